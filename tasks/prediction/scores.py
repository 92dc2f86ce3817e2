"""The score 0–100 from the calibrated probability (the job calls it by its own name: `prediction.score.name`).

score = 50 + points_to_double_odds × log2(odds / base_odds), rounded and clipped to 0..100, where
odds = p / (1 − p) and base_odds is the odds of `base_probability`. Higher means the event is more likely; every
`points_to_double_odds` points double the odds of the event. The map is monotone in p.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class ScoreScale(Protocol):
    """What the score map reads of a tasks.prediction.config.ScoreConfig. That module proves its
    rule tables with this one (through decisions), so this one names only the fields it reads."""

    @property
    def base_probability(self) -> float: ...

    @property
    def points_to_double_odds(self) -> float: ...


def predict_score(probability: np.ndarray, config: ScoreScale) -> np.ndarray:
    p = np.clip(probability, 1e-12, 1 - 1e-12)
    base_odds = config.base_probability / (1 - config.base_probability)
    raw = 50.0 + config.points_to_double_odds * np.log2((p / (1 - p)) / base_odds)
    return np.clip(np.rint(raw), 0, 100).astype(np.int16)
