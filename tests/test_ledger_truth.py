"""The ledger is the truth after faults: every run ends `succeeded` or `failed`, also when the kill,
the fault or the failed write hits the ledger itself, and what died is picked up again.

Kills land at named points of the publish (`SCORING_CRASH_AT`, tasks/sinks/crash_points.py) in a
`score run` child process (forked from one that imported `score` once, scripts/forked_score.py); ledger faults are the DuckDB lock error injected at the ledger write.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from conftest import DEMO_JOB, DemoEnv

from flows.steps.blocks import configured_warehouse
from tasks.runs.recovery import pending_ledger_dir, recovered_job
from tasks.runs.scheduling import partition_selection
from tasks.settings import PROJECT_ROOT, Settings, current_settings
from tasks.sinks.duckdb_warehouse import DuckDBWarehouse

pytestmark = pytest.mark.usefixtures("prefect_harness")
sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
from forked_score import completed  # noqa: E402

_LOCKED = duckdb.IOException(
    'IO Error: Could not set lock on file "warehouse.duckdb": Conflicting lock is held in /usr/bin/python3.11 (PID 4242)'
)


def _ledger(settings: Settings, day: dt.date) -> list[dict]:
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        cursor = con.execute(
            "SELECT * FROM runs WHERE job = ? AND partition_date = ? ORDER BY started_at", [DEMO_JOB, day]
        )
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _published_run(settings: Settings, day: dt.date) -> set[str]:
    link = settings.output_dir(DEMO_JOB) / "predictions" / f"date={day}"
    return set(pq.read_table(os.path.realpath(link)).column("run_id").to_pylist())


def _killed_at(point: str, day: dt.date) -> None:
    """`score run` of `day` in a child process, killed by itself at `point`."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "SCORING_CRASH_AT": point, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    child = completed(["run", DEMO_JOB, "--date", day.isoformat()], env=env, cwd=PROJECT_ROOT)
    assert child.returncode == -signal.SIGKILL, child.stdout[-2000:] + child.stderr[-2000:]


@pytest.fixture
def one_job(fresh_data: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Only the credit job is configured, so `nightly` scores what the demo data holds."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    shutil.copy(fresh_data.jobs_dir / f"{DEMO_JOB}.yaml", jobs)
    monkeypatch.setenv("SCORING_JOBS_DIR", str(jobs))
    return current_settings()


def test_a_run_killed_before_its_commit_is_failed_and_backfill_failed_rescores_it(
    demo_env: DemoEnv, fresh_data: Settings
) -> None:
    from flows.people import backfill

    day = demo_env.plan.scoring_dates[-1]
    _killed_at("publish:intent", day)
    (killed,) = _ledger(fresh_data, day)
    assert killed["status"] == "publishing"
    # Nothing was published: no partition, no warehouse rows.
    assert not os.path.lexists(fresh_data.output_dir(DEMO_JOB) / "predictions" / f"date={day}")
    (outcome,) = backfill(DEMO_JOB, day, day, mode="failed")
    assert outcome["outcome"] == "succeeded"
    first, second = _ledger(fresh_data, day)
    assert first["run_id"] == killed["run_id"] and first["status"] == "failed"
    assert first["error"].startswith("abandoned while publishing")
    assert second["status"] == "succeeded" and _published_run(fresh_data, day) == {second["run_id"]}
    assert not list((fresh_data.output_dir(DEMO_JOB) / "_partitions" / f"date={day}").glob(f"{killed['run_id']}*"))


def test_nightly_rescores_an_abandoned_day_before_the_new_one(
    demo_env: DemoEnv,
    one_job: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.people import nightly

    first, earlier, day = demo_env.plan.scoring_dates
    # The window holds exactly the two demo dates before `day` (the days before them are training days).
    monkeypatch.setenv("SCORING_CATCH_UP_DAYS", str((day - first).days))
    _killed_at("publish:staged:guard_summary", earlier)
    outcomes = nightly(day)
    # The never-scored first day and the abandoned day, oldest first, then the new day.
    assert [(o["date"], o["outcome"]) for o in outcomes] == [
        (d.isoformat(), "succeeded") for d in (first, earlier, day)
    ]
    killed, rescored = _ledger(one_job, earlier)
    assert killed["status"] == "failed" and "abandoned while running" in killed["error"]
    assert rescored["status"] == "succeeded"


def test_nightly_scores_the_night_its_run_was_scheduled_for_not_the_wall_clocks(
    demo_env: DemoEnv,
    one_job: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deployment's run scheduled for 00:30 Berlin the night after the last demo day, months ago, and
    run only now (queued, late or retried) scores that day; a run started by hand scores yesterday."""
    import asyncio
    from zoneinfo import ZoneInfo

    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow
    from prefect.states import Scheduled

    from flows.people import nightly
    from tasks.runs.calendar import scheduled_partition_date, yesterday

    day = demo_env.plan.scoring_dates[-1]
    monkeypatch.setenv("SCORING_CATCH_UP_DAYS", "0")
    monkeypatch.setenv("SCORING_TIMEZONE", "Europe/Berlin")
    settings = current_settings()
    scheduled = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(0, 30), ZoneInfo("Europe/Berlin"))
    assert scheduled.astimezone(dt.UTC).date() == day  # 23:30 UTC: the UTC date alone would score the day before `day`
    assert scheduled_partition_date(settings, scheduled.astimezone(dt.UTC)) == day
    assert scheduled_partition_date(settings, None) == yesterday(settings)

    async def scheduled_run():  # noqa: ANN202
        async with get_client() as client:
            flow_id = await client.create_flow(nightly)
            deployment_id = await client.create_deployment(
                flow_id=flow_id, name="nightly-scheduled", entrypoint="flows/people.py:nightly"
            )
            return await client.create_flow_run_from_deployment(
                deployment_id, state=Scheduled(scheduled_time=scheduled)
            )

    flow_run = asyncio.run(scheduled_run())
    assert flow_run.expected_start_time == scheduled
    outcomes = run_flow(nightly, flow_run=flow_run)
    assert [(o["job"], o["date"], o["outcome"]) for o in outcomes] == [(DEMO_JOB, day.isoformat(), "succeeded")]
    assert [r["status"] for r in _ledger(one_job, day)] == ["succeeded"]


def test_a_run_killed_after_its_commit_is_rolled_forward_by_score_recover(
    demo_env: DemoEnv, fresh_data: Settings
) -> None:
    from typer.testing import CliRunner

    from cli.score import app

    day = demo_env.plan.scoring_dates[-1]
    _killed_at("publish:committed", day)
    (killed,) = _ledger(fresh_data, day)
    assert killed["status"] == "committed" and killed["rows_scored"] > 0
    result = CliRunner().invoke(app, ["recover", DEMO_JOB])
    assert result.exit_code == 0, result.output
    assert killed["run_id"] in result.output and "committed" in result.output
    (closed,) = _ledger(fresh_data, day)
    assert closed["status"] == "succeeded" and "published by recovery" in closed["warnings"]
    assert _published_run(fresh_data, day) == {killed["run_id"]}
    page = (fresh_data.output_dir(DEMO_JOB) / "reports" / "html" / f"date={day}.html").read_text()
    assert killed["run_id"] in page
    assert "nothing to recover" in CliRunner().invoke(app, ["recover", DEMO_JOB]).output


def test_a_ledger_close_that_fails_leaves_a_committed_run_the_next_start_closes(
    demo_env: DemoEnv,
    fresh_data: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.score_partition import score_partition

    day = demo_env.plan.scoring_dates[-1]
    original = DuckDBWarehouse.record_run_ended

    def locked(self, run_id, *, status, **kwargs):  # noqa: ANN001, ANN003, ANN202
        if status == "succeeded":
            raise _LOCKED
        return original(self, run_id, status=status, **kwargs)

    monkeypatch.setattr(DuckDBWarehouse, "record_run_ended", locked)
    result = score_partition(DEMO_JOB, day)
    assert any("ledger not updated" in w for w in result.warnings), result.warnings
    (run,) = _ledger(fresh_data, day)
    assert run["status"] == "committed" and _published_run(fresh_data, day) == {run["run_id"]}
    monkeypatch.setattr(DuckDBWarehouse, "record_run_ended", original)
    (recovered,) = recovered_job(
        configured_warehouse(fresh_data), fresh_data, DEMO_JOB, recovering_run_id="recovery-test"
    )
    assert (recovered.run_id, recovered.was, recovered.now) == (run["run_id"], "committed", "succeeded")
    assert [r["status"] for r in _ledger(fresh_data, day)] == ["succeeded"]


def test_a_failure_the_ledger_cannot_take_is_recorded_by_the_next_start(
    demo_env: DemoEnv,
    fresh_data: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import flows.steps.units
    from flows.score_partition import score_partition

    day = demo_env.plan.scoring_dates[-1]
    first = score_partition(DEMO_JOB, day)

    def full_disk(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OSError(errno.ENOSPC, "No space left on device", str(fresh_data.output_dir(DEMO_JOB) / "reports"))

    def locked(self, **kwargs):  # noqa: ANN001, ANN003, ANN202
        raise _LOCKED

    monkeypatch.setattr(flows.steps.units, "scoring_summary", full_disk)
    monkeypatch.setattr(DuckDBWarehouse, "record_run_failed", locked)
    with pytest.raises(OSError, match="No space left"):
        score_partition(DEMO_JOB, day)
    _, stuck = _ledger(fresh_data, day)
    assert stuck["status"] == "running"
    (pending,) = pending_ledger_dir(fresh_data, DEMO_JOB).glob("*.json")
    assert json.loads(pending.read_text())["run_id"] == stuck["run_id"]
    # The previous run's outputs are untouched.
    assert _published_run(fresh_data, day) == {first.run_id}
    monkeypatch.undo()
    recovered_job(configured_warehouse(fresh_data), fresh_data, DEMO_JOB, recovering_run_id="recovery-test")
    _, closed = _ledger(fresh_data, day)
    assert closed["status"] == "failed" and closed["error"].startswith("OSError: disk full"), closed["error"]
    assert "Traceback" in closed["error_detail"] and "full_disk" in closed["error_detail"]
    assert not pending.exists()
    assert [(r["date"], r["selected"]) for r in partition_selection(fresh_data, DEMO_JOB, [day], "failed")] == [
        (day.isoformat(), True)
    ]


def test_a_warehouse_that_cannot_be_opened_after_publish_leaves_the_run_succeeded_with_warnings(
    demo_env: DemoEnv,
    fresh_data: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Monitoring and the model card share one open database after the publish; when it cannot be opened (a full
    disk), each of them fails on its own and is kept as a warning of the published run, which still succeeds."""
    import flows.steps.partition
    from flows.score_partition import score_partition

    published = []
    opened = DuckDBWarehouse._opened
    release = flows.steps.partition.released_failure_room

    def published_then_full(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        release(*args, **kwargs)
        published.append(True)

    def full_after_publish(self: DuckDBWarehouse):  # noqa: ANN202
        if published:
            raise OSError(errno.ENOSPC, "No space left on device")
        return opened(self)

    monkeypatch.setattr(flows.steps.partition, "released_failure_room", published_then_full)
    monkeypatch.setattr(DuckDBWarehouse, "_opened", full_after_publish)
    day = demo_env.plan.scoring_dates[-1]
    result = score_partition(DEMO_JOB, day)
    assert any(w.startswith("decision monitoring failed: disk full") for w in result.warnings), result.warnings
    assert any(w.startswith("model card not written: disk full") for w in result.warnings), result.warnings
    monkeypatch.setattr(DuckDBWarehouse, "_opened", opened)
    (run,) = _ledger(fresh_data, day)
    assert run["status"] == "succeeded"


def test_monitoring_that_fails_after_publish_leaves_the_run_succeeded_with_a_warning(
    demo_env: DemoEnv,
    fresh_data: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tasks.runs.monitoring
    import tasks.runs.page
    from flows.score_partition import score_partition

    def full_disk(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OSError(errno.ENOSPC, "No space left on device")

    def broken_page(**kwargs):  # noqa: ANN003, ANN202
        raise ValueError("a histogram without edges")

    monkeypatch.setattr(tasks.runs.monitoring, "monitored_decisions", full_disk)
    monkeypatch.setattr(tasks.runs.page, "run_report_html", broken_page)
    day = demo_env.plan.scoring_dates[-1]
    result = score_partition(DEMO_JOB, day)
    assert any(w.startswith("decision monitoring failed") for w in result.warnings), result.warnings
    assert any(w.startswith("run page not rendered") for w in result.warnings), result.warnings
    (run,) = _ledger(fresh_data, day)
    assert run["status"] == "succeeded"
    assert json.loads(run["warnings"]) == list(result.warnings)
    page = (fresh_data.output_dir(DEMO_JOB) / "reports" / "html" / f"date={day}.html").read_text()
    assert "could not be rendered" in page and "a histogram without edges" in page
