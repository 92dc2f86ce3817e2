"""A forecast job's monitoring before its actuals land (issue 34): the estimated error per partition
(tasks/monitoring/health.py), the forecasts' drift (tasks/quality/drift.py) and decision monitoring
(tasks/monitoring/decisions.py).

The data is generated here: daily unit sales per item, a Poisson-like mean from price, promotion and
temperature, and a negative-binomial noise whose over-dispersion grows with a `volatility` input the
mean does not depend on. The count model (XGBoost count:poisson) is trained here on `score features`
output, registered with `score register` and the days scored with `score backfill`, as a user would.
The last day's rows are moved to volatile items: their forecasts keep their distribution, their errors
grow, and only the error model can tell before the actuals land. Realized errors are recomputed with
numpy from the published forecasts and the generator's own actuals.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xgboost as xgb
import yaml
from conftest import user_project_env
from polars.testing import assert_frame_equal
from scipy.stats import norm
from user_projects import day_output, score_cli

import tasks.scoring.unit_pass as unit_pass
from tasks.catalog import FORECASTS
from tasks.jobs.validation import validated_job
from tasks.monitoring.decisions import merged_prediction_groups, prediction_groups
from tasks.monitoring.health import HealthAccumulator, estimated_error_rows, fitted_error_estimator
from tasks.prediction.decisions import predict_straddling
from tasks.scoring.prepared import prepared_job
from tasks.scoring.summary import scoring_summary
from tasks.scoring.units import planned_work_units
from tasks.settings import Settings
from tasks.sinks.parquet_store import output_dirs
from tasks.sinks.warehouse import Warehouse

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
# A user's project whose `score` talks to the session's Prefect server (conftest.user_project_env).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

JOB = "sales"
DAYS = [dt.date(2026, 5, 1) + dt.timedelta(days=i) for i in range(19)]
TRAIN_DAYS, HOLDOUT_DAYS, SCORED_DAYS = DAYS[:5], DAYS[5:8], DAYS[8:]
SHIFTED_DAY = SCORED_DAYS[-1]
UNSHIFTED_DAYS = SCORED_DAYS[:-1]
ROWS = 3000
CUTS = (2.0, 15.0)
FEATURES = ("price", "promo", "temperature", "volatility")


def mean_units(frame: pl.DataFrame) -> np.ndarray:
    """The generator's expected units sold: volatility plays no part in it."""
    return np.exp(
        1.6
        + 0.7 * frame["promo"].to_numpy()
        - 0.12 * frame["price"].to_numpy()
        + 0.025 * frame["temperature"].to_numpy()
    )


def day_rows(day: dt.date, seed: int, *, volatile: bool = False) -> pl.DataFrame:
    """One day of items; `volatile` moves every item into the top fifth of volatility, where the noise is largest."""
    rng = np.random.default_rng(seed)
    frame = pl.DataFrame(
        {
            "item_id": [f"IT-{day:%m%d}-{i:06d}" for i in range(ROWS)],
            "price": rng.uniform(1, 10, ROWS).round(2),
            "promo": (rng.random(ROWS) < 0.2).astype(np.int8),
            "temperature": rng.normal(15, 8, ROWS).round(1),
            "volatility": (rng.uniform(0.8, 1.0, ROWS) if volatile else rng.uniform(0.0, 1.0, ROWS)).round(4),
        }
    )
    mu = mean_units(frame)
    # Negative binomial with mean mu and variance mu + alpha mu^2: alpha from 0.02 to 1.52 with volatility.
    shape = 1.0 / (0.02 + 1.5 * frame["volatility"].to_numpy() ** 3)
    return frame.with_columns(pl.Series("units", rng.negative_binomial(shape, shape / (shape + mu)).astype(np.int64)))


def _suite() -> dict:
    def expectation(kind: str, column: str, action: str) -> dict:
        return {"type": kind, "kwargs": {"column": column}, "meta": {"guard": {"action": action}}}

    rows = [expectation("expect_column_values_to_be_unique", "item_id", "quarantine_all")]
    for column in ("item_id", *FEATURES):
        rows += [
            expectation("expect_column_to_exist", column, "fail"),
            expectation("expect_column_values_to_not_be_null", column, "quarantine"),
        ]
    return {"name": JOB, "expectations": rows}


def _spec() -> dict:
    return {
        "name": JOB,
        "entity_column": "item_id",
        "expectation_suite": f"{JOB}.json",
        "features": {
            "version": "1.0.0",
            "columns": [
                {"name": "price"},
                {"name": "promo", "kind": "boolean"},
                {"name": "temperature"},
                {"name": "volatility"},
            ],
        },
        "model": {"name": JOB, "version": "latest"},
        "target": {"kind": "count", "name": "units sold", "unit": "units"},
        "prediction": {
            "interval_level": 0.9,
            "rules": [
                {"id": "ADD_STOCK", "when": {"forecast_high": {"ge": CUTS[1]}}, "decision": "add_stock"},
                {"id": "CUT_STOCK", "when": {"forecast_high": {"lt": CUTS[0]}}, "decision": "cut_stock"},
                {"id": "KEEP", "decision": "keep"},
            ],
            "reasons": {
                "top_k": 2,
                "for_decisions": ["add_stock"],
                "codes": {
                    "price": {"code": "PRICE", "text": "Price"},
                    "promo": {"code": "PROMO", "text": "Promotion"},
                    "temperature": {"code": "TEMP", "text": "Temperature"},
                    "volatility": {"code": "VOL", "text": "Volatility"},
                },
            },
        },
        "monitoring": {"labels": {"entity_column": "item_id", "outcome_column": "units"}},
    }


@dataclass(frozen=True)
class Sales:
    root: Path
    actuals: dict[dt.date, pl.DataFrame]
    """Per scored day: item_id and the generator's units."""
    metadata: dict
    holdout_forecasts: np.ndarray
    """The registered model's forecasts of the hold-out rows, from XGBoost itself."""

    def table(self, name: str) -> pl.DataFrame:
        with duckdb.connect(str(self.root / "data" / "warehouse.duckdb"), read_only=True) as con:
            return pl.from_arrow(con.sql(f"SELECT * FROM {name} WHERE job = ?", params=[JOB]).to_arrow_table())

    def forecasts(self, day: dt.date) -> pl.DataFrame:
        return day_output(self.root, "forecasts", day, job=JOB)


@pytest.fixture(scope="module")
def sales(tmp_path_factory: pytest.TempPathFactory) -> Sales:
    root = tmp_path_factory.mktemp("forecast-health")
    env = user_project_env(root)
    score = score_cli(root, env)
    frames = {day: day_rows(day, 500 + i, volatile=day == SHIFTED_DAY) for i, day in enumerate(DAYS)}
    pl.concat([frames[d] for d in HOLDOUT_DAYS]).write_parquet(root / "holdout.parquet")
    pl.concat([frames[d] for d in (*TRAIN_DAYS, *HOLDOUT_DAYS)]).write_parquet(root / "history.parquet")
    for day in SCORED_DAYS:
        raw = root / "data" / "raw" / JOB / f"date={day}"
        raw.mkdir(parents=True)
        frames[day].drop("units").write_parquet(raw / "part-0.parquet")
    (root / "jobs" / f"{JOB}.yaml").write_text(yaml.safe_dump(_spec(), sort_keys=False))
    (root / "expectations" / f"{JOB}.json").write_text(json.dumps(_suite()))

    score("features", JOB, "--from", str(root / "history.parquet"), "--out", str(root / "inputs.parquet"))
    inputs = pl.read_parquet(root / "inputs.parquet")
    held_out = pl.col("item_id").str.slice(3, 4).is_in([f"{d:%m%d}" for d in HOLDOUT_DAYS])
    train, holdout = inputs.filter(~held_out), inputs.filter(held_out)
    booster = xgb.train(
        {"objective": "count:poisson", "max_depth": 4, "eta": 0.1, "seed": 3, "nthread": 2},
        xgb.DMatrix(train.select(FEATURES).to_numpy(), label=train["outcome"].to_numpy(), feature_names=list(FEATURES)),
        num_boost_round=250,
    )
    booster.save_model(str(root / "sales.ubj"))
    registered = score("register", JOB, "--model", str(root / "sales.ubj"), "--holdout", str(root / "holdout.parquet"))
    assert "estimated error before actuals" in registered.stdout, registered.stdout
    score("backfill", JOB, "--start", str(SCORED_DAYS[0]), "--end", str(SCORED_DAYS[-1]))
    return Sales(
        root=root,
        actuals={day: frames[day].select("item_id", "units") for day in SCORED_DAYS},
        metadata=json.loads((root / "data" / "models" / JOB / "1" / "metadata.json").read_text()),
        holdout_forecasts=booster.predict(
            xgb.DMatrix(holdout.select(FEATURES).to_numpy(), feature_names=list(FEATURES))
        ),
    )


def _realized(sales: Sales, day: dt.date) -> tuple[float, float, pl.DataFrame]:
    forecasts = sales.forecasts(day).join(sales.actuals[day], left_on="entity_id", right_on="item_id", how="inner")
    error = forecasts["units"].to_numpy() - forecasts["forecast"].to_numpy()
    return float(np.abs(error).mean()), float(np.sqrt((error**2).mean())), forecasts


def _estimates(sales: Sales) -> dict[tuple[dt.date, str], dict]:
    rows = sales.table("model_health").filter(pl.col("section") == "estimated_error")
    return {(r["partition_date"], r["measure"]): r for r in rows.iter_rows(named=True)}


# --- estimated error -----------------------------------------------------------------------------


def test_the_estimated_error_interval_holds_the_realized_error_on_unshifted_days(sales: Sales) -> None:
    estimates = _estimates(sales)
    inside, lines = [], []
    for day in UNSHIFTED_DAYS:
        mae, rmse, _ = _realized(sales, day)
        for measure, realized in (("mae", mae), ("rmse", rmse)):
            row = estimates[(day, measure)]
            inside.append(row["low"] <= realized <= row["high"])
            lines.append(
                f"{day} {measure:4s} estimate {row['value']:.4f} [{row['low']:.4f}, {row['high']:.4f}] realized {realized:.4f} "
                f"{'inside' if inside[-1] else 'OUTSIDE'}"
            )
    print("\n".join(lines))
    print(f"realized inside the estimate's interval: {sum(inside)} of {len(inside)} partition x measure pairs")
    assert len(inside) == 2 * len(UNSHIFTED_DAYS) >= 2 * 10
    assert sum(inside) >= 0.9 * len(inside), lines


def test_a_covariate_shift_into_noisier_rows_is_flagged_and_no_unshifted_day_is(sales: Sales) -> None:
    estimates = _estimates(sales)
    mae, rmse, _ = _realized(sales, SHIFTED_DAY)
    check = sales.metadata["interval"]["check"]
    for measure, realized in (("mae", mae), ("rmse", rmse)):
        row = estimates[(SHIFTED_DAY, measure)]
        print(
            f"{SHIFTED_DAY} shifted {measure}: estimate {row['value']:.4f} [{row['low']:.4f}, {row['high']:.4f}] "
            f"realized {realized:.4f}, hold-out {row['reference']:.4f}, flag {row['flag']}"
        )
        assert row["reference"] == pytest.approx(check[measure])
        # The actuals confirm it: the model did err more than at registration, and the estimate rose above every unshifted day's.
        assert realized > check[measure] * 1.10
        assert row["value"] > max(estimates[(d, measure)]["high"] for d in UNSHIFTED_DAYS)
        assert row["flag"] in ("warn", "alert") and row["low"] > row["reference"]
    # The MAE is sure to have risen beyond the tolerance; the RMSE's interval, on over-dispersed counts, is wider.
    assert (
        estimates[(SHIFTED_DAY, "mae")]["flag"] == "alert"
        and estimates[(SHIFTED_DAY, "mae")]["low"] > check["mae"] * 1.10
    )
    assert {estimates[(d, m)]["flag"] for d in UNSHIFTED_DAYS for m in ("mae", "rmse")} == {"ok"}


def test_the_estimates_are_the_published_expected_errors_scaled_as_registered(sales: Sales) -> None:
    """The partition's row of each measure from the published `expected_error` column and the metadata alone."""
    interval = sales.metadata["interval"]
    fitted, floor, z = interval["estimated_error"], interval["sigma_floor"], norm.ppf(0.995)
    day = UNSHIFTED_DAYS[3]
    sigma = np.maximum(sales.forecasts(day)["expected_error"].to_numpy(), floor)
    n = sigma.size
    mae = fitted["mae_scale"] * sigma.mean()
    mae_half = z * math.sqrt(
        fitted["mae_dispersion"] * (sigma**2).sum() / n**2 + (fitted["mae_scale_se"] * sigma.mean()) ** 2
    )
    mse = fitted["mse_scale"] * (sigma**2).mean()
    mse_se = math.sqrt(
        fitted["mse_dispersion"] * (sigma**4).sum() / n**2 + (fitted["mse_scale_se"] * (sigma**2).mean()) ** 2
    )
    log_mse = norm(np.log(mse), mse_se / mse)
    estimates = _estimates(sales)
    for measure, expected in (
        ("mae", (mae, mae - mae_half, mae + mae_half)),
        ("rmse", (math.sqrt(mse), math.sqrt(np.exp(log_mse.ppf(0.005))), math.sqrt(np.exp(log_mse.ppf(0.995))))),
    ):
        row = estimates[(day, measure)]
        assert (row["value"], row["low"], row["high"]) == pytest.approx(expected, rel=1e-9)
        assert row["rows"] == n and row["delta"] == pytest.approx(expected[0] / interval["check"][measure] - 1)
    # Each day's flag: its low end against the hold-out's error, its noise (at the level) and the 10 % tolerance.
    for (day, measure), row in estimates.items():
        reference, noise = interval["check"][measure], z * fitted[f"check_{measure}_se"]
        expected = (
            "alert"
            if row["low"] > max(1.1 * reference, reference + noise)
            else "warn"
            if row["low"] > reference + noise
            else "ok"
        )
        assert row["flag"] == expected, (day, measure, row)


def test_the_registered_estimator_finds_the_scales_and_says_how_sure_it_is() -> None:
    """Errors N(0, 1.1 s) read by an error model that says s: |e| has mean 1.1 s sqrt(2/pi), e^2 mean 1.21 s^2. Over
    many calibration sets the scales scatter as much as their standard errors say."""
    rng = np.random.default_rng(5)
    fits = []
    for _ in range(300):
        sigma = rng.uniform(0.5, 3.0, 2000)
        fits.append(fitted_error_estimator(sigma * rng.normal(0.0, 1.1, sigma.size), sigma))
    for scale, truth in (("mae_scale", 1.1 * math.sqrt(2 / math.pi)), ("mse_scale", 1.21)):
        found = np.array([f[scale] for f in fits])
        assert found.mean() == pytest.approx(truth, rel=0.005)
        assert np.mean([f[f"{scale}_se"] for f in fits]) == pytest.approx(found.std(ddof=1), rel=0.12)


def test_simulated_partitions_fall_inside_their_interval_at_the_level() -> None:
    """The interval's honesty on many partitions, with the estimator fitted on its own calibration rows each time:
    at level 0.9 the realized MAE and RMSE of 400 partitions of 2000 rows fall inside about 90 % of the time."""
    rng = np.random.default_rng(11)
    inside = {"mae": 0, "rmse": 0}
    trials = 400
    for _ in range(trials):
        sigma = rng.gamma(3.0, 0.5, 3000)
        fitted = fitted_error_estimator(sigma * rng.standard_t(6, sigma.size), sigma)
        partition = rng.gamma(3.0, 0.5, 2000)
        errors = partition * rng.standard_t(6, partition.size)
        health = HealthAccumulator()
        health.add_expected_error(partition, floor=0.0)
        rows = {
            r["measure"]: r
            for r in estimated_error_rows(
                health, {"estimated_error": fitted, "check": {"mae": 1.0, "rmse": 1.0}}, level=0.9, tolerance=0.1
            )
        }
        for measure, realized in (("mae", np.abs(errors).mean()), ("rmse", np.sqrt((errors**2).mean()))):
            inside[measure] += rows[measure]["low"] <= realized <= rows[measure]["high"]
    print({m: v / trials for m, v in inside.items()})
    # Binomial(400, 0.9) lies within 0.9 ± 0.045 with probability above 99.8 %.
    for measure, hits in inside.items():
        assert abs(hits / trials - 0.9) <= 0.045, (measure, hits / trials)


def test_units_merged_add_up_to_the_whole() -> None:
    rng = np.random.default_rng(2)
    sigma = rng.gamma(2.0, 1.0, 10_000)
    whole, first, second = HealthAccumulator(), HealthAccumulator(), HealthAccumulator()
    whole.add_expected_error(sigma, floor=0.3)
    first.add_expected_error(sigma[:3_000], floor=0.3)
    second.add_expected_error(sigma[3_000:], floor=0.3)
    first.merge(second)
    floored = np.maximum(sigma, 0.3)
    expected = [sigma.size, floored.sum(), (floored**2).sum(), (floored**4).sum()]
    np.testing.assert_allclose(first.expected_error_sums, expected, rtol=1e-12)
    np.testing.assert_allclose(whole.expected_error_sums, expected, rtol=1e-12)


# --- forecast drift ------------------------------------------------------------------------------


def _psi(reference: np.ndarray, current: np.ndarray) -> float:
    r, c = np.maximum(reference / reference.sum(), 1e-4), np.maximum(current / current.sum(), 1e-4)
    return float(np.sum((c - r) * np.log(c / r)))


def test_forecast_drift_against_the_hold_out_forecasts_and_the_previous_day(sales: Sales) -> None:
    stored = sales.metadata["forecast_reference"]
    holdout = sales.holdout_forecasts.astype(np.float64)
    # The reference is the hold-out's forecasts (XGBoost's own), binned on their percentiles.
    np.testing.assert_allclose(
        stored["drift_edges"], np.unique(np.quantile(holdout, np.arange(1, 100) / 100)), rtol=1e-5
    )
    edges, psi_edges = np.asarray(stored["drift_edges"]), np.asarray(stored["psi_edges"])
    day, previous_day = UNSHIFTED_DAYS[-1], UNSHIFTED_DAYS[-2]
    report = sales.table("drift_report").filter((pl.col("partition_date") == day) & (pl.col("feature") == "forecast"))
    assert sorted(report["baseline"].to_list()) == ["previous", "reference"]

    def coarse(values: np.ndarray) -> np.ndarray:
        return np.bincount(np.searchsorted(psi_edges, values, side="right"), minlength=psi_edges.size + 1).astype(float)

    current = sales.forecasts(day)["forecast"].to_numpy()
    before = sales.forecasts(previous_day)["forecast"].to_numpy()
    # Reference counts are those of the drift bins: refold the stored fine counts into the PSI bins.
    fine_starts = np.concatenate([[-np.inf], edges])
    reference = np.bincount(
        np.searchsorted(psi_edges, fine_starts, side="right"),
        weights=np.asarray(stored["drift_counts"], float),
        minlength=psi_edges.size + 1,
    )
    rows = {r["baseline"]: r for r in report.iter_rows(named=True)}
    assert rows["reference"]["psi"] == pytest.approx(_psi(reference, coarse(current)), rel=1e-6)
    assert rows["previous"]["psi"] == pytest.approx(_psi(coarse(before), coarse(current)), rel=1e-6)
    assert rows["reference"]["rows"] == current.size
    print(
        f"forecast PSI on {day}: {rows['reference']['psi']:.4f} against the hold-out, {rows['previous']['psi']:.4f} against {previous_day}"
    )
    # Only the noise moved on the shifted day: the forecasts' distribution did not, nor did any input but volatility.
    shifted = sales.table("drift_report").filter(
        (pl.col("partition_date") == SHIFTED_DAY) & (pl.col("baseline") == "reference")
    )
    flags = dict(shifted.select("feature", "flag").iter_rows())
    assert flags["forecast"] == "ok" and flags["volatility"] == "alert", flags
    assert "score" not in set(sales.table("drift_report")["feature"].to_list())


# --- decision monitoring ---------------------------------------------------------------------------


def test_decision_monitoring_of_a_forecast_job_reads_its_forecasts(sales: Sales) -> None:
    day = UNSHIFTED_DAYS[-1]
    published = sales.forecasts(day)
    rows = sales.table("decision_monitoring").filter(pl.col("partition_date") == day)
    got = {(r["measure"], r["item"]): r for r in rows.iter_rows(named=True)}
    n = published.height
    assert got[("rows", "all")]["value"] == n
    for decision in ("add_stock", "cut_stock", "keep"):
        assert got[("decision_share", decision)]["value"] == pytest.approx(
            (published["decision"] == decision).sum() / n
        )
    low, high = published["forecast_low"].to_numpy(), published["forecast_high"].to_numpy()
    straddling = np.zeros(n, dtype=bool)
    for cut in CUTS:
        straddling |= (low < cut) & (high >= cut)
    assert got[("straddling_share", "all")]["value"] == pytest.approx(straddling.mean())
    forecast = published["forecast"].to_numpy()
    assert got[("forecast_mean", "all")]["value"] == pytest.approx(forecast.mean(), rel=1e-12)
    assert got[("forecast_total", "all")]["value"] == pytest.approx(forecast.sum(), rel=1e-12)
    window = sales.table("decision_monitoring").filter(
        (pl.col("partition_date") < day) & (pl.col("measure") == "forecast_mean")
    )
    baseline = window.filter(pl.col("partition_date") >= day - dt.timedelta(days=28))["value"].mean()
    assert got[("forecast_mean", "all")]["baseline"] == pytest.approx(baseline)
    assert got[("forecast_mean", "all")]["tolerance"] == pytest.approx(0.10 * baseline)
    assert got[("forecast_mean", "all")]["flag"] == "ok"
    measures = set(rows["measure"].to_list())
    assert not measures & {"score_mean", "score_p50", "expected_event_rate", "expected_events"}, measures


CUTOFFS = [2.0, 15.0]
INTERVALS = [
    (0.0, 1.9, False),
    (0.0, 2.0, True),
    (2.0, 6.0, False),
    (1.0, 20.0, True),
    (14.0, 15.0, True),
    (15.0, 40.0, False),
]


def _forecasts(day: dt.date) -> pa.Table:
    n = len(INTERVALS)
    return pa.table(
        {
            "run_id": ["run-1"] * n,
            "job": [JOB] * n,
            "partition_date": [day] * n,
            "entity_id": [f"E{i}" for i in range(n)],
            "forecast": [(lo + hi) / 2 for lo, hi, _ in INTERVALS],
            "forecast_low": [lo for lo, _, _ in INTERVALS],
            "forecast_high": [hi for _, hi, _ in INTERVALS],
            "expected_error": [1.0] * n,
            "decision": [f"d{i}" for i in range(n)],
            "rule_id": ["R"] * n,
            "reason_codes": [[]] * n,
            "reason_texts": [[]] * n,
            "raw_margin": [0.0] * n,
            "model_name": ["m"] * n,
            "model_version": ["1"] * n,
            "feature_version": ["f"] * n,
        },
        schema=FORECASTS.schema,
    )


def test_the_warehouse_counts_forecast_groups_as_the_run_does(any_warehouse: Warehouse, tmp_path: Path) -> None:
    day = dt.date(2026, 5, 20)
    path = tmp_path / "forecasts.parquet"
    pq.write_table(_forecasts(day), path)
    any_warehouse.replace_partition(job=JOB, partition_date=day, files={"forecasts": [path]})
    in_sql = pl.from_arrow(any_warehouse.forecast_groups(JOB, day, CUTOFFS, straddling=predict_straddling)).sort(
        "decision"
    )
    in_polars = prediction_groups(pl.from_arrow(_forecasts(day)), CUTOFFS).sort("decision")
    assert in_sql["straddling"].to_list() == in_polars["straddling"].to_list() == [s for _, _, s in INTERVALS]
    assert in_sql["forecast_sum"].to_list() == pytest.approx([(lo + hi) / 2 for lo, hi, _ in INTERVALS])
    assert in_sql.columns == in_polars.columns


# --- one pass, two halves, any chunking ------------------------------------------------------------


def test_a_forecast_unit_cut_in_two_or_chunked_finer_counts_what_its_one_pass_counts(
    sales: Sales, tmp_path: Path
) -> None:
    """The prediction half of a forecast unit (from its handoff files) counts the forecasts' drift and decision groups as
    the one pass does; the inference half's estimated-error sums add up to the same model-health rows whatever the chunking."""
    data = tmp_path / "data"
    for part in ("raw", "models"):
        shutil.copytree(sales.root / "data" / part, data / part)
    settings = Settings(data_dir=data, jobs_dir=sales.root / "jobs", expectations_dir=sales.root / "expectations")
    day = UNSHIFTED_DAYS[0]
    prepared = prepared_job(JOB, day, settings)
    dirs = output_dirs(settings, JOB)

    def units(run_id: str, chunk_rows: int, score) -> list:
        return [
            score(prepared, unit, run_id=run_id, chunk_rows=chunk_rows, partition_date=day, dirs=dirs)
            for unit in planned_work_units(prepared, run_id=run_id, chunk_rows=chunk_rows, dirs=dirs)
        ]

    whole = units("one-pass", ROWS, unit_pass.scored_unit)
    inferred = units("two-halves", 700, unit_pass.inferred_unit)
    predicted = [
        unit_pass.predicted_unit(prepared.prediction_plan, u, run_id="two-halves", partition_date=day, dirs=dirs)
        for u in inferred
    ]
    assert sum(len(u.chunk_ids) for u in inferred) > 1
    one = whole[0].prediction
    assert_frame_equal(
        merged_prediction_groups([g for u in predicted for g in u.decision_groups]).drop("run_id"),
        merged_prediction_groups(one.decision_groups).drop("run_id"),
        check_exact=False,
        rel_tol=1e-12,
    )
    counts = sum(u.drift.histograms["forecast"].counts for u in predicted)
    np.testing.assert_array_equal(counts, one.drift.histograms["forecast"].counts)
    assert counts.sum() == one.rows_scored

    def health_rows(inferences: list, predictions: list) -> dict:
        summary = scoring_summary(
            prepared, inferences, predictions, run_id="sums", partition_date=day, dirs=dirs, wall_s=0.0
        )
        return {r["measure"]: r for r in summary.model_health if r["section"] == "estimated_error"}

    in_one = health_rows([u.inference for u in whole], [u.prediction for u in whole])
    in_chunks = health_rows(inferred, predicted)
    for measure in ("mae", "rmse"):
        for column in ("value", "low", "high", "rows"):
            assert in_chunks[measure][column] == pytest.approx(in_one[measure][column], rel=1e-12)


def test_slices_of_a_forecast_job_are_named_as_not_monitored(sales: Sales, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    spec = _spec()
    spec["monitoring"]["slices"] = ["promo"]
    (jobs / f"{JOB}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    settings = Settings(data_dir=sales.root / "data", jobs_dir=jobs, expectations_dir=sales.root / "expectations")
    notes = validated_job(JOB, settings, partition_date=UNSHIFTED_DAYS[0], check_labels=False).notes
    assert any("monitoring.slices ['promo']" in note and "not monitored" in note for note in notes), notes
