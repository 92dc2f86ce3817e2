"""One writer per partition: the lease, its takeover after a crash, and the flow under it, on both backends."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import threading
import time

import pyarrow.parquet as pq
import pytest
from conftest import DEMO_JOB

from flows.steps.blocks import configured_warehouse
from tasks.catalog import CLASSIFICATIONS, FORECASTS, PARTITION_DATASETS, PREDICTIONS, SHADOW_DATASETS
from tasks.errors import PartitionBusy, PartitionLeaseLost
from tasks.settings import Settings, current_settings
from tasks.sinks.partition_lock import PartitionLease
from tasks.sinks.warehouse import Warehouse

DAY = dt.date(2026, 3, 10)


def _lease(warehouse: Warehouse, run_id: str, **kw) -> PartitionLease:
    return PartitionLease(
        warehouse, DEMO_JOB, DAY, run_id, ttl_s=kw.pop("ttl_s", 30.0), wait_s=kw.pop("wait_s", 0.0), poll_s=0.05, **kw
    )


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_second_run_fails_naming_the_holder(any_warehouse: Warehouse) -> None:
    with _lease(any_warehouse, "run-a").held():
        with pytest.raises(PartitionBusy) as err:
            _lease(any_warehouse, "run-b").acquire()
    message = str(err.value)
    assert f"partition {DAY} of job {DEMO_JOB} is being scored by run run-a" in message
    assert f"pid {os.getpid()}" in message
    # Released on exit: the next run gets it at once.
    with _lease(any_warehouse, "run-b").held() as lease:
        assert lease.taken_over_from is None


def test_a_second_run_waits_for_the_first_to_finish(any_warehouse: Warehouse) -> None:
    first = _lease(any_warehouse, "run-a")
    first.acquire()
    threading.Timer(0.5, any_warehouse.release_partition_lease, (DEMO_JOB, DAY, "run-a")).start()
    started = time.monotonic()
    _lease(any_warehouse, "run-b", wait_s=20.0).acquire()
    assert 0.4 < time.monotonic() - started < 15


def test_a_killed_holder_on_this_host_is_taken_over_at_once(any_warehouse: Warehouse) -> None:
    dead = _lease(any_warehouse, "killed-run", pid=_dead_pid(), ttl_s=3600.0)
    dead.acquire()
    lease = _lease(any_warehouse, "run-b")
    lease.acquire()
    assert lease.taken_over_from == "killed-run"
    assert not any_warehouse.renew_partition_lease(DEMO_JOB, DAY, "killed-run", 30.0)


def test_a_lease_from_another_host_is_taken_over_once_it_expires(any_warehouse: Warehouse) -> None:
    _lease(any_warehouse, "remote-run", host="another-host", ttl_s=1.0).acquire()
    with pytest.raises(PartitionBusy, match="remote-run"):
        _lease(any_warehouse, "run-b").acquire()
    time.sleep(1.2)
    lease = _lease(any_warehouse, "run-b")
    lease.acquire()
    assert lease.taken_over_from is None  # not judged dead: it simply expired


def test_a_run_that_lost_its_lease_refuses_to_publish(any_warehouse: Warehouse) -> None:
    lease = _lease(any_warehouse, "slow-run", ttl_s=0.6)
    with lease.held():
        assert any_warehouse.take_over_partition_lease(DEMO_JOB, DAY, "run-b", "another-host", 1, 30.0, "slow-run")
        time.sleep(0.8)  # past a renewal: the heartbeat finds the lease in other hands
        with pytest.raises(PartitionLeaseLost, match="slow-run lost the lease"):
            lease.ensure_held()


@pytest.fixture(params=["duckdb", "postgres"])
def backend(request: pytest.FixtureRequest, fresh_data: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Fresh demo inputs, outputs to the DuckDB file or to a new PostgreSQL database."""
    if request.param == "postgres":
        monkeypatch.setenv("SCORING_WAREHOUSE_URL", request.getfixturevalue("postgres_database_url"))
    return current_settings()


@pytest.mark.usefixtures("prefect_harness")
def test_the_flow_refuses_a_partition_another_run_holds(backend: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.score_partition import score_partition

    monkeypatch.setenv("SCORING_LOCK_WAIT_S", "0")
    warehouse = configured_warehouse(backend)
    holder = _lease(warehouse, "nightly-run-1")
    with holder.held():
        with pytest.raises(PartitionBusy, match="is being scored by run nightly-run-1"):
            score_partition(DEMO_JOB, DAY)
    # Refused before it opened a ledger row or wrote a file.
    assert warehouse.latest_partition_runs(DEMO_JOB, first_date=DAY, last_date=DAY) == []
    assert not (backend.output_dir(DEMO_JOB) / "predictions").exists()
    score_partition(DEMO_JOB, DAY)
    (run,) = warehouse.latest_partition_runs(DEMO_JOB, first_date=DAY, last_date=DAY)
    assert run["status"] == "succeeded"


@pytest.mark.usefixtures("prefect_harness")
def test_ten_reruns_leave_exactly_one_runs_rows(backend: Settings) -> None:
    from flows.score_partition import score_partition

    run_ids = [score_partition(DEMO_JOB, DAY, 1000).run_id for _ in range(10)]
    assert len(set(run_ids)) == 10
    warehouse = configured_warehouse(backend)
    stored = warehouse.partition_predictions(DEMO_JOB, DAY, ["run_id", "entity_id"])
    published = pq.read_table(os.path.realpath(backend.output_dir(DEMO_JOB) / "predictions" / f"date={DAY}"))
    raw_rows = pq.read_table(backend.raw_partition_dir(DEMO_JOB, DAY.isoformat())).num_rows
    for rows in (stored, published):
        assert set(rows.column("run_id").to_pylist()) == {run_ids[-1]}
        ids = rows.column("entity_id").to_pylist()
        assert len(ids) == len(set(ids)) and 0.9 * raw_rows < len(ids) <= raw_rows
    # Every other table of the partition holds the last run's rows only, too.
    with warehouse._session(write=False) as session:
        for table in (d.table for d in PARTITION_DATASETS if d is not PREDICTIONS and d not in SHADOW_DATASETS):
            runs = session.rows(
                f"SELECT DISTINCT run_id FROM {table} WHERE job = $job AND partition_date = $day",
                {"job": DEMO_JOB, "day": DAY},
            )
            # A binary job publishes the forecast and classification contracts empty.
            assert [r["run_id"] for r in runs] == (
                [] if table in (FORECASTS.table, CLASSIFICATIONS.table) else [run_ids[-1]]
            ), table
        ledger = session.rows("SELECT run_id, status, inference FROM runs WHERE partition_date = $day", {"day": DAY})
    assert sorted(r["run_id"] for r in ledger) == sorted(run_ids)
    assert {r["status"] for r in ledger} == {"succeeded"}
    assert json.loads(ledger[0]["inference"])["chunks"] >= 3
    # Only the current and the previous version of each Parquet partition stay on disk.
    versions = backend.output_dir(DEMO_JOB) / "_partitions" / f"date={DAY}"
    assert sorted(p.name for p in versions.iterdir()) == sorted(run_ids[-2:])
