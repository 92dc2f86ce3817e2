"""Scale-out: the same score_partition flow with its unit tasks on a local 2-worker Dask cluster
gives, row for row, the outputs of the thread runner."""

from __future__ import annotations

import datetime as dt
import json
import os

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from flows.steps.task_runners import dask_task_runner
from tasks.scoring.units import partition_work_units
from tasks.settings import Settings, current_settings
from tasks.sources import ParquetPartition
from tests.conftest import DEMO_JOB, DemoEnv

pytestmark = pytest.mark.usefixtures("prefect_harness")

TABLES_BY_ENTITY = ("predictions", "quarantine")
TABLES_BY_NAME = {
    "guard_summary": "expectation",
    "drift_report": ["feature", "baseline"],
    "fallback_report": ["kind", "detail"],
}


def _split_into_row_groups(settings: Settings, day: dt.date, rows_per_group: int) -> None:
    raw = settings.raw_partition_dir(DEMO_JOB, day.isoformat())
    (path,) = sorted(raw.glob("*.parquet"))
    table = pq.read_table(path)
    pq.write_table(table, path, row_group_size=rows_per_group)


def _outputs(settings: Settings, day: dt.date) -> dict[str, pl.DataFrame]:
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        frames = {
            table: pl.from_arrow(
                con.sql(
                    f"SELECT * FROM {table} WHERE job = ? AND partition_date = ?", params=[DEMO_JOB, day]
                ).to_arrow_table()
            )
            for table in (*TABLES_BY_ENTITY, *TABLES_BY_NAME)
        }
        frames["runs"] = pl.from_arrow(
            con.sql(
                "SELECT rows_read, rows_scored, rows_repaired, rows_quarantined, rows_with_reasons, decisions, guard_counts "
                "FROM runs WHERE job = ? AND partition_date = ? AND status = 'succeeded' ORDER BY ended_at DESC LIMIT 1",
                params=[DEMO_JOB, day],
            ).to_arrow_table()
        )
    for table in TABLES_BY_ENTITY:
        # Rows of one blank or duplicated id tie on (entity_id, failed_expectations): the raw row
        # breaks the tie, so the order the runners staged them in does not matter.
        key = ["entity_id", "failed_expectations", "raw_row"] if table == "quarantine" else ["entity_id"]
        frames[table] = frames[table].drop("run_id").sort(key)
    for table, key in TABLES_BY_NAME.items():
        frames[table] = frames[table].drop("run_id").sort(key)
    return frames


def test_dask_runner_equals_thread_runner(
    demo_env: DemoEnv, fresh_data: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect_dask import DaskTaskRunner

    from flows.score_partition import score_partition

    day = demo_env.plan.scoring_dates[-1]
    _split_into_row_groups(fresh_data, day, rows_per_group=700)
    units = partition_work_units(ParquetPartition(str(fresh_data.raw_partition_dir(DEMO_JOB, day.isoformat()))), 500)
    assert len(units) == 5 and sum(u.rows for u in units) == 3000

    monkeypatch.setenv("SCORING_TASK_RUNNER", "threads")
    threads_result = score_partition(DEMO_JOB, day, 500)
    threads = _outputs(fresh_data, day)

    monkeypatch.setenv("SCORING_TASK_RUNNER", "dask")
    monkeypatch.setenv("SCORING_DASK_WORKERS", "2")
    # Inference tasks hold a GPU resource; the local cluster's workers declare one each.
    monkeypatch.setenv("SCORING_INFERENCE_RESOURCES", json.dumps({"GPU": 1}))
    runner = dask_task_runner(current_settings())
    assert isinstance(runner, DaskTaskRunner) and runner.cluster_kwargs["resources"] == {"GPU": 1}
    dask_result = score_partition(DEMO_JOB, day, 500)
    on_dask = _outputs(fresh_data, day)

    assert dask_result.run_id != threads_result.run_id
    assert threads["predictions"].height == threads_result.rows_scored > 2900
    for table, frame in threads.items():
        assert_frame_equal(on_dask[table], frame)
    # The units ran in the cluster's worker processes, not in this one.
    workers = dask_result.inference["workers"]
    assert workers and all(not w.endswith(f":{os.getpid()}") for w in workers), workers
    assert all(w.endswith(f":{os.getpid()}") for w in threads_result.inference["workers"])
