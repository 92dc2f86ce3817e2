"""A quiet, useful terminal: Prefect's per-task state lines hidden unless `-v`, the ledger as `score runs`,
`--json` on run, backfill, runs and validate, and shell completion (the real `score` command, on the
session's Prefect server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.settings import Settings
from tests.conftest import DEMO_JOB, DemoEnv

SCORE = str(Path(sys.executable).with_name("score"))


@pytest.fixture
def score(fresh_data: Settings, prefect_harness: None):  # noqa: ANN201
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}

    def run(*args: str, code: int = 0) -> subprocess.CompletedProcess:
        done = subprocess.run([SCORE, *args], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == code, (args, done.returncode, done.stdout[-2000:], done.stderr[-2000:])
        assert "Traceback" not in done.stdout + done.stderr
        return done

    return run


def test_state_lines_are_hidden_unless_verbose_and_json_is_plain_stdout(
    score, demo_env: DemoEnv, fresh_data: Settings
) -> None:
    day = demo_env.plan.scoring_dates[-1].isoformat()
    quiet = score("run", DEMO_JOB, "--date", day)
    assert not [
        line for line in quiet.stderr.splitlines() if "Task run" in line and "Finished in state Completed()" in line
    ]
    assert "[INF]" in quiet.stderr and "[PRED]" in quiet.stderr
    verbose = score("-v", "run", DEMO_JOB, "--date", day)
    assert [
        line for line in verbose.stderr.splitlines() if "Task run" in line and "Finished in state Completed()" in line
    ]
    # The run log file keeps them either way.
    logs = sorted((fresh_data.data_dir / "output" / "logs").glob("score-*.log"))
    assert "Finished in state Completed()" in logs[0].read_text()

    result = json.loads(score("run", DEMO_JOB, "--date", day, "--json").stdout)
    assert result["job"] == DEMO_JOB and result["partition_date"] == day and result["rows_scored"] > 0

    runs = json.loads(score("runs", DEMO_JOB, "--last", "2", "--json").stdout)
    assert [r["run_id"] for r in runs][:1] == [result["run_id"]] and len(runs) == 2
    assert {r["status"] for r in runs} == {"succeeded"} and runs[0]["started_at"] > runs[1]["started_at"]
    table = score("runs", DEMO_JOB, "--last", "3").stdout
    assert result["run_id"] in table and "succeeded" in table

    outcomes = json.loads(score("backfill", DEMO_JOB, "--start", day, "--end", day, "--json").stdout)
    assert [(o["date"], o["outcome"]) for o in outcomes] == [(day, "succeeded")]

    checked = json.loads(score("validate", DEMO_JOB, "--json").stdout)
    assert checked == {"job": DEMO_JOB, "ok": True, "problems": []}
    broken = json.loads(score("validate", "no_such_job", "--json", code=2).stdout)
    assert broken["ok"] is False and "no_such_job" in broken["problems"][0]["message"]


def test_shell_completion_is_on() -> None:
    done = subprocess.run([SCORE, "--help"], capture_output=True, text=True, timeout=120)
    assert "--install-completion" in done.stdout and "--show-completion" in done.stdout
    assert "--verbose" in done.stdout
