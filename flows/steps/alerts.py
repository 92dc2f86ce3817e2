"""Alerts sent through the Prefect notification block the settings name (`SCORING_ALERT_BLOCK`): a
failed run (the score_partition flow's failure hook), drift alerts and decision-monitoring shifts of a
published run. An alert that cannot be sent is a warning, never a failure of the run."""

from __future__ import annotations

import logging

from prefect.blocks.core import Block
from prefect.client.schemas.objects import FlowRun
from prefect.settings import PREFECT_API_URL, PREFECT_UI_URL
from prefect.states import State

from tasks.monitoring.alerts import Alert, run_failed_alert
from tasks.settings import current_settings

log = logging.getLogger("scoring.alerts")


def run_link(flow_run_id: object) -> str | None:
    """The flow run's page in the Prefect UI (or its API address when no UI URL is configured)."""
    if ui := PREFECT_UI_URL.value():
        return f"{ui.rstrip('/')}/runs/flow-run/{flow_run_id}"
    if api := PREFECT_API_URL.value():
        return f"{api.rstrip('/')}/flow_runs/{flow_run_id}"
    return None


def sent_alerts(alerts: list[Alert]) -> list[str]:
    """Send each alert; the warnings of those that could not be sent (none without SCORING_ALERT_BLOCK)."""
    reference = current_settings().alert_block
    if not reference or not alerts:
        return []
    try:
        block = Block.load(reference if "/" in reference else f"custom-webhook/{reference}")
    except Exception as exc:  # noqa: BLE001  (a missing or broken block must not fail a published run)
        log.warning("alerts not sent: notification block %r cannot be loaded: %s", reference, exc)
        return [f"alerts not sent: notification block {reference!r} cannot be loaded: {type(exc).__name__}: {exc}"]
    warnings = []
    for alert in alerts:
        try:
            block.notify(body=alert.body, subject=alert.subject)
            log.info("alert sent (%s): %s", alert.event, alert.subject)
        except Exception as exc:  # noqa: BLE001
            log.warning("alert %r not sent through %s: %s", alert.subject, reference, exc)
            warnings.append(f"alert {alert.event} not sent: {type(exc).__name__}: {exc}")
    return warnings


def alert_failed_run(flow: object, flow_run: FlowRun, state: State) -> None:  # noqa: ARG001  (Prefect's hook signature)
    """score_partition's failure hook: the job, the date, why, and the run's link."""
    job, date = flow_run.parameters.get("job"), flow_run.parameters.get("date")
    sent_alerts([run_failed_alert(str(job), str(date), state.message or "failed", run_link=run_link(flow_run.id))])
