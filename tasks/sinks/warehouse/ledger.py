"""The `runs` ledger: each run's row from start to its end (succeeded, failed, refused, abandoned, rolled forward)
and what the ledger says about a job's runs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tasks.sinks.warehouse.base import WarehouseBase
from tasks.sinks.warehouse.session import Session

_RUN_COUNT_COLUMNS = (
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
_RUN_JSON_COLUMNS = ("decisions", "guard_counts", "inference")


def closed_run(
    session: Session,
    run_id: str,
    *,
    status: str,
    ended_at: Any,
    error: str | None,
    counts: dict[str, Any] | None,
    warnings: Sequence[str],
    only_if: str = "",
) -> bool:
    values = {
        "run_id": run_id,
        "status": status,
        "ended_at": ended_at,
        "error": error,
        "warnings": json.dumps(list(warnings)),
        **{k: (counts or {}).get(k) for k in _RUN_COUNT_COLUMNS},
        **{k: json.dumps(counts[k]) if counts and k in counts else None for k in _RUN_JSON_COLUMNS},
    }
    assignments = [f"{c} = ${c}" for c in ("status", "ended_at", "error")] + ["warnings = CAST($warnings AS JSON)"]
    if counts is not None:
        assignments += [f"{c} = ${c}" for c in _RUN_COUNT_COLUMNS] + [
            f"{c} = CAST(${c} AS JSON)" for c in _RUN_JSON_COLUMNS
        ]
    return bool(
        session.rows(
            f"UPDATE runs SET {', '.join(assignments)} WHERE run_id = $run_id {only_if} RETURNING run_id", values
        )
    )


class RunLedger(WarehouseBase):
    """The `runs` ledger's writes and reads."""

    def record_run_started(self, row: dict[str, Any]) -> None:
        with self._session(write=True) as session:
            session.execute(
                "INSERT INTO runs (run_id, job, partition_date, status, model_name, model_version, feature_version, started_at) "
                "VALUES ($run_id, $job, $partition_date, 'running', $model_name, $model_version, $feature_version, $started_at)",
                row,
            )

    def record_run_publishing(self, run_id: str) -> bool:
        """The publish intent: the run's outputs are assembled and it is about to commit. False when
        the run is no longer `running` (closed as abandoned by a run that took its partition over)."""
        with self._session(write=True) as session:
            return bool(
                session.rows(
                    "UPDATE runs SET status = 'publishing' WHERE run_id = $run_id AND status = 'running' RETURNING run_id",
                    {"run_id": run_id},
                )
            )

    def record_run_ended(
        self,
        run_id: str,
        *,
        status: str,
        ended_at: Any,
        error: str | None = None,
        counts: dict[str, Any] | None = None,
        warnings: Sequence[str] = (),
    ) -> None:
        with self._session(write=True) as session:
            closed_run(session, run_id, status=status, ended_at=ended_at, error=error, counts=counts, warnings=warnings)

    def record_run_warnings(self, run_id: str, warnings: Sequence[str]) -> None:
        """What failed after the run's outputs were published; the run stays `succeeded`."""
        with self._session(write=True) as session:
            session.execute(
                "UPDATE runs SET warnings = CAST($warnings AS JSON) WHERE run_id = $run_id",
                {"run_id": run_id, "warnings": json.dumps(list(warnings))},
            )

    def record_run_failed(
        self, *, run_id: str, job: str, partition_date: Any, ended_at: Any, error: str, error_detail: str | None = None
    ) -> bool:
        """Close a run as failed; a run that failed before it was opened gets its ledger row here.

        A run whose rows were committed is never marked failed: its outputs are the partition's,
        and recovery finishes its publish. Returns whether the row now says failed."""
        with self._session(write=True) as session:
            return bool(
                session.rows(
                    "INSERT INTO runs AS r (run_id, job, partition_date, status, started_at, ended_at, error, error_detail) "
                    "VALUES ($run_id, $job, $partition_date, 'failed', $ended_at, $ended_at, $error, $error_detail) "
                    "ON CONFLICT (run_id) DO UPDATE SET status = 'failed', ended_at = excluded.ended_at, "
                    "error = excluded.error, error_detail = excluded.error_detail "
                    "WHERE r.status IN ('running', 'publishing', 'failed') RETURNING run_id",
                    {
                        "run_id": run_id,
                        "job": job,
                        "partition_date": partition_date,
                        "ended_at": ended_at,
                        "error": error,
                        "error_detail": error_detail,
                    },
                )
            )

    def record_run_refused(
        self, *, run_id: str, job: str, partition_date: Any, ended_at: Any, error: str, error_detail: str | None = None
    ) -> bool:
        """A run refused before its lease (no raw data, a source that did not answer, ...) as a ledger row of
        status `refused` with its reason; it wrote nothing. False when the run has a row already."""
        with self._session(write=True) as session:
            return bool(
                session.rows(
                    "INSERT INTO runs (run_id, job, partition_date, status, started_at, ended_at, error, error_detail) "
                    "VALUES ($run_id, $job, $partition_date, 'refused', $ended_at, $ended_at, $error, $error_detail) "
                    "ON CONFLICT (run_id) DO NOTHING RETURNING run_id",
                    {
                        "run_id": run_id,
                        "job": job,
                        "partition_date": partition_date,
                        "ended_at": ended_at,
                        "error": error,
                        "error_detail": error_detail,
                    },
                )
            )

    def unfinished_runs(self, job: str, partition_date: Any = None) -> list[dict[str, Any]]:
        """Runs of `job` (of one partition when given) not yet `succeeded` or `failed`, oldest first."""
        return self._read_rows(
            "runs",
            "SELECT run_id, job, partition_date, status, started_at FROM runs WHERE job = $job "
            "AND status IN ('running', 'publishing', 'committed') "
            + ("AND partition_date = $partition_date " if partition_date is not None else "")
            + "ORDER BY started_at, run_id",
            {"job": job, "partition_date": partition_date},
        )

    def run_status(self, run_id: str) -> str | None:
        rows = self._read_rows("runs", "SELECT status FROM runs WHERE run_id = $run_id", {"run_id": run_id})
        return rows[0]["status"] if rows else None

    def record_run_abandoned(self, run_id: str, *, ended_at: Any, error: str) -> bool:
        """Close a run that died before its commit as failed; False when it is no longer unfinished."""
        with self._session(write=True) as session:
            return closed_run(
                session,
                run_id,
                status="failed",
                ended_at=ended_at,
                error=error,
                counts=None,
                warnings=(),
                only_if="AND status IN ('running', 'publishing')",
            )

    def record_run_rolled_forward(self, run_id: str, *, ended_at: Any, warning: str) -> bool:
        """Close a committed run whose Parquet swap recovery finished as succeeded."""
        with self._session(write=True) as session:
            return bool(
                session.rows(
                    "UPDATE runs SET status = 'succeeded', ended_at = $ended_at, "
                    "warnings = CAST($warnings AS JSON) WHERE run_id = $run_id AND status = 'committed' RETURNING run_id",
                    {"run_id": run_id, "ended_at": ended_at, "warnings": json.dumps([warning])},
                )
            )

    def latest_succeeded_run(self, job: str) -> dict[str, Any] | None:
        """The newest succeeded `runs` row of `job`, or None when it never succeeded (or no ledger exists)."""
        rows = self._read_rows(
            "runs",
            "SELECT * FROM runs WHERE job = $job AND status = 'succeeded' ORDER BY ended_at DESC NULLS LAST LIMIT 1",
            {"job": job},
        )
        return rows[0] if rows else None

    def run_guard_summary(self, run_id: str) -> list[dict[str, Any]]:
        """The `guard_summary` rows of one run, the expectations that acted on most rows first (empty if none)."""
        return self._read_rows(
            "guard_summary",
            "SELECT expectation, column_name, expectation_type, action, evaluated_by, rows, share FROM guard_summary "
            "WHERE run_id = $run_id ORDER BY rows DESC, expectation",
            {"run_id": run_id},
        )

    def recent_runs(self, job: str, *, last: int) -> list[dict[str, Any]]:
        """The job's `last` runs by start time, newest first: the ledger's columns but the JSON ones and the traceback."""
        return self._read_rows(
            "runs",
            "SELECT run_id, partition_date, status, model_version, rows_read, rows_scored, rows_quarantined, rows_failed, "
            "started_at, ended_at, error FROM runs WHERE job = $job ORDER BY started_at DESC, run_id LIMIT $last",
            {"job": job, "last": last},
        )

    def latest_partition_runs(self, job: str, *, first_date: Any, last_date: Any) -> list[dict[str, Any]]:
        """The newest `runs` row of each of the job's partitions from `first_date` to `last_date`, oldest date first."""
        rows = self._read_rows(
            "runs",
            "SELECT ranked.* FROM (SELECT *, row_number() OVER (PARTITION BY partition_date ORDER BY started_at DESC) "
            "AS newest FROM runs WHERE job = $job AND partition_date BETWEEN $first_date AND $last_date) AS ranked "
            "WHERE newest = 1 ORDER BY partition_date",
            {"job": job, "first_date": first_date, "last_date": last_date},
        )
        return [{k: v for k, v in row.items() if k != "newest"} for row in rows]
