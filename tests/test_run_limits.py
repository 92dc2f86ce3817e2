"""Timeouts: a partition run that goes past `limits.max_run_seconds` fails cleanly — ledger `failed` with
"timed out after N s", lease released, staging removed, the previous outputs untouched — and a backfill
goes on with the next partition."""

from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

import tasks.scoring.unit_pass as unit_pass
from tasks.errors import PartitionsFailed
from tasks.settings import Settings, current_settings
from tests.conftest import DEMO_JOB, DemoEnv


def _rows(settings: Settings, sql: str, params: list) -> list[tuple]:
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        return con.execute(sql, params).fetchall()


@pytest.mark.usefixtures("prefect_harness")
def test_a_stalled_chunk_times_the_run_out_cleanly_and_the_backfill_goes_on(
    demo_env: DemoEnv, fresh_data: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.people import backfill
    from flows.score_partition import score_partition

    first, second = demo_env.plan.scoring_dates[-2:]
    before = score_partition(DEMO_JOB, first)  # a published night the timed-out run must leave as it is

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    spec = (fresh_data.jobs_dir / f"{DEMO_JOB}.yaml").read_text()
    assert "limits:\n  max_repaired_share" in spec
    (jobs / f"{DEMO_JOB}.yaml").write_text(spec.replace("limits:\n", "limits:\n  max_run_seconds: 2\n", 1))
    monkeypatch.setenv("SCORING_JOBS_DIR", str(jobs))
    settings = current_settings()

    stalls = []
    real = unit_pass.guarded_chunk

    def stalling(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if not stalls:  # the first chunk of the first partition hangs for longer than the limit
            stalls.append(time.time())
            time.sleep(3)
        return real(*args, **kwargs)

    monkeypatch.setattr(unit_pass, "guarded_chunk", stalling)
    with pytest.raises(PartitionsFailed, match=str(first)):
        backfill(DEMO_JOB, first, second, chunk_rows=500)

    runs = _rows(
        settings, "SELECT partition_date, status, error FROM runs WHERE job = ? ORDER BY started_at", [DEMO_JOB]
    )
    (timed_out,) = [r for r in runs if r[1] == "failed"]
    assert timed_out[0] == first and "timed out after 2 s" in timed_out[2], runs
    assert runs[-1][:2] == (second, "succeeded")  # the backfill went on with the next partition
    # The night scored before is untouched: same run in Parquet and in the warehouse.
    link = settings.output_dir(DEMO_JOB) / "predictions" / f"date={first}"
    assert set(pq.read_table(os.path.realpath(link)).column("run_id").to_pylist()) == {before.run_id}
    assert _rows(settings, "SELECT DISTINCT run_id FROM predictions WHERE partition_date = ?", [first]) == [
        (before.run_id,)
    ]
    # Lease released, staging removed.
    assert _rows(settings, "SELECT * FROM partition_leases", []) == []
    assert not [p for p in settings.output_dir(DEMO_JOB).rglob("_staging/**/*") if p.is_file()]


def test_the_spec_limit_overrides_the_settings_default(
    demo_env: DemoEnv, fresh_data: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks.runs.ticket import run_ticket
    from tasks.scoring.prepared import prepared_job

    monkeypatch.setenv("SCORING_MAX_RUN_SECONDS", "60")
    settings = current_settings()
    day = demo_env.plan.scoring_dates[-1]
    ticket = run_ticket(
        prepared_job(DEMO_JOB, day, settings),
        run_id="r",
        partition_date=day,
        chunk_rows=None,
        max_run_seconds=settings.max_run_seconds,
    )
    assert ticket.max_run_seconds == 60 and ticket.deadline is None
    started = ticket.started(1_000.0)
    assert started.deadline == 1_060.0 and started.run_deadline().limit_s == 60
    monkeypatch.setenv("SCORING_MAX_RUN_SECONDS", "-1")
    with pytest.raises(Exception, match="SCORING_MAX_RUN_SECONDS"):
        current_settings()
