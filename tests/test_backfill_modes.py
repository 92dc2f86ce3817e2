"""Backfill modes and dry runs: exactly the selected partitions are touched, a dry run writes nothing."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import duckdb
import pytest
import yaml
from conftest import DEMO_JOB, DemoEnv

from tasks.settings import Settings

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
    demo_env: DemoEnv,
    fresh_data: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
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
    # What the mode found, and why nothing: each day's last status, also when none is selected.
    selection = _latest_artifact("backfill-selection")
    assert selection.description == (
        f"{DEMO_JOB} {first}…{last}, mode failed: nothing to score, no day had a last run that failed or was refused (3 succeeded)"
    )
    assert [(r["date"], r["selected"], r["last status"]) for r in json.loads(selection.data)] == [
        (d.isoformat(), False, "succeeded") for d in (first, middle, last)
    ]
    assert backfill(DEMO_JOB, first, last, mode="missing", dry_run=True) == []


def _latest_artifact(key: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        (latest,) = client.read_latest_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    return latest


def test_backfill_reports_its_progress_as_an_artifact(demo_env: DemoEnv, fresh_data: Settings) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.people import backfill

    day = demo_env.plan.scoring_dates[0]
    backfill(DEMO_JOB, day, day)
    with get_client(sync_client=True) as client:
        (latest,) = client.read_latest_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["backfill-progress"]))
        )
    assert latest.type == "progress" and float(latest.data) == 100.0


def test_a_wrong_range_fails_at_once_in_one_sentence(
    demo_env: DemoEnv, fresh_data: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.people import backfill

    first, _, last = demo_env.plan.scoring_dates
    after_today = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=2)
    monkeypatch.setenv("SCORING_MAX_BACKFILL_DAYS", str((last - first).days))
    for start, end, sentence in [
        (last, first, f"the end date {first} is before the start date {last}: give the earlier day as the start"),
        (
            first,
            last,
            f"{first}…{last} spans {(last - first).days + 1} days, more than the {(last - first).days} one backfill may score "
            "(SCORING_MAX_BACKFILL_DAYS): split the range",
        ),
        (after_today, after_today, f"the end date {after_today} is after today"),
    ]:
        state = backfill(DEMO_JOB, start, end, return_state=True)
        assert state.is_failed() and sentence in state.message, state.message
        assert _partition_task_runs(state.state_details.flow_run_id) == []
    # Nothing ran: not even the recovery that opens the warehouse.
    assert not fresh_data.duckdb_path.exists() and not (fresh_data.data_dir / "output").exists()


def test_cli_dry_run_prints_the_plan(demo_env: DemoEnv, fresh_data: Settings, prefect_logging: None) -> None:
    from typer.testing import CliRunner

    from cli.score import app

    first, last = demo_env.plan.scoring_dates[0], demo_env.plan.scoring_dates[-1]
    result = CliRunner().invoke(
        app, ["backfill", DEMO_JOB, "--start", str(first), "--end", str(last), "--mode", "missing", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    assert f"would score 3 partition(s): {first}" in result.output
    assert not fresh_data.duckdb_path.exists()


def _partition_task_runs(flow_run_id) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return sorted((r for r in runs if r.name.startswith(f"score {DEMO_JOB} ")), key=lambda r: r.created)


def test_concurrent_backfill_runs_partitions_at_once_and_keeps_going_past_a_failure(
    demo_env: DemoEnv,
    fresh_data: Settings,
    prefect_logging: None,
) -> None:
    from typer.testing import CliRunner

    from cli.score import app
    from flows.people import backfill
    from tasks.runs.scheduling import catch_up_dates
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
        rows = con.sql("SELECT partition_date, status, error FROM runs ORDER BY partition_date").fetchall()
    # The middle date has no raw data: refused before its lease, recorded as refused with its reason.
    assert [row[:2] for row in rows] == [(first, "succeeded"), (middle, "refused"), (last, "succeeded")]
    assert rows[1][2].startswith("JobValidationError: ") and "no raw partition" in rows[1][2], rows[1]
    # Tables and the failed task say the sentence without the error's class and the raw folder's path.
    reason = f"date: no raw partition for job '{DEMO_JOB}' on {middle}: the folder does not exist"
    assert rows[1][2].endswith(reason)
    # Its day is red in the backfill's graph: its task run failed with the reason, the other two completed.
    tasks = _partition_task_runs(state.state_details.flow_run_id)
    assert sorted(t.state.type.value for t in tasks) == ["COMPLETED", "COMPLETED", "FAILED"]
    assert [(t.name, t.state.message) for t in tasks if t.state.is_failed()] == [(f"score {DEMO_JOB} {middle}", reason)]
    # The outcomes table: date, outcome and reason first, the run page last (its path under the data folder).
    outcomes = json.loads(_latest_artifact("backfill-outcomes").data)
    assert [list(o)[:3] + list(o)[-1:] for o in outcomes] == [["date", "outcome", "reason", "link"]] * 3
    assert [(o["date"], o["outcome"], o["reason"]) for o in outcomes] == [
        (first.isoformat(), "succeeded", ""),
        (middle.isoformat(), "🔴 failed", reason),
        (last.isoformat(), "succeeded", ""),
    ]
    pages = [o["link"] for o in outcomes if o["outcome"] == "succeeded"]
    assert pages == [f"output/{DEMO_JOB}/reports/html/date={d}.html" for d in (first, last)]
    assert all((fresh_data.data_dir / page).is_file() for page in pages)
    assert all("approve " in o["decisions"] for o in outcomes if o["outcome"] == "succeeded"), outcomes
    # `score runs` lists the refused day with its reason, and the nightly catch-up scores it again.
    listed = json.loads(CliRunner().invoke(app, ["runs", DEMO_JOB, "--json"]).stdout)
    assert [(r["partition_date"], r["status"], r["error"]) for r in listed if r["status"] == "refused"] == [
        (middle.isoformat(), *rows[1][1:])
    ]
    window = fresh_data.model_copy(update={"catch_up_days": (last - first).days + 1})
    assert catch_up_dates(window, DEMO_JOB, last + dt.timedelta(days=1)) == [middle]
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        assert client.read_flow_run(state.state_details.flow_run_id).name == f"{DEMO_JOB} {first}…{last} mode all"
    # `failed` finds the refused day and says why.
    assert [p["date"] for p in backfill(DEMO_JOB, first, last, mode="failed", dry_run=True)] == [middle.isoformat()]
    selection = _latest_artifact("backfill-selection")
    assert selection.description.startswith(
        f"{DEMO_JOB} {first}…{last}, mode failed: 1 of 3 day(s) to score, last run failed or refused: "
        f"{middle} (refused: {reason})"
    ), selection.description
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
    assert [r.created < p.end_time for p, r in zip(sequential, sequential[1:], strict=False)] == [False, False]


def test_a_backfills_partition_subflows_run_without_their_own_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefect joins a flow run's heartbeat thread at the run's end, and that thread sleeps in whole
    seconds: a heartbeat per partition subflow cost up to 1 s a partition. The backfill's own run beats."""
    from prefect import flow
    from prefect.settings import get_current_settings

    from flows.steps import partitions

    seen: dict[str, object] = {}

    from tasks.results import RUN_COUNTS, PartitionResult

    @flow(name="score_partition")
    def probe(job: str, date: dt.date, chunk_rows: int | None = None) -> PartitionResult:
        seen["partition"] = get_current_settings().flows.heartbeat_frequency
        return PartitionResult(
            job=job,
            partition_date=date,
            run_id="probe",
            run_page=None,
            **{**dict.fromkeys(RUN_COUNTS, 0), "rows_scored": 1},
            decisions={},
            guard_counts={},
            inference={},
            model_health={},
            challenger=None,
            drift_flags=(),
            forecast=None,
            classification=None,
            decision_monitoring=None,
            warnings=(),
        )

    @flow(name="probe-backfill")
    def parent() -> dict:
        seen["parent"] = get_current_settings().flows.heartbeat_frequency
        return partitions.scored_partition(DEMO_JOB, dt.date(2026, 3, 10), None)

    monkeypatch.setattr(partitions, "score_partition", probe)
    # The session's harness turns flow heartbeats off (conftest); a backfill started by people beats.
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 180}):
        outcome = parent()

    assert outcome["outcome"] == "succeeded"
    assert seen["partition"] is None
    assert seen["parent"] == 180


def test_partitions_loading_their_models_at_once_all_get_the_whole_xgboost() -> None:
    """A concurrent backfill's partitions import xgboost at once: a thread that found it in `sys.modules`
    while another was still importing it got a half-made module (no `Booster`), and its day failed."""
    import subprocess
    import sys

    from tasks.settings import PROJECT_ROOT

    probe = (
        "import threading\n"
        "from tasks.inference.frameworks import inference_xgboost_module\n"
        "seen = []\n"
        "threads = [threading.Thread(target=lambda: seen.append(hasattr(inference_xgboost_module(), 'Booster'))) for _ in range(4)]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "print(seen)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == str([True] * 4), done.stdout + done.stderr
