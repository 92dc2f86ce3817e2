"""The Prefect API server going away in the middle of a `score run` that reports to it.

A real `prefect server start` on 127.0.0.1 with its own PREFECT_HOME; `score run` with PREFECT_API_URL
pointing at it scores a 24 000-row partition in 100-row chunks; at its first [PRED] line the server's
process group is killed. The run must fail before it publishes, in the ledger and on the terminal, with
one line naming the lost API, exit 3, no traceback, within a bounded wait (Prefect's client retries
are bounded by PREFECT_CLIENT_MAX_RETRIES, see tasks/__init__.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import httpx
import polars as pl
import pytest
from conftest import DEMO_JOB, DemoEnv

from tasks import TELEMETRY_OFF

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DAY = "2026-03-20"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _killed(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _big_partition(demo_env: DemoEnv, data: Path) -> None:
    """Every demo day's rows as one partition: long enough in 100-row chunks to lose the API mid-run."""
    for part in ("raw", "models"):
        shutil.copytree(demo_env.data_dir / part, data / part)
    days = sorted((data / "raw" / DEMO_JOB).glob("date=*/*.parquet"))
    target = data / "raw" / DEMO_JOB / f"date={DAY}"
    target.mkdir()
    pl.concat([pl.read_parquet(p) for p in days]).write_parquet(target / "part-0.parquet", row_group_size=5000)


def test_the_api_server_lost_mid_run_fails_the_run_before_publishing_with_one_line(
    demo_env: DemoEnv, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    _big_partition(demo_env, data)
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "SCORING_"))}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        PREFECT_API_URL=api,
        **TELEMETRY_OFF,
        SCORING_DATA_DIR=str(data),
        PYTHONUNBUFFERED="1",
    )
    server_log = tmp_path / "server.log"
    with server_log.open("w") as out:
        server = subprocess.Popen(
            [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    run = None
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server_log.read_text()[-3000:]
            try:
                if httpx.get(f"{api}/health", timeout=5).json() is True:
                    break
            except (httpx.HTTPError, ValueError):
                pass
            assert time.monotonic() < deadline, server_log.read_text()[-3000:]
            time.sleep(0.5)

        output = tmp_path / "score.out"
        with output.open("w") as out:
            run = subprocess.Popen(
                [str(BIN / "score"), "run", DEMO_JOB, "--date", DAY, "--chunk-rows", "100"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        while "[PRED]" not in output.read_text():
            assert run.poll() is None, output.read_text()[-3000:]
            time.sleep(0.1)
        _killed(server)
        lost_at = time.monotonic()
        code = run.wait(timeout=300)
        waited = time.monotonic() - lost_at
    finally:
        for proc in (run, server):
            if proc is not None and proc.poll() is None:
                _killed(proc)

    text = output.read_text()
    print(f"score run ended {waited:.1f} s after the API server was killed")
    assert code == 3, text[-3000:]
    assert "Traceback" not in text and "Error logging to API" not in text, text[-3000:]
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, text[-3000:]
    assert f"the orchestration API at {api} was lost during the run" in errors[0] and "is not published" in errors[0], (
        errors[0]
    )
    # Bounded: Prefect's default client retries alone took ~62 s a call and 150–224 s a run.
    assert waited < 120, waited
    with duckdb.connect(str(data / "warehouse.duckdb"), read_only=True) as con:
        runs = con.execute("SELECT status, error FROM runs").fetchall()
        tables = {name for (name,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        published = con.execute("SELECT count(*) FROM predictions").fetchall()[0][0] if "predictions" in tables else 0
    assert runs == [("failed", "OrchestrationLost: " + errors[0].removeprefix("error: "))], runs
    # Not published: no rows in the warehouse, no partition pointer in Parquet.
    assert published == 0 and not (data / "output" / DEMO_JOB / "_current" / f"date={DAY}").exists()
