"""The catalog (tasks/catalog.py) is the one description of every dataset, and the stores agree with it.

A column added in one place only fails here: in the catalog only (the scoring code does not write
it, or a store lacks it), in a report's staged rows only (the published Parquet has a column the
catalog does not), or in a warehouse table only. The warehouse is checked as the code creates it,
empty on both backends and on the scored demo (tests/monitoring_demo.py: six dates, decision
monitoring, then outcomes ingested); the Parquet store as the demo's runs published it.
"""

from __future__ import annotations

import datetime as dt
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from monitoring_demo import JOB, SALES_JOB, MonitoredDemo, copied_demo, monitored_demo

from tasks import catalog
from tasks.catalog import DATASETS, PARTITION_DATASETS, PARTITION_KEY, PREDICTIONS, WAREHOUSE_DATASETS, Dataset
from tasks.settings import PROJECT_ROOT, Settings
from tasks.sinks.duckdb_warehouse import DuckDBWarehouse
from tasks.sinks.parquet_store import REPORT_PAGE, OutputDirs, output_dirs
from tasks.sinks.publish import partition_store
from tasks.sinks.warehouse import Warehouse


def _comparable(kind: pa.DataType) -> pa.DataType:
    """A column type as a store reads it back, made comparable: polars writes large strings and
    lists, DuckDB reads JSON back as text and UTC as Etc/UTC."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or kind == pa.json_():
        return pa.string()
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(_comparable(kind.value_type))
    if pa.types.is_timestamp(kind) and kind.tz in ("UTC", "Etc/UTC"):
        return pa.timestamp(kind.unit, tz="UTC")
    return kind


def _columns(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    return [(f.name, _comparable(f.type)) for f in schema]


# --- the catalog itself -------------------------------------------------------------------------


def test_every_dataset_is_named_once_and_its_description_holds_together() -> None:
    for what in ("name", "table", "folder"):
        values = [getattr(d, what) for d in DATASETS if getattr(d, what) is not None]
        assert len(values) == len(set(values)), what
    for d in DATASETS:
        assert set(d.keys) <= set(d.schema.names if d.schema is not None else ()), d.name
        assert not d.primary_key or d.keys, d.name
        assert not d.partitioned or set(PARTITION_KEY) <= set(d.schema.names), d.name
        assert d.staged is None or d.folder is not None, d.name
        assert not d.published or (d.table is not None and d.schema is not None), d.name
    # The ordered tuples are exactly the datasets with the property each stands for.
    assert set(WAREHOUSE_DATASETS) == {d for d in DATASETS if d.table is not None}
    assert set(catalog.STAGED_DATASETS) == {d for d in DATASETS if d.staged is not None}
    assert set(PARTITION_DATASETS) == {d for d in DATASETS if d.staged is not None and d.published}
    assert set(catalog.MONITORING_DATASETS) == {d for d in DATASETS if d.partitioned and d.staged is None}
    assert set(catalog.LEDGER_DATASETS) == {d for d in DATASETS if d.primary_key}
    assert len(DATASETS) == len(set(DATASETS))
    assert all(catalog.dataset(d.name) is d for d in DATASETS)
    assert all(catalog.warehouse_dataset(d.table) is d for d in WAREHOUSE_DATASETS)
    with pytest.raises(KeyError, match="known"):
        catalog.dataset("predictionz")


def test_the_catalog_imports_pyarrow_and_the_standard_library_only() -> None:
    """So every layer can read it: no polars, no Prefect, no warehouse, nothing else of tasks/."""
    probe = (
        "import sys, pyarrow; before = set(sys.modules); import tasks.catalog; "
        "print('\\n'.join(sorted(m for m in set(sys.modules) - before if m.partition('.')[0] not in sys.stdlib_module_names)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=PROJECT_ROOT
    ).stdout.split()
    assert sorted(loaded) == ["tasks", "tasks.catalog"]


def test_the_parquet_store_publishes_the_catalogs_folders(tmp_path: Path) -> None:
    dirs = output_dirs(Settings(data_dir=tmp_path), JOB)
    root = tmp_path / "output" / JOB
    store = partition_store(dirs)
    assert list(store.datasets) == [d.name for d in PARTITION_DATASETS]
    assert store.datasets == {d.name: root / d.folder for d in PARTITION_DATASETS}
    assert {name: schema for name, schema in store.schemas.items()} == {d.name: d.schema for d in PARTITION_DATASETS}
    assert dirs.all() == tuple(root / d.folder for d in catalog.STAGED_DATASETS)
    assert (
        dirs.fallback_report == root / "reports" / "fallback" and dirs.inference_handoff == root / "inference_handoff"
    )
    with pytest.raises(AttributeError, match="staged datasets"):
        dirs.runs  # noqa: B018  (the ledger has no folder)
    # Tasks on Dask workers get the folders pickled.
    assert pickle.loads(pickle.dumps(dirs)) == dirs == OutputDirs(root)


def test_the_docs_name_every_published_folder_and_table() -> None:
    """The outputs page lists every published folder, and the hand-written pages explain every warehouse table
    somewhere (the generated output reference lists them all by construction, so it does not count here)."""
    outputs = (PROJECT_ROOT / "docs" / "reference" / "outputs.md").read_text()
    for d in PARTITION_DATASETS:
        assert f"`data/output/<job>/{d.folder}/date=" in outputs, d.folder
    pages = "\n".join(p.read_text() for p in (PROJECT_ROOT / "docs").rglob("*.md"))
    for d in WAREHOUSE_DATASETS:
        assert f"`{d.table}`" in pages, d.table


# --- the warehouse as the code creates it -------------------------------------------------------


def _warehouse_problems(warehouse: Warehouse) -> list[str]:
    """Where the warehouse's tables differ from the catalog: tables, column order and types, NOT NULL, primary keys."""
    problems = []
    with warehouse._session(write=True) as session:
        present = {
            r["table_name"]
            for r in session.rows(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            )
        }
        wanted = {d.table for d in WAREHOUSE_DATASETS}
        if present != wanted:
            problems.append(
                f"tables: {sorted(present - wanted)} not in the catalog, {sorted(wanted - present)} missing"
            )
        primary = {}
        for r in session.rows(
            "SELECT tc.table_name, kcu.column_name FROM information_schema.table_constraints tc "
            "JOIN information_schema.key_column_usage kcu ON tc.constraint_name = kcu.constraint_name AND tc.table_name = kcu.table_name "
            "WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema = current_schema() ORDER BY tc.table_name, kcu.ordinal_position"
        ):
            primary.setdefault(r["table_name"], []).append(r["column_name"])
        for d in WAREHOUSE_DATASETS:
            if d.table not in present:
                continue
            columns = session.rows(
                "SELECT column_name, is_nullable FROM information_schema.columns WHERE table_name = $table "
                "AND table_schema = current_schema() ORDER BY ordinal_position",
                {"table": d.table},
            )
            if [c["column_name"] for c in columns] != d.schema.names:
                problems.append(
                    f"{d.table}: columns {[c['column_name'] for c in columns]}, the catalog says {d.schema.names}"
                )
            not_null = {c["column_name"] for c in columns if c["is_nullable"] == "NO"}
            if not_null != {f.name for f in d.schema if not f.nullable}:
                problems.append(
                    f"{d.table}: NOT NULL {sorted(not_null)}, the catalog {sorted(f.name for f in d.schema if not f.nullable)}"
                )
            read = session.arrow(f'SELECT * FROM "{d.table}" LIMIT 0').schema
            if _columns(read) != _columns(d.schema):
                problems.append(f"{d.table}: types {_columns(read)}, the catalog {_columns(d.schema)}")
            if primary.get(d.table, []) != (list(d.keys) if d.primary_key else []):
                problems.append(
                    f"{d.table}: primary key {primary.get(d.table)}, the catalog {d.keys if d.primary_key else None}"
                )
    return problems


def test_a_new_warehouse_has_exactly_the_catalogs_tables(any_warehouse: Warehouse) -> None:
    assert _warehouse_problems(any_warehouse) == []


def test_the_check_sees_a_column_added_to_a_table_only(tmp_path: Path) -> None:
    warehouse = DuckDBWarehouse(tmp_path / "warehouse.duckdb")
    with warehouse._session(write=True) as session:
        session.execute('ALTER TABLE guard_summary ADD COLUMN "note" VARCHAR')
    assert [p.split(":")[0] for p in _warehouse_problems(warehouse)] == ["guard_summary", "guard_summary"]


# --- the scored demo ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> MonitoredDemo:
    return monitored_demo(tmp_path_factory)


def _parquet_problems(root: Path, dataset: Dataset, day: dt.date, run_id: str) -> list[str]:
    link = root / dataset.folder / f"date={day.isoformat()}"
    expected = root / "_partitions" / f"date={day.isoformat()}" / run_id / dataset.folder
    if not os.path.lexists(link) or Path(os.path.realpath(link)) != expected.resolve():
        return [f"{link} does not lead to {expected}"]
    problems = []
    wanted = dict(_columns(dataset.schema))
    for path in sorted(expected.glob("*.parquet")):
        found = dict(_columns(pq.read_schema(path)))
        if found != wanted:
            extra, missing = sorted(set(found) - set(wanted)), sorted(set(wanted) - set(found))
            retyped = sorted(n for n in set(found) & set(wanted) if found[n] != wanted[n])
            problems.append(
                f"{path.relative_to(root)}: columns not in the catalog {extra}, missing {missing}, other types {retyped}"
            )
    return problems


def test_every_published_folder_of_the_demo_is_the_catalogs(demo: MonitoredDemo) -> None:
    settings = Settings(data_dir=demo.data_dir)
    root = settings.output_dir(JOB)
    warehouse = DuckDBWarehouse(settings.duckdb_path)
    assert _warehouse_problems(warehouse) == []
    for day in demo.dates:
        run_id = demo.run_ids[day]
        for dataset in PARTITION_DATASETS:
            assert _parquet_problems(root, dataset, day, run_id) == [], (dataset.name, day)
        version = root / "_partitions" / f"date={day.isoformat()}" / run_id
        folders = {str(p.parent.relative_to(version)) for p in version.rglob("*.parquet")}
        assert folders == {d.folder for d in PARTITION_DATASETS}, day
        assert (version / REPORT_PAGE).is_file()
        # What Delta writes: the version files read with the catalog's schema, as many rows as the warehouse holds.
        with warehouse._session(write=False) as session:
            for dataset in PARTITION_DATASETS:
                rows = ds.dataset(
                    sorted(str(p) for p in (version / dataset.folder).glob("*.parquet")), schema=dataset.schema
                ).count_rows()
                stored = session.rows(
                    f'SELECT count(*) AS n FROM "{dataset.table}" WHERE job = $job AND partition_date = $day',
                    {"job": JOB, "day": day},
                )[0]["n"]
                assert rows == stored, (dataset.name, day, rows, stored)
    assert list(root.rglob("_staging/**/*.*")) == []


CHALLENGER_TABLES = (*catalog.SHADOW_DATASETS, catalog.SHADOW_OUTCOMES, catalog.MODEL_ALIASES)


def test_every_key_of_the_catalog_identifies_one_row_of_the_demo(demo: MonitoredDemo, tmp_path: Path) -> None:
    """After scoring, decision monitoring and outcomes of the binary and the forecast job, every table with rows and
    keys has no two rows of one key."""
    from tasks.jobspec import load_job_spec
    from tasks.monitoring.outcomes import ingested_outcomes

    settings = Settings(data_dir=copied_demo(demo, tmp_path / "data"))
    warehouse = DuckDBWarehouse(settings.duckdb_path)
    for job in (JOB, SALES_JOB):
        spec = load_job_spec(job, settings)
        for day in demo.dates:
            ingested_outcomes(
                warehouse, spec, labels_dir=settings.labels_partition_dir(job, day.isoformat()), partition_date=day
            )
    with warehouse._session(write=False) as session:
        for dataset in WAREHOUSE_DATASETS:
            (counted,) = session.rows(f'SELECT count(*) AS n FROM "{dataset.table}"')
            # Leases are released after each run; the champion/challenger tables fill only for a job that names
            # a challenger or promotes one (tests/test_champion_challenger.py checks their rows and keys).
            # The demo has no multiclass job: tests/test_multiclass_*.py check its tables.
            multiclass = (
                catalog.CLASSIFICATIONS,
                catalog.SHADOW_CLASSIFICATIONS,
                catalog.OUTCOME_CLASS_LABELS,
                catalog.OUTCOME_CLASS_METRICS,
                catalog.OUTCOME_CLASS_RATES,
                catalog.OUTCOME_CLASS_CALIBRATION,
            )
            if dataset not in (catalog.PARTITION_LEASES, *CHALLENGER_TABLES, *multiclass):
                assert counted["n"] > 0, dataset.table
            if not dataset.keys:
                continue
            keys = ", ".join(f'"{k}"' for k in dataset.keys)
            repeated = session.rows(
                f'SELECT {keys}, count(*) AS n FROM "{dataset.table}" GROUP BY {keys} HAVING count(*) > 1 LIMIT 3'
            )
            assert repeated == [], (dataset.table, repeated)
    assert PREDICTIONS.keys == (*PARTITION_KEY, "entity_id")
