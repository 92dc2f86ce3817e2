"""A forecast job goes everywhere a binary job goes: a small count job ("sales": units sold per item and
day) with an XGBoost count:poisson champion and a reg:tweedie challenger, both trained here.

- Its forecasts reach the Parquet store, DuckDB, PostgreSQL and a Delta table identical row for row;
- the Dask task runner (inference cut apart from prediction) gives the forecasts of the thread runner;
- a kill at the publish crash points leaves the old run's or the new run's forecasts, never a mix;
- the challenger shadows it with its own error model and interval, and when actuals land both are
  compared on the same rows; a challenger of another kind is refused like any model.

Every expected value comes from an independent computation: XGBoost's own predictions of the raw rows,
crepes' own conformal interval from the registered scores, numpy on the published tables and the label files.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
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

from tasks.settings import PROJECT_ROOT, Settings

JOB = "sales"
DAYS = [dt.date(2026, 5, 1) + dt.timedelta(days=d) for d in range(8)]
TRAIN_DAYS, HOLDOUT_DAY, SCORED_DAYS = DAYS[:4], DAYS[4], DAYS[6:]
ROWS = 1200
CHUNK_ROWS = 400
FEATURES = ("price", "promo", "temperature", "rain_mm")
LEVEL = 0.9
sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
from forked_score import completed  # noqa: E402


def sales_rows(day: dt.date, n: int, seed: int, *, price_shift: float = 0.0) -> pl.DataFrame:
    """Units sold ~ Poisson(exp(1.5 + 0.8·promo − 0.15·price + 0.02·temperature − 0.04·rain)), plus a weekend lift."""
    rng = np.random.default_rng(seed)
    price = (rng.uniform(1, 10, n) + price_shift).round(2)
    promo = (rng.random(n) < 0.2).astype(np.int64)
    temperature = rng.normal(15, 8, n).round(1)
    rain = np.where(rng.random(n) < 0.3, rng.exponential(5, n), 0).round(1)
    mu = np.exp(1.5 + 0.8 * promo - 0.15 * price + 0.02 * temperature - 0.04 * rain + 0.2 * (day.weekday() >= 5))
    return pl.DataFrame(
        {
            "item_id": [f"IT-{day:%m%d}-{i:06d}" for i in range(n)],
            "price": price,
            "promo": promo,
            "temperature": temperature,
            "rain_mm": rain,
            "units": rng.poisson(mu).astype(np.int64),
        }
    )


def _suite() -> dict:
    def guard(kind: str, column: str, action: str, **kwargs) -> dict:
        return {"type": kind, "kwargs": {"column": column, **kwargs}, "meta": {"guard": {"action": action}}}

    expectations = [
        guard("expect_column_to_exist", "item_id", "fail"),
        guard("expect_column_values_to_not_be_null", "item_id", "quarantine"),
        guard("expect_column_values_to_be_unique", "item_id", "quarantine_all"),
    ]
    for column in FEATURES:
        expectations += [
            guard("expect_column_to_exist", column, "fail"),
            guard("expect_column_values_to_be_in_type_list", column, "fail", type_list=["int64", "float64"]),
            guard("expect_column_values_to_not_be_null", column, "quarantine"),
        ]
    return {"name": JOB, "expectations": expectations}


def _spec(*, challenger: str | None, failure: str = "count", delta_url: str | None = None) -> dict:
    spec = {
        "name": JOB,
        "description": "Units sold per item and day.",
        "entity_column": "item_id",
        "expectation_suite": f"{JOB}.json",
        "features": {
            "version": "1.0.0",
            "columns": [
                {"name": "price"},
                {"name": "promo", "kind": "boolean"},
                {"name": "temperature"},
                {"name": "rain_mm"},
            ],
        },
        "model": {
            "name": JOB,
            "version": "1",
            **({"challenger": challenger, "challenger_failure": failure} if challenger else {}),
        },
        "target": {"kind": "count", "name": "units sold", "unit": "units"},
        "prediction": {
            "interval_level": LEVEL,
            "rules": [
                {"id": "ADD_STOCK", "when": {"forecast_high": {"ge": 12}}, "decision": "add_stock"},
                {"id": "KEEP", "decision": "keep"},
            ],
            "reasons": {
                "top_k": 2,
                "for_decisions": ["add_stock"],
                "codes": {
                    "price": {"code": "PRICE", "text": "Price"},
                    "promo": {"code": "PROMO", "text": "Promotion"},
                    "temperature": {"code": "TEMP", "text": "Temperature"},
                    "rain_mm": {"code": "RAIN", "text": "Rain"},
                },
            },
        },
        "limits": {"max_repaired_share": 0.2, "max_quarantined_share": 0.05},
        "monitoring": {
            "labels": {"entity_column": "item_id", "outcome_column": "units", "observed_date_column": "observed_date"},
            "slices": [],
        },
    }
    if delta_url:
        spec["sinks"] = {"delta": {"url": delta_url}}
    return spec


@dataclass(frozen=True)
class SalesProject:
    """The count job's folders: data (raw, labels, registry), jobs and expectations."""

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
            frame.drop("units", strict=False).to_arrow(), folder / "part-0.parquet", row_group_size=CHUNK_ROWS
        )

    def copy(self, root: Path) -> SalesProject:
        shutil.copytree(self.root, root, ignore=shutil.ignore_patterns("output", "warehouse*", "_ledger", "delta"))
        return SalesProject(root)

    def table(self, sql: str) -> pl.DataFrame:
        with duckdb.connect(str(self.settings.duckdb_path), read_only=True) as con:
            return pl.from_arrow(con.sql(sql).to_arrow_table())

    def parquet(self, name: str, day: dt.date) -> pl.DataFrame:
        from tasks.catalog import dataset

        folder = self.settings.output_dir(JOB) / dataset(name).folder / f"date={day}"
        return pl.from_arrow(pq.read_table(os.path.realpath(folder)))


def _trained(frame: pl.DataFrame, params: dict, rounds: int, path: Path) -> Path:
    import xgboost as xgb

    x = frame.select(FEATURES).to_numpy().astype(np.float32)
    booster = xgb.train(
        {**params, "nthread": 2, "seed": 0},
        xgb.DMatrix(x, label=frame["units"].to_numpy(), feature_names=list(FEATURES)),
        num_boost_round=rounds,
    )
    booster.save_model(str(path))
    return path


@pytest.fixture(scope="module")
def sales(tmp_path_factory: pytest.TempPathFactory) -> SalesProject:
    """The count job with its data and two registered versions: 1, count:poisson (the champion), and 2,
    reg:tweedie (the challenger, named by the alias `challenger`)."""
    from tasks.inference.aliases import inference_moved_alias
    from tasks.jobs.registration import registered_job_model

    project = SalesProject(tmp_path_factory.mktemp("sales"))
    for folder in ("jobs", "expectations"):
        (project.root / folder).mkdir()
    (project.root / "expectations" / f"{JOB}.json").write_text(json.dumps(_suite()))
    project.write_spec(challenger=None)
    frames = {day: sales_rows(day, ROWS if day in SCORED_DAYS else 1500, seed=i) for i, day in enumerate(DAYS)}
    train = pl.concat([frames[d] for d in TRAIN_DAYS])
    for day in SCORED_DAYS:
        project.write_raw(day, frames[day])
        labels = project.settings.labels_partition_dir(JOB, day.isoformat())
        labels.mkdir(parents=True)
        frames[day].select("item_id", "units", pl.lit(day + dt.timedelta(days=1)).alias("observed_date")).write_parquet(
            labels / "part-0.parquet"
        )
    poisson = _trained(
        train, {"objective": "count:poisson", "max_depth": 4, "eta": 0.1}, 120, project.root / "poisson.ubj"
    )
    # Few shallow rounds: a challenger that differs from the champion enough to flip some decisions.
    tweedie = _trained(
        train,
        {"objective": "reg:tweedie", "tweedie_variance_power": 1.3, "max_depth": 2, "eta": 0.3},
        25,
        project.root / "tweedie.ubj",
    )
    for version, model in (("1", poisson), ("2", tweedie)):
        registered_job_model(JOB, model, settings=project.settings, holdout=frames[HOLDOUT_DAY], version=version)
    inference_moved_alias(
        project.settings.model_registry_dir(JOB), "challenger", "2", versions=["1", "2"], changed_by="test"
    )
    return project


@pytest.fixture
def project(sales: SalesProject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SalesProject:
    """A never-scored copy of the count job, shadowed by its challenger, that this test's environment points at."""
    copy = sales.copy(tmp_path / "sales")
    copy.write_spec(challenger="challenger")
    for name in ("SCORING_WAREHOUSE_URL", "SCORING_WAREHOUSE_PATH", "SCORING_WAREHOUSE_SECRET_BLOCK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in copy.env.items():
        monkeypatch.setenv(name, value)
    return copy


# --- independent references -------------------------------------------------------------------------


def framework_forecasts(project: SalesProject, version: str, raw: pl.DataFrame) -> pl.DataFrame:
    """XGBoost's own forecast of each raw row by a registered version, and the interval crepes draws around it
    from the version's registered conformal scores and its error model (XGBoost too) at the spec's level."""
    import crepes
    import xgboost as xgb

    directory = project.settings.model_registry_dir(JOB) / version
    meta = json.loads((directory / "metadata.json").read_text())
    x = raw.select(FEATURES).to_numpy().astype(np.float32)
    booster = xgb.Booster(model_file=str(directory / meta["model_file"]))
    forecast = booster.predict(xgb.DMatrix(x, feature_names=list(FEATURES))).astype(np.float64)
    margin = booster.predict(xgb.DMatrix(x, feature_names=list(FEATURES)), output_margin=True).astype(np.float64)
    errors = xgb.Booster(model_file=str(directory / meta["error_model_file"]))
    sigma = np.maximum(
        errors.predict(xgb.DMatrix(np.column_stack([x, margin.astype(np.float32)]))).astype(np.float64), 0.0
    )
    interval = meta["interval"]
    regressor = crepes.ConformalRegressor()
    regressor.fitted, regressor.normalized, regressor.mondrian = True, True, True
    regressor.binned_alphas = (np.arange(len(interval["bin_alphas"])), [np.array(a) for a in interval["bin_alphas"]])
    sigmas = np.maximum(sigma, interval["sigma_floor"])
    bins = np.searchsorted(np.array(interval["bin_edges"]), sigmas, side="right")
    bounds = regressor.predict_int(forecast, sigmas=sigmas, bins=bins, confidence=LEVEL, y_min=0.0)
    return pl.DataFrame(
        {
            "entity_id": raw["item_id"],
            "forecast": forecast,
            "forecast_low": bounds[:, 0],
            "forecast_high": bounds[:, 1],
            "expected_error": sigma,
            "raw_margin": margin,
        }
    )


def assert_forecasts_match(published: pl.DataFrame, expected: pl.DataFrame) -> None:
    joined = expected.join(published, on="entity_id", how="left", suffix="_published")
    assert published.height == expected.height and joined["forecast_published"].null_count() == 0
    for column in ("forecast", "forecast_low", "forecast_high", "expected_error", "raw_margin"):
        np.testing.assert_allclose(
            joined[f"{column}_published"].to_numpy(), joined[column].to_numpy(), rtol=1e-5, atol=1e-5, err_msg=column
        )
    decided = np.where(joined["forecast_high"].to_numpy() >= 12, "add_stock", "keep")
    clear = (
        np.abs(joined["forecast_high"].to_numpy() - 12) > 1e-4
    )  # float32 trees: a row at the threshold may go either way
    assert (joined["decision"].to_numpy()[clear] == decided[clear]).all()


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort("entity_id")


# --- sinks, warehouses and the shadow ----------------------------------------------------------------


@pytest.mark.usefixtures("prefect_harness")
def test_forecasts_and_shadow_forecasts_are_identical_in_parquet_duckdb_delta_and_postgres(
    project: SalesProject, postgres_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deltalake import DeltaTable

    from flows.score_partition import score_partition

    day = SCORED_DAYS[-1]
    delta = project.root / "delta"
    project.write_spec(challenger="challenger", delta_url=str(delta))
    result = score_partition(JOB, day, CHUNK_ROWS)
    assert result.rows_scored == ROWS and result.challenger["rows_compared"] == ROWS
    raw = project.raw(day)
    where = f"WHERE partition_date = DATE '{day}'"
    for dataset, version in (("forecasts", "1"), ("shadow_forecasts", "2")):
        parquet = _sorted(project.parquet(dataset, day))
        warehouse = _sorted(project.table(f"SELECT * FROM {dataset} {where}"))
        table = DeltaTable(str(delta / dataset)).to_pyarrow_table()
        lake = _sorted(pl.from_arrow(table.filter(pc.equal(table["partition_date"], pa.scalar(day, pa.date32())))))
        assert_frame_equal(warehouse, parquet)
        assert_frame_equal(lake.select(parquet.columns), parquet)
        assert set(parquet["run_id"]) == {result.run_id} and set(parquet["model_version"]) == {version}
        assert_forecasts_match(parquet, framework_forecasts(project, version, raw))
    assert set(project.parquet("shadow_forecasts", day)["alias"]) == {"challenger"}
    for empty in ("predictions", "shadow_predictions"):
        assert (
            project.parquet(empty, day).height == 0 and project.table(f"SELECT count(*) AS n FROM {empty}")["n"][0] == 0
        )

    # The same partition scored on PostgreSQL: the same rows, run id aside.
    duck = {
        d: project.table(f"SELECT * EXCLUDE (run_id) FROM {d} {where}")
        for d in ("forecasts", "shadow_forecasts", "decision_flips")
    }
    from tasks.sinks.duckdb_warehouse import DuckDBWarehouse
    from tasks.sinks.postgres_warehouse import PostgresWarehouse

    shadow = DuckDBWarehouse(project.settings.duckdb_path).partition_shadow_forecasts(JOB, day)
    monkeypatch.setenv("SCORING_WAREHOUSE_URL", postgres_database_url)
    project.write_spec(challenger="challenger")
    score_partition(JOB, day, CHUNK_ROWS)
    import adbc_driver_postgresql.dbapi

    with adbc_driver_postgresql.dbapi.connect(postgres_database_url) as con, con.cursor() as cursor:
        for dataset, rows in duck.items():
            cursor.execute(f"SELECT * FROM {dataset} WHERE partition_date = '{day}'")
            stored = pl.from_arrow(cursor.fetch_arrow_table()).drop("run_id")
            assert rows.height > 0, dataset
            assert_frame_equal(_sorted(stored).select(rows.columns), _sorted(rows), check_dtypes=False)
    # The challenger's forecasts as the comparison on actuals reads them, on either backend.
    assert shadow.num_rows == ROWS and PostgresWarehouse(postgres_database_url).partition_shadow_forecasts(
        JOB, day
    ).equals(shadow)


@pytest.mark.usefixtures("prefect_harness")
def test_the_challenger_shadows_with_its_own_interval_and_is_compared_when_actuals_land(project: SalesProject) -> None:
    from flows.score_partition import score_partition
    from tasks.jobspec import load_job_spec
    from tasks.monitoring.outcomes import ingested_outcomes
    from tasks.sinks.duckdb_warehouse import DuckDBWarehouse

    day = SCORED_DAYS[-1]
    result = score_partition(JOB, day, CHUNK_ROWS)
    where = f"WHERE partition_date = DATE '{day}'"
    mine = _sorted(project.table(f"SELECT * FROM forecasts {where}"))
    theirs = _sorted(project.table(f"SELECT * FROM shadow_forecasts {where}"))
    both = mine.join(theirs, on="entity_id", suffix="_c")
    assert both.height == mine.height == ROWS

    # Flipped decisions, with both forecasts, against the two published tables.
    flipped = both.filter(pl.col("decision") != pl.col("decision_c"))
    assert 0 < flipped.height < ROWS
    flips = _sorted(project.table(f"SELECT * FROM decision_flips {where}"))
    expected = flipped.select(
        "entity_id",
        pl.col("model_version").alias("champion_version"),
        pl.col("model_version_c").alias("challenger_version"),
        pl.col("decision").alias("champion_decision"),
        pl.col("decision_c").alias("challenger_decision"),
        pl.col("forecast").alias("champion_forecast"),
        pl.col("forecast_c").alias("challenger_forecast"),
        pl.col("reason_codes").alias("champion_reason_codes"),
        pl.col("reason_codes_c").alias("challenger_reason_codes"),
    )
    assert_frame_equal(flips.select(expected.columns), expected)
    assert flips["champion_score"].null_count() == flips["champion_probability"].null_count() == flips.height
    # A row the challenger sends to add_stock carries the challenger's own reasons, up or down.
    added = flips.filter(pl.col("challenger_decision") == "add_stock")
    assert added.height == 0 or all(
        re.fullmatch(r"[A-Z]+_(UP|DOWN)", c) for c in added["challenger_reason_codes"].explode()
    )

    # The comparison's sections against numpy on the same two tables.
    comparison = project.table(f"SELECT * FROM shadow_comparison {where}")
    assert set(comparison["section"]) == {
        "summary",
        "crosstab",
        "decision_mix",
        "mean_forecast",
        "mean_interval_width",
        "forecast_delta",
    }
    crosstab = comparison.filter(pl.col("section") == "crosstab").sort("champion_item", "challenger_item")
    counted = (
        both.group_by(pl.col("decision").alias("champion_item"), pl.col("decision_c").alias("challenger_item"))
        .agg(
            pl.len().cast(pl.Int64).alias("rows"),
            pl.col("forecast").mean().alias("champion_value"),
            pl.col("forecast_c").mean().alias("challenger_value"),
        )
        .sort("champion_item", "challenger_item")
    )
    assert_frame_equal(crosstab.select(counted.columns), counted, check_exact=False, rtol=1e-9)
    means = {r["champion_item"]: r for r in comparison.filter(pl.col("section") == "mean_forecast").to_dicts()}
    assert means["all"]["champion_value"] == pytest.approx(mine["forecast"].mean(), rel=1e-9)
    assert means["all"]["challenger_value"] == pytest.approx(theirs["forecast"].mean(), rel=1e-9)
    for decision in ("add_stock", "keep"):
        assert means[decision]["rows"] == mine.filter(pl.col("decision") == decision).height
        assert means[decision]["challenger_value"] == pytest.approx(
            theirs.filter(pl.col("decision") == decision)["forecast"].mean(), rel=1e-9
        )
    (width,) = comparison.filter(pl.col("section") == "mean_interval_width").to_dicts()
    assert width["champion_value"] == pytest.approx((mine["forecast_high"] - mine["forecast_low"]).mean(), rel=1e-9)
    assert width["challenger_value"] == pytest.approx(
        (theirs["forecast_high"] - theirs["forecast_low"]).mean(), rel=1e-9
    )
    delta = (both["forecast_c"] - both["forecast"]).to_numpy()
    stats = {
        r["champion_item"]: r["challenger_value"]
        for r in comparison.filter(pl.col("section") == "forecast_delta").to_dicts()
    }
    assert stats["mean"] == pytest.approx(delta.mean(), rel=1e-9) and stats["mean_abs"] == pytest.approx(
        np.abs(delta).mean(), rel=1e-9
    )
    for q in (1, 5, 25, 50, 75, 95, 99):
        exact = np.quantile(delta, q / 100, method="inverted_cdf")
        assert stats[f"p{q:02d}"] == pytest.approx(exact, rel=0.01, abs=1e-9), q
    summary = {r["champion_item"]: r["rows"] for r in comparison.filter(pl.col("section") == "summary").to_dicts()}
    assert summary == {"rows_compared": ROWS, "rows_flipped": flipped.height, "rows_failed": 0}
    assert result.challenger["rows_flipped"] == flipped.height
    page = (project.settings.output_dir(JOB) / "reports" / "html" / f"date={day}.html").read_text()
    assert (
        "Champion and challenger" in page
        and f"would flip <b>{flipped.height}</b> decisions" in page
        and "could not be rendered" not in page
    )

    # Actuals land: both models' MAE, RMSE and coverage on the same rows, against the label files.
    settings = project.settings
    spec = load_job_spec(JOB, settings)
    warehouse = DuckDBWarehouse(settings.duckdb_path)
    ingested_outcomes(
        warehouse, spec, labels_dir=settings.labels_partition_dir(JOB, day.isoformat()), partition_date=day
    )
    rows = {r["measure"]: r for r in project.table(f"SELECT * FROM shadow_outcomes {where}").to_dicts()}
    assert set(rows) == {"mae", "rmse", "coverage", "coverage_miss"}
    labels = pl.read_parquet(settings.labels_partition_dir(JOB, day.isoformat()) / "*.parquet")
    actual = both.join(labels.select(pl.col("item_id").alias("entity_id"), "units"), on="entity_id")
    y = actual["units"].to_numpy().astype(np.float64)
    for side, suffix in (("champion", ""), ("challenger", "_c")):
        f, low, high = (actual[f"{c}{suffix}"].to_numpy() for c in ("forecast", "forecast_low", "forecast_high"))
        coverage = float(((y >= low) & (y <= high)).mean())
        assert rows["mae"][side] == pytest.approx(np.abs(y - f).mean(), rel=1e-12), side
        assert rows["rmse"][side] == pytest.approx(math.sqrt(((y - f) ** 2).mean()), rel=1e-12), side
        assert rows["coverage"][side] == pytest.approx(coverage, abs=1e-12), side
        assert rows["coverage_miss"][side] == pytest.approx(abs(coverage - LEVEL), abs=1e-12), side
    for measure, row in rows.items():
        assert (
            row["rows"] == ROWS
            and row["events"] is None
            and (row["champion_version"], row["challenger_version"]) == ("1", "2")
        )
        assert row["delta"] == pytest.approx(row["challenger"] - row["champion"], abs=1e-12)
        assert row["delta_low"] <= row["delta"] <= row["delta_high"], measure
        decided = not row["delta_low"] <= 0 <= row["delta_high"]
        if measure in ("mae", "rmse", "coverage_miss"):
            assert row["better"] == (
                "undecided" if not decided else "challenger" if row["delta"] < 0 else "champion"
            ), measure
    assert rows["coverage"]["better"] == rows["coverage_miss"]["better"]
    recommendation = rows["mae"]["recommendation"]
    assert recommendation.startswith(("promote the challenger", "keep the champion", "mixed", "no clear difference")), (
        recommendation
    )
    if rows["mae"]["better"] == "champion":
        assert "MAE is higher by" in recommendation

    # The challenger as champion scores the rows it shadowed: the same forecasts, intervals, decisions and reasons.
    project.write_spec(challenger=None)
    spec_path = project.root / "jobs" / f"{JOB}.yaml"
    spec_path.write_text(spec_path.read_text().replace("version: '1'", "version: '2'"))
    score_partition(JOB, day, CHUNK_ROWS)
    as_champion = _sorted(project.table(f"SELECT * EXCLUDE (run_id) FROM forecasts {where}"))
    assert set(as_champion["model_version"]) == {"2"}
    assert_frame_equal(as_champion, theirs.drop("run_id", "alias"))
    assert project.table(f"SELECT count(*) AS n FROM shadow_forecasts {where}")["n"][0] == 0


# --- the Dask runner and the crash points ------------------------------------------------------------

_RUN_TABLES = (
    "forecasts",
    "shadow_forecasts",
    "decision_flips",
    "shadow_comparison",
    "quarantine",
    "drift_report",
    "fallback_report",
    "model_health",
)


def _run_outputs(project: SalesProject, day: dt.date) -> dict[str, pl.DataFrame]:
    return {
        table: project.table(f"SELECT * EXCLUDE (run_id) FROM {table} WHERE partition_date = DATE '{day}'").sort(
            pl.all()
        )
        for table in _RUN_TABLES
    }


@pytest.mark.usefixtures("prefect_harness")
def test_the_dask_runner_gives_the_forecasts_of_the_thread_runner(
    project: SalesProject, monkeypatch: pytest.MonkeyPatch
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
    assert (
        threads["forecasts"].height == ROWS
        and threads["shadow_forecasts"].height == ROWS
        and threads["decision_flips"].height > 0
    )
    for table, frame in threads.items():
        assert_frame_equal(on_dask[table], frame, check_exact=table != "model_health", rtol=1e-12)
    workers = dask_result.inference["workers"]
    assert workers and all(not w.endswith(f":{os.getpid()}") for w in workers), workers


_PUBLISH_POINTS = ("publish:staged:shadow_forecasts", "publish:intent", "publish:committed", "publish:swapped")
"""Kill points of the publish (tasks/sinks/crash_points.py): before the warehouse commit the old run stands, after it the new."""
_COMMITTED = ("publish:committed", "publish:swapped")


@pytest.mark.crash
@pytest.mark.usefixtures("prefect_harness")
def test_a_kill_at_the_publish_points_leaves_the_old_or_the_new_forecasts_never_a_mix(project: SalesProject) -> None:
    """`score run` SIGKILLed at each publish point with raw rows that differ from the published run's, then recovered
    (alternately by `score recover` and by the job's next run): in Parquet and the warehouse, forecasts, shadow forecasts
    and flips are one run's, the same run's, and equal XGBoost's forecasts of that run's raw rows."""
    from prefect.settings import PREFECT_API_URL

    from flows.score_partition import score_partition

    day, other = SCORED_DAYS[-1], SCORED_DAYS[0]
    inputs = {"a": project.raw(day), "b": sales_rows(day, ROWS, seed=99)}
    assert inputs["a"]["item_id"].to_list() == inputs["b"]["item_id"].to_list()
    expected = {
        (name, version): framework_forecasts(project, version, frame)
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
        for dataset, version in (("forecasts", "1"), ("shadow_forecasts", "2"), ("decision_flips", None)):
            warehouse = _sorted(project.table(f"SELECT * FROM {dataset} {where}"))
            parquet = _sorted(project.parquet(dataset, day))
            assert_frame_equal(parquet, warehouse)
            # Flips may be few; forecasts and shadow forecasts are every row.
            assert set(warehouse["run_id"]) <= {succeeded} and (version is None or warehouse.height == ROWS), (
                point,
                dataset,
            )
            if version is not None:
                assert_forecasts_match(warehouse, expected[(published, version)])


# --- a challenger of another kind, and the shadow sums -----------------------------------------------


def test_a_binary_challenger_on_a_forecast_job_is_refused_like_any_model(project: SalesProject) -> None:
    import xgboost as xgb

    from tasks.jobs.registration import job_model_inputs, registered_model_version
    from tasks.jobs.validation import validated_job
    from tasks.scoring.prepared import prepared_job

    settings = project.settings
    registry = settings.model_registry_dir(JOB)
    meta = json.loads((registry / "1" / "metadata.json").read_text())
    rows = job_model_inputs(JOB, sales_rows(HOLDOUT_DAY, 3000, seed=5), settings=settings, labelled=True)
    events = (rows.outcomes > 5).astype(np.float32)
    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": 3, "nthread": 2},
        xgb.DMatrix(rows.matrix[::2], label=events[::2]),
        30,
    )
    booster.save_model(str(project.root / "classifier.ubj"))
    registered_model_version(
        project.root / "classifier.ubj",
        registry_dir=registry,
        version="3",
        feature_version=meta["feature_version"],
        features=FEATURES,
        holdout_features=rows.matrix[1::2],
        holdout_outcomes=events[1::2],
        kind="binary",
    )
    said = "was registered as a binary classifier, but job sales is a count forecast job"
    project.write_spec(challenger="3")
    (note,) = [n for n in validated_job(JOB, settings, check_labels=False).notes if "challenger 3" in n]
    assert "cannot shadow the run" in note and said in note
    prepared = prepared_job(JOB, SCORED_DAYS[-1], settings)
    assert prepared.challenger is None and said in prepared.challenger_error

    project.write_spec(challenger="3", failure="fail")
    done = completed(["validate", JOB], env={**os.environ, **project.env}, cwd=project.root, timeout=300)
    errors = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr, (
        done.stdout[-2000:] + done.stderr[-2000:]
    )
    assert len(errors) == 1 and said in errors[0] and f"{registry / '3' / 'metadata.json'}: target:" in errors[0], (
        errors
    )


def _chunk(rng: np.random.Generator, n: int, *, version: str, shift: float) -> pa.Table:
    forecast = rng.gamma(2.0, 3.0, n)
    forecast = np.where(rng.random(n) < 0.1, forecast - shift, forecast + shift * rng.normal(size=n))
    half = rng.uniform(1, 4, n)
    return pa.table(
        {
            "entity_id": [f"e{i}" for i in range(n)],
            "model_version": [version] * n,
            "decision": np.where(forecast + half >= 12, "add_stock", "keep"),
            "reason_codes": [["PRICE_UP"]] * n,
            "forecast": forecast,
            "forecast_low": np.maximum(forecast - half, 0),
            "forecast_high": forecast + half,
        }
    )


def test_the_forecast_shadow_sums_merge_in_any_order_and_give_the_delta_quantiles_within_their_resolution() -> None:
    from tasks.monitoring.shadow import FORECAST_DELTA_RELATIVE_ERROR, ShadowAccumulator, shadow_comparison_rows

    rng = np.random.default_rng(3)
    chunks = []
    for n in (700, 5, 1300):
        champion = _chunk(rng, n, version="1", shift=0.0)
        challenger = champion.set_column(
            champion.schema.get_field_index("model_version"), "model_version", pa.array(["2"] * n)
        )
        moved = champion.column("forecast").to_numpy() + np.where(rng.random(n) < 0.3, 0.0, rng.normal(0, 2, n))
        challenger = challenger.set_column(challenger.schema.get_field_index("forecast"), "forecast", pa.array(moved))
        challenger = challenger.set_column(
            challenger.schema.get_field_index("decision"),
            "decision",
            pa.array(np.where(moved + 2 >= 12, "add_stock", "keep")),
        )
        chunks.append((champion, challenger))
    decisions = ("add_stock", "keep")
    whole = ShadowAccumulator(decisions, forecasts=True)
    for champion, challenger in chunks:
        whole.add(champion, challenger)
    merged = ShadowAccumulator(decisions, forecasts=True)
    for champion, challenger in reversed(chunks):
        part = ShadowAccumulator(decisions, forecasts=True)
        part.add(champion, challenger)
        merged.merge(part)
    assert Counter(merged.forecast_deltas) == Counter(whole.forecast_deltas) and (merged.rows == whole.rows).all()
    with pytest.raises(ValueError, match="forecasts"):
        ShadowAccumulator(decisions).merge(whole)

    rows = shadow_comparison_rows(merged, champion_version="1", challenger_version="2", rows_scored=2005)
    delta = np.concatenate([b.column("forecast").to_numpy() - a.column("forecast").to_numpy() for a, b in chunks])
    assert (delta == 0).mean() > 0.2 and (delta < 0).any() and (delta > 0).any()
    stats = {r["champion_item"]: r["challenger_value"] for r in rows if r["section"] == "forecast_delta"}
    for q in (1, 5, 25, 50, 75, 95, 99):
        exact = float(np.quantile(delta, q / 100, method="inverted_cdf"))
        assert abs(stats[f"p{q:02d}"] - exact) <= FORECAST_DELTA_RELATIVE_ERROR * abs(exact) + 1e-12, (
            q,
            stats[f"p{q:02d}"],
            exact,
        )
    assert stats["mean"] == pytest.approx(delta.mean(), rel=1e-12) and stats["mean_abs"] == pytest.approx(
        np.abs(delta).mean(), rel=1e-12
    )
    assert not any(r["section"] in ("score_delta", "expected_event_rate") for r in rows)
