"""What an operator is told at night, and when: a run failed, a feature drifted to `alert` against
training, decision monitoring flagged a shift, a multiclass job's predicted class mix moved to `alert`
against its model's reference rows. Each alert names the job, the date, what happened and
the run's link; flows/steps/alerts.py sends them through the Prefect notification block the settings
name. Prefect-free: these are texts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tasks.prediction.words import JobWords

AlertEvent = Literal["run_failed", "drift_alert", "decision_shift", "class_mix_shift"]


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
        "run_failed",
        job,
        partition_date,
        f"[scoring] {job} {partition_date}: the run failed",
        f"The scoring run of {job} for {partition_date} failed: {error}\nNothing of it was published; the previous "
        f"outputs of the partition stand. Re-run it from the backfill deployment (mode failed) once fixed.{_links(run_link, None)}",
    )


def _class_mix_alert(job: str, partition_date: str, health_rows: Sequence[dict[str, Any]], links: str) -> Alert | None:
    """The class-mix alert of a multiclass run: its mix's PSI against the model's reference rows flagged `alert`, with
    the classes whose share moved most."""
    mix = [r for r in health_rows if r.get("section") == "class_mix"]
    if not any(r["measure"] == "psi" and r.get("flag") == "alert" for r in mix):
        return None
    psi = next(r["value"] for r in mix if r["measure"] == "psi")
    moved = sorted(
        (r for r in mix if r["measure"] == "predicted_share"), key=lambda r: -abs(r["value"] - r["reference"])
    )[:3]
    lines = "\n".join(f"- {r['item']}: {r['value']:.1%} of rows (reference {r['reference']:.1%})" for r in moved)
    return Alert(
        "class_mix_shift",
        job,
        partition_date,
        f"[scoring] {job} {partition_date}: the predicted class mix moved",
        f"The classes {job} predicted on {partition_date} moved away from the model's reference rows (PSI {psi:.3f}, table "
        f"model_health section class_mix); the run was published.\n{lines}{links}",
    )


def _named(item: str, words: JobWords | None) -> str:
    """A decision-monitoring item (`decision_share:manual_review`) with the decision's plain name, or the score's, after it."""
    measure, _, value = item.partition(":")
    if words is not None and measure == "score_mean":
        return f"{item} (mean {words.score_name})"
    if words is None or measure != "decision_share" or words.decision(value) == value:
        return item
    return f"{item} ({words.decision(value)})"


def published_run_alerts(
    job: str,
    partition_date: str,
    *,
    drift_rows: Sequence[dict[str, Any]],
    monitoring: dict[str, Any] | None,
    run_link: str | None,
    page: str | None,
    health_rows: Sequence[dict[str, Any]] = (),
    words: JobWords | None = None,
) -> list[Alert]:
    """The alerts of a published run: features at `alert` drift, decision-monitoring shifts (measures or slices), and a
    multiclass job's class mix at `alert` (`health_rows`: the run's model_health rows). `words`, the job's own, name
    its features and decisions."""
    alerts = []
    drifted = [r for r in drift_rows if r.get("flag") == "alert"]
    if drifted:
        lines = "\n".join(
            f"- {(words.feature_and_column(r['feature']) if words is not None else r['feature'])} against {r['baseline']}"
            + (f": PSI {r['psi']:.3f}" if isinstance(r.get("psi"), float) else "")
            for r in drifted
        )
        alerts.append(
            Alert(
                "drift_alert",
                job,
                partition_date,
                f"[scoring] {job} {partition_date}: {len(drifted)} drift alert(s)",
                f"The inputs of {job} on {partition_date} drifted beyond the alert thresholds; the run was published.\n{lines}"
                f"{_links(run_link, page)}",
            )
        )
    shifted = [*(monitoring or {}).get("shifted", []), *(monitoring or {}).get("shifted_slices", [])]
    if shifted:
        alerts.append(
            Alert(
                "decision_shift",
                job,
                partition_date,
                f"[scoring] {job} {partition_date}: decisions shifted",
                f"Decision monitoring of {job} on {partition_date} flagged {len(shifted)} measure(s) against the trailing "
                "window (tables decision_monitoring, slice_monitoring):\n"
                + "\n".join(f"- {_named(s, words)}" for s in shifted)
                + _links(run_link, page),
            )
        )
    if (mix := _class_mix_alert(job, partition_date, health_rows, _links(run_link, page))) is not None:
        alerts.append(mix)
    return alerts
