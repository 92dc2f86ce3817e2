"""What an operator is told at night, and when: a run failed, a feature drifted to `alert` against
training, decision monitoring flagged a shift. Each alert names the job, the date, what happened and
the run's link; flows/steps/alerts.py sends them through the Prefect notification block the settings
name. Prefect-free: these are texts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

AlertEvent = Literal["run_failed", "drift_alert", "decision_shift"]


@dataclass(frozen=True)
class Alert:
    event: AlertEvent
    job: str
    partition_date: str
    subject: str
    body: str


def _links(run_link: str | None, page: str | None) -> str:
    return "".join(f"\n{label}: {value}" for label, value in (("run", run_link), ("page", page)) if value)


def run_failed_alert(job: str, partition_date: str, error: str, *, run_link: str | None) -> Alert:
    return Alert(
        "run_failed", job, partition_date, f"[scoring] {job} {partition_date}: the run failed",
        f"The scoring run of {job} for {partition_date} failed: {error}\nNothing of it was published; the previous "
        f"outputs of the partition stand. Re-run it from the backfill deployment (mode failed) once fixed.{_links(run_link, None)}",
    )


def published_run_alerts(
    job: str, partition_date: str, *, drift_rows: Sequence[dict[str, Any]], monitoring: dict[str, Any] | None,
    run_link: str | None, page: str | None,
) -> list[Alert]:
    """The alerts of a published run: features at `alert` drift, and decision-monitoring shifts (measures or slices)."""
    alerts = []
    drifted = [r for r in drift_rows if r.get("flag") == "alert"]
    if drifted:
        lines = "\n".join(
            f"- {r['feature']} against {r['baseline']}" + (f": PSI {r['psi']:.3f}" if isinstance(r.get("psi"), float) else "") for r in drifted
        )
        alerts.append(Alert(
            "drift_alert", job, partition_date, f"[scoring] {job} {partition_date}: {len(drifted)} drift alert(s)",
            f"The inputs of {job} on {partition_date} drifted beyond the alert thresholds; the run was published.\n{lines}"
            f"{_links(run_link, page)}",
        ))
    shifted = [*(monitoring or {}).get("shifted", []), *(monitoring or {}).get("shifted_slices", [])]
    if shifted:
        alerts.append(Alert(
            "decision_shift", job, partition_date, f"[scoring] {job} {partition_date}: decisions shifted",
            f"Decision monitoring of {job} on {partition_date} flagged {len(shifted)} measure(s) against the trailing "
            "window (tables decision_monitoring, slice_monitoring):\n" + "\n".join(f"- {s}" for s in shifted)
            + _links(run_link, page),
        ))
    return alerts
