"""SIGKILL `score run` at random points, re-run, and check nobody ever saw a partial partition (both backends).

The trials run through `scripts/crash_trials.py`, which also runs more of them by hand; the
count here comes from `SCORING_CRASH_TRIALS` (default 10 per backend) and is printed in the
session's summary.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import CRASH_SUMMARY, DemoEnv

from tasks.settings import PROJECT_ROOT, Settings, current_settings

sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
from crash_trials import PUBLISH_POINTS, crash_trials, publish_crash_trials  # noqa: E402

TRIALS = int(os.environ.get("SCORING_CRASH_TRIALS", "10"))
_STAGED = tuple(p for p in PUBLISH_POINTS if p.startswith("publish:staged:"))
PUBLISH_POINTS_OF = {
    backend: tuple(p for p in PUBLISH_POINTS if p not in _STAGED or _STAGED.index(p) % 2 == side)
    for side, backend in enumerate(("duckdb", "postgres"))
}
"""Every point after the staging on both backends; the points between two staged dataset moves (before the ledger's
intent, so the warehouse holds nothing of the run yet and the rollback is the same code whichever move it follows)
shared out between the two, every second one each: every point is killed, each backend rolls back nine or ten times."""


@pytest.mark.crash
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_sigkill_at_random_points_leaves_one_complete_run(
    backend: str,
    request: pytest.FixtureRequest,
    demo_env: DemoEnv,
    fresh_data: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from prefect.settings import PREFECT_API_URL

    if backend == "postgres":
        monkeypatch.setenv("SCORING_WAREHOUSE_URL", request.getfixturevalue("postgres_database_url"))
    settings = current_settings()
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "SCORING_LOCK_WAIT_S": "60"}
    day = demo_env.plan.scoring_dates[-1]
    report = crash_trials(settings, day, trials=TRIALS, seed=20261203, env=env, logs=tmp_path / "logs")
    CRASH_SUMMARY.append(
        f"{report.backend}: {report.trials} trials, {report.kills} killed by SIGKILL (landed in {report.interrupted_in}), "
        f"{report.completed_before_kill} finished first; {report.parquet_reads} Parquet and {report.warehouse_reads} "
        f"concurrent warehouse reads; violations {len(report.violations)}; final equals clean run: {report.final_equals_reference}"
    )
    assert TRIALS >= 10
    assert report.kills >= TRIALS // 2, report
    assert not report.violations, report.violations[:10]
    assert report.final_equals_reference
    assert report.runs_left_running == 0
    assert report.leftover_staging == []


@pytest.mark.crash
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_sigkill_inside_publish_is_recovered_to_exactly_one_run(
    backend: str,
    request: pytest.FixtureRequest,
    demo_env: DemoEnv,
    fresh_data: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A kill at each point of PUBLISH_POINTS_OF the backend (between two dataset moves, around the ledger intent,
    between the warehouse commit and the Parquet swap, after the swap), with an input that differs
    from the published run's; after `score recover` or the next run of the job, every dataset of the
    partition in Parquet and the warehouse holds exactly one run's rows, the same run in both, and
    every raw id is in predictions or quarantine."""
    from prefect.settings import PREFECT_API_URL

    if backend == "postgres":
        monkeypatch.setenv("SCORING_WAREHOUSE_URL", request.getfixturevalue("postgres_database_url"))
    settings = current_settings()
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "SCORING_LOCK_WAIT_S": "60"}
    day, other = demo_env.plan.scoring_dates[-1], demo_env.plan.scoring_dates[-2]
    points = PUBLISH_POINTS_OF[backend]
    trials = int(os.environ.get("SCORING_PUBLISH_CRASH_TRIALS", str(len(points))))
    report = publish_crash_trials(settings, day, other, trials=trials, env=env, logs=tmp_path / "logs", points=points)
    CRASH_SUMMARY.append(
        f"{report.backend} publish: {report.kills} of {report.trials} runs killed inside publish; {report.rolled_back} rolled back, "
        f"{report.rolled_forward} rolled forward; recovered by {report.recovered_by}; {report.partitions_checked} partitions "
        f"checked in both stores; violations {len(report.violations)}"
    )
    assert trials >= 10 and set(PUBLISH_POINTS_OF["duckdb"]) | set(PUBLISH_POINTS_OF["postgres"]) == set(PUBLISH_POINTS)
    assert not report.violations, report.violations[:10]
    assert report.ok and report.rolled_forward >= 2 and report.rolled_back >= 8
