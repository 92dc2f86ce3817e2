"""The flows you may import to compose your own, and what they give back.

- `score_partition(job, date)`: score one partition of one job; returns a `PartitionResult`.
- `backfill(job, start_date, end_date, mode=...)` and `nightly(date=None)`: many partitions, one
  `score_partition` subflow each; they return one outcome row (a dict) per partition.
- `outcomes(job, start_date, end_date)`: ingest the labels of scored partitions and write the monitoring page.
- `read_published_run(job, date)`: the published rows, ledger row and report pages of a partition (`PublishedRun`).
- `NotPublished`: what `read_published_run` raises for a partition no run published.

Everything else under `flows/` (the steps) and `tasks/` may change between releases. The names are
loaded on first use: importing `flows.steps.blocks` (as the command line does) loads no flow and no
Prefect flow machinery. `tasks` is imported first so telemetry is off before Prefect loads.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

import tasks  # noqa: F401

if TYPE_CHECKING:
    from flows.outcomes import outcomes
    from flows.people import backfill, nightly
    from flows.results import read_published_run
    from flows.score_partition import score_partition
    from tasks.results import DecisionMonitoring, LedgerRow, NotPublished, PartitionResult, PublishedRun, Recovery

__all__ = [
    "DecisionMonitoring",
    "LedgerRow",
    "NotPublished",
    "PartitionResult",
    "PublishedRun",
    "Recovery",
    "backfill",
    "nightly",
    "outcomes",
    "read_published_run",
    "score_partition",
]

_WHERE = {
    "score_partition": "flows.score_partition",
    "backfill": "flows.people",
    "nightly": "flows.people",
    "outcomes": "flows.outcomes",
    "read_published_run": "flows.results",
    "DecisionMonitoring": "tasks.results",
    "LedgerRow": "tasks.results",
    "NotPublished": "tasks.results",
    "PartitionResult": "tasks.results",
    "PublishedRun": "tasks.results",
    "Recovery": "tasks.results",
}


def __getattr__(name: str) -> Any:
    # PEP 562: a flow module is imported when its name is first asked for, not with the package.
    if name not in _WHERE:
        raise AttributeError(f"module 'flows' has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(_WHERE[name]), name)
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


class _Flows(types.ModuleType):
    """The package, whose exported names stay the flows: importing the module `flows.score_partition` (or
    `flows.outcomes`) would otherwise bind the package's `score_partition` to the module, and a later
    `from flows import score_partition` would give the module. `from flows.score_partition import …` is unaffected."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _WHERE and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Flows
