"""A multiclass job goes everywhere a binary job goes: the fault-type job of tests/test_multiclass_prediction.py
(`fault_rows`, `_multiclass_spec`) with an XGBoost multi:softprob champion and a smaller one as challenger,
both trained here.

- Its classifications, shadow classifications and flips reach the Parquet store, DuckDB, PostgreSQL and a Delta
  table on S3 identical row for row (the probability vectors too: float8[] on PostgreSQL);
- decision monitoring counts the decision mix and the straddling share from the run's chunks and from either
  warehouse alike;
- the challenger shadows it: flips carry both classes, and the comparison crosstabs the classes;
- the Dask task runner (inference cut apart from prediction) gives the classifications of the thread runner;
- a kill at the publish crash points leaves the old run's or the new run's classifications, never a mix.

Every expected value comes from an independent computation: XGBoost's own margins of the raw rows, numpy and
polars on the published tables.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from polars.testing import assert_frame_equal
from test_multiclass_prediction import CLASSES, FEATURES, _multiclass_spec, fault_rows

from tasks.settings import PROJECT_ROOT, Settings

JOB = "faults"
DAYS = [dt.date(2026, 6, 1) + dt.timedelta(days=d) for d in range(5)]
TRAIN_DAY, HOLDOUT_DAY, SCORED_DAYS = DAYS[0], DAYS[1], DAYS[3:]
ROWS = 900
CHUNK_ROWS = 300
sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
from forked_score import completed  # noqa: E402

CUTOFFS = (0.5,)
"""The probability cut-off of test_multiclass_prediction's rule table."""


def _suite() -> dict:
    def guard(kind: str, column: str, action: str, **kwargs) -> dict:
        return {"type": kind, "kwargs": {"column": column, **kwargs}, "meta": {"guard": {"action": action}}}

    expectations = [
        guard("expect_column_to_exist", "machine_id", "fail"),
        guard("expect_column_values_to_not_be_null", "machine_id", "quarantine"),
        guard("expect_column_values_to_be_unique", "machine_id", "quarantine_all"),
    ]
    for column in FEATURES:
        expectations += [
            guard("expect_column_to_exist", column, "fail"),
            guard("expect_column_values_to_be_in_type_list", column, "fail", type_list=["int64", "float64"]),
            guard("expect_column_values_to_not_be_null", column, "quarantine"),
        ]
    return {"name": JOB, "expectations": expectations}


def _spec(*, challenger: str | None, delta_url: str | None = None) -> dict:
    spec = {
        "name": JOB,
        "description": "Which fault a machine shows.",
        "entity_column": "machine_id",
        "expectation_suite": f"{JOB}.json",
        "features": {"version": "1.0.0", "columns": [{"name": c} for c in FEATURES]},
        "model": {"name": JOB, "version": "1", **({"challenger": challenger} if challenger else {})},
        "limits": {"max_repaired_share": 0.2, "max_quarantined_share": 0.05},
        "monitoring": {
            "labels": {
                "entity_column": "machine_id",
                "outcome_column": "fault",
                "observed_date_column": "observed_date",
            },
            "slices": [],
        },
    }
    if delta_url:
        spec["sinks"] = {"delta": {"url": delta_url}}
    return _multiclass_spec(spec)


@dataclass(frozen=True)
class FaultProject:
    """The multiclass job's folders: data (raw, registry), jobs and expectations."""

    root: Path

    @property
    def env(self) -> dict[str, str]:
        return {
            "SCORING_DATA_DIR": str(self.root / "data"),
            "SCORING_JOBS_DIR": str(self.root / "jobs"),
            "SCORING_EXPECTATIONS_DIR": str(self.root / "expectations"),
        }

    @property
    def settings(self) -> Settings:
        return Settings(
            data_dir=self.root / "data", jobs_dir=self.root / "jobs", expectations_dir=self.root / "expectations"
        )

    def write_spec(self, **options) -> None:
        (self.root / "jobs" / f"{JOB}.yaml").write_text(yaml.safe_dump(_spec(**options), sort_keys=False))

    def raw(self, day: dt.date) -> pl.DataFrame:
        return pl.read_parquet(self.settings.raw_partition_dir(JOB, day.isoformat()) / "*.parquet")

    def write_raw(self, day: dt.date, frame: pl.DataFrame) -> None:
        folder = self.settings.raw_partition_dir(JOB, day.isoformat())
        folder.mkdir(parents=True, exist_ok=True)
        # Row groups of a chunk each: the partition splits into several work units.
        pq.write_table(
            frame.drop("fault", strict=False).to_arrow(), folder / "part-0.parquet", row_group_size=CHUNK_ROWS
        )

    def copy(self, root: Path) -> FaultProject:
        shutil.copytree(self.root, root, ignore=shutil.ignore_patterns("output", "warehouse*", "_ledger", "delta"))
        return FaultProject(root)

    def table(self, sql: str) -> pl.DataFrame:
        with duckdb.connect(str(self.settings.duckdb_path), read_only=True) as con:
            return pl.from_arrow(con.sql(sql).to_arrow_table())

    def parquet(self, name: str, day: dt.date) -> pl.DataFrame:
        from tasks.catalog import dataset

        folder = self.settings.output_dir(JOB) / dataset(name).folder / f"date={day}"
        return pl.from_arrow(pq.read_table(os.path.realpath(folder)))


def _trained(frame: pl.DataFrame, params: dict, rounds: int, path: Path) -> Path:
    import xgboost as xgb

    label = frame["fault"].replace_strict(CLASSES, list(range(len(CLASSES)))).to_numpy()
    booster = xgb.train(
        {"objective": "multi:softprob", "num_class": len(CLASSES), "nthread": 2, "seed": 0, **params},
        xgb.DMatrix(frame.select(FEATURES).to_numpy().astype(np.float32), label=label, feature_names=list(FEATURES)),
        rounds,
    )
    booster.save_model(str(path))
    return path


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> FaultProject:
    """The multiclass job with its data and two registered versions: 1 (the champion) and 2, two shallow rounds
    (the challenger, named by the alias `challenger`, different enough to change some classes and decisions)."""
    from tasks.inference.aliases import inference_moved_alias
    from tasks.jobs.registration import registered_job_model

    project = FaultProject(tmp_path_factory.mktemp("faults"))
    for folder in ("jobs", "expectations"):
        (project.root / folder).mkdir()
    (project.root / "expectations" / f"{JOB}.json").write_text(json.dumps(_suite()))
    project.write_spec(challenger=None)
    frames = {day: fault_rows(day, ROWS if day in SCORED_DAYS else 3000, 70 + i) for i, day in enumerate(DAYS)}
    for day in SCORED_DAYS:
        project.write_raw(day, frames[day])
    champion = _trained(frames[TRAIN_DAY], {"max_depth": 3, "eta": 0.2}, 40, project.root / "champion.ubj")
    challenger = _trained(frames[TRAIN_DAY], {"max_depth": 1, "eta": 0.5}, 3, project.root / "challenger.ubj")
    for version, model in (("1", champion), ("2", challenger)):
        registered_job_model(JOB, model, settings=project.settings, holdout=frames[HOLDOUT_DAY], version=version)
    inference_moved_alias(
        project.settings.model_registry_dir(JOB), "challenger", "2", versions=["1", "2"], changed_by="test"
    )
    return project


@pytest.fixture
def project(faults: FaultProject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FaultProject:
    """A never-scored copy of the multiclass job, shadowed by its challenger, that this test's environment points at."""
    copy = faults.copy(tmp_path / "faults")
    copy.write_spec(challenger="challenger")
    for name in ("SCORING_WAREHOUSE_URL", "SCORING_WAREHOUSE_PATH", "SCORING_WAREHOUSE_SECRET_BLOCK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in copy.env.items():
        monkeypatch.setenv(name, value)
    return copy


# --- independent references -------------------------------------------------------------------------


def framework_margins(project: FaultProject, version: str, raw: pl.DataFrame) -> pl.DataFrame:
    """XGBoost's own per-class margins of each raw row by a registered version."""
    import xgboost as xgb

    directory = project.settings.model_registry_dir(JOB) / version
    meta = json.loads((directory / "metadata.json").read_text())
    booster = xgb.Booster(model_file=str(directory / meta["model_file"]))
    x = raw.select(FEATURES).to_numpy().astype(np.float32)
    margins = booster.predict(xgb.DMatrix(x, feature_names=list(FEATURES)), output_margin=True).astype(np.float64)
    return pl.DataFrame({"entity_id": raw["machine_id"], "expected_margins": margins.tolist()})


def assert_classified(published: pl.DataFrame, expected: pl.DataFrame) -> None:
    """Every raw row once, its raw margins XGBoost's, its class the most probable of its calibrated vector, its
    decision the rule table's on class and probability."""
    joined = expected.join(published, on="entity_id", how="left")
    assert published.height == expected.height and joined["raw_margins"].null_count() == 0
    np.testing.assert_allclose(
        np.asarray(joined["raw_margins"].to_list()), np.asarray(joined["expected_margins"].to_list()), atol=1e-5
    )
    vector = np.asarray(joined["class_probabilities"].to_list())
    np.testing.assert_allclose(vector.sum(axis=1), 1.0, atol=1e-9)
    cls, p = np.asarray(CLASSES)[vector.argmax(axis=1)], vector.max(axis=1)
    assert (joined["predicted_class"].to_numpy() == cls).all() and np.allclose(joined["probability"].to_numpy(), p)
    decided = np.where(
        (cls == "leak") & (p >= 0.5),
        "stop",
        np.where(
            (cls != "none") & (p < 0.5),
            "inspect",
            np.where(np.isin(cls, ["bearing", "overheat"]) & (p >= 0.5), "service", "run"),
        ),
    )
    assert (joined["decision"].to_numpy() == decided).all()


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort("entity_id")


def _groups(frame: pl.DataFrame) -> pl.DataFrame:
    """The classifications counted per decision, rule, class and straddling, as polars counts them (probability_low <
    0.5 <= probability_high straddles the rule table's one cut-off)."""
    straddling = (pl.col("probability_low") < 0.5) & (pl.col("probability_high") >= 0.5)
    return (
        frame.group_by(
            "run_id", "model_version", "decision", "rule_id", "predicted_class", straddling.alias("straddling")
        )
        .agg(pl.len().cast(pl.Int64).alias("rows"), pl.col("probability").sum().alias("probability_sum"))
        .sort("decision", "rule_id", "predicted_class", "straddling")
    )


# --- sinks, warehouses, decision monitoring ----------------------------------------------------------


@pytest.mark.usefixtures("prefect_harness")
def test_classifications_and_their_shadow_are_identical_in_parquet_duckdb_delta_on_s3_and_postgres(
    project: FaultProject, postgres_database_url: str, s3_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deltalake import DeltaTable

    from flows.score_partition import score_partition
    from tasks.prediction.decisions import predict_straddling
    from tasks.sinks.duckdb_warehouse import DuckDBWarehouse
    from tasks.sinks.postgres_warehouse import PostgresWarehouse

    day = SCORED_DAYS[-1]
    delta = f"s3://{s3_env.bucket}/{uuid.uuid4().hex}/tables"
    project.write_spec(challenger="challenger", delta_url=delta)
    result = score_partition(JOB, day, CHUNK_ROWS)
    assert result.rows_scored == ROWS and result.challenger["rows_compared"] == ROWS
    raw = project.raw(day)
    where = f"WHERE partition_date = DATE '{day}'"
    for dataset, version in (("classifications", "1"), ("shadow_classifications", "2")):
        parquet = _sorted(project.parquet(dataset, day))
        warehouse = _sorted(project.table(f"SELECT * FROM {dataset} {where}"))
        table = DeltaTable(f"{delta}/{dataset}").to_pyarrow_table()
        lake = _sorted(pl.from_arrow(table.filter(pc.equal(table["partition_date"], pa.scalar(day, pa.date32())))))
        assert_frame_equal(warehouse, parquet)
        assert_frame_equal(lake.select(parquet.columns), parquet)
        assert set(parquet["run_id"]) == {result.run_id} and set(parquet["model_version"]) == {version}
        assert_classified(parquet, framework_margins(project, version, raw))
    assert set(project.parquet("shadow_classifications", day)["alias"]) == {"challenger"}
    for empty in ("predictions", "shadow_predictions", "forecasts", "shadow_forecasts"):
        assert (
            project.parquet(empty, day).height == 0 and project.table(f"SELECT count(*) AS n FROM {empty}")["n"][0] == 0
        )

    # Decision monitoring of the run's own chunk counts, against polars on the published rows; the warehouse counts alike.
    published = project.parquet("classifications", day)
    monitored = {
        (r["measure"], r["item"]): r["value"]
        for r in project.table(f"SELECT * FROM decision_monitoring {where}").to_dicts()
    }
    for decision in ("stop", "inspect", "service", "run"):
        assert monitored[("decision_share", decision)] == pytest.approx(
            (published["decision"] == decision).mean(), abs=1e-12
        )
    straddles = ((published["probability_low"] < 0.5) & (published["probability_high"] >= 0.5)).mean()
    assert 0 < straddles < 1 and monitored[("straddling_share", "all")] == pytest.approx(straddles, abs=1e-12)
    for name in CLASSES:
        assert monitored[("class_share", name)] == pytest.approx(
            (published["predicted_class"] == name).mean(), abs=1e-12
        )
    assert monitored[("expected_accuracy", "all")] == pytest.approx(published["probability"].mean(), rel=1e-12)
    assert not any(measure.startswith("score") for measure, _ in monitored)
    duck = DuckDBWarehouse(project.settings.duckdb_path)
    counted = _groups(published)
    in_sql = pl.from_arrow(duck.classification_groups(JOB, day, CUTOFFS, straddling=predict_straddling)).sort(
        "decision", "rule_id", "predicted_class", "straddling"
    )
    assert_frame_equal(in_sql, counted, check_exact=False, rel_tol=1e-12)

    # The same partition scored on PostgreSQL: the same rows, run id aside; the vectors read back as they went in.
    tables = ("classifications", "shadow_classifications", "decision_flips", "decision_monitoring", "shadow_comparison")
    rows = {d: project.table(f"SELECT * EXCLUDE (run_id) FROM {d} {where}") for d in tables}
    monkeypatch.setenv("SCORING_WAREHOUSE_URL", postgres_database_url)
    project.write_spec(challenger="challenger")
    again = score_partition(JOB, day, CHUNK_ROWS)
    import adbc_driver_postgresql.dbapi

    with adbc_driver_postgresql.dbapi.connect(postgres_database_url) as con, con.cursor() as cursor:
        for dataset, expected in rows.items():
            cursor.execute(f"SELECT * FROM {dataset} WHERE partition_date = '{day}'")
            stored = pl.from_arrow(cursor.fetch_arrow_table()).drop("run_id")
            assert expected.height > 0, dataset
            keys = [
                c
                for c in ("entity_id", "measure", "item", "section", "champion_item", "challenger_item")
                if c in expected.columns
            ]
            assert_frame_equal(
                stored.select(expected.columns).sort(keys),
                expected.sort(keys),
                check_dtypes=False,
                check_exact=dataset != "decision_monitoring",
            )
        cursor.execute(
            "SELECT column_name, udt_name FROM information_schema.columns WHERE table_name = 'classifications' AND data_type = 'ARRAY'"
        )
        assert sorted(cursor.fetchall()) == [
            ("class_probabilities", "_float8"),
            ("raw_margins", "_float8"),
            ("reason_codes", "_text"),
            ("reason_texts", "_text"),
        ]
    postgres = PostgresWarehouse(postgres_database_url)
    in_postgres = pl.from_arrow(postgres.classification_groups(JOB, day, CUTOFFS, straddling=predict_straddling)).sort(
        "decision", "rule_id", "predicted_class", "straddling"
    )
    assert_frame_equal(in_postgres.drop("run_id"), counted.drop("run_id"), check_exact=False, rel_tol=1e-12)
    assert set(in_postgres["run_id"]) == {again.run_id}


# --- the shadow ---------------------------------------------------------------------------------------


@pytest.mark.usefixtures("prefect_harness")
def test_the_challenger_shadows_and_its_flips_and_class_crosstab_match_the_two_published_tables(
    project: FaultProject,
) -> None:
    from flows.score_partition import score_partition

    day = SCORED_DAYS[-1]
    result = score_partition(JOB, day, CHUNK_ROWS)
    where = f"WHERE partition_date = DATE '{day}'"
    mine = _sorted(project.table(f"SELECT * FROM classifications {where}"))
    theirs = _sorted(project.table(f"SELECT * FROM shadow_classifications {where}"))
    both = mine.join(theirs, on="entity_id", suffix="_c")
    assert both.height == mine.height == ROWS

    flipped = both.filter(pl.col("decision") != pl.col("decision_c"))
    assert 0 < flipped.height < ROWS
    flips = _sorted(project.table(f"SELECT * FROM decision_flips {where}"))
    expected = flipped.select(
        "entity_id",
        pl.col("model_version").alias("champion_version"),
        pl.col("model_version_c").alias("challenger_version"),
        pl.col("decision").alias("champion_decision"),
        pl.col("decision_c").alias("challenger_decision"),
        pl.col("probability").alias("champion_probability"),
        pl.col("probability_c").alias("challenger_probability"),
        pl.col("predicted_class").alias("champion_class"),
        pl.col("predicted_class_c").alias("challenger_class"),
        pl.col("reason_codes").alias("champion_reason_codes"),
        pl.col("reason_codes_c").alias("challenger_reason_codes"),
    )
    assert_frame_equal(flips.select(expected.columns), expected)
    assert flips["champion_score"].null_count() == flips["champion_forecast"].null_count() == flips.height

    comparison = project.table(f"SELECT * FROM shadow_comparison {where}")
    assert set(comparison["section"]) == {
        "summary",
        "crosstab",
        "decision_mix",
        "expected_accuracy",
        "class_crosstab",
        "class_mix",
    }
    classes = comparison.filter(pl.col("section") == "class_crosstab").sort("champion_item", "challenger_item")
    counted = (
        both.group_by(
            pl.col("predicted_class").alias("champion_item"), pl.col("predicted_class_c").alias("challenger_item")
        )
        .agg(
            pl.len().cast(pl.Int64).alias("rows"),
            pl.col("probability").mean().alias("champion_value"),
            pl.col("probability_c").mean().alias("challenger_value"),
        )
        .sort("champion_item", "challenger_item")
    )
    assert_frame_equal(classes.select(counted.columns), counted, check_exact=False, rel_tol=1e-9)
    changed = both.filter(pl.col("predicted_class") != pl.col("predicted_class_c")).height
    assert changed > 0
    crosstab = comparison.filter(pl.col("section") == "crosstab").sort("champion_item", "challenger_item")
    by_decision = (
        both.group_by(pl.col("decision").alias("champion_item"), pl.col("decision_c").alias("challenger_item"))
        .agg(
            pl.len().cast(pl.Int64).alias("rows"),
            pl.col("probability").mean().alias("champion_value"),
            pl.col("probability_c").mean().alias("challenger_value"),
        )
        .sort("champion_item", "challenger_item")
    )
    assert_frame_equal(crosstab.select(by_decision.columns), by_decision, check_exact=False, rel_tol=1e-9)
    mix = {r["champion_item"]: r for r in comparison.filter(pl.col("section") == "class_mix").to_dicts()}
    for name in CLASSES:
        assert mix[name]["champion_value"] == pytest.approx((mine["predicted_class"] == name).mean(), abs=1e-12)
        assert mix[name]["challenger_value"] == pytest.approx((theirs["predicted_class"] == name).mean(), abs=1e-12)
    accuracy = {r["champion_item"]: r for r in comparison.filter(pl.col("section") == "expected_accuracy").to_dicts()}
    assert accuracy["all"]["champion_value"] == pytest.approx(mine["probability"].mean(), rel=1e-9)
    assert accuracy["all"]["challenger_value"] == pytest.approx(theirs["probability"].mean(), rel=1e-9)
    summary = {r["champion_item"]: r["rows"] for r in comparison.filter(pl.col("section") == "summary").to_dicts()}
    assert summary == {
        "rows_compared": ROWS,
        "rows_flipped": flipped.height,
        "rows_failed": 0,
        "rows_class_changed": changed,
    }
    assert result.challenger["rows_flipped"] == flipped.height
    page = (project.settings.output_dir(JOB) / "reports" / "html" / f"date={day}.html").read_text()
    assert (
        "Champion and challenger" in page
        and f"{changed} rows change class" in page
        and "could not be rendered" not in page
    )


# --- the Dask runner and the crash points ------------------------------------------------------------

_RUN_TABLES = (
    "classifications",
    "shadow_classifications",
    "decision_flips",
    "shadow_comparison",
    "decision_monitoring",
    "quarantine",
    "drift_report",
    "fallback_report",
)


def _run_outputs(project: FaultProject, day: dt.date) -> dict[str, pl.DataFrame]:
    return {
        table: project.table(f"SELECT * EXCLUDE (run_id) FROM {table} WHERE partition_date = DATE '{day}'").sort(
            pl.all()
        )
        for table in _RUN_TABLES
    }


@pytest.mark.usefixtures("prefect_harness")
def test_the_dask_runner_gives_the_classifications_of_the_thread_runner(
    project: FaultProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.score_partition import score_partition

    day = SCORED_DAYS[-1]
    monkeypatch.setenv("SCORING_TASK_RUNNER", "threads")
    threads_result = score_partition(JOB, day, CHUNK_ROWS)
    threads = _run_outputs(project, day)
    monkeypatch.setenv("SCORING_TASK_RUNNER", "dask")
    monkeypatch.setenv("SCORING_DASK_WORKERS", "2")
    # Inference on workers of its own: each unit's decided chunks, the challenger's too, cross in hand-off files.
    monkeypatch.setenv("SCORING_INFERENCE_RESOURCES", json.dumps({"GPU": 1}))
    dask_result = score_partition(JOB, day, CHUNK_ROWS)
    on_dask = _run_outputs(project, day)
    assert dask_result.run_id != threads_result.run_id
    assert threads["classifications"].height == ROWS and threads["shadow_classifications"].height == ROWS
    assert threads["decision_flips"].height > 0 and threads["decision_monitoring"].height > 0
    for table, frame in threads.items():
        assert_frame_equal(on_dask[table], frame, check_exact=table != "decision_monitoring", rtol=1e-12)
    workers = dask_result.inference["workers"]
    assert workers and all(not w.endswith(f":{os.getpid()}") for w in workers), workers


_PUBLISH_POINTS = ("publish:staged:shadow_classifications", "publish:intent", "publish:committed", "publish:swapped")
"""Kill points of the publish (tasks/sinks/crash_points.py): before the warehouse commit the old run stands, after it the new."""
_COMMITTED = ("publish:committed", "publish:swapped")


@pytest.mark.crash
@pytest.mark.usefixtures("prefect_harness")
def test_a_kill_at_the_publish_points_leaves_the_old_or_the_new_classifications_never_a_mix(
    project: FaultProject,
) -> None:
    """`score run` SIGKILLed at each publish point with raw rows that differ from the published run's, then recovered
    (alternately by `score recover` and by the job's next run): in Parquet and the warehouse, classifications, shadow
    classifications and flips are one run's, the same run's, and hold XGBoost's margins of that run's raw rows."""
    from prefect.settings import PREFECT_API_URL

    from flows.score_partition import score_partition

    day, other = SCORED_DAYS[-1], SCORED_DAYS[0]
    inputs = {"a": project.raw(day), "b": fault_rows(day, ROWS, 99)}
    assert inputs["a"]["machine_id"].to_list() == inputs["b"]["machine_id"].to_list()
    expected = {
        (name, version): framework_margins(project, version, frame)
        for name, frame in inputs.items()
        for version in ("1", "2")
    }
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "SCORING_LOCK_WAIT_S": "60"}
    score_partition(JOB, day, CHUNK_ROWS)
    published = "a"
    where = f"WHERE partition_date = DATE '{day}'"

    def score(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return completed(list(args), env={**env, **extra}, cwd=PROJECT_ROOT, timeout=300)

    for trial, point in enumerate(_PUBLISH_POINTS):
        new = "b" if published == "a" else "a"
        project.write_raw(day, inputs[new])
        killed = score("run", JOB, "--date", day.isoformat(), "--chunk-rows", str(CHUNK_ROWS), SCORING_CRASH_AT=point)
        assert killed.returncode == -signal.SIGKILL, (point, killed.stdout[-2000:], killed.stderr[-2000:])
        if trial % 2 == 0:
            recovered = score("recover", JOB)
            assert recovered.returncode == 0, (point, recovered.stdout[-2000:], recovered.stderr[-2000:])
        else:
            score_partition(JOB, other, CHUNK_ROWS)
        if point in _COMMITTED:
            published = new
        runs = project.table(f"SELECT run_id, status FROM runs {where} ORDER BY started_at")
        assert not set(runs["status"]) - {"succeeded", "failed"}, (point, runs)
        succeeded = runs.filter(pl.col("status") == "succeeded")["run_id"][-1]
        for dataset, version in (("classifications", "1"), ("shadow_classifications", "2"), ("decision_flips", None)):
            warehouse = _sorted(project.table(f"SELECT * FROM {dataset} {where}"))
            parquet = _sorted(project.parquet(dataset, day))
            assert_frame_equal(parquet, warehouse)
            # Flips may be few; classifications and shadow classifications are every row.
            assert set(warehouse["run_id"]) <= {succeeded} and (version is None or warehouse.height == ROWS), (
                point,
                dataset,
            )
            if version is not None:
                assert_classified(warehouse, expected[(published, version)])


# --- the shadow sums ----------------------------------------------------------------------------------


def _classified_chunk(rng: np.random.Generator, n: int, version: str) -> pa.Table:
    vector = rng.dirichlet(np.ones(len(CLASSES)), n)
    chosen = vector.argmax(axis=1)
    p = vector.max(axis=1)
    return pa.table(
        {
            "entity_id": [f"e{i}" for i in range(n)],
            "model_version": [version] * n,
            "decision": np.where(p >= 0.5, "act", "wait"),
            "reason_codes": [["VIB"]] * n,
            "predicted_class": np.asarray(CLASSES)[chosen],
            "probability": p,
        }
    )


def test_the_class_shadow_sums_merge_in_any_order_and_refuse_other_classes() -> None:
    from tasks.monitoring.shadow import ShadowAccumulator, shadow_comparison_rows

    rng = np.random.default_rng(5)
    chunks = [(_classified_chunk(rng, n, "1"), _classified_chunk(rng, n, "2")) for n in (400, 3, 250)]
    decisions, classes = ("act", "wait"), tuple(CLASSES)
    whole = ShadowAccumulator(decisions, classes=classes)
    for champion, challenger in chunks:
        whole.add(champion, challenger)
    merged = ShadowAccumulator(decisions, classes=classes)
    for champion, challenger in reversed(chunks):
        part = ShadowAccumulator(decisions, classes=classes)
        part.add(champion, challenger)
        merged.merge(part)
    assert (merged.class_rows == whole.class_rows).all() and np.allclose(
        merged.class_champion_probability, whole.class_champion_probability
    )
    with pytest.raises(ValueError, match="classes"):
        ShadowAccumulator(decisions, classes=("a", "b", "c")).merge(whole)
    rows = shadow_comparison_rows(merged, champion_version="1", challenger_version="2", rows_scored=653)
    mine = pl.concat([pl.from_arrow(a) for a, _ in chunks])
    theirs = pl.concat([pl.from_arrow(b) for _, b in chunks])
    cells = {(r["champion_item"], r["challenger_item"]): r["rows"] for r in rows if r["section"] == "class_crosstab"}
    counted = pl.DataFrame({"a": mine["predicted_class"], "b": theirs["predicted_class"]}).group_by("a", "b").len()
    assert cells == {(a, b): n for a, b, n in counted.iter_rows()}
    assert not any(r["section"] in ("score_delta", "expected_event_rate", "forecast_delta") for r in rows)
