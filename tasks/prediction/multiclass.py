"""Multiclass calibration: raw margins → a calibrated probability vector, with an interval for the
predicted class's probability.

The map (fitted on the hold-out by `predict_fitted_multiclass_calibrator`):

- Input is the model's own log-probability vector, l = log_softmax(margins) (the maximum is
  subtracted first, so margins of any finite size work; log-probabilities below LOG_FLOOR are held
  there, where the probability is 0 in float64 anyway). Working on l rather than on the margins makes
  the map independent of how a framework offsets its margins (ONNX graphs give log-probabilities).
- Temperature scaling: p = softmax(l / T), one parameter, fitted by maximum a posteriori with a weak
  Normal(0, 1) prior on log(1/T) (a small hold-out the model happens to get all right must not drive T
  to 0). It keeps the model's ranking of the classes in every row.
- Vector scaling: p = softmax(a ⊙ l + b), a scale and a bias per class (the diagonal form of Dirichlet
  calibration, Kull et al. 2019), its negative log-likelihood penalised by
  VECTOR_PENALTY/2 · (‖a − 1/T‖² + ‖b‖²), so with few rows it stays near the temperature solution.
- The choice: temperature scaling unless every class has at least VECTOR_MIN_CLASS_ROWS hold-out rows
  and vector scaling has the lower FOLDS-fold cross-validated log loss (class-stratified, fixed
  folds). Both out-of-fold log losses and the uncalibrated log loss are kept in the metadata.

The interval (`ClassProbabilityMap`): `low` and `high` bound the rate at which rows the model predicts
as this class, with a calibrated probability like this one, turn out to be this class — a credible
interval at `level` that is as narrow as the hold-out's evidence there allows. Per class, the hold-out
rows predicted as that class are cut by calibrated probability into equal-count bins of at least
MIN_BIN_ROWS rows (at most MAX_BINS). For a row predicted as class k with probability p falling in a
bin of n hold-out rows, of which h were class k, the interval spans both
- the Jeffreys Beta interval Beta(p·n + ½, (1 − p)·n + ½) (what n rows could pin a rate of p down to),
- and that bin's own Jeffreys posterior Beta(h + ½, n − h + ½) (where the hold-out put the rate there, so
  a local misfit of the parametric map widens the interval instead of hiding),
and always contains p. A 300-row hold-out gives wide intervals, a 50,000-row one narrow ones; a class
the model never predicted on the hold-out gets nearly [0, 1].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# scipy.optimize and scipy.special are imported inside the functions that use them, so importing this
# module (every `score` command does) stays instant (tests/test_lazy_imports.py).

TEMPERATURE = "temperature_scaling"
VECTOR = "vector_scaling"
METHODS = (TEMPERATURE, VECTOR)
FOLDS = 5
VECTOR_MIN_CLASS_ROWS = 100
"""Hold-out rows every class needs before vector scaling (2K parameters) is considered."""
VECTOR_PENALTY = 10.0
"""L2 precision pulling vector scaling's scales toward 1/T and its biases toward 0."""
LOG_TEMPERATURE_PRIOR_SD = 1.0
MIN_BIN_ROWS = 50
MAX_BINS = 10
LOG_FLOOR = -1000.0
_GRID = 513
"""Points in p ∈ [0, 1] at which each bin's Beta quantiles are tabulated (then interpolated linearly:
scipy's betaincinv on 100k rows alone takes ~0.15 s; the table is within 1e-4 of it)."""


@dataclass(frozen=True)
class ClassProbabilities:
    probabilities: np.ndarray
    """(n, K) calibrated probability vector, rows sum to 1, in class order."""
    predicted: np.ndarray
    """(n,) int64 index of the most probable class (ties: the lowest index)."""
    probability: np.ndarray
    """(n,) calibrated probability of the predicted class."""
    low: np.ndarray
    high: np.ndarray
    runner_up: np.ndarray
    """(n,) int64 index of the second most probable class (ties: the lowest index after the predicted)."""
    margin: np.ndarray
    """(n,) probability − the runner-up's probability, ≥ 0."""


@dataclass(frozen=True)
class MulticlassCalibrator:
    """softmax(scale ⊙ log_softmax(margins) + bias), with the hold-out bins behind the interval.

    bin_edges[k] are the upper probability edges of class k's bins (the last is 1); bin_rows[k] and
    bin_hits[k] the hold-out rows predicted as k in each bin and how many of them were k."""

    classes: tuple[str, ...]
    method: str
    temperature: float
    scale: np.ndarray
    bias: np.ndarray
    class_rows: tuple[int, ...]
    cv_log_loss: dict[str, float | None]
    bin_edges: tuple[np.ndarray, ...]
    bin_rows: tuple[np.ndarray, ...]
    bin_hits: tuple[np.ndarray, ...]

    def to_metadata(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "classes": list(self.classes),
            "temperature": float(self.temperature),
            "scale": [float(v) for v in self.scale],
            "bias": [float(v) for v in self.bias],
            "class_rows": [int(v) for v in self.class_rows],
            "cv_log_loss": {k: (None if v is None else float(v)) for k, v in self.cv_log_loss.items()},
            "folds": FOLDS,
            "bin_edges": [[float(v) for v in e] for e in self.bin_edges],
            "bin_rows": [[int(v) for v in r] for r in self.bin_rows],
            "bin_hits": [[int(v) for v in h] for h in self.bin_hits],
        }

    def calibrated(self, margins: np.ndarray) -> np.ndarray:
        """The (n, K) calibrated probability vectors of raw `margins`."""
        s = _log_softmax(_margins(margins, len(self.classes)))
        s *= self.scale
        s += self.bias
        return _softmax(s)


def predict_fitted_multiclass_calibrator(
    margins: np.ndarray, labels: np.ndarray, *, classes: Sequence[str]
) -> MulticlassCalibrator:
    """The calibrator of held-out `margins` (n, K) and their class indices `labels` (n,)."""
    classes = tuple(str(c) for c in classes)
    k = len(classes)
    if k < 2:
        raise ValueError(f"a multiclass calibration needs at least 2 classes, got {list(classes)}")
    z = _margins(margins, k)
    y = np.asarray(labels)
    if y.shape != (z.shape[0],) or z.shape[0] == 0:
        raise ValueError(f"need held-out rows with one label each, got margins {z.shape} and labels {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        if not (np.issubdtype(y.dtype, np.floating) and np.all(np.isfinite(y)) and np.all(y == np.round(y))):
            raise ValueError(f"labels must be class indices 0..{k - 1}, got values of type {y.dtype}")
    y = y.astype(np.int64)
    if (y < 0).any() or (y >= k).any():
        bad = np.unique(y[(y < 0) | (y >= k)])[:5].tolist()
        raise ValueError(f"labels must be class indices 0..{k - 1}, got {bad}")
    counts = np.bincount(y, minlength=k)
    missing = [classes[i] for i in np.flatnonzero(counts == 0)]
    if missing:
        names = ", ".join(repr(m) for m in missing)
        raise ValueError(
            f"the hold-out has no row of class {names}, so its probability cannot be calibrated; every class needs hold-out rows"
        )
    logp = _log_softmax(z)
    folds = _folds(y, k)
    uncalibrated = float(-np.mean(logp[np.arange(y.size), y]))
    cv_temperature = _out_of_fold_log_loss(logp, y, folds, vector=False)
    eligible = bool(counts.min() >= VECTOR_MIN_CLASS_ROWS)
    cv_vector = _out_of_fold_log_loss(logp, y, folds, vector=True) if eligible else None
    beta = _fit_temperature(logp, y)
    if cv_vector is not None and cv_vector < cv_temperature:
        method = VECTOR
        scale, bias = _fit_vector(logp, y, beta)
    else:
        method = TEMPERATURE
        scale, bias = np.full(k, beta), np.zeros(k)
    p = _softmax(logp * scale + bias)
    edges, rows, hits = _interval_bins(p, y)
    return MulticlassCalibrator(
        classes=classes,
        method=method,
        temperature=1.0 / beta,
        scale=scale,
        bias=bias,
        class_rows=tuple(int(c) for c in counts),
        cv_log_loss={"uncalibrated": uncalibrated, TEMPERATURE: cv_temperature, VECTOR: cv_vector},
        bin_edges=edges,
        bin_rows=rows,
        bin_hits=hits,
    )


def predict_multiclass_calibrator_from_metadata(calibration: dict[str, Any]) -> MulticlassCalibrator:
    """The calibrator `to_metadata` stored; a ValueError names the first key that is missing or wrong."""
    if not isinstance(calibration, dict):
        raise ValueError(f"the multiclass calibration must be a mapping, got {type(calibration).__name__}")
    method = calibration.get("method")
    if method not in METHODS:
        raise ValueError(f"calibration key 'method' must be one of {list(METHODS)}, got {method!r}")
    classes = calibration.get("classes")
    if not isinstance(classes, list) or len(classes) < 2 or not all(isinstance(c, str) for c in classes):
        raise ValueError(f"calibration key 'classes' must be a list of at least 2 class names, got {classes!r}")
    k = len(classes)
    temperature = calibration.get("temperature")
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not np.isfinite(temperature)
        or temperature <= 0
    ):
        raise ValueError(f"calibration key 'temperature' must be a positive number, got {temperature!r}")
    scale = _numbers(calibration, "scale", k)
    bias = _numbers(calibration, "bias", k)
    class_rows = _numbers(calibration, "class_rows", k, integer=True)
    cv = calibration.get("cv_log_loss")
    if not isinstance(cv, dict) or not all(
        v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in cv.values()
    ):
        raise ValueError(f"calibration key 'cv_log_loss' must map methods to numbers, got {cv!r}")
    edges = _nested(calibration, "bin_edges", k)
    rows = _nested(calibration, "bin_rows", k, integer=True)
    hits = _nested(calibration, "bin_hits", k, integer=True)
    for c in range(k):
        if not (edges[c].size == rows[c].size == hits[c].size >= 1):
            raise ValueError(
                f"calibration keys 'bin_edges', 'bin_rows', 'bin_hits' must have as many bins for class {classes[c]!r}"
            )
        if (hits[c] < 0).any() or (hits[c] > rows[c]).any() or (np.diff(edges[c]) < 0).any():
            raise ValueError(f"calibration key 'bin_hits' or 'bin_edges' of class {classes[c]!r} is inconsistent")
    return MulticlassCalibrator(
        classes=tuple(classes),
        method=method,
        temperature=float(temperature),
        scale=scale,
        bias=bias,
        class_rows=tuple(int(v) for v in class_rows),
        cv_log_loss={str(key): (None if v is None else float(v)) for key, v in cv.items()},
        bin_edges=edges,
        bin_rows=rows,
        bin_hits=hits,
    )


class ClassProbabilityMap:
    """Calibrated class probabilities and the predicted class's interval at credibility `level`."""

    def __init__(self, calibrator: MulticlassCalibrator, level: float) -> None:
        from scipy import special

        if not 0.0 < level < 1.0:
            raise ValueError(f"the interval level must be between 0 and 1, got {level}")
        self.calibrator = calibrator
        self.level = level
        # Class c's upper bin edges shifted to [2c, 2c + 1]: one searchsorted of 2·predicted + p finds
        # every row's bin among its own class's bins (each class's last edge is 1).
        self._edges = np.concatenate([e + 2.0 * c for c, e in enumerate(calibrator.bin_edges)])
        n = np.concatenate(calibrator.bin_rows).astype(np.float64)
        h = np.concatenate(calibrator.bin_hits).astype(np.float64)
        lo_q, hi_q = (1.0 - level) / 2.0, (1.0 + level) / 2.0
        # Where the hold-out put each bin's rate.
        self._bin_low = special.betaincinv(h + 0.5, n - h + 0.5, lo_q)
        self._bin_high = special.betaincinv(h + 0.5, n - h + 0.5, hi_q)
        # What a bin's rows could pin a rate of p down to, tabulated over p for every bin.
        grid = np.linspace(0.0, 1.0, _GRID)
        a = grid[None, :] * n[:, None] + 0.5
        b = (1.0 - grid[None, :]) * n[:, None] + 0.5
        self._table_low = special.betaincinv(a, b, lo_q).ravel()
        self._table_high = special.betaincinv(a, b, hi_q).ravel()

    def predict_class_probabilities(self, margins: np.ndarray) -> ClassProbabilities:
        p = self.calibrator.calibrated(margins)
        n = p.shape[0]
        rows = np.arange(n)
        predicted = np.argmax(p, axis=1)
        top = p[rows, predicted]
        rest = p.copy()
        rest[rows, predicted] = -np.inf
        runner_up = np.argmax(rest, axis=1)
        second = p[rows, runner_up]
        bin_of = np.minimum(np.searchsorted(self._edges, 2.0 * predicted + top, side="left"), self._edges.size - 1)
        position = top * (_GRID - 1)
        cell = np.minimum(position.astype(np.int64), _GRID - 2)
        w = position - cell
        at = bin_of * _GRID + cell
        low = (1.0 - w) * self._table_low[at] + w * self._table_low[at + 1]
        high = (1.0 - w) * self._table_high[at] + w * self._table_high[at + 1]
        low = np.minimum(np.minimum(low, self._bin_low[bin_of]), top)
        high = np.maximum(np.maximum(high, self._bin_high[bin_of]), top)
        return ClassProbabilities(
            probabilities=p,
            predicted=predicted.astype(np.int64),
            probability=top,
            low=np.clip(low, 0.0, 1.0),
            high=np.clip(high, 0.0, 1.0),
            runner_up=runner_up.astype(np.int64),
            margin=top - second,
        )


def predict_classwise_reliability(
    probabilities: np.ndarray, labels: np.ndarray, *, classes: Sequence[str], bins: int = 10
) -> dict[str, Any]:
    """Classwise and top-label expected calibration error on equal-width probability bins.

    A class's ECE: its probability p_k over all rows against the indicator "the row is class k", rows
    cut into `bins` equal-width bins of p_k, Σ (bin rows / rows) · |mean p_k − observed rate|.
    `classwise_ece` is the mean over classes; `top_label_ece` does the same for the top probability
    against "the predicted class was right". Each class keeps its table of non-empty bins."""
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(labels).astype(np.int64)
    k = len(classes)
    if p.ndim != 2 or p.shape[1] != k or y.shape != (p.shape[0],) or p.shape[0] == 0:
        raise ValueError(f"need (rows, {k}) probabilities and one label a row, got {p.shape} and {y.shape}")
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    table = []
    for c, name in enumerate(classes):
        ece, rows_table = _reliability(p[:, c], (y == c).astype(np.float64), bins)
        table.append({"class": str(name), "rows": int((y == c).sum()), "ece": ece, "bins": rows_table})
    predicted = np.argmax(p, axis=1)
    top_ece, _ = _reliability(p[np.arange(p.shape[0]), predicted], (predicted == y).astype(np.float64), bins)
    return {
        "classwise_ece": float(np.mean([t["ece"] for t in table])),
        "top_label_ece": top_ece,
        "classes": table,
    }


def _reliability(prob: np.ndarray, hit: np.ndarray, bins: int) -> tuple[float, list[dict[str, Any]]]:
    index = np.minimum((prob * bins).astype(np.int64), bins - 1)
    rows = np.bincount(index, minlength=bins)
    sum_p = np.bincount(index, weights=prob, minlength=bins)
    sum_hit = np.bincount(index, weights=hit, minlength=bins)
    table = []
    ece = 0.0
    for b in np.flatnonzero(rows):
        mean_p, rate = sum_p[b] / rows[b], sum_hit[b] / rows[b]
        ece += rows[b] / prob.size * abs(mean_p - rate)
        table.append(
            {
                "low": b / bins,
                "high": (b + 1) / bins,
                "rows": int(rows[b]),
                "mean_probability": float(mean_p),
                "observed_rate": float(rate),
            }
        )
    return float(ece), table


def _margins(margins: np.ndarray, k: int) -> np.ndarray:
    z = np.asarray(margins, dtype=np.float64)
    if z.ndim != 2 or z.shape[1] != k:
        raise ValueError(f"margins must be (rows, {k}) for {k} classes, got shape {z.shape}")
    if not np.isfinite(z).all():
        raise ValueError(f"margins must be finite; {int((~np.isfinite(z)).sum())} are not")
    return z


def predict_log_probabilities(margins: np.ndarray) -> np.ndarray:
    """The model's own log-probability vectors: log_softmax of its margins (rows × classes), floored at LOG_FLOOR."""
    return _log_softmax(np.asarray(margins, dtype=np.float64))


def _log_softmax(z: np.ndarray) -> np.ndarray:
    # z − max overflows to −inf only for margins ~1e308 apart; such a class has probability 0 and,
    # like any below the floor, is held there.
    with np.errstate(over="ignore"):
        shifted = z - np.max(z, axis=1, keepdims=True)
    np.maximum(shifted, LOG_FLOOR, out=shifted)
    shifted -= np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return np.maximum(shifted, LOG_FLOOR, out=shifted)


def _softmax(s: np.ndarray) -> np.ndarray:
    e = s - np.max(s, axis=1, keepdims=True)
    np.exp(e, out=e)
    e /= np.sum(e, axis=1, keepdims=True)
    return e


def _nll(s: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Summed negative log-likelihood of scores `s` and its gradient with respect to them."""
    shifted = s - np.max(s, axis=1, keepdims=True)
    lse = np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    logp = shifted - lse
    rows = np.arange(y.size)
    grad = np.exp(logp)
    grad[rows, y] -= 1.0
    return float(-logp[rows, y].sum()), grad


def _fit_temperature(logp: np.ndarray, y: np.ndarray) -> float:
    """β = 1/T, the MAP under log β ~ Normal(0, LOG_TEMPERATURE_PRIOR_SD)."""
    from scipy import optimize

    precision = 1.0 / LOG_TEMPERATURE_PRIOR_SD**2

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        u = float(theta[0])
        beta = np.exp(u)
        value, grad = _nll(beta * logp, y)
        return value + 0.5 * precision * u * u, np.array([beta * float(np.sum(grad * logp)) + precision * u])

    result = optimize.minimize(objective, np.zeros(1), jac=True, method="L-BFGS-B", bounds=[(-8.0, 8.0)])
    return float(np.exp(result.x[0]))


def _fit_vector(logp: np.ndarray, y: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
    from scipy import optimize

    k = logp.shape[1]

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        a, b = theta[:k], theta[k:]
        value, grad = _nll(logp * a + b, y)
        da = np.sum(grad * logp, axis=0) + VECTOR_PENALTY * (a - beta)
        db = np.sum(grad, axis=0) + VECTOR_PENALTY * b
        penalty = 0.5 * VECTOR_PENALTY * (np.sum((a - beta) ** 2) + np.sum(b**2))
        return value + penalty, np.concatenate([da, db])

    start = np.concatenate([np.full(k, beta), np.zeros(k)])
    result = optimize.minimize(objective, start, jac=True, method="L-BFGS-B")
    return result.x[:k].copy(), result.x[k:].copy()


def _folds(y: np.ndarray, k: int) -> np.ndarray:
    """A fold number per row: each class's rows dealt in a fixed shuffled order, so folds are stratified and runs repeat."""
    rng = np.random.default_rng(20240935)
    fold = np.empty(y.size, dtype=np.int64)
    for c in range(k):
        idx = np.flatnonzero(y == c)
        fold[idx[rng.permutation(idx.size)]] = (np.arange(idx.size) + c) % FOLDS
    return fold


def _out_of_fold_log_loss(logp: np.ndarray, y: np.ndarray, fold: np.ndarray, *, vector: bool) -> float:
    total = 0.0
    for f in range(FOLDS):
        test = fold == f
        train = ~test
        if not test.any() or not train.any():
            continue
        beta = _fit_temperature(logp[train], y[train])
        if vector:
            a, b = _fit_vector(logp[train], y[train], beta)
        else:
            a, b = np.full(logp.shape[1], beta), np.zeros(logp.shape[1])
        total += _nll(logp[test] * a + b, y[test])[0]
    return total / y.size


def _interval_bins(p: np.ndarray, y: np.ndarray) -> tuple[tuple[np.ndarray, ...], ...]:
    """Per class: upper edges, rows and hits of equal-count bins of the hold-out rows predicted as it."""
    k = p.shape[1]
    predicted = np.argmax(p, axis=1)
    all_edges, all_rows, all_hits = [], [], []
    for c in range(k):
        idx = np.flatnonzero(predicted == c)
        order = idx[np.argsort(p[idx, c], kind="stable")]
        prob, hit = p[order, c], (y[order] == c)
        count = max(1, min(MAX_BINS, order.size // MIN_BIN_ROWS))
        cuts = [round(i * order.size / count) for i in range(count + 1)]
        edges = np.array([(prob[e - 1] + prob[e]) / 2.0 for e in cuts[1:-1]] + [1.0])
        # Counted by the same lookup the map does, so rows tied at a cut are where scoring puts them.
        bin_of = np.minimum(np.searchsorted(edges, prob, side="left"), count - 1)
        all_edges.append(edges)
        all_rows.append(np.bincount(bin_of, minlength=count).astype(np.int64))
        all_hits.append(np.bincount(bin_of, weights=hit, minlength=count).round().astype(np.int64))
    return tuple(all_edges), tuple(all_rows), tuple(all_hits)


def _numbers(calibration: dict[str, Any], key: str, k: int, *, integer: bool = False) -> np.ndarray:
    value = calibration.get(key)
    if not isinstance(value, list) or len(value) != k or not all(_is_number(v, integer) for v in value):
        kind = "whole numbers ≥ 0" if integer else "finite numbers"
        raise ValueError(f"calibration key {key!r} must be a list of {k} {kind}, got {value!r}")
    return np.array(value, dtype=np.int64 if integer else np.float64)


def _nested(calibration: dict[str, Any], key: str, k: int, *, integer: bool = False) -> tuple[np.ndarray, ...]:
    value = calibration.get(key)
    if (
        not isinstance(value, list)
        or len(value) != k
        or not all(isinstance(v, list) and v and all(_is_number(x, integer) for x in v) for v in value)
    ):
        raise ValueError(f"calibration key {key!r} must be {k} non-empty lists of numbers, one per class")
    return tuple(np.array(v, dtype=np.int64 if integer else np.float64) for v in value)


def _is_number(v: Any, integer: bool) -> bool:
    if isinstance(v, bool):
        return False
    if integer:
        return isinstance(v, int) and v >= 0
    return isinstance(v, (int, float)) and bool(np.isfinite(v))
