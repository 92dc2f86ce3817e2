"""What a scoring run gives back, as typed objects a flow of your own can import: `PartitionResult`, what the
`score_partition` flow returns for a published run, and `PublishedRun`, a published partition read back by job
and date (flows/results.py finds it; `flows.read_published_run`).

Prefect-free and low in the house (only the catalog and the errors below it), so any layer and any
flow can hold these objects without importing what made them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tasks.catalog import CLASSIFICATIONS, FORECASTS, GUARD_ACTIONS, PREDICTIONS, QUARANTINE, Dataset
from tasks.errors import PartitionError

RUN_COUNTS = (
    "rows_read",
    "rows_scored",
    "rows_repaired",
    "rows_quarantined",
    "rows_failed",
    "rows_fallback",
    "rows_with_reasons",
    "rows_without_adverse_reason",
    "rows_straddling",
)
"""The row counts of a run, as the ledger and `PartitionResult` name them."""


class NotPublished(PartitionError):
    """A partition that no run of the job has published: there are no rows or reports to read."""


@dataclass(frozen=True)
class DecisionMonitoring:
    """The run's decision mix, rule hits, score summary and straddling share against the trailing window, as
    stored in the `decision_monitoring` table."""

    measures: int
    """Measures compared with the trailing window."""
    shifted: tuple[str, ...]
    """`measure:item` of each measure that moved beyond its tolerance (e.g. `decision_share:decline`)."""
    shifted_slices: tuple[str, ...]
    """`column=value:measure` of each slice measure that moved at the spec's false discovery rate."""
    shifts: tuple[Mapping[str, Any], ...]
    """The moved measures with their `measure`, `item`, `value`, `baseline` (the trailing mean) and `delta`."""
    window_days: int
    """The trailing window compared with, in days."""
    without_baseline: int
    """Measures with no earlier partition in the window to compare with."""

    @classmethod
    def from_dict(cls, monitoring: Mapping[str, Any]) -> DecisionMonitoring:
        return cls(
            measures=monitoring["measures"],
            shifted=tuple(monitoring["shifted"]),
            shifted_slices=tuple(monitoring["shifted_slices"]),
            shifts=tuple(monitoring["shifts"]),
            window_days=monitoring["window_days"],
            without_baseline=monitoring["without_baseline"],
        )


@dataclass(frozen=True)
class Recovery:
    """What the run's start did to a run that died before it (its own partition's or another of the job's)."""

    run_id: str
    job: str
    partition_date: dt.date
    was: str
    """The dead run's ledger status before: `running`, `publishing` or `committed`."""
    now: str
    """Its status after: `failed` (undone) or `succeeded` (its publish finished)."""
    action: str
    """What was done to its outputs, in words."""


@dataclass(frozen=True)
class PartitionResult:
    """A published partition run: what `score_partition` returns. A run that fails raises instead, so a result
    always means the partition's rows, reports and ledger row are this run's."""

    job: str
    partition_date: dt.date
    run_id: str
    """The Prefect flow run's id, also the run's key in the `runs` ledger and its Parquet version."""
    run_page: Path | None
    """The run's HTML page (`<job>/reports/html/date=<date>.html` under the data folder's `output`); None when
    the run's artifacts could not be written (its `warnings` say why)."""
    rows_read: int
    rows_scored: int
    rows_repaired: int
    """Rows a guard repaired and that were scored."""
    rows_quarantined: int
    """Rows a guard kept out of scoring (the `quarantine` dataset)."""
    rows_failed: int
    rows_fallback: int
    """Rows scored by the fallback rule because the model could not score them."""
    rows_with_reasons: int
    rows_without_adverse_reason: int
    rows_straddling: int
    """Rows whose interval straddles a decision cut-off."""
    decisions: Mapping[str, int]
    """Scored rows per decision."""
    guard_counts: Mapping[str, int]
    """Rows each expectation acted on."""
    inference: Mapping[str, Any]
    """Device, providers, chunks, latency percentiles, throughput and peak memory of the run's inference."""
    model_health: Mapping[str, Any]
    """The headline of the run's model health: estimates (each `[value, low, high]`) and the `flagged` rows."""
    challenger: Mapping[str, Any] | None
    """The challenger's comparison (version, rows compared and flipped, top flips); None without a challenger."""
    drift_flags: tuple[str, ...]
    """`feature flag` of each feature whose drift crossed a threshold (`warn` or `alert`)."""
    forecast: Mapping[str, Any] | None
    """A forecast job's headline (mean forecast, mean interval width); None for other jobs."""
    classification: Mapping[str, Any] | None
    """A multiclass job's headline (class mix, close calls); None for other jobs."""
    decision_monitoring: DecisionMonitoring | None
    """The decision mix against the trailing window; None when it failed (a warning says why)."""
    warnings: tuple[str, ...]
    """What did not go as planned after the publish (page, artifacts, monitoring, alerts); the ledger row keeps them."""
    recovered: tuple[Recovery, ...] = field(default=())
    """Dead runs of the job that this run's start finished or undid."""

    @property
    def decision_shares(self) -> dict[str, float]:
        """Each decision's share of the scored rows (empty when no row was scored)."""
        return {d: n / self.rows_scored for d, n in self.decisions.items()} if self.rows_scored else {}

    @property
    def quarantined_share(self) -> float:
        """The share of the rows read that a guard quarantined."""
        return self.rows_quarantined / self.rows_read if self.rows_read else 0.0

    @classmethod
    def from_dict(cls, result: Mapping[str, Any]) -> PartitionResult:
        """The typed result of a run's result as `to_dict` writes it (a finished run's numbers and its recoveries)."""
        monitoring = result.get("decision_monitoring")
        return cls(
            job=result["job"],
            partition_date=dt.date.fromisoformat(result["partition_date"]),
            run_id=result["run_id"],
            run_page=Path(result["report"]) if result["report"] else None,
            **{c: int(result[c]) for c in RUN_COUNTS},
            decisions=dict(result["decisions"]),
            guard_counts=dict(result["guard_counts"]),
            inference=dict(result["inference"]),
            model_health=dict(result["model_health"]),
            challenger=result["challenger"],
            drift_flags=tuple(result["drift_flags"]),
            forecast=result.get("forecast"),
            classification=result.get("classification"),
            decision_monitoring=DecisionMonitoring.from_dict(monitoring) if monitoring is not None else None,
            warnings=tuple(result["warnings"]),
            recovered=tuple(
                Recovery(**{**r, "partition_date": dt.date.fromisoformat(str(r["partition_date"]))})
                for r in result.get("recovered", ())
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON-ready values: what `score run --json` prints and a backfill's outcome row reads."""
        result: dict[str, Any] = {
            "run_id": self.run_id,
            "job": self.job,
            "partition_date": self.partition_date.isoformat(),
            "report": str(self.run_page) if self.run_page is not None else "",
            **{c: getattr(self, c) for c in RUN_COUNTS},
            **{m: dict(getattr(self, m)) for m in ("decisions", "guard_counts", "inference", "model_health")},
            "challenger": self.challenger,
            "drift_flags": list(self.drift_flags),
            **({"forecast": self.forecast} if self.forecast is not None else {}),
            **({"classification": self.classification} if self.classification is not None else {}),
            "warnings": list(self.warnings),
        }
        if self.decision_monitoring is not None:
            m = self.decision_monitoring
            result["decision_monitoring"] = {
                "job": self.job,
                "partition_date": self.partition_date.isoformat(),
                "run_id": self.run_id,
                "measures": m.measures,
                "shifted": list(m.shifted),
                "shifted_slices": list(m.shifted_slices),
                "shifts": [dict(s) for s in m.shifts],
                "window_days": m.window_days,
                "without_baseline": m.without_baseline,
            }
        result["recovered"] = [
            {**dataclasses.asdict(r), "partition_date": r.partition_date.isoformat()} for r in self.recovered
        ]
        return result


@dataclass(frozen=True)
class LedgerRow:
    """One row of the `runs` ledger (the catalog's RUNS): a run's status, model, counts and times."""

    run_id: str
    job: str
    partition_date: dt.date
    status: str
    """`running` → `publishing` → `committed` → `succeeded`, or `failed`; `refused`: refused before its lease."""
    model_name: str | None
    model_version: str | None
    feature_version: str | None
    counts: Mapping[str, int | None]
    """rows_read, rows_scored, rows_repaired, rows_quarantined, rows_failed, rows_fallback, rows_with_reasons,
    rows_without_adverse_reason, rows_straddling (None for a run that ended before counting)."""
    decisions: Mapping[str, int]
    guard_counts: Mapping[str, int]
    inference: Mapping[str, Any]
    started_at: dt.datetime
    ended_at: dt.datetime | None
    error: str | None
    """A failed or refused run's error, one line."""
    warnings: tuple[str, ...]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> LedgerRow:
        """A ledger row as the warehouse reads it (its JSON columns as JSON text)."""

        def parsed(value: Any, empty: Any) -> Any:
            return empty if value is None else json.loads(value) if isinstance(value, str) else value

        day = row["partition_date"]
        return cls(
            run_id=row["run_id"],
            job=row["job"],
            partition_date=day if isinstance(day, dt.date) else dt.date.fromisoformat(str(day)),
            status=row["status"],
            model_name=row.get("model_name"),
            model_version=row.get("model_version"),
            feature_version=row.get("feature_version"),
            counts={c: row.get(c) for c in RUN_COUNTS},
            decisions=parsed(row.get("decisions"), {}),
            guard_counts=parsed(row.get("guard_counts"), {}),
            inference=parsed(row.get("inference"), {}),
            started_at=row["started_at"],
            ended_at=row.get("ended_at"),
            error=row.get("error"),
            warnings=tuple(parsed(row.get("warnings"), [])),
        )


@dataclass(frozen=True)
class PublishedRun:
    """The published outputs of one partition: the run the readers see now, its rows and its reports.

    The rows are read from the run's own Parquet version folder, resolved once when the run was read: every
    dataset read here is that run's, even if another run publishes the partition meanwhile. The folder stays until
    the publish after the next one, so read what you need soon (a LazyFrame included)."""

    job: str
    partition_date: dt.date
    run_id: str
    """The published run (the partition's Parquet pointer)."""
    ledger: LedgerRow | None
    """The partition's newest ledger row: the published run's own, unless a later run of the day failed, was refused
    or is running (then `ledger.run_id != run_id`, and its status and error say what became of it). None when the
    warehouse has no row of the partition."""
    version_dir: Path
    """The run's Parquet version folder, every published dataset under its catalog folder."""
    run_page: Path
    """The run's HTML page (the link readers follow, `<job>/reports/html/date=<date>.html`)."""
    monitoring_page: Path | None
    """The job's monitoring page, once an outcomes run wrote it."""
    model_card: Path | None
    """The job's model card page, once a run wrote it."""

    @property
    def latest_run_published(self) -> bool:
        """Whether the partition's newest run is the one published (False after a later failed or refused run)."""
        return self.ledger is not None and self.ledger.run_id == self.run_id

    def scan(self, dataset: Dataset) -> pl.LazyFrame:
        """The run's rows of a dataset the catalog publishes per partition (tasks/catalog.py), e.g. `PREDICTIONS`,
        as a LazyFrame: filter and select before anything is read."""
        if dataset.folder is None or not dataset.partitioned or not dataset.published:
            raise ValueError(f"dataset {dataset.name} is not published per partition in Parquet")
        return pl.scan_parquet(self.version_dir / dataset.folder / "*.parquet")

    def table(self, dataset: Dataset) -> pl.DataFrame:
        """The run's rows of a published dataset (`scan`), read."""
        return self.scan(dataset).collect()

    def predictions(self) -> pl.DataFrame:
        """A binary job's scored rows (the catalog's PREDICTIONS): entity, score, decision, rule, reasons."""
        return self.table(PREDICTIONS)

    def forecasts(self) -> pl.DataFrame:
        """A forecast job's scored rows (FORECASTS)."""
        return self.table(FORECASTS)

    def classifications(self) -> pl.DataFrame:
        """A multiclass job's scored rows (CLASSIFICATIONS)."""
        return self.table(CLASSIFICATIONS)

    def quarantine(self) -> pl.DataFrame:
        """Rows a guard kept out of scoring, with the expectations they failed and the raw row (QUARANTINE)."""
        return self.table(QUARANTINE)

    def guard_actions(self) -> pl.DataFrame:
        """Every repair and quarantine a guard made, old value to new (GUARD_ACTIONS)."""
        return self.table(GUARD_ACTIONS)
