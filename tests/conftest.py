"""Shared fixtures: a demo data environment in a tmp folder, and Prefect's test harness.

Both are session-scoped: generating the demo data, training the demo model and starting the
temporary Prefect server are the expensive parts of the suite, and every test that needs them
only reads them or writes to partitions it owns.
"""

from __future__ import annotations

import os
import shutil

# Telemetry off before anything imports Prefect or Great Expectations (`tasks` does the same).
for _name, _value in (
    ("PREFECT_SERVER_ANALYTICS_ENABLED", "false"),
    ("GX_ANALYTICS_ENABLED", "false"),
    ("DO_NOT_TRACK", "1"),
):
    os.environ.setdefault(_name, _value)

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import tasks  # noqa: F401  (telemetry off before Prefect loads)
from tasks.demo.setup import DemoPlan, prepared_demo
from tasks.settings import PROJECT_ROOT, Settings, current_settings

DEMO_JOB = "credit_risk"
DEMO_END = dt.date(2026, 3, 10)
DEMO_ARGS = {"days": 3, "rows_per_day": 3000, "train_days": 5, "seed": 7, "end": DEMO_END}

# Every `SCORING_*` variable Settings reads; the demo environment controls all of them.
_SCORING_VARS = (
    "SCORING_DATA_DIR",
    "SCORING_JOBS_DIR",
    "SCORING_EXPECTATIONS_DIR",
    "SCORING_WAREHOUSE_PATH",
    "SCORING_TIMEZONE",
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gx: imports Great Expectations itself (a slow import, a few seconds)")
    config.addinivalue_line("markers", "server: starts a real Prefect server, deploys prefect.yaml and runs a process worker (slow)")
    config.addinivalue_line("markers", "browser: drives Debian's chromium headless through playwright (skipped without it, unless CI is set)")
    # `tasks` routes the `scoring` loggers to Prefect; outside a flow run (unit tests) Prefect warns
    # that it cannot ship those lines to its API. That is expected here.
    config.addinivalue_line("filterwarnings", "ignore:Logger 'scoring:UserWarning")


@dataclass(frozen=True)
class DemoEnv:
    """A prepared demo: raw partitions, labels and a trained model under `data_dir`."""

    data_dir: Path
    settings: Settings
    plan: DemoPlan


@pytest.fixture(scope="session")
def demo_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoEnv]:
    """`SCORING_DATA_DIR` points at a tmp folder holding the demo data for the whole session."""
    data_dir = tmp_path_factory.mktemp("scoring-data")
    with pytest.MonkeyPatch.context() as mp:
        for name in _SCORING_VARS:
            mp.delenv(name, raising=False)
        mp.setenv("SCORING_DATA_DIR", str(data_dir))
        settings = current_settings()
        # Guard against writing into the repository's own data/ folder.
        assert settings.data_dir == data_dir
        assert settings.jobs_dir == PROJECT_ROOT / "jobs"
        plan = prepared_demo(settings, **DEMO_ARGS)
        yield DemoEnv(data_dir=data_dir, settings=settings, plan=plan)


@pytest.fixture(scope="session")
def prefect_logging() -> None:
    """Let Prefect configure its logging now, on the session's stderr.

    Prefect sets up logging once, on the first `from prefect import flow`, and its console handler
    keeps the `sys.stderr` of that moment. If that happens inside typer's CliRunner (the CLI imports
    the flows lazily), the handler holds CliRunner's stream, closed after the invocation, and every
    later flow run fails with "I/O operation on closed file" and a RecursionError.
    """
    import prefect.main  # noqa: F401


@pytest.fixture(scope="session")
def prefect_harness(prefect_logging: None) -> Iterator[None]:
    """A temporary Prefect server and database for flow runs (started once per session)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture
def fresh_data(demo_env: DemoEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A never-scored copy of the demo inputs (raw, labels, models) in its own data folder.

    For tests that must start from empty outputs or that change the registry or the job spec;
    `SCORING_DATA_DIR` points at the copy for the duration of the test only.
    """
    data = tmp_path / "data"
    for part in ("raw", "labels", "models"):
        shutil.copytree(demo_env.data_dir / part, data / part)
    monkeypatch.setenv("SCORING_DATA_DIR", str(data))
    settings = current_settings()
    assert settings.data_dir == data
    return settings
