"""The warehouse behaves the same on DuckDB and PostgreSQL: partition replacement from Parquet
(all or nothing), the run ledger, monitoring tables, partition leases; and on PostgreSQL, bulk
Arrow loads and a password that never shows."""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flows.steps.blocks import configured_warehouse, with_warehouse_url
from tasks.catalog import OUTCOME_LABELS, PARTITION_DATASETS, table_schemas
from tasks.contracts import PREDICTION_SCHEMA
from tasks.errors import WarehouseUnreachable
from tasks.redaction import redacted_url
from tasks.settings import Settings
from tasks.sinks.duckdb_warehouse import DuckDBWarehouse
from tasks.sinks.postgres_warehouse import PostgresWarehouse
from tasks.sinks.warehouse import Warehouse
from tasks.sinks.warehouse_choice import warehouse_for

JOB = "credit_risk"
DAY = dt.date(2026, 3, 9)
NEXT_DAY = DAY + dt.timedelta(days=1)
PARTITIONED_SCHEMAS = table_schemas(PARTITION_DATASETS)
"""Every table a scoring run replaces per partition, with its schema (tasks/catalog.py)."""

_SAMPLE_VALUES: dict[pa.DataType, Callable[[str, int], Any]] = {
    pa.string(): lambda name, i: f"{name}-{i}",
    pa.float64(): lambda name, i: i / 8,
    pa.int16(): lambda name, i: i % 1000,
    pa.int64(): lambda name, i: i * 3,
    pa.bool_(): lambda name, i: i % 2 == 0,
    pa.list_(pa.string()): lambda name, i: [f"{name}-{i}", "second"],
    pa.list_(pa.float64()): lambda name, i: [0.0, i / 4, 1.5],
    pa.list_(pa.int64()): lambda name, i: [i, 2, 3],
}


def sample_rows(schema: pa.Schema, *, run_id: str, rows: int, day: dt.date = DAY, first: int = 0) -> pa.Table:
    """Rows of a partitioned table's schema for (JOB, day), every value derived from its row number."""
    fixed = {"run_id": run_id, "job": JOB, "partition_date": day}
    columns = {
        f.name: pa.array(
            [
                fixed[f.name] if f.name in fixed else _SAMPLE_VALUES[f.type](f.name, i)
                for i in range(first, first + rows)
            ],
            f.type,
        )
        for f in schema
    }
    return pa.table(columns, schema=schema)


def written(folder: Path, name: str, table: pa.Table) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.parquet"
    pq.write_table(table, path)
    return path


def staged_run(folder: Path, run_id: str, *, rows: int, day: dt.date = DAY) -> dict[str, list[Path]]:
    """A run's staged files: predictions in two files, one file for every other partitioned table."""
    files = {
        table: [written(folder / run_id / table, "part-0", sample_rows(schema, run_id=run_id, rows=rows, day=day))]
        for table, schema in PARTITIONED_SCHEMAS.items()
    }
    second = sample_rows(PREDICTION_SCHEMA, run_id=run_id, rows=rows, day=day, first=rows)
    files["predictions"].append(written(folder / run_id / "predictions", "part-1", second))
    return files


def test_replacing_a_partition_twice_leaves_exactly_the_second_runs_rows(
    any_warehouse: Warehouse, tmp_path: Path
) -> None:
    other_day = any_warehouse.replace_partition(
        job=JOB, partition_date=NEXT_DAY, files=staged_run(tmp_path, "run-other", rows=4, day=NEXT_DAY)
    )
    first = any_warehouse.replace_partition(job=JOB, partition_date=DAY, files=staged_run(tmp_path, "run-1", rows=50))
    second = any_warehouse.replace_partition(job=JOB, partition_date=DAY, files=staged_run(tmp_path, "run-2", rows=20))

    assert first == {table: 100 if table == "predictions" else 50 for table in PARTITIONED_SCHEMAS}
    assert second == {table: 40 if table == "predictions" else 20 for table in PARTITIONED_SCHEMAS}
    stored = any_warehouse.partition_predictions(JOB, DAY, PREDICTION_SCHEMA.names).sort_by("entity_id")
    expected = pa.concat_tables(
        [
            sample_rows(PREDICTION_SCHEMA, run_id="run-2", rows=20),
            sample_rows(PREDICTION_SCHEMA, run_id="run-2", rows=20, first=20),
        ]
    ).sort_by("entity_id")
    assert stored.schema.equals(PREDICTION_SCHEMA)
    assert stored.to_pylist() == expected.to_pylist()
    assert sorted(any_warehouse.quarantined_entities(JOB, DAY)["entity_id"].to_pylist()) == sorted(
        f"entity_id-{i}" for i in range(20)
    )
    histograms = any_warehouse.previous_drift_histograms(JOB, NEXT_DAY)
    assert histograms == [
        {
            "feature": f"feature-{i}",
            "edges": [0.0, i / 4, 1.5],
            "counts": [i, 2, 3],
            "nulls": i * 3,
            "kind": f"kind-{i}",
        }
        for i in range(20)
    ]
    assert other_day["predictions"] == 8
    assert any_warehouse.partition_predictions(JOB, NEXT_DAY, ["run_id"])["run_id"].to_pylist() == ["run-other"] * 8
    counts = any_warehouse.prediction_counts(JOB, first_date=DAY, last_date=NEXT_DAY, by=("partition_date", "run_id"))
    assert counts.to_pylist() == [
        {"partition_date": DAY, "run_id": "run-2", "rows": 40},
        {"partition_date": NEXT_DAY, "run_id": "run-other", "rows": 8},
    ]


def test_a_runs_guard_summary_reads_back_most_acting_expectation_first(
    any_warehouse: Warehouse, tmp_path: Path
) -> None:
    assert any_warehouse.run_guard_summary("run-1") == []
    any_warehouse.replace_partition(job=JOB, partition_date=DAY, files=staged_run(tmp_path, "run-1", rows=5))
    any_warehouse.replace_partition(
        job=JOB, partition_date=NEXT_DAY, files=staged_run(tmp_path, "run-2", rows=3, day=NEXT_DAY)
    )
    summary = any_warehouse.run_guard_summary("run-1")
    assert [r["expectation"] for r in summary] == [f"expectation-{i}" for i in (4, 3, 2, 1, 0)]
    assert summary[0] == {
        "expectation": "expectation-4",
        "column_name": "column_name-4",
        "expectation_type": "expectation_type-4",
        "action": "action-4",
        "evaluated_by": "evaluated_by-4",
        "rows": 12,
        "share": 0.5,
    }
    assert len(any_warehouse.run_guard_summary("run-2")) == 3


def test_a_failing_load_leaves_the_previous_rows(any_warehouse: Warehouse, tmp_path: Path) -> None:
    any_warehouse.replace_partition(job=JOB, partition_date=DAY, files=staged_run(tmp_path, "run-1", rows=10))
    files = staged_run(tmp_path, "run-2", rows=12)
    broken = sample_rows(PARTITIONED_SCHEMAS["fallback_report"], run_id="run-2", rows=3)
    broken = broken.set_column(broken.schema.get_field_index("rows"), "rows", pa.array(["many", "few", "none"]))
    files["fallback_report"] = [written(tmp_path / "broken", "part-0", broken)]

    with pytest.raises(Exception, match="many|few|none|rows"):
        any_warehouse.replace_partition(job=JOB, partition_date=DAY, files=files)

    kept = any_warehouse.partition_predictions(JOB, DAY, ["run_id"])
    assert kept["run_id"].to_pylist() == ["run-1"] * 20


def test_the_ledger_records_started_succeeded_and_failed_runs(any_warehouse: Warehouse) -> None:
    started = dt.datetime(2026, 3, 10, 6, 0, tzinfo=dt.UTC)
    assert any_warehouse.latest_succeeded_run(JOB) is None
    any_warehouse.record_run_started(
        {
            "run_id": "run-1",
            "job": JOB,
            "partition_date": DAY,
            "model_name": "m",
            "model_version": "3",
            "feature_version": "1.0",
            "started_at": started,
        }
    )
    assert [r["status"] for r in any_warehouse.latest_partition_runs(JOB, first_date=DAY, last_date=DAY)] == ["running"]
    decisions = {"refer": 2, "approve": 7}
    any_warehouse.record_run_ended(
        "run-1",
        status="succeeded",
        ended_at=started + dt.timedelta(minutes=2),
        counts={"rows_read": 9, "rows_scored": 9, "decisions": decisions},
    )
    any_warehouse.record_run_started(
        {
            "run_id": "run-2",
            "job": JOB,
            "partition_date": DAY,
            "model_name": "m",
            "model_version": "4",
            "feature_version": "1.0",
            "started_at": started + dt.timedelta(hours=1),
        }
    )
    any_warehouse.record_run_failed(
        run_id="run-2",
        job=JOB,
        partition_date=DAY,
        ended_at=started + dt.timedelta(hours=1, minutes=1),
        error="model exploded",
    )
    any_warehouse.record_run_failed(
        run_id="run-3",
        job=JOB,
        partition_date=NEXT_DAY,
        ended_at=started + dt.timedelta(hours=2),
        error="no raw partition",
    )

    succeeded = any_warehouse.latest_succeeded_run(JOB)
    assert succeeded is not None
    assert (succeeded["run_id"], succeeded["model_version"], succeeded["rows_read"]) == ("run-1", "3", 9)
    assert json.loads(succeeded["decisions"]) == decisions
    assert succeeded["started_at"] == started and succeeded["ended_at"] == started + dt.timedelta(minutes=2)
    latest = any_warehouse.latest_partition_runs(JOB, first_date=DAY, last_date=NEXT_DAY)
    assert [(r["partition_date"], r["run_id"], r["status"], r["error"]) for r in latest] == [
        (DAY, "run-2", "failed", "model exploded"),
        (NEXT_DAY, "run-3", "failed", "no raw partition"),
    ]


def test_partitions_of_one_backfill_can_open_a_fresh_warehouse_at_once(any_warehouse: Warehouse) -> None:
    # A backfill's partitions run in threads of one process; their first writes each check the
    # schema, and two concurrent creates of one table used to end in a catalog conflict.
    writers = 6
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def first_write(i: int) -> None:
        barrier.wait()
        try:
            any_warehouse.record_run_started(
                {
                    "run_id": f"run-{i}",
                    "job": JOB,
                    "partition_date": DAY + dt.timedelta(days=i),
                    "model_name": "m",
                    "model_version": "1",
                    "feature_version": "1.0",
                    "started_at": dt.datetime(2026, 3, 10, tzinfo=dt.UTC),
                }
            )
        except BaseException as exc:  # noqa: BLE001 - collected and asserted on below
            errors.append(exc)

    threads = [threading.Thread(target=first_write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    runs = any_warehouse.latest_partition_runs(JOB, first_date=DAY, last_date=DAY + dt.timedelta(days=writers))
    assert sorted(r["run_id"] for r in runs) == [f"run-{i}" for i in range(writers)]


def test_replacing_monitoring_rows_is_idempotent(any_warehouse: Warehouse) -> None:
    schema = OUTCOME_LABELS.schema
    labels = pa.table(
        {
            "job": [JOB] * 3,
            "partition_date": [DAY] * 3,
            "entity_id": ["a", "b", "c"],
            "outcome": pa.array([1, 0, None], pa.int16()),
            "observed_date": [NEXT_DAY] * 3,
            "source": ["parquet"] * 3,
            "entity_status": ["matched", "matched", "quarantined"],
        },
        schema=schema,
    )
    for _ in range(2):
        assert any_warehouse.replace_monitoring_partition(
            job=JOB, partition_date=DAY, tables={"outcome_labels": labels}
        ) == {"outcome_labels": 3}
    stored = any_warehouse.monitoring_rows("outcome_labels", job=JOB, first_date=DAY, last_date=DAY)
    assert stored.schema.equals(schema)
    assert stored.to_pylist() == labels.to_pylist()
    emptied = any_warehouse.replace_monitoring_partition(
        job=JOB, partition_date=DAY, tables={"outcome_labels": schema.empty_table()}
    )
    assert emptied == {"outcome_labels": 0}


def test_partition_leases_are_taken_over_only_when_expired_or_by_compare_and_set(any_warehouse: Warehouse) -> None:
    assert any_warehouse.acquire_partition_lease(JOB, DAY, "run-1", "host-a", 101, ttl_s=0.3) is None
    holder = any_warehouse.acquire_partition_lease(JOB, DAY, "run-2", "host-b", 202, ttl_s=60)
    assert holder is not None
    assert (holder["run_id"], holder["host"], holder["pid"]) == ("run-1", "host-a", 101)
    assert isinstance(holder["expires_at"], dt.datetime)
    assert any_warehouse.acquire_partition_lease(JOB, DAY, "run-1", "host-a", 101, ttl_s=0.3) is None, (
        "re-acquiring one's own lease"
    )

    time.sleep(0.6)
    assert any_warehouse.acquire_partition_lease(JOB, DAY, "run-2", "host-b", 202, ttl_s=60) is None
    assert any_warehouse.renew_partition_lease(JOB, DAY, "run-1", ttl_s=60) is False
    assert any_warehouse.renew_partition_lease(JOB, DAY, "run-2", ttl_s=60) is True
    assert any_warehouse.acquire_partition_lease(JOB, NEXT_DAY, "run-1", "host-a", 101, ttl_s=60) is None, (
        "other partitions are free"
    )

    assert (
        any_warehouse.take_over_partition_lease(JOB, DAY, "run-3", "host-c", 303, 60, previous_run_id="run-1") is False
    )
    assert (
        any_warehouse.take_over_partition_lease(JOB, DAY, "run-3", "host-c", 303, 60, previous_run_id="run-2") is True
    )
    assert any_warehouse.renew_partition_lease(JOB, DAY, "run-2", ttl_s=60) is False

    any_warehouse.release_partition_lease(JOB, DAY, "run-2")
    assert (any_warehouse.acquire_partition_lease(JOB, DAY, "run-4", "host-d", 404, ttl_s=60) or {}).get(
        "run_id"
    ) == "run-3"
    any_warehouse.release_partition_lease(JOB, DAY, "run-3")
    assert any_warehouse.acquire_partition_lease(JOB, DAY, "run-4", "host-d", 404, ttl_s=60) is None


def test_postgres_loads_each_staged_file_in_bulk(
    postgres_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from adbc_driver_manager import dbapi

    calls: dict[str, list[Any]] = {"execute": [], "executemany": [], "adbc_ingest": []}
    for method in calls:
        original = getattr(dbapi.Cursor, method)

        def counted(
            self: Any, first: Any, *args: Any, _name: str = method, _original: Any = original, **kwargs: Any
        ) -> Any:
            calls[_name].append(first)
            return _original(self, first, *args, **kwargs)

        monkeypatch.setattr(dbapi.Cursor, method, counted)
    warehouse = PostgresWarehouse(postgres_database_url)
    rows = 50_000
    files = {
        "predictions": [
            written(tmp_path, "part-0", sample_rows(PREDICTION_SCHEMA, run_id="run-1", rows=rows)),
            written(tmp_path, "part-1", sample_rows(PREDICTION_SCHEMA, run_id="run-1", rows=rows, first=rows)),
        ]
    }
    warehouse.record_run_failed(
        run_id="run-0", job=JOB, partition_date=DAY, ended_at=dt.datetime.now(dt.UTC), error="e"
    )
    for found in calls.values():
        found.clear()

    assert warehouse.replace_partition(job=JOB, partition_date=DAY, files=files) == {"predictions": 2 * rows}
    assert calls["adbc_ingest"] == ["predictions", "predictions"], "one bulk load per staged file"
    assert calls["executemany"] == []
    assert not [sql for sql in calls["execute"] if "INSERT" in sql.upper()]
    assert len(calls["execute"]) < 10


def test_postgres_password_never_shows_in_errors_logs_or_repr(
    postgres_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    password = "Wr0ng-pass%40word"
    url = f"postgresql://postgres:{password}@{postgres_url.split('@', 1)[1]}"
    warehouse = PostgresWarehouse(url)
    secrets = (password, urllib.parse.unquote(password))

    with caplog.at_level(logging.DEBUG), pytest.raises(Exception) as failure:
        warehouse.latest_succeeded_run(JOB)
    assert "password authentication failed" in str(failure.value)

    import adbc_driver_postgresql.dbapi

    def echoing(uri: str, **kwargs: Any) -> Any:
        raise RuntimeError(f"could not use {uri} (password {secrets[0]}, decoded {secrets[1]})")

    monkeypatch.setattr(adbc_driver_postgresql.dbapi, "connect", echoing)
    with caplog.at_level(logging.DEBUG), pytest.raises(WarehouseUnreachable) as echoed:
        warehouse.record_run_failed(
            run_id="r", job=JOB, partition_date=DAY, ended_at=dt.datetime.now(dt.UTC), error="e"
        )
    assert redacted_url(url) in str(echoed.value)

    shown = [
        repr(warehouse),
        str(warehouse.location),
        *("".join(traceback.format_exception(e.value)) for e in (failure, echoed)),
        *(r.getMessage() for r in caplog.records),
        caplog.text,
    ]
    assert caplog.records, "connect failures are logged"
    for text in shown:
        for secret in secrets:
            assert secret not in text
    assert "***" in repr(warehouse)


def test_the_settings_choose_the_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SCORING_WAREHOUSE_URL", "SCORING_WAREHOUSE_SECRET_BLOCK", "SCORING_WAREHOUSE_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SCORING_DATA_DIR", str(tmp_path))
    assert isinstance(configured_warehouse(Settings()), DuckDBWarehouse)
    monkeypatch.setenv("SCORING_WAREHOUSE_URL", "postgresql://scorer:s3cret@db:5432/w")
    settings = Settings()
    assert "s3cret" not in repr(settings) and "s3cret" not in settings.model_dump_json()
    chosen = configured_warehouse(settings)
    assert isinstance(chosen, PostgresWarehouse) and chosen.location == "postgresql://scorer:***@db:5432/w"
    monkeypatch.setenv("SCORING_WAREHOUSE_SECRET_BLOCK", "warehouse-url")
    with pytest.raises(ValueError, match="not both"):
        configured_warehouse(Settings())
    monkeypatch.setenv("SCORING_WAREHOUSE_URL", "mysql://scorer:s3cret@db/w")
    monkeypatch.delenv("SCORING_WAREHOUSE_SECRET_BLOCK")
    with pytest.raises(ValueError, match="postgresql://") as refused:
        configured_warehouse(Settings())
    assert "s3cret" not in str(refused.value)


def test_the_url_can_come_from_a_prefect_secret_block(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.blocks.system import Secret

    Secret(value="postgresql://scorer:bl0ck-s3cret@db:5432/w").save("scoring-warehouse-test", overwrite=True)
    monkeypatch.delenv("SCORING_WAREHOUSE_URL", raising=False)
    monkeypatch.setenv("SCORING_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("SCORING_WAREHOUSE_SECRET_BLOCK", "scoring-warehouse-test")
    settings = Settings()
    with pytest.raises(ValueError, match="with_warehouse_url"):
        warehouse_for(settings)
    chosen = configured_warehouse(settings)
    assert isinstance(chosen, PostgresWarehouse)
    assert chosen.location == "postgresql://scorer:***@db:5432/w" and "bl0ck-s3cret" not in repr(chosen)
    assert with_warehouse_url(settings).warehouse_url is not None


def test_a_kept_open_duckdb_opens_the_file_once_and_frees_it_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step of several calls (start, publish, monitoring) opens the file once; the lock is the
    block's only: another process opens the file as soon as the block ends."""
    import subprocess
    import sys

    warehouse = DuckDBWarehouse(tmp_path / "w.duckdb", lock_timeout_s=0.0)

    def started(run_id: str) -> None:
        warehouse.record_run_started(
            {
                "run_id": run_id,
                "job": JOB,
                "partition_date": DAY,
                "model_name": "m",
                "model_version": "1",
                "feature_version": "1.0",
                "started_at": dt.datetime(2026, 3, 10, tzinfo=dt.UTC),
            }
        )

    started("r0")
    opened = []
    real = DuckDBWarehouse._opened
    monkeypatch.setattr(DuckDBWarehouse, "_opened", lambda self: opened.append(1) or real(self))

    def other_process_opens() -> bool:
        probe = f"import duckdb; duckdb.connect({str(warehouse.path)!r}).close()"
        return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0

    with warehouse.kept_open():
        started("r1")
        rows = warehouse.replace_partition(job=JOB, partition_date=DAY, files=staged_run(tmp_path, "r1", rows=3))
        assert sorted(r["run_id"] for r in warehouse.unfinished_runs(JOB)) == ["r0", "r1"]
        with warehouse.kept_open():
            assert warehouse.record_run_publishing("r1")
        assert not other_process_opens()
    assert len(opened) == 1 and rows["predictions"] == 6
    assert other_process_opens()
    # A thread of its own opens its own connection, and the rows committed in the block are there.
    seen: list[list[str]] = []
    thread = threading.Thread(target=lambda: seen.append(sorted(r["run_id"] for r in warehouse.unfinished_runs(JOB))))
    thread.start()
    thread.join()
    assert seen == [["r0", "r1"]] and len(opened) == 2


FIRST_RELEASE_TABLES = (
    "predictions",
    "quarantine",
    "guard_actions",
    "guard_summary",
    "fallback_report",
    "drift_report",
    "drift_histograms",
    "runs",
)
"""The warehouse of the first release: these tables, without the columns added since (and drift_report's
`outside_p1_p99_share` still called `out_of_range_share`)."""


def _first_release_ddl(types: dict) -> list[str]:
    from tasks.catalog import warehouse_dataset
    from tasks.sinks.warehouse.migrations import ADDED_COLUMNS, RENAMED_COLUMNS

    statements = []
    for table in FIRST_RELEASE_TABLES:
        dataset = warehouse_dataset(table)
        renamed = {new: old for old, new in RENAMED_COLUMNS.get(table, {}).items()}
        columns = [
            f'"{renamed.get(f.name, f.name)}" {types[f.type]}{"" if f.nullable else " NOT NULL"}'
            for f in dataset.schema
            if f.name not in ADDED_COLUMNS.get(table, ())
        ]
        if dataset.primary_key:
            columns.append(f"PRIMARY KEY ({', '.join(dataset.keys)})")
        statements.append(f'CREATE TABLE "{table}" ({", ".join(columns)})')
    statements += [
        "INSERT INTO runs (run_id, job, partition_date, status, started_at) VALUES ('old-run', 'credit_risk', DATE '2026-03-09', "
        "'succeeded', TIMESTAMPTZ '2026-03-10 02:00:00+00')",
        "INSERT INTO drift_report (run_id, job, partition_date, feature, baseline, psi, out_of_range_share) VALUES "
        "('old-run', 'credit_risk', DATE '2026-03-09', 'annual_income', 'reference', 0.02, 0.013)",
    ]
    return statements


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_a_warehouse_of_the_first_releases_schema_is_upgraded_in_place_by_recorded_migrations(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from tasks.catalog import WAREHOUSE_DATASETS
    from tasks.sinks.warehouse.migrations import MIGRATIONS
    from tasks.sinks.warehouse.schema import DUCKDB_TYPES, POSTGRES_TYPES

    if backend == "duckdb":
        import duckdb

        path = tmp_path / "warehouse.duckdb"
        with duckdb.connect(str(path)) as con:
            for statement in _first_release_ddl(DUCKDB_TYPES):
                con.execute(statement)
        warehouse: Warehouse = DuckDBWarehouse(path)
    else:
        import adbc_driver_postgresql.dbapi

        url = request.getfixturevalue("postgres_database_url")
        with adbc_driver_postgresql.dbapi.connect(url, autocommit=True) as con, con.cursor() as cursor:
            for statement in _first_release_ddl(POSTGRES_TYPES):
                cursor.execute(statement)
        warehouse = PostgresWarehouse(url)

    warehouse.record_run_started(
        {
            "run_id": "new-run",
            "job": JOB,
            "partition_date": DAY,
            "model_name": "credit_risk",
            "model_version": "2",
            "feature_version": "1.0.0",
            "started_at": dt.datetime(2026, 12, 4, tzinfo=dt.UTC),
        }
    )
    assert [m["id"] for m in warehouse.applied_migrations()] == [m.id for m in MIGRATIONS]
    with warehouse._session(write=False) as session:
        tables = {
            r["table_name"]
            for r in session.rows(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            )
        }
        assert {d.table for d in WAREHOUSE_DATASETS} <= tables
        for dataset in WAREHOUSE_DATASETS:
            columns = {
                r["column_name"]
                for r in session.rows(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = $t AND table_schema = current_schema()",
                    {"t": dataset.table},
                )
            }
            assert set(dataset.schema.names) <= columns, (dataset.table, set(dataset.schema.names) - columns)
        old = session.rows("SELECT psi, outside_p1_p99_share, kind FROM drift_report WHERE run_id = 'old-run'")
        assert old == [{"psi": 0.02, "outside_p1_p99_share": 0.013, "kind": None}]
        ledger = session.rows("SELECT run_id, status, rows_failed, warnings FROM runs ORDER BY run_id")
        assert [(r["run_id"], r["status"], r["rows_failed"]) for r in ledger] == [
            ("new-run", "running", None),
            ("old-run", "succeeded", None),
        ]
        if backend == "postgres":
            indexed = {
                r["tablename"]
                for r in session.rows("SELECT tablename FROM pg_indexes WHERE indexname LIKE '%\\_partition'")
            }
            assert indexed == {d.table for d in WAREHOUSE_DATASETS if d.partitioned}, indexed ^ {
                d.table for d in WAREHOUSE_DATASETS if d.partitioned
            }
    # Opened again by a new writer, nothing is applied twice.
    again = DuckDBWarehouse(path) if backend == "duckdb" else PostgresWarehouse(url)
    again.record_run_ended(
        "new-run", status="failed", ended_at=dt.datetime(2026, 12, 4, 0, 1, tzinfo=dt.UTC), error="test"
    )
    assert [m["id"] for m in again.applied_migrations()] == [m.id for m in MIGRATIONS]


def test_a_new_warehouse_records_every_migration_and_has_its_indexes(any_warehouse: Warehouse) -> None:
    from tasks.catalog import WAREHOUSE_DATASETS
    from tasks.sinks.postgres_warehouse import PostgresWarehouse as Postgres
    from tasks.sinks.warehouse.migrations import MIGRATIONS

    any_warehouse.record_run_started(
        {
            "run_id": "r",
            "job": JOB,
            "partition_date": DAY,
            "model_name": "m",
            "model_version": "1",
            "feature_version": "1",
            "started_at": dt.datetime(2026, 12, 4, tzinfo=dt.UTC),
        }
    )
    assert [m["id"] for m in any_warehouse.applied_migrations()] == [m.id for m in MIGRATIONS]
    if isinstance(any_warehouse, Postgres):
        with any_warehouse._session(write=False) as session:
            indexed = {
                r["tablename"]
                for r in session.rows("SELECT tablename FROM pg_indexes WHERE indexname LIKE '%\\_partition'")
            }
        assert indexed == {d.table for d in WAREHOUSE_DATASETS if d.partitioned}


def test_the_pooled_comparison_reads_an_md5_sample_of_entities_beyond_its_cap(
    any_warehouse: Warehouse, tmp_path: Path
) -> None:
    import hashlib

    any_warehouse.replace_partition(job=JOB, partition_date=DAY, files=staged_run(tmp_path, "run-1", rows=400))
    ids = sample_rows(PREDICTION_SCHEMA, run_id="run-1", rows=400).column("entity_id").to_pylist()
    labels = pa.Table.from_pylist(
        [
            {
                "job": JOB,
                "partition_date": DAY,
                "entity_id": i,
                "outcome": k % 2,
                "observed_date": DAY,
                "source": "test",
                "entity_status": "scored",
            }
            for k, i in enumerate(ids)
        ],
        schema=OUTCOME_LABELS.schema,
    )
    any_warehouse.replace_monitoring_partition(job=JOB, partition_date=DAY, tables={OUTCOME_LABELS.table: labels})
    everything, total = any_warehouse.labelled_shadow_rows(JOB, first_date=DAY, last_date=DAY)
    assert total == everything.num_rows == 400
    sample, counted = any_warehouse.labelled_shadow_rows(JOB, first_date=DAY, last_date=DAY, max_rows=100)
    cut = f"{65_536 * 100 // 400:04x}"
    expected = sorted(i for i in ids if hashlib.md5(i.encode()).hexdigest()[:4] < cut)
    assert counted == 400 and sorted(sample.column("entity_id").to_pylist()) == expected and 50 < len(expected) < 150
    again, _ = any_warehouse.labelled_shadow_rows(JOB, first_date=DAY, last_date=DAY, max_rows=100)
    assert again.equals(sample)


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_decision_flips_of_before_forecast_and_multiclass_jobs_gain_their_columns_in_place(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Migrations 0003 and 0004 add the forecasts and the classes to a `decision_flips` that lacks them; the flips
    already there keep their rows with nulls, and a multiclass job's flips load and read back with both classes."""
    from tasks.catalog import DECISION_FLIPS
    from tasks.sinks.warehouse.schema import DUCKDB_TYPES, POSTGRES_TYPES

    added = ("champion_forecast", "challenger_forecast", "champion_class", "challenger_class")
    types = DUCKDB_TYPES if backend == "duckdb" else POSTGRES_TYPES
    columns = ", ".join(f'"{f.name}" {types[f.type]}' for f in DECISION_FLIPS.schema if f.name not in added)
    statements = [
        f"CREATE TABLE decision_flips ({columns})",
        "INSERT INTO decision_flips (run_id, job, partition_date, entity_id, champion_decision, challenger_decision) "
        "VALUES ('old-run', 'credit_risk', DATE '2026-03-08', 'E1', 'approve', 'review')",
    ]
    if backend == "duckdb":
        import duckdb

        path = tmp_path / "warehouse.duckdb"
        with duckdb.connect(str(path)) as con:
            for statement in statements:
                con.execute(statement)
        warehouse: Warehouse = DuckDBWarehouse(path)
    else:
        import adbc_driver_postgresql.dbapi

        url = request.getfixturevalue("postgres_database_url")
        with adbc_driver_postgresql.dbapi.connect(url, autocommit=True) as con, con.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
        warehouse = PostgresWarehouse(url)
    flips = sample_rows(DECISION_FLIPS.schema, run_id="new-run", rows=3)
    warehouse.replace_partition(
        job=JOB, partition_date=DAY, files={"decision_flips": [written(tmp_path / "staged", "flips", flips)]}
    )
    assert {"0003_forecast_columns", "0004_class_columns"} <= {m["id"] for m in warehouse.applied_migrations()}
    with warehouse._session(write=False) as session:
        old = session.rows(
            "SELECT champion_class, challenger_class, champion_forecast FROM decision_flips WHERE run_id = 'old-run'"
        )
        new = session.rows(
            "SELECT entity_id, champion_class, challenger_class FROM decision_flips WHERE run_id = 'new-run' ORDER BY entity_id"
        )
    assert old == [{"champion_class": None, "challenger_class": None, "champion_forecast": None}]
    assert new == [
        {
            "entity_id": f"entity_id-{i}",
            "champion_class": f"champion_class-{i}",
            "challenger_class": f"challenger_class-{i}",
        }
        for i in range(3)
    ]
