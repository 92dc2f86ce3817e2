"""Calibrated class probabilities mean what they say on later rows the calibration never saw.

Tiny XGBoost (multi:softprob, `output_margin=True`) and LightGBM (`raw_score=True`) models are trained
here on make_classification data; the calibration is fitted on a hold-out and judged on later independent
draws of the same process, against sklearn's log loss, scipy's Beta quantiles and a numpy recomputation
of the calibration error.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats
from sklearn.datasets import make_classification
from sklearn.metrics import log_loss

from tasks.prediction.multiclass import (
    ClassProbabilityMap,
    predict_classwise_reliability,
    predict_fitted_multiclass_calibrator,
    predict_multiclass_calibrator_from_metadata,
)

xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")

CLASSES = ("billing", "network", "hardware", "other")
K = len(CLASSES)
TRAIN = slice(0, 4000)
HOLDOUT = slice(4000, 4800)
LARGE_HOLDOUT = slice(4000, 24000)
LATER = slice(24000, 44000)
LEVEL = 0.9


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return make_classification(
        n_samples=44_000,
        n_features=10,
        n_informative=7,
        n_redundant=1,
        n_classes=K,
        n_clusters_per_class=2,
        weights=[0.35, 0.3, 0.2, 0.15],
        class_sep=1.0,
        random_state=35,
    )


@pytest.fixture(scope="module")
def margins_of(data):
    """Margins of the hold-out, large hold-out and later rows, by model."""
    x, y = data
    models = {
        "xgboost": xgb.XGBClassifier(
            n_estimators=40, max_depth=4, learning_rate=0.15, objective="multi:softprob", n_jobs=1
        ),
        "lightgbm": lgb.LGBMClassifier(n_estimators=40, num_leaves=15, learning_rate=0.1, n_jobs=1, verbose=-1),
        # Deep trees, a high learning rate and many rounds on 4,000 rows: confidently wrong on later rows.
        "overconfident": xgb.XGBClassifier(
            n_estimators=150, max_depth=8, learning_rate=0.4, objective="multi:softprob", n_jobs=1
        ),
    }
    out = {}
    for name, model in models.items():
        model.fit(x[TRAIN], y[TRAIN])
        if name == "lightgbm":
            out[name] = np.asarray(model.predict(x[: LATER.stop], raw_score=True), dtype=np.float64)
        else:
            out[name] = np.asarray(model.predict(x[: LATER.stop], output_margin=True), dtype=np.float64)
    return out


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def ece_by_numpy(prob: np.ndarray, hit: np.ndarray, bins: int = 10) -> float:
    """Equal-width-bin ECE, recomputed with np.digitize."""
    index = np.clip(np.digitize(prob, np.linspace(0, 1, bins + 1)[1:-1]), 0, bins - 1)
    total = 0.0
    for b in range(bins):
        rows = index == b
        if rows.any():
            total += rows.mean() * abs(prob[rows].mean() - hit[rows].mean())
    return total


def fitted(margins: np.ndarray, y: np.ndarray, rows: slice):
    return predict_fitted_multiclass_calibrator(margins[rows], y[rows], classes=CLASSES)


@pytest.mark.parametrize("model", ["xgboost", "lightgbm"])
def test_classwise_ece_on_later_rows_is_at_most_two_points(data, margins_of, model: str) -> None:
    _, y = data
    margins = margins_of[model]
    assert np.bincount(y[HOLDOUT], minlength=K).min() >= 100
    calibrator = fitted(margins, y, HOLDOUT)
    out = ClassProbabilityMap(calibrator, LEVEL).predict_class_probabilities(margins[LATER])
    report = predict_classwise_reliability(out.probabilities, y[LATER], classes=CLASSES)
    by_numpy = [ece_by_numpy(out.probabilities[:, c], (y[LATER] == c).astype(float)) for c in range(K)]
    assert report["classwise_ece"] == pytest.approx(np.mean(by_numpy), abs=1e-12)
    assert report["classwise_ece"] <= 0.02, report
    assert np.allclose(out.probabilities.sum(axis=1), 1.0)
    assert (
        log_loss(y[LATER], out.probabilities, labels=range(K))
        <= log_loss(y[LATER], softmax(margins[LATER]), labels=range(K)) + 0.005
    )


def test_reliability_table_matches_a_numpy_recomputation(data, margins_of) -> None:
    _, y = data
    p = softmax(margins_of["overconfident"][LATER])
    report = predict_classwise_reliability(p, y[LATER], classes=CLASSES, bins=8)
    for c, entry in enumerate(report["classes"]):
        assert entry["class"] == CLASSES[c] and entry["rows"] == int((y[LATER] == c).sum())
        assert entry["ece"] == pytest.approx(ece_by_numpy(p[:, c], (y[LATER] == c).astype(float), bins=8), abs=1e-12)
        assert sum(b["rows"] for b in entry["bins"]) == p.shape[0]
        for b in entry["bins"]:
            rows = (p[:, c] >= b["low"]) & ((p[:, c] < b["high"]) | (b["high"] == 1.0))
            assert rows.sum() == b["rows"]
            assert b["mean_probability"] == pytest.approx(p[rows, c].mean())
            assert b["observed_rate"] == pytest.approx((y[LATER][rows] == c).mean())
    top = p.max(axis=1)
    right = (p.argmax(axis=1) == y[LATER]).astype(float)
    assert report["top_label_ece"] == pytest.approx(ece_by_numpy(top, right, bins=8), abs=1e-12)
    # The uncalibrated over-confident model is visibly off.
    assert report["top_label_ece"] > 0.03


def test_an_overconfident_model_loses_log_loss_to_its_calibration(data, margins_of) -> None:
    _, y = data
    margins = margins_of["overconfident"]
    calibrator = fitted(margins, y, HOLDOUT)
    meta = calibrator.to_metadata()
    assert meta["temperature"] > 1.2, meta  # over-confidence is softened
    assert meta["cv_log_loss"]["uncalibrated"] == pytest.approx(
        log_loss(y[HOLDOUT], softmax(margins[HOLDOUT]), labels=range(K))
    )
    chosen = meta["cv_log_loss"][meta["method"]]
    assert chosen < meta["cv_log_loss"]["uncalibrated"]
    calibrated = ClassProbabilityMap(calibrator, LEVEL).predict_class_probabilities(margins[LATER]).probabilities
    before = log_loss(y[LATER], softmax(margins[LATER]), labels=range(K))
    after = log_loss(y[LATER], calibrated, labels=range(K))
    assert after < before - 0.02, (before, after)


def test_vector_scaling_is_chosen_when_classes_are_shifted_and_data_suffice(data, margins_of) -> None:
    """A model whose class priors are off (margins offset per class) needs per-class biases."""
    _, y = data
    margins = margins_of["lightgbm"] + np.array([1.2, 0.0, -0.6, -1.2])
    large = fitted(margins, y, LARGE_HOLDOUT).to_metadata()
    assert large["method"] == "vector_scaling", large["cv_log_loss"]
    assert large["cv_log_loss"]["vector_scaling"] < large["cv_log_loss"]["temperature_scaling"]
    assert large["class_rows"] == np.bincount(y[LARGE_HOLDOUT], minlength=K).tolist()
    vector = ClassProbabilityMap(predict_multiclass_calibrator_from_metadata(large), LEVEL)
    later = vector.predict_class_probabilities(margins[LATER]).probabilities
    assert (
        log_loss(y[LATER], later, labels=range(K)) < log_loss(y[LATER], softmax(margins[LATER]), labels=range(K)) - 0.03
    )
    # Under 100 rows of a class: temperature scaling only, the vector fit not even tried.
    few = np.flatnonzero(y[HOLDOUT] != 3)[:500].tolist() + np.flatnonzero(y[HOLDOUT] == 3)[:60].tolist()
    small = predict_fitted_multiclass_calibrator(margins[HOLDOUT][few], y[HOLDOUT][few], classes=CLASSES).to_metadata()
    assert small["method"] == "temperature_scaling" and small["cv_log_loss"]["vector_scaling"] is None
    assert small["scale"] == [1.0 / small["temperature"]] * K and small["bias"] == [0.0] * K


def test_metadata_round_trips_through_json_to_identical_outputs(data, margins_of) -> None:
    _, y = data
    margins = margins_of["xgboost"]
    for rows in (HOLDOUT, LARGE_HOLDOUT):
        calibrator = fitted(margins, y, rows)
        loaded = predict_multiclass_calibrator_from_metadata(json.loads(json.dumps(calibrator.to_metadata())))
        assert loaded.classes == CLASSES and loaded.to_metadata() == calibrator.to_metadata()
        a = ClassProbabilityMap(calibrator, LEVEL).predict_class_probabilities(margins[LATER])
        b = ClassProbabilityMap(loaded, LEVEL).predict_class_probabilities(margins[LATER])
        for field in ("probabilities", "predicted", "probability", "low", "high", "runner_up", "margin"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), field


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("method", "isotonic"),
        ("scale", [1.0, 2.0]),
        ("bias", [0.0, "x", 0.0, 0.0]),
        ("temperature", -1.0),
        ("bin_rows", [[1], [2]]),
        ("classes", "abc"),
        ("cv_log_loss", [0.3]),
    ],
)
def test_bad_metadata_names_the_key(data, margins_of, key: str, value) -> None:
    _, y = data
    meta = fitted(margins_of["xgboost"], y, HOLDOUT).to_metadata() | {key: value}
    with pytest.raises(ValueError, match=f"'{key}'"):
        predict_multiclass_calibrator_from_metadata(meta)


def test_a_holdout_missing_a_class_names_it(data, margins_of) -> None:
    _, y = data
    keep = y[HOLDOUT] != 2
    with pytest.raises(ValueError, match="no row of class 'hardware'") as caught:
        predict_fitted_multiclass_calibrator(margins_of["xgboost"][HOLDOUT][keep], y[HOLDOUT][keep], classes=CLASSES)
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="0..3"):
        predict_fitted_multiclass_calibrator(margins_of["xgboost"][:3], np.array([0, 1, 4]), classes=CLASSES)
    with pytest.raises(ValueError, match=r"\(rows, 4\)"):
        predict_fitted_multiclass_calibrator(margins_of["xgboost"][:3, :3], np.array([0, 1, 2]), classes=CLASSES)


def test_intervals_are_the_jeffreys_beta_of_the_holdout_bins(data, margins_of) -> None:
    """Each row's interval, recomputed from the stored bins with scipy.stats.beta, and the bins' counts
    recounted from the hold-out."""
    _, y = data
    margins = margins_of["lightgbm"]
    calibrator = fitted(margins, y, HOLDOUT)
    meta = calibrator.to_metadata()
    holdout = ClassProbabilityMap(calibrator, LEVEL).predict_class_probabilities(margins[HOLDOUT])
    for c in range(K):
        edges = np.array(meta["bin_edges"][c])
        assert edges[-1] == 1.0 and sum(meta["bin_rows"][c]) == int((holdout.predicted == c).sum())
        lower = np.concatenate([[-np.inf], edges[:-1]])
        for b in range(edges.size):
            rows = (holdout.predicted == c) & (holdout.probability > lower[b]) & (holdout.probability <= edges[b])
            assert rows.sum() == meta["bin_rows"][c][b]
            assert (y[HOLDOUT][rows] == c).sum() == meta["bin_hits"][c][b]
            assert meta["bin_rows"][c][b] >= min(50, sum(meta["bin_rows"][c]))
    out = ClassProbabilityMap(calibrator, LEVEL).predict_class_probabilities(margins[LATER][:3000])
    tail = (1 - LEVEL) / 2
    for i in range(0, 3000, 7):
        c, p = out.predicted[i], out.probability[i]
        b = int(np.searchsorted(meta["bin_edges"][c], p))
        n, h = meta["bin_rows"][c][b], meta["bin_hits"][c][b]
        low = min(stats.beta.ppf(tail, p * n + 0.5, (1 - p) * n + 0.5), stats.beta.ppf(tail, h + 0.5, n - h + 0.5), p)
        high = max(
            stats.beta.ppf(1 - tail, p * n + 0.5, (1 - p) * n + 0.5), stats.beta.ppf(1 - tail, h + 0.5, n - h + 0.5), p
        )
        assert out.low[i] == pytest.approx(low, abs=2e-4) and out.high[i] == pytest.approx(high, abs=2e-4)
    assert (out.low <= out.probability).all() and (out.probability <= out.high).all()


def test_a_small_holdout_gives_wider_intervals_than_a_large_one(data, margins_of) -> None:
    _, y = data
    margins = margins_of["xgboost"]
    small = ClassProbabilityMap(fitted(margins, y, slice(4000, 4300)), LEVEL).predict_class_probabilities(
        margins[LATER]
    )
    large = ClassProbabilityMap(fitted(margins, y, LARGE_HOLDOUT), LEVEL).predict_class_probabilities(margins[LATER])
    small_width, large_width = np.mean(small.high - small.low), np.mean(large.high - large.low)
    assert small_width > 2 * large_width, (small_width, large_width)
    assert large_width < 0.08


@pytest.mark.parametrize("rows", [HOLDOUT, LARGE_HOLDOUT], ids=["800 rows", "20k rows"])
def test_intervals_cover_the_realized_rate_of_the_predicted_class(data, margins_of, rows: slice) -> None:
    """Later rows grouped by predicted class and probability (groups of ~1,000): the share of the
    predicted class among them falls inside the group's mean interval about as often as the level says."""
    _, y = data
    margins = margins_of["lightgbm"]
    out = ClassProbabilityMap(fitted(margins, y, rows), LEVEL).predict_class_probabilities(margins[LATER])
    covered = []
    for c in range(K):
        mine = np.flatnonzero(out.predicted == c)
        mine = mine[np.argsort(out.probability[mine], kind="stable")]
        for group in np.array_split(mine, max(1, mine.size // 1000)):
            rate = (y[LATER][group] == c).mean()
            covered.append(out.low[group].mean() <= rate <= out.high[group].mean())
    assert len(covered) >= 15
    assert np.mean(covered) >= LEVEL - 0.1, covered


def test_predicted_runner_up_and_margin_follow_numpy_with_ties_to_the_lowest_index(data, margins_of) -> None:
    _, y = data
    margins = margins_of["xgboost"]
    calibrator = fitted(margins, y, slice(4000, 4300))
    assert calibrator.method == "temperature_scaling"  # keeps equal margins equal
    tied = np.array([[1.0, 1.0, 0.0, -1.0], [0.0, 2.0, 2.0, 2.0], [3.0, 3.0, 3.0, 3.0], [-1.0, 0.5, 0.5, 4.0]])
    z = np.vstack([tied, margins[LATER][:5000]])
    out = ClassProbabilityMap(calibrator, LEVEL).predict_class_probabilities(z)
    p = out.probabilities
    order = np.argsort(-p, axis=1, kind="stable")
    assert np.array_equal(out.predicted, np.argmax(p, axis=1)) and np.array_equal(out.predicted, order[:, 0])
    assert np.array_equal(out.runner_up, order[:, 1])
    assert out.predicted[:4].tolist() == [0, 1, 0, 3] and out.runner_up[:4].tolist() == [1, 2, 1, 1]
    rows = np.arange(z.shape[0])
    assert np.array_equal(out.probability, p[rows, out.predicted])
    assert np.array_equal(out.margin, p[rows, out.predicted] - p[rows, out.runner_up])
    assert (out.margin >= 0).all() and out.margin[:3].tolist() == [0.0, 0.0, 0.0]
    assert out.predicted.dtype == np.int64 and out.runner_up.dtype == np.int64


def test_margins_of_any_finite_size_give_proper_vectors(data, margins_of) -> None:
    _, y = data
    calibrator = fitted(margins_of["lightgbm"], y, LARGE_HOLDOUT)
    z = np.array([[1e308, -1e308, 0.0, 5.0], [-1e300, -1e300, -1e300, -1e300 + 1e290], [700.0, 710.0, -800.0, 0.0]])
    out = ClassProbabilityMap(calibrator, LEVEL).predict_class_probabilities(z)
    assert np.isfinite(out.probabilities).all() and np.allclose(out.probabilities.sum(axis=1), 1.0)
    assert out.predicted.tolist() == [0, 3, 1]
    assert np.isfinite(out.low).all() and np.isfinite(out.high).all()
    with pytest.raises(ValueError, match="finite"):
        ClassProbabilityMap(calibrator, LEVEL).predict_class_probabilities(np.array([[np.nan, 0.0, 0.0, 0.0]]))


def test_fitting_is_deterministic(data, margins_of) -> None:
    _, y = data
    a = fitted(margins_of["lightgbm"], y, LARGE_HOLDOUT).to_metadata()
    b = fitted(margins_of["lightgbm"], y, LARGE_HOLDOUT).to_metadata()
    assert a == b


def test_a_class_the_holdout_never_saw_predicted_gets_an_uninformative_interval() -> None:
    rng = np.random.default_rng(7)
    labels = rng.integers(0, K, 400)
    margins = np.eye(K)[labels] * 2.0 + rng.normal(size=(400, K))
    margins[:, 3] -= 10.0  # class 3 is never the most probable on the hold-out
    calibrator = predict_fitted_multiclass_calibrator(margins, labels, classes=CLASSES)
    assert calibrator.to_metadata()["bin_rows"][3] == [0]
    out = ClassProbabilityMap(calibrator, LEVEL).predict_class_probabilities(np.array([[0.0, 0.0, 0.0, 30.0]]))
    tail = (1 - LEVEL) / 2
    assert out.predicted.tolist() == [3]
    assert out.low[0] == pytest.approx(stats.beta.ppf(tail, 0.5, 0.5), abs=1e-4)
    assert out.high[0] == pytest.approx(stats.beta.ppf(1 - tail, 0.5, 0.5), abs=1e-4)
