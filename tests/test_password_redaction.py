"""The PostgreSQL password never shows: scoring runs, a failing run and a wrong password, then every
log line (here and in Prefect's API), artifact, flow-run state message and ledger row is scanned."""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from pathlib import Path

import pytest
import yaml
from conftest import DEMO_JOB, DemoEnv

from flows.steps.blocks import configured_warehouse
from tasks.settings import Settings, current_settings

pytestmark = pytest.mark.usefixtures("prefect_harness")


async def _everything_prefect_stored(flow_run_ids: list) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, LogFilter, LogFilterFlowRunId

    async with get_client() as client:
        logs: list = []
        while page := await client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=flow_run_ids)), limit=200, offset=len(logs)
        ):
            logs += page
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=flow_run_ids))
        )
        runs = [await client.read_flow_run(i) for i in flow_run_ids]
    return (
        [log.message for log in logs]
        + [f"{a.key} {a.description} {a.data}" for a in artifacts]
        + [f"{r.state.message if r.state else ''} {r.parameters}" for r in runs]
    )


def _strict_jobs(settings: Settings, tmp_path: Path) -> Path:
    jobs = tmp_path / "strict-jobs"
    jobs.mkdir()
    spec = yaml.safe_load((settings.jobs_dir / f"{DEMO_JOB}.yaml").read_text())
    spec["limits"]["max_quarantined_share"] = 0.0  # the demo always quarantines blank ids
    (jobs / f"{DEMO_JOB}.yaml").write_text(yaml.safe_dump(spec))
    return jobs


def test_no_log_artifact_state_or_ledger_row_holds_the_password(
    demo_env: DemoEnv,
    fresh_data: Settings,
    postgres_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    from flows.score_partition import score_partition

    password = urllib.parse.unquote(urllib.parse.urlsplit(postgres_database_url).password or "")
    assert len(password) >= 16
    monkeypatch.setenv("SCORING_WAREHOUSE_URL", postgres_database_url)
    day = demo_env.plan.scoring_dates[0]
    states = []
    with caplog.at_level(logging.DEBUG):
        states.append(score_partition(DEMO_JOB, day, return_state=True))
        # A run that fails inside (a quarantine limit it breaks): its error goes to the ledger and the state.
        with monkeypatch.context() as strict:
            strict.setenv("SCORING_JOBS_DIR", str(_strict_jobs(fresh_data, tmp_path)))
            states.append(score_partition(DEMO_JOB, day, return_state=True))
        wrong = postgres_database_url.replace(urllib.parse.quote(password, safe=""), "Not-The-Password-42")
        monkeypatch.setenv("SCORING_WAREHOUSE_URL", wrong)
        states.append(score_partition(DEMO_JOB, day, return_state=True))
    assert [s.is_completed() for s in states] == [True, False, False]
    assert "password authentication failed" in str(states[2].message)
    monkeypatch.setenv("SCORING_WAREHOUSE_URL", postgres_database_url)

    shown = [caplog.text, *(str(s.message) for s in states)]
    shown += asyncio.run(_everything_prefect_stored([s.state_details.flow_run_id for s in states]))
    with configured_warehouse(current_settings())._session(write=False) as session:
        ledger = session.rows("SELECT * FROM runs")
        leases = session.rows("SELECT * FROM partition_leases")
    assert {r["status"] for r in ledger} == {"succeeded", "failed"} and leases == []
    shown += [str(row) for row in ledger]
    for text in shown:
        assert password not in text
        assert "Not-The-Password-42" not in text
    # The scans looked at real content: the runs' logs and artifacts are there.
    assert any("run report" in t for t in shown) and any("fallback" in t for t in shown)
