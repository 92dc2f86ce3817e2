"""Measures of a multiclass job's calibrated probability vectors, numpy only (scipy.special for a quantile
and a tail; scipy.stats would cost every run ~0.7 s of imports): estimated before labels, realized once
labels land, and the drift of the predicted class mix.

**Estimated performance before labels** (confidence-based, NannyML's CBPE for multiclass). Row i has the
calibrated vector p_i over K classes and the predicted class c_i. If the vectors are calibrated, the true
class is a draw from p_i, independent across rows, so the counts every measure is made of are sums of
independent categorical draws: per class k, X_k = rows predicted k that are k (mean C_k = Σ_{c_i=k} p_ik)
and A_k = rows that are k (mean T_k = Σ_i p_ik). Their covariances need only two K×K sums,
M = Σ_i p_i p_iᵀ and N[k, l] = Σ_{c_i=k} p_ik p_il:
    Cov(X_k, X_l) = δ_kl (C_k − N_kk),  Cov(X_k, A_l) = δ_kl C_k − N_kl,  Cov(A_k, A_l) = δ_kl T_k − M_kl.
Accuracy ΣX_k/n and precision X_k/m_k (m_k rows predicted k) are linear in the counts, so their variance is
exact (the number correct is Poisson-binomial: mean Σp_ic, variance Σp_ic(1 − p_ic)); recall X_k/A_k, F1
2X_k/(m_k + A_k) and macro F1 (their mean over the classes) take the delta method's gradient at the means.
Each interval is the estimate ± z·sd at the level (normal approximation, which a few hundred rows make
good), clipped to [0, 1]. Where the probability of the predicted class has the calibrator's own interval
[p_low, p_high], the bounds add as a binary job's do (every row's bound moves together): the interval runs
from the measure computed with Σp_low − z·sd to the measure with Σp_high + z·sd. That assumes every row's
calibration is off the same way at once, and gives intervals too wide to flag anything (±8 points of accuracy
on a 400-row hold-out). A run instead passes `calibration_rows`, the hold-out rows the calibration was fitted
on: a measure v the calibration stands behind is known from them to ±sqrt(v(1 − v)/r) (r the hold-out rows the
measure rests on: all of them for accuracy and class rates, the class's share of them for its precision and
recall), added to the labels' own draw in quadrature.

The estimate is built from a fixed-size vector of sums (`multiclass_estimate_sums`), so a partition's
chunks add up to the partition's exactly in any order and memory stays flat whatever the partition size.

**Realized performance** on labelled rows: accuracy, log loss of the calibrated vector (clipped at the
float64 machine epsilon, as scikit-learn's `log_loss`), per class precision, recall, F1, support and rows
predicted; calibration per class one-vs-rest on equal-width bins (the class's ECE Σ_b |Σp_b − events_b|/N,
and the classwise ECE, their mean over the classes), and the top-label ECE (the predicted class's
probability against "the prediction was right").

**Class mix**: the predicted classes' shares of a partition against the reference's (the hold-out's
predicted shares): each class's share ratio, the Jensen–Shannon distance (base 2, as
`scipy.spatial.distance.jensenshannon`), PSI (shares floored as the drift tables floor them) and the p-value
of the chi-square test that both counts come from one class mix (`scipy.stats.chi2_contingency`, no
continuity correction). A mix is flagged only when the change is both real (p below `alpha`) and large
(PSI at the drift tables' warn or alert level): a million-row partition makes any change significant, a
small one makes large changes by chance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from tasks.prediction.class_labels import predict_class_label_indices

LOG_LOSS_CLIP = float(np.finfo(np.float64).eps)
"""Probabilities are clipped to [eps, 1 − eps] before the log, as scikit-learn's `log_loss` does for float64."""
SHARE_FLOOR = 1e-4
"""The drift tables' floor of a share in PSI (tasks/quality/drift.py): a class the reference never predicted
weighs heavily without making PSI infinite."""
_NAN = float("nan")


def _z(level: float) -> float:
    from scipy.special import ndtri

    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    return float(ndtri((1.0 + level) / 2.0))


def _sum_layout(n_classes: int) -> dict[str, slice]:
    """Where each sum sits in the vector: rows, then per class m, C, T, L, H, then M and N row-major."""
    k = n_classes
    names = (
        ("rows", 1),
        ("predicted", k),
        ("correct", k),
        ("expected", k),
        ("correct_low", k),
        ("correct_high", k),
        ("outer", k * k),
        ("outer_predicted", k * k),
    )
    layout, start = {}, 0
    for name, size in names:
        layout[name] = slice(start, start + size)
        start += size
    return layout


def multiclass_sum_size(n_classes: int) -> int:
    """Length of the sums vector of `n_classes` classes: 1 + 5K + 2K²."""
    return 1 + 5 * n_classes + 2 * n_classes * n_classes


def _checked_vectors(probabilities: np.ndarray, predicted: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probabilities, dtype=np.float64)
    c = np.asarray(predicted)
    if p.ndim != 2 or p.shape[1] != n_classes:
        raise ValueError(f"probabilities must be (rows, {n_classes}), got shape {p.shape}")
    if c.shape != (p.shape[0],):
        raise ValueError(f"predicted must hold one class index per row ({p.shape[0]}), got shape {c.shape}")
    if not np.issubdtype(c.dtype, np.integer):
        raise ValueError(f"predicted must be class indices (integers), got dtype {c.dtype}")
    if c.size and (c.min() < 0 or c.max() >= n_classes):
        raise ValueError(f"predicted class indices must lie in 0..{n_classes - 1}, got {int(c.min())}..{int(c.max())}")
    return p, c.astype(np.int64)


def multiclass_estimate_sums(
    probabilities: np.ndarray,
    predicted: np.ndarray,
    *,
    n_classes: int,
    probability_low: np.ndarray | None = None,
    probability_high: np.ndarray | None = None,
) -> np.ndarray:
    """The float64 sums one chunk contributes to the estimate (length `multiclass_sum_size`); chunks add.

    `probability_low` / `probability_high`: the calibrator's interval of each row's predicted-class
    probability; without them the bounds are the probability itself (no calibrator uncertainty)."""
    p, c = _checked_vectors(probabilities, predicted, n_classes)
    k = n_classes
    layout = _sum_layout(k)
    sums = np.zeros(multiclass_sum_size(k))
    chosen = p[np.arange(c.size), c]
    low = chosen if probability_low is None else np.asarray(probability_low, dtype=np.float64)
    high = chosen if probability_high is None else np.asarray(probability_high, dtype=np.float64)
    sums[layout["rows"]] = c.size
    sums[layout["predicted"]] = np.bincount(c, minlength=k)
    sums[layout["correct"]] = np.bincount(c, weights=chosen, minlength=k)
    sums[layout["expected"]] = p.sum(axis=0)
    sums[layout["correct_low"]] = np.bincount(c, weights=low, minlength=k)
    sums[layout["correct_high"]] = np.bincount(c, weights=high, minlength=k)
    sums[layout["outer"]] = (p.T @ p).ravel()
    # N[k, :] = Σ over rows predicted k of p_ik · p_i: the predicted class's probability times the vector.
    outer_predicted = np.zeros((k, k))
    np.add.at(outer_predicted, c, chosen[:, None] * p)
    sums[layout["outer_predicted"]] = outer_predicted.ravel()
    return sums


def multiclass_predicted_counts(sums: np.ndarray, *, n_classes: int) -> np.ndarray:
    """Rows predicted as each class, from (merged) `multiclass_estimate_sums`."""
    return np.asarray(sums, dtype=np.float64)[_sum_layout(n_classes)["predicted"]].round().astype(np.int64)


def _measure(
    value: float,
    sd: float,
    low_point: float,
    high_point: float,
    z: float,
    calibration_rows: float | None = None,
) -> dict[str, float]:
    if math.isnan(value) or math.isnan(sd):
        return {"value": value, "low": _NAN, "high": _NAN, "sd": sd}
    if calibration_rows is not None:
        sd = math.sqrt(sd**2 + value * (1.0 - value) / max(calibration_rows, 1.0))
        low_point = high_point = _NAN
    low = (value if math.isnan(low_point) else min(low_point, value)) - z * sd
    high = (value if math.isnan(high_point) else max(high_point, value)) + z * sd
    return {"value": value, "low": max(0.0, low), "high": min(1.0, high), "sd": sd}


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else _NAN


def multiclass_estimated_performance_from_sums(
    sums: np.ndarray,
    *,
    classes: Sequence[str],
    level: float,
    calibration_rows: int | None = None,
) -> dict[str, Any]:
    """The estimate of `multiclass_estimated_performance` from (merged) `multiclass_estimate_sums`; with
    `calibration_rows` (the calibration's hold-out rows) the map's own uncertainty from them instead of the bounds.

    {"rows", "level", "accuracy", "macro_f1", "classes": {class: {"predicted_rows", "expected_rows",
    "precision", "recall", "f1"}}}; each measure {"value", "low", "high", "sd"}, `expected_rows` the
    expected number of rows truly of the class. NaN where a measure has no rows to stand on."""
    k = len(classes)
    sums = np.asarray(sums, dtype=np.float64)
    if sums.shape != (multiclass_sum_size(k),):
        raise ValueError(f"sums of {k} classes must have length {multiclass_sum_size(k)}, got shape {sums.shape}")
    z = _z(level)
    layout = _sum_layout(k)
    n = float(sums[layout["rows"]][0])
    m, big_c, t = sums[layout["predicted"]], sums[layout["correct"]], sums[layout["expected"]]
    big_l, big_h = sums[layout["correct_low"]], sums[layout["correct_high"]]
    big_m = sums[layout["outer"]].reshape(k, k)
    big_n = sums[layout["outer_predicted"]].reshape(k, k)
    # Covariance of S = (X_1..X_K, A_1..A_K), the module docstring's formulas.
    cov = np.zeros((2 * k, 2 * k))
    cov[:k, :k] = np.diag(big_c - np.diag(big_n))
    cov[:k, k:] = np.diag(big_c) - big_n
    cov[k:, :k] = cov[:k, k:].T
    cov[k:, k:] = np.diag(t) - big_m

    def sd(gradient: np.ndarray) -> float:
        return math.sqrt(max(float(gradient @ cov @ gradient), 0.0))

    outside = t - big_c
    accuracy_gradient = np.concatenate([np.full(k, 1.0 / n if n else _NAN), np.zeros(k)])
    result: dict[str, Any] = {
        "rows": int(n),
        "level": float(level),
        "accuracy": _measure(
            _ratio(big_c.sum(), n),
            sd(accuracy_gradient) if n else _NAN,
            _ratio(big_l.sum(), n),
            _ratio(big_h.sum(), n),
            z,
            calibration_rows,
        ),
    }

    def rows_of(share: float) -> float | None:
        # The hold-out rows a per-class measure rests on: the class's share of them (the partition's share stands in).
        return None if calibration_rows is None else calibration_rows * share

    per_class: dict[str, Any] = {}
    macro_gradient, f1s, f1_lows, f1_highs = np.zeros(2 * k), [], [], []
    for j, name in enumerate(classes):
        expected_gradient = np.zeros(2 * k)
        expected_gradient[k + j] = 1.0
        expected_sd = sd(expected_gradient)
        precision_gradient, recall_gradient, f1_gradient = np.zeros(2 * k), np.zeros(2 * k), np.zeros(2 * k)
        if m[j] > 0:
            precision_gradient[j] = 1.0 / m[j]
        if t[j] > 0:
            recall_gradient[j], recall_gradient[k + j] = 1.0 / t[j], -big_c[j] / t[j] ** 2
        base = m[j] + t[j]
        if base > 0:
            f1_gradient[j], f1_gradient[k + j] = 2.0 / base, -2.0 * big_c[j] / base**2
            macro_gradient += f1_gradient
            f1s.append(2.0 * big_c[j] / base)
            f1_lows.append(_ratio(2.0 * big_l[j], m[j] + big_l[j] + outside[j]))
            f1_highs.append(_ratio(2.0 * big_h[j], m[j] + big_h[j] + outside[j]))
        per_class[str(name)] = {
            "predicted_rows": int(m[j]),
            "expected_rows": {
                "value": float(t[j]),
                "low": max(0.0, t[j] - z * expected_sd),
                "high": t[j] + z * expected_sd,
                "sd": expected_sd,
            },
            "precision": _measure(
                _ratio(big_c[j], m[j]),
                sd(precision_gradient) if m[j] > 0 else _NAN,
                _ratio(big_l[j], m[j]),
                _ratio(big_h[j], m[j]),
                z,
                rows_of(_ratio(m[j], n)),
            ),
            "recall": _measure(
                _ratio(big_c[j], t[j]),
                sd(recall_gradient) if t[j] > 0 else _NAN,
                _ratio(big_l[j], big_l[j] + outside[j]),
                _ratio(big_h[j], big_h[j] + outside[j]),
                z,
                rows_of(_ratio(t[j], n)),
            ),
            "f1": _measure(
                _ratio(2.0 * big_c[j], base),
                sd(f1_gradient) if base > 0 else _NAN,
                _ratio(2.0 * big_l[j], m[j] + big_l[j] + outside[j]),
                _ratio(2.0 * big_h[j], m[j] + big_h[j] + outside[j]),
                z,
                rows_of(_ratio(min(m[j], t[j]), n)),
            ),
        }
    if f1s:
        count = len(f1s)
        result["macro_f1"] = _measure(
            float(np.mean(f1s)),
            sd(macro_gradient / count),
            float(np.nanmean(f1_lows)),
            float(np.nanmean(f1_highs)),
            z,
            None if calibration_rows is None else calibration_rows / count,
        )
    else:
        result["macro_f1"] = _measure(_NAN, _NAN, _NAN, _NAN, z)
    result["classes"] = per_class
    return result


def multiclass_estimated_performance(
    probabilities: np.ndarray,
    predicted: np.ndarray,
    *,
    classes: Sequence[str],
    level: float,
    probability_low: np.ndarray | None = None,
    probability_high: np.ndarray | None = None,
) -> dict[str, Any]:
    """Estimated accuracy, per class precision, recall, F1 and expected rows, and macro F1, each with its
    interval at `level`, from calibrated vectors (rows, K) and each row's predicted class index alone."""
    sums = multiclass_estimate_sums(
        probabilities,
        predicted,
        n_classes=len(classes),
        probability_low=probability_low,
        probability_high=probability_high,
    )
    return multiclass_estimated_performance_from_sums(sums, classes=classes, level=level)


def class_indices(labels: np.ndarray, classes: Sequence[str]) -> np.ndarray:
    """Each label's index in `classes`: labels are class names (indices pass through when integers)."""
    values = np.asarray(labels)
    if np.issubdtype(values.dtype, np.integer):
        if values.size and (values.min() < 0 or values.max() >= len(classes)):
            raise ValueError(
                f"label indices must lie in 0..{len(classes) - 1}, got {int(values.min())}..{int(values.max())}"
            )
        return values.astype(np.int64)
    indices, unknown = predict_class_label_indices(pl.Series(values.astype(str)), classes)
    if unknown:
        raise ValueError(f"labels name classes the job does not have: {unknown[:5]}; its classes are {list(classes)}")
    return indices.astype(np.int64)


def _calibration_bins(probability: np.ndarray, outcome: np.ndarray, bins: int) -> dict[str, np.ndarray]:
    index = np.minimum((probability * bins).astype(np.int64), bins - 1)
    rows = np.bincount(index, minlength=bins).astype(np.int64)
    events = np.bincount(index, weights=outcome, minlength=bins)
    probability_sum = np.bincount(index, weights=probability, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_probability = np.where(rows > 0, probability_sum / rows, np.nan)
        observed_rate = np.where(rows > 0, events / rows, np.nan)
    return {
        "bin": np.arange(bins, dtype=np.int64),
        "low": np.arange(bins) / bins,
        "high": np.arange(1, bins + 1) / bins,
        "rows": rows,
        "events": events.round().astype(np.int64),
        "probability_sum": probability_sum,
        "mean_probability": mean_probability,
        "observed_rate": observed_rate,
    }


def _ece(table: Mapping[str, np.ndarray]) -> float:
    total = int(table["rows"].sum())
    return float(np.abs(table["probability_sum"] - table["events"]).sum() / total) if total else _NAN


def multiclass_realized_performance(
    probabilities: np.ndarray,
    predicted: np.ndarray,
    labels: np.ndarray,
    *,
    classes: Sequence[str],
    bins: int = 10,
) -> dict[str, Any]:
    """Realized measures of labelled rows (labels: class names, or class indices as integers).

    {"rows", "accuracy", "log_loss", "macro_f1", "classwise_ece", "top_label_ece", "classes": {class:
    {"precision", "recall", "f1", "support", "predicted_rows", "ece"}}, "calibration": DataFrame (class, bin,
    low, high, rows, events, probability_sum, mean_probability, observed_rate) of every class and bin, empty
    bins too, so tables add up over partitions}. A class never predicted has NaN precision; one never
    observed NaN recall; macro F1 is the mean F1 over the classes that were predicted or observed."""
    k = len(classes)
    p, c = _checked_vectors(probabilities, predicted, k)
    y = class_indices(labels, classes)
    if y.shape != c.shape:
        raise ValueError(f"labels must hold one class per row ({c.size}), got shape {y.shape}")
    n = c.size
    clipped = np.clip(p, LOG_LOSS_CLIP, 1.0 - LOG_LOSS_CLIP)
    correct = c == y
    predicted_rows = np.bincount(c, minlength=k)
    support = np.bincount(y, minlength=k)
    true_positive = np.bincount(c[correct], minlength=k)
    per_class: dict[str, Any] = {}
    tables, eces, f1s = [], [], []
    for j, name in enumerate(classes):
        table = _calibration_bins(p[:, j], (y == j).astype(np.float64), bins)
        tables.append(pl.DataFrame({"class": [str(name)] * bins, **table}))
        ece = _ece(table)
        eces.append(ece)
        base = predicted_rows[j] + support[j]
        f1 = 2.0 * true_positive[j] / base if base else _NAN
        if base:
            f1s.append(f1)
        per_class[str(name)] = {
            "precision": _ratio(float(true_positive[j]), float(predicted_rows[j])),
            "recall": _ratio(float(true_positive[j]), float(support[j])),
            "f1": f1,
            "support": int(support[j]),
            "predicted_rows": int(predicted_rows[j]),
            "ece": ece,
        }
    top = _calibration_bins(p[np.arange(n), c], correct.astype(np.float64), bins)
    return {
        "rows": int(n),
        "accuracy": float(correct.mean()) if n else _NAN,
        "log_loss": float(-np.log(clipped[np.arange(n), y]).mean()) if n else _NAN,
        "macro_f1": float(np.mean(f1s)) if f1s else _NAN,
        "classwise_ece": float(np.mean(eces)) if n else _NAN,
        "top_label_ece": _ece(top),
        "classes": per_class,
        "calibration": pl.concat(tables),
    }


def multiclass_class_mix(
    predicted_counts: Mapping[str, int],
    reference_counts: Mapping[str, int],
    *,
    alpha: float = 0.01,
    psi_warn: float = 0.1,
    psi_alert: float = 0.25,
) -> dict[str, Any]:
    """The predicted class mix of a partition against the reference's.

    {"classes": [{"class", "rows", "share", "reference_rows", "reference_share", "ratio"}] (the reference's
    classes in its order, then any it never predicted), "js_distance", "psi", "chi_square", "p_value",
    "flag"}: `alert` when p < `alpha` and PSI ≥ `psi_alert`, `warn` when p < `alpha` and PSI ≥ `psi_warn`,
    `ok` otherwise, None while either side has no rows."""
    from scipy.special import chdtrc, rel_entr

    names = [*reference_counts, *(name for name in predicted_counts if name not in reference_counts)]
    now = np.array([float(predicted_counts.get(name, 0)) for name in names])
    before = np.array([float(reference_counts.get(name, 0)) for name in names])
    if (now < 0).any() or (before < 0).any():
        raise ValueError("class counts must be >= 0")
    share = now / now.sum() if now.sum() else np.full(now.size, _NAN)
    reference_share = before / before.sum() if before.sum() else np.full(before.size, _NAN)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(reference_share > 0, share / reference_share, np.nan)
    rows = [
        {
            "class": str(name),
            "rows": int(now[i]),
            "share": float(share[i]),
            "reference_rows": int(before[i]),
            "reference_share": float(reference_share[i]),
            "ratio": float(ratio[i]),
        }
        for i, name in enumerate(names)
    ]
    if not now.sum() or not before.sum():
        return {"classes": rows, "js_distance": _NAN, "psi": _NAN, "chi_square": _NAN, "p_value": _NAN, "flag": None}
    middle = (share + reference_share) / 2.0
    divergence = (rel_entr(share, middle).sum() + rel_entr(reference_share, middle).sum()) / 2.0 / math.log(2.0)
    floored_now, floored_before = np.maximum(share, SHARE_FLOOR), np.maximum(reference_share, SHARE_FLOOR)
    psi = float(np.sum((floored_now - floored_before) * np.log(floored_now / floored_before)))
    seen = (now + before) > 0
    table = np.vstack([now[seen], before[seen]])
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    statistic = float(((table - expected) ** 2 / expected).sum())
    p_value = float(chdtrc(seen.sum() - 1, statistic)) if seen.sum() > 1 else 1.0
    if p_value < alpha and psi >= psi_alert:
        flag = "alert"
    elif p_value < alpha and psi >= psi_warn:
        flag = "warn"
    else:
        flag = "ok"
    return {
        "classes": rows,
        "js_distance": float(math.sqrt(max(divergence, 0.0))),
        "psi": psi,
        "chi_square": statistic,
        "p_value": p_value,
        "flag": flag,
    }
