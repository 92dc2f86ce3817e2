"""Model health before labels (tasks/monitoring/health.py, tasks/monitoring/slices.py): estimated
performance against the labels that land later, attribution drift, multivariate drift, slices.

The demo-based tests read the monitored demo (six dates of 2000 applications, the credit shift on the
last two; tests/monitoring_demo.py) and ingest its labels on a private copy; the others drive the same
accumulators on data built here, where the truth is known by construction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
from monitoring_demo import JOB, MonitoredDemo, copied_demo, monitored_demo
from polars.testing import assert_frame_equal
from scipy.stats import chi2_contingency, false_discovery_control, kendalltau, norm

from tasks.catalog import MODEL_HEALTH
from tasks.demo.credit_data import SHIFTED_FEATURES
from tasks.jobspec import load_job_spec
from tasks.monitoring.health import (
    HealthAccumulator,
    PcaReference,
    attribution_sample,
    attribution_share,
    binned_auc,
    fitted_health_reference,
    hanley_mcneil_se,
    kendall_tau_b,
    multivariate_rows,
)
from tasks.monitoring.outcomes import ingested_outcomes
from tasks.monitoring.slices import chunk_slice_counts, merged_slice_counts, slice_monitoring_rows, summed_slice_counts
from tasks.quality.drift import DriftAccumulator, Histogram, drift_report_rows, reference_statistics
from tasks.settings import Settings
from tasks.sinks.duckdb_warehouse import DuckDBWarehouse

pytestmark = pytest.mark.usefixtures("prefect_harness")

DRIFT_THRESHOLDS = {"psi_warn": 0.1, "psi_alert": 0.25, "ks_warn": 0.1, "ks_alert": 0.2}


@dataclass(frozen=True)
class HealthEnv:
    demo: MonitoredDemo
    data_dir: Path
    changed_dates: list[dt.date]

    @property
    def settings(self) -> Settings:
        return Settings(data_dir=self.data_dir)

    def table(self, name: str) -> pl.DataFrame:
        with duckdb.connect(str(self.settings.duckdb_path), read_only=True) as con:
            return pl.from_arrow(con.sql(f"SELECT * FROM {name} WHERE job = ?", params=[JOB]).to_arrow_table())


def _labels_path(data_dir: Path, day: dt.date) -> Path:
    return data_dir / "labels" / JOB / f"date={day.isoformat()}" / "labels.parquet"


@pytest.fixture(scope="module")
def env(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HealthEnv]:
    """The monitored demo's labels ingested, two unshifted dates' labels first redrawn from a changed
    risk function: each application defaults with p + 0.15·(1 − p) instead of p, its inputs unchanged."""
    demo = monitored_demo(tmp_path_factory)
    data_dir = copied_demo(demo, tmp_path_factory.mktemp("health") / "data")
    unshifted = [d for d in demo.dates if d not in demo.shifted_dates]
    changed = unshifted[1:3]
    for i, day in enumerate(changed):
        path = _labels_path(data_dir, day)
        labels = pl.read_parquet(path)
        extra = np.random.default_rng(100 + i).random(labels.height) < 0.15
        labels.with_columns(
            pl.max_horizontal(pl.col("defaulted"), pl.Series(extra.astype(np.int8))).cast(pl.Int8).alias("defaulted")
        ).write_parquet(path)
    settings = Settings(data_dir=data_dir)
    spec = load_job_spec(JOB, settings)
    warehouse = DuckDBWarehouse(settings.duckdb_path)
    for day in demo.dates:
        ingested_outcomes(
            warehouse, spec, labels_dir=settings.labels_partition_dir(JOB, day.isoformat()), partition_date=day
        )
    yield HealthEnv(demo=demo, data_dir=data_dir, changed_dates=changed)


# --- estimated performance against what the labels say ------------------------------------------


def test_realized_performance_falls_inside_the_estimates_on_unchanged_days(env: HealthEnv) -> None:
    estimates = env.table("outcome_estimates")
    healthy = estimates.filter(~pl.col("partition_date").is_in(env.changed_dates) & pl.col("outside").is_not_null())
    measures = set(healthy["measure"].unique().to_list())
    assert {"event_rate", "event_rate_by_decision", "event_rate_by_rule", "precision", "recall", "auc"} <= measures
    inside = 1.0 - healthy["outside"].mean()
    assert healthy.height >= 4 * 12
    assert inside >= 0.90, healthy.filter(pl.col("outside")).to_dicts()


def test_a_changed_risk_function_flags_exactly_its_partitions(env: HealthEnv) -> None:
    flags = dict(
        env.table("outcome_estimates").group_by("partition_date").agg(pl.col("partition_flag").first()).iter_rows()
    )
    assert set(flags) == set(env.demo.dates)
    # The shifted dates moved their inputs, not the relation between inputs and outcome: not flagged.
    assert {d for d, flagged in flags.items() if flagged} == set(env.changed_dates)


def test_the_estimates_match_an_independent_computation_on_the_published_predictions(env: HealthEnv) -> None:
    day = env.demo.dates[0]
    health = env.table(MODEL_HEALTH.table).filter(pl.col("partition_date") == day)
    estimated = {
        (r["measure"], r["item"]): r
        for r in health.filter(pl.col("section") == "estimated_performance").iter_rows(named=True)
    }
    predictions = env.table("predictions").filter(pl.col("partition_date") == day)
    p, low, high = (predictions[c].to_numpy() for c in ("probability", "probability_low", "probability_high"))
    z = norm.ppf(0.995)
    for decision in predictions["decision"].unique().to_list():
        chosen = (predictions["decision"] == decision).to_numpy()
        row = estimated[("event_rate_by_decision", decision)]
        noise = z * np.sqrt((p[chosen] * (1 - p[chosen])).sum()) / chosen.sum()
        assert row["rows"] == chosen.sum()
        assert row["value"] == pytest.approx(p[chosen].mean(), rel=1e-9)
        assert row["low"] == pytest.approx(max(0.0, low[chosen].mean() - noise), rel=1e-9)
        assert row["high"] == pytest.approx(min(1.0, high[chosen].mean() + noise), rel=1e-9)
    adverse = np.isin(predictions["decision"].to_numpy(), ["decline", "manual_review"])
    assert estimated[("recall", "any action")]["value"] == pytest.approx(p[adverse].sum() / p.sum(), rel=1e-9)
    # The expected AUC over every pair, exactly: P(a random event outranks a random non-event) under p.
    order = np.argsort(p)
    ps, qs = p[order], 1 - p[order]
    below = np.concatenate(([0.0], np.cumsum(qs)[:-1]))
    exact = float((ps * below).sum() / (ps.sum() * qs.sum()))
    assert estimated[("auc", "all")]["value"] == pytest.approx(exact, abs=2e-3)
    # Realized values in outcome_estimates, from the labels file joined by hand.
    labels = pl.read_parquet(_labels_path(env.data_dir, day)).select("entity_id", pl.col("defaulted").alias("y"))
    joined = predictions.join(labels, on="entity_id")
    realized = {
        (r["measure"], r["item"]): r
        for r in env.table("outcome_estimates").filter(pl.col("partition_date") == day).iter_rows(named=True)
    }
    y, pj = joined["y"].to_numpy().astype(float), joined["probability"].to_numpy()
    assert realized[("event_rate", "all")]["realized"] == pytest.approx(y.mean())
    from scipy.stats import mannwhitneyu

    u = mannwhitneyu(pj[y == 1], pj[y == 0]).statistic
    assert realized[("auc", "all")]["realized"] == pytest.approx(u / ((y == 1).sum() * (y == 0).sum()))
    declined = (joined["decision"] == "decline").to_numpy()
    assert realized[("precision", "decline")]["realized"] == pytest.approx(
        y[declined].mean() if declined.any() else np.nan, nan_ok=True
    )


def test_binned_auc_and_its_error_against_scipy() -> None:
    rng = np.random.default_rng(3)
    positives, negatives = rng.normal(1.0, 1.0, 400), rng.normal(0.0, 1.0, 600)
    edges = np.linspace(-5, 6, 2001)
    events, non_events = (
        np.histogram(positives, edges)[0].astype(float),
        np.histogram(negatives, edges)[0].astype(float),
    )
    from scipy.stats import mannwhitneyu

    exact = mannwhitneyu(positives, negatives).statistic / (400 * 600)
    assert binned_auc(events, non_events) == pytest.approx(exact, abs=1e-3)
    # Hanley-McNeil's standard error against the spread of the AUC over resampled draws.
    draws = [mannwhitneyu(rng.normal(1.0, 1.0, 400), rng.normal(0.0, 1.0, 600)).statistic / 240000 for _ in range(300)]
    assert hanley_mcneil_se(exact, 400, 600) == pytest.approx(np.std(draws), rel=0.2)


# --- attribution drift -------------------------------------------------------------------------


def test_attribution_drift_flags_the_shifted_features_and_no_other(env: HealthEnv) -> None:
    rows = env.table(MODEL_HEALTH.table).filter(pl.col("section") == "attribution")
    flagged = rows.filter(pl.col("flag").is_in(["warn", "alert"]))
    by_date = {d: set(flagged.filter(pl.col("partition_date") == d)["item"].to_list()) for d in env.demo.dates}
    for day, features in by_date.items():
        if day in env.demo.shifted_dates:
            assert features == set(SHIFTED_FEATURES), (day, features)
        else:
            assert features == set(), (day, features)
    tau = rows.filter(pl.col("measure") == "rank_agreement")
    assert tau.height == len(env.demo.dates)


def test_kendall_tau_b_matches_scipy_with_ties() -> None:
    rng = np.random.default_rng(5)
    for _ in range(20):
        x, y = rng.integers(0, 6, 15).astype(float), rng.integers(0, 6, 15).astype(float)
        assert kendall_tau_b(x, y) == pytest.approx(kendalltau(x, y).statistic)


def test_the_attribution_sample_is_spread_fixed_and_sized() -> None:
    first = attribution_sample(0, 100_000, 0.05)
    assert first.size == pytest.approx(5000, rel=0.05)
    assert np.array_equal(first, attribution_sample(0, 100_000, 0.05))
    # A chunk's choice depends on the rows' global positions only: two halves make the whole.
    halves = np.concatenate([attribution_sample(0, 50_000, 0.05), 50_000 + attribution_sample(50_000, 50_000, 0.05)])
    assert np.array_equal(first, halves)
    assert np.abs(np.diff(np.histogram(first, bins=10)[0])).max() < 100
    assert attribution_sample(0, 10, 1.0).tolist() == list(range(10)) and attribution_sample(0, 10, 0.0).size == 0
    # A partition under `min_rows` is explained whole; a large one at the configured share; 0 stays off.
    assert attribution_share(0.01, 10_000, 2_000) == 1.0
    assert attribution_share(0.01, 10_000, 10_000_000) == 0.01 and attribution_share(0.0, 10_000, 2_000) == 0.0


# --- multivariate drift ------------------------------------------------------------------------


def _correlated(rng: np.random.Generator, n: int, *, broken: bool) -> np.ndarray:
    """Six inputs: two pairs correlated at 0.9, two independent; `broken` shuffles one partner of the
    first pair, which leaves every marginal exactly as it was and the correlation at zero."""
    base = rng.normal(size=(n, 4))
    x = np.column_stack(
        [
            base[:, 0],
            0.9 * base[:, 0] + np.sqrt(1 - 0.81) * rng.normal(size=n),
            3 + 2 * base[:, 1],
            3 + 2 * (0.9 * base[:, 1] + np.sqrt(1 - 0.81) * rng.normal(size=n)),
            rng.exponential(1.0, n),
            base[:, 3],
        ]
    )
    if broken:
        x[:, 1] = rng.permutation(x[:, 1])
    return x


def test_a_broken_correlation_alerts_the_multivariate_measure_and_no_univariate_one() -> None:
    rng = np.random.default_rng(11)
    names = tuple(f"x{i}" for i in range(6))
    reference = _correlated(rng, 20_000, broken=False)
    pca = fitted_health_reference(reference, names)["pca"]
    stats = reference_statistics(reference.astype(np.float32), names)
    baselines = {"reference": {n: Histogram.of_reference(s) for n, s in stats.items()}}
    for broken in (False, True):
        current = _correlated(rng, 20_000, broken=broken)
        health, drift = (
            HealthAccumulator(features=names),
            DriftAccumulator(
                edges={n: h.edges for n, h in baselines["reference"].items()},
                psi_edges={n: h.psi_edges for n, h in baselines["reference"].items()},
            ),
        )
        for chunk in np.array_split(current, 7):
            health.add_inputs(chunk, PcaReference.of(pca))
            drift.add_matrix(names, chunk)
        psi = {r["feature"]: r["psi"] for r in drift_report_rows(drift, baselines, DRIFT_THRESHOLDS)}
        assert max(psi.values()) < DRIFT_THRESHOLDS["psi_warn"], psi
        row = multivariate_rows(health, pca, tolerance=0.10)[0]
        # The same mean, computed once on the whole matrix by hand.
        z = (current - np.asarray(pca["mean"])) / np.asarray(pca["scale"])
        components = np.asarray(pca["components"])
        residual = z - z @ components.T @ components
        # float32 inputs, as the model's: the mean over 20 000 rows agrees to ~1e-6. Each row counts at most the cap.
        errors = (residual**2).sum(axis=1)
        assert row["value"] == pytest.approx(np.minimum(errors, pca["error_cap"]).mean(), rel=1e-5)
        assert row["flag"] == ("alert" if broken else "ok"), row


# --- slices ------------------------------------------------------------------------------------

DECISIONS = ("decline", "manual_review", "approve")


def _slice_day(rng: np.random.Generator, n: int, *, shifted_value: str | None = None) -> pl.DataFrame:
    """One partition's slice counts: four regions × three channels; in `shifted_value`'s rows the risk is higher."""
    region = rng.choice(["north", "south", "east", "west"], n, p=[0.4, 0.3, 0.2, 0.1])
    channel = rng.choice(["web", "branch", "phone"], n)
    logit = rng.normal(-2.2, 0.8, n) + (0.8 * (region == shifted_value) if shifted_value else 0.0)
    p = 1 / (1 + np.exp(-logit))
    rule = np.where(p >= 0.25, 0, np.where(p >= 0.12, 1, 2)).astype(np.int16)
    score = np.clip(np.round(50 + 10 * np.log2(p / (1 - p) / (0.1 / 0.9))), 0, 100)
    slices = pl.DataFrame({"region": region, "channel": channel})
    decisions = np.array(DECISIONS, dtype=object)
    chunks = [
        chunk_slice_counts(slices[i : i + 5000], p[i : i + 5000], rule[i : i + 5000], decisions, score[i : i + 5000])
        for i in range(0, n, 5000)
    ]
    return merged_slice_counts(chunks, max_values=50)


def _window(rng: np.random.Generator, days: int, n: int) -> pl.DataFrame:
    return merged_slice_counts([_slice_day(rng, n) for _ in range(days)], max_values=50)


def test_a_shift_confined_to_one_slice_value_is_found_after_fdr_control() -> None:
    rng = np.random.default_rng(21)
    rows = slice_monitoring_rows(
        _slice_day(rng, 20_000, shifted_value="west"), _window(rng, 5, 20_000), decisions=DECISIONS, fdr=0.05
    )
    shifted = {(r["slice_column"], r["slice_value"]) for r in rows if r["flag"] == "shift"}
    assert ("region", "west") in shifted
    # The other regions are untouched; a channel holds a tenth of west's rows and may move with them.
    assert {value for column, value in shifted if column == "region"} == {"west"}
    west = {r["measure"]: r for r in rows if r["slice_value"] == "west"}
    assert (
        west["expected_event_rate"]["flag"] == "shift"
        and west["expected_event_rate"]["value"] > west["expected_event_rate"]["baseline"]
    )


def test_unshifted_slices_raise_no_more_false_flags_than_the_configured_rate() -> None:
    flagged_seeds, p_values = 0, []
    for seed in range(20):
        rng = np.random.default_rng(1000 + seed)
        rows = slice_monitoring_rows(_slice_day(rng, 20_000), _window(rng, 5, 20_000), decisions=DECISIONS, fdr=0.05)
        flagged_seeds += any(r["flag"] == "shift" for r in rows)
        p_values += [r["p_value"] for r in rows]
    # Every day here is null, so Benjamini-Hochberg bounds the chance that a day has any flag by the
    # FDR: one seed in 20 is expected; 4 or more would happen by chance once in 60 (binomial, 5 %).
    assert flagged_seeds <= 3, flagged_seeds
    # And the tests under it hold their level: about 5 % of the 420 p-values fall below 0.05.
    assert 0.02 <= np.mean(np.asarray(p_values) < 0.05) <= 0.08


def test_slice_p_values_and_q_values_match_scipy() -> None:
    rng = np.random.default_rng(8)
    current, baseline = _slice_day(rng, 6000, shifted_value="east"), _window(rng, 3, 6000)
    rows = slice_monitoring_rows(current, baseline, decisions=DECISIONS, fdr=0.05)
    for r in (r for r in rows if r["measure"] == "decision_mix"):
        pick = (pl.col("slice_column") == r["slice_column"]) & (pl.col("slice_value") == r["slice_value"])
        a = current.filter(pick).group_by("decision").agg(pl.col("rows").sum())
        b = baseline.filter(pick).group_by("decision").agg(pl.col("rows").sum())
        table = (
            a.join(b, on="decision", how="full", coalesce=True).fill_null(0).select("rows", "rows_right").to_numpy().T
        )
        table = table[:, table.sum(axis=0) > 0]
        assert r["p_value"] == pytest.approx(chi2_contingency(table, correction=False).pvalue, rel=1e-9)
    p_values = np.array([r["p_value"] for r in rows])
    assert np.allclose([r["q_value"] for r in rows], false_discovery_control(p_values, method="bh"))


def test_the_demo_stores_slice_tests_once_the_window_has_partitions(env: HealthEnv) -> None:
    slices = env.table("slice_monitoring")
    counts = env.table("slice_counts")
    first = env.demo.dates[0]
    assert set(slices["slice_column"].unique().to_list()) == {"home_ownership", "loan_purpose"}
    assert set(slices.filter(pl.col("partition_date") == first)["flag"].unique().to_list()) == {"no_baseline"}
    later = slices.filter(pl.col("partition_date") > first)
    assert later["q_value"].is_not_null().all()
    # The counts add up to the partition's published predictions, per slice column.
    predictions = env.table("predictions")
    for day in env.demo.dates:
        per_column = counts.filter(pl.col("partition_date") == day).group_by("slice_column").agg(pl.col("rows").sum())
        assert set(per_column["rows"].to_list()) == {predictions.filter(pl.col("partition_date") == day).height}


def test_attribution_and_reconstruction_error_match_xgboost_and_numpy_on_the_model_inputs(env: HealthEnv) -> None:
    """The demo's partitions are under `attribution_min_rows`, so every scored row was explained: the
    means must equal XGBoost's own contributions over the published rows' model inputs."""
    import json

    import xgboost as xgb

    from tasks.jobs.registration import job_model_inputs

    day = env.demo.dates[-1]
    version = env.demo.versions[day]
    registry = env.settings.model_registry_dir(JOB) / version
    metadata = json.loads((registry / "metadata.json").read_text())
    published = env.table("predictions").filter(pl.col("partition_date") == day)["entity_id"]
    inputs = job_model_inputs(
        JOB, env.settings.raw_partition_dir(JOB, day.isoformat()), settings=env.settings, labelled=False
    )
    keep = inputs.entity_ids.cast(pl.String).is_in(published.implode()).to_numpy()
    x = inputs.matrix[keep]
    assert x.shape[0] == published.len()
    booster = xgb.Booster(model_file=str(registry / metadata["model_file"]))
    contributions = booster.predict(xgb.DMatrix(x, feature_names=list(inputs.names)), pred_contribs=True)[:, :-1]
    health = env.table(MODEL_HEALTH.table).filter(pl.col("partition_date") == day)
    mean_abs = {
        r["item"]: r["value"] for r in health.filter(pl.col("measure") == "mean_abs_contribution").iter_rows(named=True)
    }
    mean = {
        r["item"]: r["value"] for r in health.filter(pl.col("measure") == "mean_contribution").iter_rows(named=True)
    }
    for j, name in enumerate(inputs.names):
        assert mean_abs[name] == pytest.approx(np.abs(contributions[:, j]).mean(), rel=1e-4, abs=1e-6), name
        assert mean[name] == pytest.approx(contributions[:, j].mean(), rel=1e-4, abs=1e-5), name
    pca = metadata["health"]["pca"]
    z = (x.astype(np.float64) - np.asarray(pca["mean"])) / np.asarray(pca["scale"])
    z = np.where(np.isfinite(z), z, 0.0)
    components = np.asarray(pca["components"])
    residual = z - z @ components.T @ components
    error = health.filter(pl.col("measure") == "reconstruction_error")
    errors = (residual**2).sum(axis=1)
    assert error["value"][0] == pytest.approx(np.minimum(errors, pca["error_cap"]).mean(), rel=1e-5)
    beyond = health.filter(pl.col("measure") == "beyond_cap_share")["value"][0]
    assert beyond == pytest.approx((errors > pca["error_cap"]).mean(), abs=1.5 / errors.size)
    assert error["flag"][0] == "alert"


def test_slice_counts_folded_as_they_come_equal_those_merged_at_the_end() -> None:
    rng = np.random.default_rng(4)
    n = 40_000
    values = pl.DataFrame({"shop": rng.integers(0, 3000, n).astype(str)})
    p = rng.random(n)
    rule = rng.integers(0, 3, n).astype(np.int16)
    score = rng.integers(0, 101, n)
    decisions = np.array(DECISIONS, dtype=object)
    parts = [
        chunk_slice_counts(values[i : i + 1000], p[i : i + 1000], rule[i : i + 1000], decisions, score[i : i + 1000])
        for i in range(0, n, 1000)
    ]
    folded: list[pl.DataFrame] = []
    for part in parts:
        folded.append(part)
        if len(folded) >= 4:
            folded = [summed_slice_counts(folded)]
    once = merged_slice_counts(parts, max_values=100)
    # Sums added in another order: equal to the last bits of a float.
    assert_frame_equal(merged_slice_counts(folded, max_values=100), once, check_exact=False, rel_tol=1e-12)
    # 100 shops kept by their rows, the other 2900 pooled; every row counted once.
    assert once["slice_value"].n_unique() == 101 and once["rows"].sum() == n
    assert summed_slice_counts(folded).height < sum(part.height for part in parts)


def test_the_auc_interval_carries_the_hold_out_error_of_an_under_dispersed_calibrator() -> None:
    """Probabilities that keep half the risk's spread rank the rows right but read the AUC low: the
    hold-out at registration measures that error, and the partition's interval makes room for it."""
    from tasks.monitoring.health import estimated_performance_rows, holdout_auc_check
    from tasks.monitoring.measures import exact_auc

    rng = np.random.default_rng(12)

    def sample(n: int) -> tuple[np.ndarray, np.ndarray]:
        logit = rng.normal(-1.5, 1.4, n)
        outcome = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(float)
        return 1 / (1 + np.exp(-(-1.5 + 0.5 * (logit + 1.5)))), outcome

    check = holdout_auc_check(*sample(3000))
    assert check["realized"] - check["expected"] > 0.03
    p, outcome = sample(20_000)
    health = HealthAccumulator(rule_ids=("ALL",), rule_decisions=("approve",))
    health.add_decided(p, p, p, np.zeros(p.size, dtype=np.int16))
    realized = exact_auc(outcome, p)

    def auc_row(holdout: dict | None) -> dict:
        rows = estimated_performance_rows(
            health, decisions=["approve"], rule_ids=["ALL"], actions=[], level=0.99, holdout_auc=holdout
        )
        return next(r for r in rows if r["measure"] == "auc")

    bare, widened = auc_row(None), auc_row(check)
    assert not bare["low"] <= realized <= bare["high"], (bare, realized)
    assert widened["low"] <= realized <= widened["high"], (widened, realized)
