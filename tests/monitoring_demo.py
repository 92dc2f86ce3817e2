"""A scored demo with a long enough history for monitoring, shared by test_monitoring.py and test_outcomes.py.

The conftest demo has three dates: its trailing window is too short to tell a shift from noise.
This one has six dates, the credit shift injected on the last two, and two model versions (the
last two dates are scored by version 2, a registered copy of version 1), so that metrics per model
version have more than one version to tell apart. The store-sales forecast job is scored on the same
six dates in the same data folder (its heat wave on the last two), so the warehouse holds a binary
and a forecast job side by side. It is built once per session (the module-level cache) and only read
afterwards; tests that write get a copy (`copied_demo`).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from tasks.demo.setup import SALES_JOB, prepared_demo, prepared_sales_demo
from tasks.settings import Settings, current_settings

JOB = "credit_risk"
ARGS = {"days": 6, "rows_per_day": 2000, "train_days": 5, "seed": 11, "end": dt.date(2026, 3, 10), "shift_days": 2}
SHIFT_DAYS = ARGS["shift_days"]
SECOND_VERSION_DAYS = 2
SALES_ARGS = {**ARGS, "rows_per_day": 1000}
"""Two hold-out days of 1,000 rows: the conformal interval's 20 % check part has 400 rows."""


@dataclass(frozen=True)
class MonitoredDemo:
    data_dir: Path
    dates: list[dt.date]
    shifted_dates: list[dt.date]
    versions: dict[dt.date, str]
    run_ids: dict[dt.date, str]
    sales_version: str
    """The store-sales model version that scored every date."""
    sales_run_ids: dict[dt.date, str]


_BUILT: dict[str, MonitoredDemo] = {}


def _registered_copy(settings: Settings, model: str, source: str, target: str) -> None:
    registry = settings.model_registry_dir(model)
    shutil.copytree(registry / source, registry / target)
    meta_path = registry / target / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["version"] = target
    meta_path.write_text(json.dumps(meta, indent=2))


def published_run_ids(settings: Settings, job: str, *, table: str = "predictions") -> dict[dt.date, str]:
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        rows = con.execute(f"SELECT DISTINCT partition_date, run_id FROM {table} WHERE job = ?", [job]).fetchall()
    return dict(rows)


def monitored_demo(tmp_path_factory: pytest.TempPathFactory) -> MonitoredDemo:
    """Generate and score (backfill, which runs `monitor-decisions` after each date, in order) the demo."""
    if "demo" in _BUILT:
        return _BUILT["demo"]
    from flows.people import backfill

    data_dir = tmp_path_factory.mktemp("monitoring-data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SCORING_DATA_DIR", str(data_dir))
        for name in ("SCORING_JOBS_DIR", "SCORING_EXPECTATIONS_DIR", "SCORING_WAREHOUSE_PATH", "SCORING_TIMEZONE"):
            mp.delenv(name, raising=False)
        settings = current_settings()
        assert settings.data_dir == data_dir
        plan = prepared_demo(settings, **ARGS)
        dates = plan.scoring_dates
        split = len(dates) - SECOND_VERSION_DAYS
        backfill(JOB, dates[0], dates[split - 1])
        _registered_copy(settings, JOB, plan.model_version, str(int(plan.model_version) + 1))
        backfill(JOB, dates[split], dates[-1])
        run_ids = published_run_ids(settings, JOB)
        sales = prepared_sales_demo(settings, **SALES_ARGS)
        assert sales.scoring_dates == dates
        backfill(SALES_JOB, dates[0], dates[-1])
        sales_run_ids = published_run_ids(settings, SALES_JOB, table="forecasts")
    built = MonitoredDemo(
        data_dir=data_dir,
        dates=dates,
        shifted_dates=dates[-SHIFT_DAYS:],
        versions={
            d: plan.model_version if i < split else str(int(plan.model_version) + 1) for i, d in enumerate(dates)
        },
        run_ids=run_ids,
        sales_version=sales.model_version,
        sales_run_ids=sales_run_ids,
    )
    _BUILT["demo"] = built
    return built


def copied_demo(demo: MonitoredDemo, target: Path) -> Path:
    """A private copy of the demo's data folder (raw, labels, models, outputs, warehouse) to write into."""
    shutil.copytree(demo.data_dir, target)
    return target
