"""Make a run's staged outputs the partition's outputs, in both stores, as one commit.

1. The staged files of every dataset and the run's page are fsynced and moved into the run's
   version folder (nothing a reader sees changes).
2. The ledger records the intent: `publishing`.
3. One warehouse transaction replaces the partition's rows of every table and moves the run's
   ledger row to `committed`: the ledger says which run's rows the warehouse holds.
4. One `rename(2)` points the partition at the run's version folder: every Parquet dataset of
   the partition changes at once.
5. With a Delta sink in the job spec, each dataset's version files replace the partition in its
   Delta table, one commit per table (tasks/sinks/delta.py).
6. The ledger row becomes `succeeded`.

The warehouse commit (3) is the truth. A kill before 3 leaves every store on the previous run
(recovery closes the run as failed); a kill after 3 leaves a committed run with a complete
version, which recovery swaps in and writes to the Delta tables again (roll forward; both steps
are repeatable). A Delta table that cannot be written fails the run with SinkUnwritable naming
the table, after Parquet and the warehouse were published: the row stays `committed`, so the next
start of the job (or `score recover`) finishes the Delta writes before anything else of the job
is published.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tasks.catalog import INFERENCE_HANDOFF, PARTITION_DATASETS
from tasks.errors import PartitionLeaseLost
from tasks.sinks.crash_points import crash_point
from tasks.sinks.delta import DeltaTables, written_delta_partition
from tasks.sinks.parquet_store import OutputDirs, PartitionStore, discard_staged
from tasks.sinks.warehouse import Warehouse

log = logging.getLogger("scoring.publish")
T = TypeVar("T")


def partition_store(dirs: OutputDirs) -> PartitionStore:
    """The job's published Parquet datasets, the catalog's PARTITION_DATASETS, each under its name."""
    return PartitionStore(
        root=dirs.root,
        datasets={d.name: dirs.of(d) for d in PARTITION_DATASETS},
        schemas={d.name: d.schema for d in PARTITION_DATASETS},
    )


def version_tables(store: PartitionStore, partition: str, run_id: str) -> dict[str, list[Path]]:
    """The files of the run's version folder per warehouse (and Delta) table."""
    return {d.table: store.version_files(partition, run_id, d.name) for d in PARTITION_DATASETS}


@dataclass
class PublishedPartition:
    """Rows now in the warehouse per table, and what did not go as planned after the commit."""

    rows: dict[str, int]
    warnings: list[str] = field(default_factory=list)


def published_partition(
    warehouse: Warehouse,
    dirs: OutputDirs,
    *,
    job: str,
    partition_date: dt.date,
    run_id: str,
    counts: dict,
    page_html: str | None,
    warnings: Sequence[str],
    ended_at: dt.datetime,
    crash_at: str | None = None,
    delta: DeltaTables | None = None,
) -> PublishedPartition:
    """Publish the run's staged outputs in the six steps above, to the Delta tables of `delta` too
    when given; `crash_at` names a point to die at (crash trials)."""
    # One open database for the whole publish: the intent, the transaction and the closing row.
    with warehouse.kept_open():
        store = partition_store(dirs)
        partition = partition_date.isoformat()
        store.assembled_version(
            partition,
            run_id,
            page_html=page_html,
            after_each=lambda name: crash_point(f"publish:staged:{name}", crash_at),
        )
        crash_point("publish:assembled", crash_at)
        if not warehouse.record_run_publishing(run_id):
            raise PartitionLeaseLost(
                f"run {run_id} of {job} {partition_date} was closed by another run; nothing is published"
            )
        crash_point("publish:intent", crash_at)
        files = version_tables(store, partition, run_id)
        rows = warehouse.replace_partition(
            job=job, partition_date=partition_date, committing_run=run_id, counts=counts, files=files
        )
        crash_point("publish:committed", crash_at)
        store.swapped_in(partition, run_id)
        crash_point("publish:swapped", crash_at)
        if delta is not None:
            written_delta_partition(delta, job=job, partition_date=partition_date, run_id=run_id, files=files)
        crash_point("publish:delta", crash_at)
        discard_staged(dirs.of(INFERENCE_HANDOFF), run_id)
        published = PublishedPartition(rows=rows, warnings=list(warnings))
        try:
            retried(
                lambda: warehouse.record_run_ended(
                    run_id, status="succeeded", ended_at=ended_at, counts=counts, warnings=warnings
                )
            )
        except Exception as exc:
            published.warnings.append(
                f"ledger not updated ({type(exc).__name__}: {exc}); the next start of {job} closes the run as succeeded"
            )
            log.warning(
                "%s %s: run %s published, but its ledger row could not be closed: %s", job, partition_date, run_id, exc
            )
    return published


def retried(fn: Callable[[], T], *, attempts: int = 4, first_delay_s: float = 0.5) -> T:
    """`fn()`, retried with backoff: a ledger write must survive a warehouse that is busy for a moment."""
    delay = first_delay_s
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception:
            if attempt == attempts:
                raise
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def discarded_run(dirs: OutputDirs, partition_date: dt.date, run_id: str) -> None:
    """Remove what a failed or abandoned run wrote: its staging (hand-off files too) and, unless
    readers see it, its version folder."""
    partition_store(dirs).discarded_run(partition_date.isoformat(), run_id)
    discard_staged(dirs.of(INFERENCE_HANDOFF), run_id)
