"""The raw partition cut into work units of whole row groups, from the Parquet footers, and each
unit read back as chunks of the job's size; the duplicate pre-pass marks the rows the entity-key
rule quarantines before any unit is scored."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.errors import PartitionError, RunStopped, RunTimedOut
from tasks.guards.duplicates import RawRowGroup, duplicated_entity_ids, partition_row_groups, write_quarantined_rows
from tasks.jobs.validation import checked_raw_files
from tasks.scoring.prepared import PreparedJob
from tasks.sinks.parquet_store import OutputDirs, staging_dir
from tasks.sources import ParquetPartition, ReadLimit, opened_parquet, read_row_group
from tasks.sources.chunks import rechunked_tables


@dataclass(frozen=True)
class RunDeadline:
    """When a run must have finished scoring (seconds since the epoch, so every worker of the run reads the same
    clock time) and the limit it came from; checked before each chunk and before the publish."""

    at: float
    limit_s: float
    what: str

    def check(self) -> None:
        if time.time() > self.at:
            raise RunTimedOut(
                f"{self.what} timed out after {self.limit_s:g} s (limits.max_run_seconds, else SCORING_MAX_RUN_SECONDS); "
                "nothing of it was published"
            )


_STOPPED_RUNS: dict[str, int] = {}
"""Runs of this process a signal stopped, with the signal: their units stop at the next chunk."""


def stopped_run(run_id: str, signum: int) -> None:
    """Stop the run's units in this process at their next chunk: a signal reaches the main thread only,
    and the run's failure must not drop its staged files while a unit still writes them."""
    _STOPPED_RUNS[run_id] = signum


def check_not_stopped(run_id: str) -> None:
    """Raise RunStopped when a signal stopped the run; checked before each chunk, with the deadline."""
    if (signum := _STOPPED_RUNS.get(run_id)) is not None:
        raise RunStopped(signum)


log = logging.getLogger("scoring.run")


def raw_chunks(raw: ParquetPartition, chunk_rows: int) -> Iterator[pa.Table]:
    """The partition as tables of exactly `chunk_rows` rows (the last may be shorter).

    Files are read one after the other, a batch at a time, so memory holds one row group (a Parquet
    row group is read whole: producers should write row groups no larger than a chunk) and a
    corrupt file is named.
    """
    files = checked_raw_files(raw)

    def batches() -> Iterator[pa.RecordBatch]:
        for path in files:
            try:
                yield from opened_parquet(path).iter_batches(batch_size=chunk_rows)
            except _CORRUPT_PARQUET as exc:
                _raise_if_os_error(exc)
                raise PartitionError(f"raw file {path} is corrupt: {_first_line(exc)}") from exc

    return rechunked_tables(batches(), chunk_rows)


_CORRUPT_PARQUET = (pa.ArrowException, OSError)
"""What pyarrow raises for bytes that are not (or no longer) Parquet: ArrowInvalid, or an OSError without errno."""


def _raise_if_os_error(exc: BaseException) -> None:
    # A real OS error (permission, disk) has an errno and is the environment's, not the file's content.
    if isinstance(exc, OSError) and exc.errno is not None:
        raise exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class WorkUnit:
    """Whole row groups of the raw partition that one task scores as consecutive chunks.

    Parquet reads a row group whole, so a unit never splits one between tasks: a row group larger
    than a chunk is read once and cut into chunks inside its unit, not re-read by several tasks.
    """

    unit_id: int
    row_groups: tuple[tuple[str, int], ...]
    rows: int
    first_chunk_id: int
    first_row: int = 0
    """Global number of the unit's first row in partition order (file, row group, row)."""
    duplicate_rows_file: str | None = None
    """Staged row numbers that the entity-key rule quarantines, when the partition has any."""
    partition_rows: int = 0
    """Rows of the whole partition: how large a share of them the attribution sample must take."""
    read_limit: ReadLimit | None = None
    """How long each read of the raw source may take (the partition's SCORING_SOURCE_TIMEOUT_S)."""


UNITS_PER_WORKER = 4
"""Units planned per worker that scores them at once, where the partition has chunks enough: each unit costs a task
run and a progress update (the server's CPU fell 29-37 ms per unit no longer made, the client's ~8 ms a task run),
which one-chunk units paid 200 times for a 10 M-row partition; four a worker still let a worker that ends early take
another's share, and the progress move in steps of 1/8 on two workers."""


def partition_work_units(
    raw: ParquetPartition,
    chunk_rows: int,
    *,
    workers: int | None = None,
    groups: list[RawRowGroup] | None = None,
) -> list[WorkUnit]:
    """The partition cut into units of whole row groups, from the Parquet footers alone (`groups`, when the caller
    has read them): units of at least `chunk_rows` rows (the last may be smaller), and, with `workers` (units scored
    at once), of at least the partition's rows over UNITS_PER_WORKER per worker."""
    groups = partition_row_groups(raw) if groups is None else groups
    unit_rows = chunk_rows
    if workers is not None:
        unit_rows = max(chunk_rows, -(-sum(group.rows for group in groups) // (workers * UNITS_PER_WORKER)))
    units: list[WorkUnit] = []
    pending: list[tuple[str, int]] = []
    pending_rows = next_chunk = first_row = 0

    def flush() -> None:
        nonlocal pending, pending_rows, next_chunk, first_row
        units.append(WorkUnit(len(units), tuple(pending), pending_rows, next_chunk, first_row, read_limit=raw.limit))
        next_chunk += -(-pending_rows // chunk_rows)
        first_row += pending_rows
        pending, pending_rows = [], 0

    for group in groups:
        pending.append((group.path, group.group))
        pending_rows += group.rows
        if pending_rows >= unit_rows:
            flush()
    if pending:
        flush()
    return units


def planned_work_units(
    prepared: PreparedJob, *, run_id: str, chunk_rows: int, dirs: OutputDirs, workers: int | None = None
) -> list[WorkUnit]:
    """The work units (`partition_work_units`), each told which of its rows repeat an entity id seen elsewhere in
    the partition.

    The duplicate pre-pass reads only the entity column; an id found twice fails the run here,
    before any scoring, when the suite's entity-key action is `fail`.
    """
    scratch = staging_dir(dirs.inference_handoff, run_id)
    raw = prepared.raw.parquet_partition(scratch / "raw-snapshot", chunk_rows)
    # Read once for the units and the duplicate pre-pass: on an object store each footer is a request.
    groups = partition_row_groups(raw)
    units = partition_work_units(raw, chunk_rows, workers=workers, groups=groups)
    total = sum(unit.rows for unit in units)
    units = [replace(unit, partition_rows=total) for unit in units]
    rule = prepared.suite.entity_key
    if rule is None:
        return units
    duplicates = duplicated_entity_ids(groups, rule.column, scratch_parent=scratch, limit=raw.limit)
    if duplicates.rows.is_empty():
        return units
    if rule.on_duplicate == "fail":
        raise duplicates.failure(rule, prepared.suite.path.name)
    quarantined = duplicates.quarantined_rows(rule.on_duplicate)
    log.warning(
        "%s: %d entity id(s) appear more than once in column %r (%d rows); %s quarantines %d of them (%s)",
        prepared.raw,
        duplicates.id_count,
        rule.column,
        duplicates.rows.height,
        rule.key,
        quarantined.size,
        rule.on_duplicate,
    )
    path = write_quarantined_rows(scratch / "duplicate-rows.parquet", quarantined)
    return [replace(unit, duplicate_rows_file=str(path)) for unit in units]


def unit_chunks(unit: WorkUnit, chunk_rows: int) -> Iterator[tuple[int, pa.Table]]:
    """(chunk id, table) of each chunk of the unit, one row group in memory at a time."""

    def batches() -> Iterator[pa.RecordBatch]:
        opened: tuple[str, pq.ParquetFile] | None = None
        for path, group in unit.row_groups:
            try:
                # One open per file of the unit: on an object store each open costs requests for the footer.
                if opened is None or opened[0] != path:
                    opened = (path, opened_parquet(path, unit.read_limit))
            except _CORRUPT_PARQUET as exc:
                _raise_if_os_error(exc)
                raise PartitionError(f"raw file {path} is corrupt in row group {group}: {_first_line(exc)}") from exc
            yield from read_row_group(opened[1], path, group, limit=unit.read_limit).to_batches(
                max_chunksize=chunk_rows
            )

    try:
        yield from enumerate(rechunked_tables(batches(), chunk_rows), start=unit.first_chunk_id)
    except pa.ArrowInvalid as exc:
        files = sorted({path for path, _ in unit.row_groups})
        raise PartitionError(f"raw files {files} do not share one schema: {exc}") from exc
