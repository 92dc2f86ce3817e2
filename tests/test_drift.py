"""Drift report: streaming histograms agree with direct computation; the demo's shift is found exactly."""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl
import pytest
from conftest import DEMO_JOB, DemoEnv
from scipy.stats import ks_2samp

from tasks.demo.credit_data import SHIFTED_FEATURES
from tasks.features import feature_kinds, load_feature_module
from tasks.guards import guarded_chunk
from tasks.jobspec import load_job_spec
from tasks.quality.drift import KS_BOUND_SHOWN_WITHIN, DriftAccumulator, Histogram, drift_bin_counts, drift_metrics
from tasks.scoring.prepared import prepared_job
from tasks.settings import Settings


def test_chunked_accumulation_equals_one_pass_and_identical_data_has_no_drift() -> None:
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.normal(size=10_000), [np.nan] * 50])
    edges = np.quantile(values[~np.isnan(values)], np.arange(1, 100) / 100)
    chunked = DriftAccumulator(edges={"x": edges})
    for part in np.array_split(values, 7):
        chunked.add("x", part)
    whole, nulls = drift_bin_counts(values, edges)
    assert chunked.histograms["x"].counts.tolist() == whole.tolist() and chunked.histograms["x"].nulls == nulls == 50
    same = drift_metrics(chunked.histograms["x"], Histogram(edges=edges, counts=whole.copy(), nulls=nulls))
    assert same["psi"] == 0 and same["ks"] == 0 and same["js"] == pytest.approx(0, abs=1e-12)
    moved = DriftAccumulator(edges={"x": edges})
    moved.add("x", values + 0.5)
    shifted = drift_metrics(chunked.histograms["x"], moved.histograms["x"])
    assert shifted["psi"] > 0.25 and 0.15 < shifted["ks"] <= shifted["ks_upper"]
    assert shifted["wasserstein"] == pytest.approx(0.5, abs=0.05)


def test_merging_histograms_on_different_edges_is_refused() -> None:
    a, b = DriftAccumulator(edges={"x": np.array([0.0, 1.0])}), DriftAccumulator(edges={"x": np.array([0.0, 2.0])})
    with pytest.raises(ValueError, match="different bin edges"):
        a.merge(b)


@pytest.fixture(scope="module")
def drift_runs(demo_env: DemoEnv, tmp_path_factory: pytest.TempPathFactory, prefect_harness: None):
    """All demo dates scored in order into a fresh copy, so each has a previous partition."""
    import shutil

    from flows.people import backfill

    data = tmp_path_factory.mktemp("drift-data")
    for part in ("raw", "labels", "models"):
        shutil.copytree(demo_env.data_dir / part, data / part)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SCORING_DATA_DIR", str(data))
        settings = Settings(data_dir=data)
        backfill(DEMO_JOB, demo_env.plan.scoring_dates[0], demo_env.plan.scoring_dates[-1])
        with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
            report = pl.from_arrow(con.sql("SELECT * FROM drift_report").to_arrow_table())
        yield settings, report


@pytest.mark.usefixtures("prefect_harness")
def test_exactly_the_shifted_features_are_flagged_on_the_shifted_days(demo_env: DemoEnv, drift_runs) -> None:
    _, report = drift_runs
    spec = load_job_spec(DEMO_JOB, Settings())
    vs_reference = report.filter(pl.col("baseline") == "reference")
    n_shifted = 2
    for i, day in enumerate(demo_env.plan.scoring_dates):
        rows = vs_reference.filter(pl.col("partition_date") == day)
        assert rows.height == len(load_feature_module(spec.feature_module).FEATURES)
        flagged = set(rows.filter(pl.col("flag") != "ok")["feature"])
        shifted = i >= len(demo_env.plan.scoring_dates) - n_shifted
        assert flagged == (set(SHIFTED_FEATURES) if shifted else set()), (day, rows.sort("psi").tail(4).to_dicts())


@pytest.mark.usefixtures("prefect_harness")
def test_streamed_psi_is_exact_and_ks_is_within_its_bound(demo_env: DemoEnv, drift_runs) -> None:
    settings, report = drift_runs
    previous_day, day = demo_env.plan.scoring_dates[-2], demo_env.plan.scoring_dates[-1]
    prepared = prepared_job(DEMO_JOB, day, settings)
    reference = prepared.drift_baselines["reference"]

    def matrix_of(d):
        raw = pl.read_parquet(settings.raw_partition_dir(DEMO_JOB, d.isoformat()) / "*.parquet")
        scorable = guarded_chunk(raw, prepared.suite, entity_column="entity_id").scorable
        return prepared.features.feature_matrix(scorable).astype(np.float64)

    current, before = matrix_of(day), matrix_of(previous_day)
    kinds = feature_kinds(prepared.features)
    assert {name: reference[name].kind for name in prepared.features.FEATURES} == kinds
    for j, name in enumerate(prepared.features.FEATURES):
        ref = reference[name]
        if kinds[name] == "numeric":
            counts, _ = drift_bin_counts(current[:, j], ref.psi_edges)
        else:
            # One bin per training category, then everything else: counted here without the binning code.
            present = current[~np.isnan(current[:, j]), j]
            counts = np.array([np.sum(present == v) for v in ref.edges] + [np.sum(~np.isin(present, ref.edges))])
        ref_counts = ref.psi_counts()
        r = np.maximum(ref_counts / ref_counts.sum(), 1e-4)
        c = np.maximum(counts / counts.sum(), 1e-4)
        direct_psi = float(np.sum((c - r) * np.log(c / r)))
        row = report.filter(
            (pl.col("partition_date") == day) & (pl.col("feature") == name) & (pl.col("baseline") == "reference")
        )
        assert row["psi"].item() == pytest.approx(direct_psi, rel=1e-12, abs=1e-12), name
        # Against the previous partition both samples exist in full: scipy's exact KS must lie in the bound.
        prev_row = report.filter(
            (pl.col("partition_date") == day) & (pl.col("feature") == name) & (pl.col("baseline") == "previous")
        )
        if kinds[name] == "categorical":
            assert prev_row["ks"].item() is None and prev_row["ks_upper"].item() is None, name
            continue
        a, b = before[:, j], current[:, j]
        exact = ks_2samp(a[~np.isnan(a)], b[~np.isnan(b)]).statistic
        ks, upper = prev_row["ks"].item(), prev_row["ks_upper"].item()
        assert ks - 1e-12 <= exact, (name, exact, prev_row.to_dicts())
        # The bound is reported only where it is tight; where it is, the exact statistic lies within it.
        assert upper is None or (exact <= upper + 1e-12 and upper - ks <= KS_BOUND_SHOWN_WITHIN), (
            name,
            exact,
            prev_row.to_dicts(),
        )


@pytest.mark.parametrize("seed", range(5))
def test_numeric_bin_counts_equal_a_binary_search_of_every_value(seed: int) -> None:
    """The counted bins are where np.searchsorted(side="right") puts each present value: values on
    an edge go up, ±inf to the ends, NaN only into the missing count; edges may repeat."""
    rng = np.random.default_rng(seed)
    edges = np.sort(rng.choice(np.round(rng.normal(size=12), 1), size=10))
    values = np.concatenate([rng.normal(size=2000), edges, rng.choice(edges, 50), [np.inf, -np.inf, np.nan, np.nan]])
    present = values[~np.isnan(values)]
    expected = np.bincount(np.searchsorted(edges, present, side="right"), minlength=len(edges) + 1)
    counts, nulls = drift_bin_counts(values, edges)
    assert counts.tolist() == expected.tolist() and nulls == 2
    assert drift_bin_counts(values, np.array([]))[0].tolist() == [present.size]


@pytest.mark.parametrize("seed", range(5))
def test_drift_measures_equal_scipys_on_a_shared_support(seed: int) -> None:
    """The run computes JS and Wasserstein-1 in closed form on the histograms' support; scipy's
    general functions give the same numbers."""
    from scipy.spatial.distance import jensenshannon
    from scipy.stats import wasserstein_distance

    from tasks.quality.drift import _jensen_shannon_bits, _wasserstein_on_support

    rng = np.random.default_rng(seed)
    support = np.sort(rng.normal(size=12))
    u, v = rng.integers(0, 50, 12) + 1e-12, rng.integers(0, 50, 12) + 1e-12
    assert _jensen_shannon_bits(u, v) == pytest.approx(jensenshannon(u, v, base=2) ** 2, rel=1e-12, abs=1e-15)
    assert _wasserstein_on_support(support, u, v) == pytest.approx(
        wasserstein_distance(support, support, u_weights=u, v_weights=v), rel=1e-12, abs=1e-15
    )
