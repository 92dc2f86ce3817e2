"""Backfill modes and dry runs: exactly the selected partitions are touched, a dry run writes nothing."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import duckdb
import pytest
import yaml

from tasks.settings import Settings

from conftest import DEMO_JOB, DemoEnv

pytestmark = pytest.mark.usefixtures("prefect_harness")


def runs_per_date(settings: Settings) -> dict[dt.date, list[str]]:
    if not settings.duckdb_path.exists():
        return {}
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        rows = con.sql("SELECT partition_date, status FROM runs ORDER BY started_at").fetchall()
    out: dict[dt.date, list[str]] = {}
    for day, status in rows:
        out.setdefault(day, []).append(status)
    return out


def test_a_dry_run_lists_the_partitions_and_writes_nothing(demo_env: DemoEnv, fresh_data: Settings) -> None:
    from flows.people import backfill

    days = demo_env.plan.scoring_dates
    planned = backfill(DEMO_JOB, days[0], days[-1], mode="all", dry_run=True)
    assert [p["date"] for p in planned] == [d.isoformat() for d in days]
    assert {p["outcome"] for p in planned} == {"would score"}
    assert not fresh_data.duckdb_path.exists()
    assert not (fresh_data.data_dir / "output").exists()


def test_missing_and_failed_modes_touch_exactly_their_partitions(
    demo_env: DemoEnv, fresh_data: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.people import backfill
    from flows.score_partition import score_partition

    first, middle, last = demo_env.plan.scoring_dates
    score_partition(DEMO_JOB, first)
    # The middle date fails once, after its ledger row opened: a quarantine limit it breaks.
    jobs = tmp_path / "strict-jobs"
    jobs.mkdir()
    spec = yaml.safe_load((fresh_data.jobs_dir / f"{DEMO_JOB}.yaml").read_text())
    spec["limits"]["max_quarantined_share"] = 0.0  # the demo always quarantines blank ids
    (jobs / f"{DEMO_JOB}.yaml").write_text(yaml.safe_dump(spec))
    with monkeypatch.context() as strict:
        strict.setenv("SCORING_JOBS_DIR", str(jobs))
        with pytest.raises(Exception, match="exceeds the job limit"):
            score_partition(DEMO_JOB, middle)
    before = runs_per_date(fresh_data)
    assert before == {first: ["succeeded"], middle: ["failed"]}

    assert [p["date"] for p in backfill(DEMO_JOB, first, last, mode="missing", dry_run=True)] == [last.isoformat()]
    assert [p["date"] for p in backfill(DEMO_JOB, first, last, mode="failed", dry_run=True)] == [middle.isoformat()]
    assert runs_per_date(fresh_data) == before  # dry runs left the ledger alone

    backfill(DEMO_JOB, first, last, mode="missing")
    assert runs_per_date(fresh_data) == {**before, last: ["succeeded"]}
    backfill(DEMO_JOB, first, last, mode="failed")
    assert runs_per_date(fresh_data) == {first: ["succeeded"], middle: ["failed", "succeeded"], last: ["succeeded"]}
    # Nothing left to do in either mode.
    assert backfill(DEMO_JOB, first, last, mode="failed", dry_run=True) == []
    assert backfill(DEMO_JOB, first, last, mode="missing", dry_run=True) == []


def test_backfill_reports_its_progress_as_an_artifact(demo_env: DemoEnv, fresh_data: Settings) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.people import backfill

    day = demo_env.plan.scoring_dates[0]
    backfill(DEMO_JOB, day, day)
    with get_client(sync_client=True) as client:
        (latest,) = client.read_latest_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["backfill-progress"])))
    assert latest.type == "progress" and float(latest.data) == 100.0


def test_cli_dry_run_prints_the_plan(demo_env: DemoEnv, fresh_data: Settings, prefect_logging: None) -> None:
    from typer.testing import CliRunner

    from cli.score import app

    first, last = demo_env.plan.scoring_dates[0], demo_env.plan.scoring_dates[-1]
    result = CliRunner().invoke(app, ["backfill", DEMO_JOB, "--start", str(first), "--end", str(last), "--mode", "missing", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert f"would score 3 partition(s): {first}" in result.output
    assert not fresh_data.duckdb_path.exists()


def _partition_task_runs(flow_run_id) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return sorted((r for r in runs if r.name.startswith("score-partition-run")), key=lambda r: r.created)


def test_concurrent_backfill_runs_partitions_at_once_and_keeps_going_past_a_failure(demo_env: DemoEnv, fresh_data: Settings) -> None:
    from flows.people import backfill
    from tasks.scoring.progress import progress_listener

    first, middle, last = demo_env.plan.scoring_dates
    shutil.rmtree(fresh_data.raw_partition_dir(DEMO_JOB, middle.isoformat()))
    seen: list[tuple[str, int, int]] = []
    with progress_listener(lambda what, done, total: seen.append((what, done, total))):
        state = backfill(DEMO_JOB, first, last, concurrency=3, return_state=True)
    assert state.is_failed() and f"1 of 3 partition(s) failed: {DEMO_JOB} {middle}" in state.message
    assert [s for s in seen if s[0].endswith("partitions")] == [(f"{DEMO_JOB} partitions", n, 3) for n in (1, 2, 3)]
    # Inside each scored partition, its work units report too.
    assert {s for s in seen if s[0].endswith("units")} == {(f"{DEMO_JOB} {d} units", 1, 1) for d in (first, last)}
    with duckdb.connect(str(fresh_data.duckdb_path), read_only=True) as con:
        rows = con.sql("SELECT partition_date, status FROM runs ORDER BY partition_date").fetchall()
    # The middle date has no raw data: refused before its lease, so it has no ledger row.
    assert rows == [(first, "succeeded"), (last, "succeeded")]
    with duckdb.connect(str(fresh_data.duckdb_path), read_only=True) as con:
        baselines = con.sql(
            "SELECT partition_date, max(baseline_partitions) FROM decision_monitoring GROUP BY partition_date ORDER BY 1"
        ).fetchall()
    # Monitored again in date order after the out-of-order finish: the last day's trailing window
    # holds the first day, whichever finished first.
    assert baselines == [(first, 0), (last, 1)]
    # All three partitions were started before the first one ended.
    runs = _partition_task_runs(state.state_details.flow_run_id)
    assert len(runs) == 3 and max(r.created for r in runs) < min(r.end_time for r in runs)

    # With concurrency 1, each partition starts after the one before it ended.
    state = backfill(DEMO_JOB, first, last, mode="missing", concurrency=1, return_state=True)
    assert state.is_failed()
    sequential = _partition_task_runs(state.state_details.flow_run_id)
    assert len(sequential) == 1
    state = backfill(DEMO_JOB, first, last, concurrency=1, return_state=True)
    sequential = _partition_task_runs(state.state_details.flow_run_id)
    assert [r.created < p.end_time for p, r in zip(sequential, sequential[1:])] == [False, False]


def test_a_backfills_partition_subflows_run_without_their_own_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefect joins a flow run's heartbeat thread at the run's end, and that thread sleeps in whole
    seconds: a heartbeat per partition subflow cost up to 1 s a partition. The backfill's own run beats."""
    from prefect import flow
    from prefect.settings import get_current_settings

    from flows.steps import partitions

    seen: dict[str, object] = {}

    @flow(name="score_partition")
    def probe(job: str, date: dt.date, chunk_rows: int | None = None) -> dict:
        seen["partition"] = get_current_settings().flows.heartbeat_frequency
        return {"rows_scored": 1, "report": "", "run_id": "probe"}

    @flow(name="probe-backfill")
    def parent() -> dict:
        seen["parent"] = get_current_settings().flows.heartbeat_frequency
        return partitions.scored_partition(DEMO_JOB, dt.date(2026, 3, 10), None)

    monkeypatch.setattr(partitions, "score_partition", probe)
    outcome = parent()

    assert outcome["outcome"] == "succeeded"
    assert seen["partition"] is None
    assert seen["parent"] == get_current_settings().flows.heartbeat_frequency is not None
