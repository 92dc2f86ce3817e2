"""Alerts at night: a failed run, a drift alert and a decision-monitoring shift each reach a webhook through a
Prefect notification block (a custom-webhook block aimed at a receiver on 127.0.0.1 started here); a clean run
sends nothing."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import re
import threading
from collections.abc import Iterator

import pytest

from tasks.errors import ScoringError
from tasks.settings import Settings
from tests.conftest import DEMO_JOB, DemoEnv


@pytest.fixture
def webhook(prefect_harness: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict]]:
    """The JSON bodies the receiver got, in order; SCORING_ALERT_BLOCK names a block aimed at it."""
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    received: list[dict] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    CustomWebhookNotificationBlock(
        name="scoring",
        url=f"http://127.0.0.1:{server.server_port}/hook",
        method="POST",
        json_data={"subject": "{{subject}}", "body": "{{body}}"},
        allow_private_urls=True,
    ).save("scoring-alerts-test", overwrite=True)
    monkeypatch.setenv("SCORING_ALERT_BLOCK", "scoring-alerts-test")
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()


def test_each_event_notifies_once_and_a_clean_run_not_at_all(
    demo_env: DemoEnv, fresh_data: Settings, webhook: list[dict]
) -> None:
    from flows.score_partition import score_partition

    clean, _, shifted = demo_env.plan.scoring_dates
    result = score_partition(DEMO_JOB, clean)
    assert result.decision_monitoring is not None and result.decision_monitoring.shifted == () and webhook == [], (
        webhook
    )

    result = score_partition(DEMO_JOB, shifted)
    assert len(webhook) == 2, [m["subject"] for m in webhook]
    assert re.fullmatch(rf"\[scoring\] {DEMO_JOB} {shifted}: \d+ drift alert\(s\)", webhook[0]["subject"]), webhook[0][
        "subject"
    ]
    assert webhook[1]["subject"] == f"[scoring] {DEMO_JOB} {shifted}: decisions shifted"
    drift, decisions = webhook
    # The feature by its plain name (the spec gives none: made from the column's), the column beside it.
    assert "Credit utilization (credit_utilization) against reference" in drift["body"] and "run: http" in drift["body"]
    assert (
        all(s.split(":")[0] in decisions["body"] for s in result.decision_monitoring.shifted)
        and "run: http" in decisions["body"]
    )

    missing = clean - dt.timedelta(days=30)
    with pytest.raises(ScoringError):
        score_partition(DEMO_JOB, missing)
    failed = webhook[2:]
    assert [m["subject"] for m in failed] == [f"[scoring] {DEMO_JOB} {missing}: the run failed"]
    assert "no raw partition" in failed[0]["body"] and str(missing) in failed[0]["body"]
    assert "/flow_runs/" in failed[0]["body"] or "/runs/flow-run/" in failed[0]["body"]


def test_an_alert_block_that_cannot_be_loaded_is_a_warning_not_a_failure(
    demo_env: DemoEnv, fresh_data: Settings, prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.score_partition import score_partition

    monkeypatch.setenv("SCORING_ALERT_BLOCK", "no-such-alert-block")
    result = score_partition(DEMO_JOB, demo_env.plan.scoring_dates[-1])
    assert any("notification block 'no-such-alert-block' cannot be loaded" in w for w in result.warnings), (
        result.warnings
    )


def test_the_automation_of_the_deployments_is_created_from_code(webhook: list[dict]) -> None:
    import yaml
    from prefect.automations import Automation
    from prefect.blocks.core import Block

    from flows.automations import AUTOMATION_NAME, created_automation
    from tasks.settings import PROJECT_ROOT

    first = created_automation()
    again = created_automation()  # re-running replaces it rather than adding a second one
    read = Automation.read(name=AUTOMATION_NAME)
    assert read.id == again.id != first.id
    assert read.trigger.expect == {"prefect.flow-run.Failed", "prefect.flow-run.Crashed"}
    (action,) = read.actions
    assert action.block_document_id == Block.load("custom-webhook/scoring-alerts-test")._block_document_id
    assert "{{ flow_run|ui_url }}" in action.body
    # It watches the tag every scoring deployment carries.
    deployments = yaml.safe_load((PROJECT_ROOT / "prefect.yaml").read_text())["deployments"]
    assert all("scoring" in d["tags"] for d in deployments if d["entrypoint"].startswith("flows/"))
