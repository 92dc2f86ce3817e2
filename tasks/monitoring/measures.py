"""Realized measures of calibrated probabilities against 0/1 outcomes, numpy only (no scipy.stats on
the run path): the outcomes flow, model health's hold-out check and the champion/challenger
comparison all compute them here."""

from __future__ import annotations

import numpy as np


def exact_auc(labels: np.ndarray, probability: np.ndarray) -> float:
    """AUC by Mann–Whitney: P(p_event > p_non-event) + ½ P(tie), over all event/non-event pairs,
    counted exactly in integers; NaN unless both classes occur."""
    y = np.asarray(labels, dtype=np.int64)
    positives = int(y.sum())
    negatives = int(y.size - positives)
    if positives == 0 or negatives == 0:
        return float("nan")
    _, group = np.unique(np.asarray(probability, dtype=np.float64), return_inverse=True)
    group = group.ravel()
    size = int(group.max()) + 1
    pos = np.bincount(group[y == 1], minlength=size).astype(np.int64)
    neg = np.bincount(group, minlength=size).astype(np.int64) - pos
    below = np.cumsum(neg) - neg
    twice_wins = 2 * int(pos @ below) + int(pos @ neg)
    return twice_wins / (2 * positives * negatives)


def brier_score(labels: np.ndarray, probability: np.ndarray) -> float:
    """Mean squared difference between probability and outcome; NaN without rows."""
    if labels.size == 0:
        return float("nan")
    return float(np.mean((np.asarray(probability, dtype=np.float64) - labels) ** 2))
