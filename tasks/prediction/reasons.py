"""Reason codes: the features that pushed a row's margin most toward the adverse outcome."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tasks.contracts import FeatureContributions
from tasks.jobspec import ReasonConfig


@dataclass(frozen=True)
class ReasonCodes:
    codes: list[list[str]]
    texts: list[list[str]]
    without_adverse_factor: int


def predict_reason_codes(contributions: FeatureContributions, config: ReasonConfig) -> ReasonCodes:
    """Top-k positive contributions per row, largest first; ties go to the earlier model feature.

    A row where no feature pushes toward the event gets `no_adverse_code`, and is counted.
    """
    names = contributions.feature_names
    missing = [f for f in names if f not in config.codes]
    if missing:
        raise ValueError(f"reason table lacks codes for model feature(s) {missing}")
    codes = np.array([config.codes[f].code for f in names], dtype=object)
    texts = np.array([config.codes[f].text for f in names], dtype=object)
    values = contributions.values
    # Stable sort on the negated value keeps feature order among equal contributions.
    order = np.argsort(-values, axis=1, kind="stable")[:, : config.top_k]
    top = np.take_along_axis(values, order, axis=1)
    out_codes: list[list[str]] = []
    out_texts: list[list[str]] = []
    none = 0
    for row_order, row_top in zip(order, top):
        chosen = row_order[row_top > 0]
        if chosen.size == 0:
            none += 1
            out_codes.append([config.no_adverse_code])
            out_texts.append([config.no_adverse_text])
        else:
            out_codes.append(codes[chosen].tolist())
            out_texts.append(texts[chosen].tolist())
    return ReasonCodes(codes=out_codes, texts=out_texts, without_adverse_factor=none)
