"""A multiclass job's measures against independent computations: scikit-learn's metrics, numpy's own
recomputation of the calibration error, scipy.stats' tests, and labels drawn from the calibrated vectors
themselves (where an estimate before labels must cover the realized value at its level)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.spatial.distance import jensenshannon
from sklearn.metrics import accuracy_score, f1_score, log_loss, precision_recall_fscore_support

from tasks.monitoring.multiclass_measures import (
    multiclass_class_mix,
    multiclass_estimate_sums,
    multiclass_estimated_performance,
    multiclass_estimated_performance_from_sums,
    multiclass_realized_performance,
)

CLASSES = ("bearing", "gear", "shaft", "none")


def calibrated_vectors(rows: int, rng: np.random.Generator, classes: int = len(CLASSES)) -> np.ndarray:
    """Softmax of random logits with a class-dependent offset: confident rows and doubtful ones, unequal classes."""
    logits = rng.normal(size=(rows, classes)) * 1.6 + np.linspace(0.6, -0.4, classes)
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def drawn_labels(p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One class index per row drawn from the row's own probability vector."""
    cumulative = np.cumsum(p, axis=1)
    u = rng.random((p.shape[0], 1))
    return np.minimum((u > cumulative).sum(axis=1), p.shape[1] - 1)


def test_estimated_accuracy_covers_the_realized_accuracy_of_labels_drawn_from_the_vectors() -> None:
    rng = np.random.default_rng(35)
    level, partitions = 0.9, 40
    covered = {"accuracy": 0, "macro_f1": 0}
    class_cover = {"precision": [0, 0], "recall": [0, 0], "f1": [0, 0]}
    for _ in range(partitions):
        rows = int(rng.integers(1800, 2200))
        p = calibrated_vectors(rows, rng)
        predicted = p.argmax(axis=1)
        labels = np.asarray(CLASSES)[drawn_labels(p, rng)]
        estimate = multiclass_estimated_performance(p, predicted, classes=CLASSES, level=level)
        realized = accuracy_score(labels, np.asarray(CLASSES)[predicted])
        covered["accuracy"] += estimate["accuracy"]["low"] <= realized <= estimate["accuracy"]["high"]
        macro = f1_score(
            labels, np.asarray(CLASSES)[predicted], labels=list(CLASSES), average="macro", zero_division=np.nan
        )
        covered["macro_f1"] += estimate["macro_f1"]["low"] <= macro <= estimate["macro_f1"]["high"]
        precision, recall, f1, _ = precision_recall_fscore_support(
            labels, np.asarray(CLASSES)[predicted], labels=list(CLASSES), zero_division=np.nan
        )
        for j, name in enumerate(CLASSES):
            for measure, values in (("precision", precision), ("recall", recall), ("f1", f1)):
                interval = estimate["classes"][name][measure]
                if not math.isnan(values[j]) and not math.isnan(interval["low"]):
                    class_cover[measure][0] += interval["low"] <= values[j] <= interval["high"]
                    class_cover[measure][1] += 1
    share = covered["accuracy"] / partitions
    print(
        f"estimated accuracy's {level:.0%} interval contained the realized accuracy in {covered['accuracy']}/{partitions} "
        f"partitions ({share:.1%}); macro F1 {covered['macro_f1']}/{partitions}; per class "
        + ", ".join(f"{m} {c}/{t}" for m, (c, t) in class_cover.items())
    )
    assert share >= 0.85
    assert covered["macro_f1"] / partitions >= 0.8
    for measure, (inside, total) in class_cover.items():
        assert inside / total >= 0.82, (measure, inside, total)


def test_the_estimate_is_the_mean_predicted_probability_and_the_intervals_have_their_exact_width() -> None:
    rng = np.random.default_rng(1)
    p = calibrated_vectors(500, rng)
    predicted = p.argmax(axis=1)
    chosen = p[np.arange(p.shape[0]), predicted]
    estimate = multiclass_estimated_performance(p, predicted, classes=CLASSES, level=0.95)
    z = stats.norm.ppf(0.975)
    assert estimate["rows"] == 500
    assert estimate["accuracy"]["value"] == pytest.approx(chosen.mean())
    # The number correct is Poisson-binomial: variance Σp(1 − p).
    assert estimate["accuracy"]["high"] - estimate["accuracy"]["value"] == pytest.approx(
        z * math.sqrt((chosen * (1 - chosen)).sum()) / 500
    )
    for j, name in enumerate(CLASSES):
        mine = predicted == j
        row = estimate["classes"][name]
        assert row["predicted_rows"] == mine.sum()
        assert row["expected_rows"]["value"] == pytest.approx(p[:, j].sum())
        assert row["precision"]["value"] == pytest.approx(p[mine, j].sum() / mine.sum())
        assert row["recall"]["value"] == pytest.approx(p[mine, j].sum() / p[:, j].sum())
        assert row["f1"]["value"] == pytest.approx(2 * p[mine, j].sum() / (mine.sum() + p[:, j].sum()))


def test_the_delta_method_sd_matches_the_spread_of_simulated_draws() -> None:
    """Recall, F1 and macro F1 are ratios: their sd comes from the delta method over correlated class counts."""
    rng = np.random.default_rng(3)
    p = calibrated_vectors(1500, rng)
    predicted = p.argmax(axis=1)
    estimate = multiclass_estimated_performance(p, predicted, classes=CLASSES, level=0.9)
    names = np.asarray(CLASSES)
    recalls, macros, f1s = [], [], []
    for _ in range(400):
        labels = names[drawn_labels(p, rng)]
        _, recall, f1, _ = precision_recall_fscore_support(
            labels, names[predicted], labels=list(CLASSES), zero_division=0
        )
        recalls.append(recall)
        f1s.append(f1)
        macros.append(f1.mean())
    recalls, f1s = np.asarray(recalls), np.asarray(f1s)
    assert estimate["macro_f1"]["sd"] == pytest.approx(np.std(macros, ddof=1), rel=0.15)
    for j, name in enumerate(CLASSES):
        assert estimate["classes"][name]["recall"]["sd"] == pytest.approx(recalls[:, j].std(ddof=1), rel=0.15)
        assert estimate["classes"][name]["f1"]["sd"] == pytest.approx(f1s[:, j].std(ddof=1), rel=0.15)
        assert estimate["classes"][name]["recall"]["value"] == pytest.approx(recalls[:, j].mean(), abs=0.01)


def test_chunk_sums_added_give_the_estimate_of_all_rows_at_once() -> None:
    rng = np.random.default_rng(2)
    p = calibrated_vectors(3001, rng)
    predicted = p.argmax(axis=1)
    chosen = p[np.arange(p.shape[0]), predicted]
    low, high = chosen * 0.97, np.minimum(chosen * 1.02, 1.0)
    whole = multiclass_estimated_performance(
        p, predicted, classes=CLASSES, level=0.9, probability_low=low, probability_high=high
    )
    cuts = [0, 17, 900, 901, 2500, 3001]
    chunks = [
        multiclass_estimate_sums(
            p[a:b], predicted[a:b], n_classes=len(CLASSES), probability_low=low[a:b], probability_high=high[a:b]
        )
        for a, b in zip(cuts[:-1], cuts[1:], strict=True)
    ]
    assert len({c.shape for c in chunks}) == 1
    merged = multiclass_estimated_performance_from_sums(sum(chunks[::-1]), classes=CLASSES, level=0.9)
    assert merged.keys() == whole.keys()
    assert merged["rows"] == whole["rows"] == 3001

    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for key, value in d.items():
            out |= flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value}
        return out

    a, b = flat(merged), flat(whole)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == pytest.approx(b[key], rel=1e-12, abs=1e-12, nan_ok=True), key


def test_the_calibrators_bounds_widen_the_interval_as_they_move_every_row() -> None:
    rng = np.random.default_rng(4)
    p = calibrated_vectors(800, rng)
    predicted = p.argmax(axis=1)
    chosen = p[np.arange(p.shape[0]), predicted]
    plain = multiclass_estimated_performance(p, predicted, classes=CLASSES, level=0.9)
    bounded = multiclass_estimated_performance(
        p, predicted, classes=CLASSES, level=0.9, probability_low=chosen - 0.03, probability_high=chosen + 0.02
    )
    assert bounded["accuracy"]["value"] == plain["accuracy"]["value"]
    assert bounded["accuracy"]["low"] == pytest.approx(plain["accuracy"]["low"] - 0.03)
    assert bounded["accuracy"]["high"] == pytest.approx(plain["accuracy"]["high"] + 0.02)
    for name in CLASSES:
        assert bounded["classes"][name]["recall"]["low"] < plain["classes"][name]["recall"]["low"]
        assert bounded["classes"][name]["recall"]["high"] > plain["classes"][name]["recall"]["high"]


def test_a_class_never_predicted_has_no_precision_and_no_rows_no_accuracy() -> None:
    p = np.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.2, 0.5, 0.3]])
    estimate = multiclass_estimated_performance(p, np.array([0, 0, 1]), classes=("a", "b", "c"), level=0.9)
    assert estimate["classes"]["c"]["predicted_rows"] == 0
    assert math.isnan(estimate["classes"]["c"]["precision"]["value"])
    assert estimate["classes"]["c"]["recall"]["value"] == 0.0
    empty = multiclass_estimated_performance(
        np.zeros((0, 3)), np.zeros(0, dtype=np.int64), classes=("a", "b", "c"), level=0.9
    )
    assert empty["rows"] == 0 and math.isnan(empty["accuracy"]["value"]) and math.isnan(empty["macro_f1"]["value"])


def test_bad_shapes_are_refused() -> None:
    p = np.full((2, 3), 1 / 3)
    with pytest.raises(ValueError, match="probabilities"):
        multiclass_estimate_sums(p, np.array([0, 1]), n_classes=4)
    with pytest.raises(ValueError, match="0..2"):
        multiclass_estimate_sums(p, np.array([0, 3]), n_classes=3)
    with pytest.raises(ValueError, match="length"):
        multiclass_estimated_performance_from_sums(np.zeros(5), classes=("a", "b", "c"), level=0.9)
    with pytest.raises(ValueError, match="classes the job does not have"):
        multiclass_realized_performance(p, np.array([0, 1]), np.array(["a", "z"]), classes=("a", "b", "c"))


def _numpy_ece(probability: np.ndarray, outcome: np.ndarray, bins: int) -> float:
    """Equal-width-bin ECE written independently: Σ_b n_b/N · |mean probability_b − observed rate_b|."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    total = 0.0
    for b in range(bins):
        upper = probability <= edges[b + 1] if b == bins - 1 else probability < edges[b + 1]
        inside = (probability >= edges[b]) & upper
        if inside.any():
            total += inside.sum() / probability.size * abs(probability[inside].mean() - outcome[inside].mean())
    return total


def test_realized_measures_equal_sklearn_and_a_numpy_ece() -> None:
    rng = np.random.default_rng(5)
    p = calibrated_vectors(2500, rng)
    p[:3] = [
        [1.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [0.5, 0.5, 0.0, 0.0],
    ]  # a zero probability on a true class: clipped
    predicted = p.argmax(axis=1)
    truth = drawn_labels(p, rng)
    truth[:3] = [1, 2, 3]
    names = np.asarray(CLASSES)
    labels = names[truth]
    realized = multiclass_realized_performance(p, predicted, labels, classes=CLASSES, bins=10)
    assert realized["rows"] == 2500
    assert realized["accuracy"] == pytest.approx(accuracy_score(labels, names[predicted]))
    # scikit-learn orders string labels lexicographically against the columns: give it the class indices.
    assert realized["log_loss"] == pytest.approx(log_loss(truth, p, labels=list(range(len(CLASSES)))), rel=1e-12)
    assert realized["macro_f1"] == pytest.approx(
        f1_score(labels, names[predicted], labels=list(CLASSES), average="macro")
    )
    precision, recall, f1, support = precision_recall_fscore_support(labels, names[predicted], labels=list(CLASSES))
    eces = []
    for j, name in enumerate(CLASSES):
        row = realized["classes"][name]
        assert row["precision"] == pytest.approx(precision[j])
        assert row["recall"] == pytest.approx(recall[j])
        assert row["f1"] == pytest.approx(f1[j])
        assert row["support"] == support[j]
        assert row["predicted_rows"] == (predicted == j).sum()
        eces.append(_numpy_ece(p[:, j], (truth == j).astype(float), 10))
        assert row["ece"] == pytest.approx(eces[-1], abs=1e-12)
    assert realized["classwise_ece"] == pytest.approx(np.mean(eces), abs=1e-12)
    confidence = p[np.arange(2500), predicted]
    assert realized["top_label_ece"] == pytest.approx(
        _numpy_ece(confidence, (predicted == truth).astype(float), 10), abs=1e-12
    )
    table = realized["calibration"]
    assert table.height == 10 * len(CLASSES)
    for j, name in enumerate(CLASSES):
        mine = table.filter(table["class"] == name)
        assert mine["rows"].sum() == 2500
        third = (p[:, j] >= 0.3) & (p[:, j] < 0.4)
        bin3 = mine.filter(mine["bin"] == 3).row(0, named=True)
        assert (bin3["low"], bin3["high"]) == pytest.approx((0.3, 0.4))
        assert bin3["rows"] == third.sum()
        assert bin3["mean_probability"] == pytest.approx(p[third, j].mean())
        assert bin3["observed_rate"] == pytest.approx((truth[third] == j).mean())


def test_labels_drawn_from_calibrated_vectors_have_a_small_classwise_ece() -> None:
    rng = np.random.default_rng(6)
    p = calibrated_vectors(20_000, rng)
    realized = multiclass_realized_performance(p, p.argmax(axis=1), drawn_labels(p, rng), classes=CLASSES)
    assert realized["classwise_ece"] < 0.02
    miscalibrated = multiclass_realized_performance(
        p**2 / (p**2).sum(axis=1, keepdims=True), p.argmax(axis=1), drawn_labels(p, rng), classes=CLASSES
    )
    assert miscalibrated["classwise_ece"] > 0.03


def test_class_mix_against_scipy() -> None:
    reference = {"bearing": 400, "gear": 300, "shaft": 200, "none": 100}
    now = {"bearing": 380, "gear": 260, "shaft": 300, "none": 60, "unseen": 5}
    mix = multiclass_class_mix(now, reference)
    names = [row["class"] for row in mix["classes"]]
    assert names == ["bearing", "gear", "shaft", "none", "unseen"]
    a = np.array([now.get(n, 0) for n in names], dtype=float)
    b = np.array([reference.get(n, 0) for n in names], dtype=float)
    assert mix["js_distance"] == pytest.approx(jensenshannon(a, b, base=2))
    chi2, p_value, dof, _ = stats.chi2_contingency(np.vstack([a, b]), correction=False)
    assert mix["chi_square"] == pytest.approx(chi2)
    assert mix["p_value"] == pytest.approx(p_value)
    shares = {row["class"]: row for row in mix["classes"]}
    assert shares["shaft"]["ratio"] == pytest.approx((300 / 1005) / 0.2)
    assert math.isnan(shares["unseen"]["ratio"]) and shares["unseen"]["reference_rows"] == 0
    floored_a, floored_b = np.maximum(a / a.sum(), 1e-4), np.maximum(b / b.sum(), 1e-4)
    assert mix["psi"] == pytest.approx(np.sum((floored_a - floored_b) * np.log(floored_a / floored_b)))
    assert p_value < 0.01 and mix["flag"] == ("alert" if mix["psi"] >= 0.25 else "warn" if mix["psi"] >= 0.1 else "ok")


def test_class_mix_flags_a_large_real_change_only() -> None:
    reference = {"a": 50_000, "b": 30_000, "c": 20_000}
    same = multiclass_class_mix({"a": 4950, "b": 3040, "c": 2010}, reference)
    assert same["p_value"] > 0.01 and same["flag"] == "ok"
    # Significant on a million rows but tiny: not flagged.
    tiny = multiclass_class_mix({"a": 485_000, "b": 310_000, "c": 205_000}, reference)
    assert tiny["p_value"] < 0.01 and tiny["psi"] < 0.1 and tiny["flag"] == "ok"
    big = multiclass_class_mix({"a": 1000, "b": 3000, "c": 6000}, reference)
    assert big["flag"] == "alert"
    # Large but on a handful of rows: chance, not flagged.
    few = multiclass_class_mix({"a": 1, "b": 2, "c": 2}, reference)
    assert few["p_value"] > 0.01 and few["flag"] == "ok"
    empty = multiclass_class_mix({}, reference)
    assert empty["flag"] is None and math.isnan(empty["js_distance"])
