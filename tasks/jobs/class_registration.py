"""What registering a multiclass model settles beyond the other kinds: that the model's outputs are the
job's classes in the job's order, the calibration of its probability vector, and its classwise reliability
measured out of fold on the hold-out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tasks.prediction.multiclass import (
    ClassProbabilityMap,
    MulticlassCalibrator,
    predict_classwise_reliability,
    predict_fitted_multiclass_calibrator,
    predict_log_probabilities,
)

ORDER_CHECK_NATS = 0.05
"""Mean log-likelihood per hold-out row by which another order of the model's outputs must beat the spec's before
registration calls the order wrong: a swap of two classes the model tells apart costs far more; noise far less."""


def class_order_problem(margins: np.ndarray, labels: np.ndarray, classes: list[str]) -> str | None:
    """Why the model's outputs do not look like the job's classes in the job's order on the hold-out, or None.

    The likelihood of the hold-out's labels is computed for every assignment of outputs to classes at once
    (an assignment problem over the K × K table of summed log-probabilities); when the best assignment is
    not the spec's and beats it clearly, the spec lists the classes in another order than the model learnt them."""
    from scipy.optimize import linear_sum_assignment

    log_p = predict_log_probabilities(margins)
    k = len(classes)
    table = np.stack(
        [log_p[labels == j].sum(axis=0) for j in range(k)], axis=1
    )  # table[i, j]: output i read as class j
    rows, cols = linear_sum_assignment(-table)
    best = float(table[rows, cols].sum())
    given = float(np.trace(table))
    if np.array_equal(cols, np.arange(k)) or (best - given) / labels.size <= ORDER_CHECK_NATS:
        return None
    moved = [f"output {i} behaves like {classes[j]!r}" for i, j in zip(rows, cols, strict=True) if i != j]
    return (
        f"gives its outputs in another order than target.classes {classes}: on the hold-out, {', '.join(moved)} "
        f"(log-likelihood {best / labels.size:.3f} vs {given / labels.size:.3f} per row in the spec's order); list target.classes "
        "in the order the model learnt them (e.g. scikit-learn's clf.classes_, or the codes the labels were encoded with)"
    )


@dataclass(frozen=True)
class FittedClassCalibration:
    calibrator: MulticlassCalibrator
    reliability: dict[str, Any]
    """Classwise ECE and per-class calibration tables of the hold-out, each row calibrated by a fit on the other half."""
    accuracy: float
    log_loss: float
    """Of the out-of-fold calibrated probabilities."""
    uncalibrated_log_loss: float


def fitted_class_calibration(
    margins: np.ndarray, labels: np.ndarray, classes: list[str], *, level: float
) -> FittedClassCalibration:
    """The calibration of the probability vector on the whole hold-out, and its quality measured honestly: each
    half of the hold-out is calibrated by a fit on the other half (where each half holds every class)."""
    calibrator = predict_fitted_multiclass_calibrator(margins, labels, classes=classes)
    rng = np.random.default_rng(0)
    half = rng.permutation(labels.size) % 2 == 0
    out_of_fold = np.empty(margins.shape, dtype=np.float64)
    folds_hold_every_class = all(np.unique(labels[part]).size == len(classes) for part in (half, ~half))
    if folds_hold_every_class:
        for fit, apply in ((half, ~half), (~half, half)):
            fold = predict_fitted_multiclass_calibrator(margins[fit], labels[fit], classes=classes)
            out_of_fold[apply] = (
                ClassProbabilityMap(fold, level).predict_class_probabilities(margins[apply]).probabilities
            )
    else:
        out_of_fold = ClassProbabilityMap(calibrator, level).predict_class_probabilities(margins).probabilities
    reliability = predict_classwise_reliability(out_of_fold, labels, classes=classes)
    reliability["out_of_fold"] = folds_hold_every_class
    rows = np.arange(labels.size)
    raw = np.exp(predict_log_probabilities(margins))
    return FittedClassCalibration(
        calibrator=calibrator,
        reliability=reliability,
        accuracy=float((out_of_fold.argmax(axis=1) == labels).mean()),
        log_loss=float(-np.log(np.clip(out_of_fold[rows, labels], 1e-15, 1.0)).mean()),
        uncalibrated_log_loss=float(-np.log(np.clip(raw[rows, labels], 1e-15, 1.0)).mean()),
    )


def class_reference(probabilities: np.ndarray, classes: list[str]) -> dict[str, Any]:
    """The reference rows' predicted-class shares and mean calibrated probabilities: what class-mix drift compares with."""
    predicted = probabilities.argmax(axis=1)
    counts = np.bincount(predicted, minlength=len(classes))
    return {
        "rows": int(predicted.size),
        "predicted_share": {c: float(counts[i] / max(predicted.size, 1)) for i, c in enumerate(classes)},
        "mean_probability": {
            c: float(probabilities[:, i].mean()) if predicted.size else 0.0 for i, c in enumerate(classes)
        },
    }


def class_calibration_note(fitted: FittedClassCalibration) -> str:
    """The registration report's line on the calibration and its classwise reliability."""
    meta = fitted.calibrator.to_metadata()
    worst = max(fitted.reliability["classes"], key=lambda c: c["ece"])
    how = (
        "out of fold (each half calibrated by the other)"
        if fitted.reliability.get("out_of_fold")
        else "in sample (a half lacked a class)"
    )
    return (
        f"calibration: {meta.get('method', 'fitted')} of the probability vector; measured {how} on the hold-out: accuracy "
        f"{fitted.accuracy:.3f}, log loss {fitted.log_loss:.4f} (uncalibrated {fitted.uncalibrated_log_loss:.4f}), classwise ECE "
        f"{fitted.reliability['classwise_ece']:.4f}, worst class {worst['class']!r} ECE {worst['ece']:.4f} on {worst['rows']:,} rows"
    )
