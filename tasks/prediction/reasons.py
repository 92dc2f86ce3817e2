"""Reason codes: the features that pushed a row's margin most toward the adverse outcome."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tasks.contracts import FeatureContributions
from tasks.jobspec import ReasonConfig


@dataclass(frozen=True)
class ReasonCodes:
    """Per explained row, its reason codes and texts (lists, largest contribution first)."""

    codes: pa.ListArray
    texts: pa.ListArray
    without_adverse_factor: int


def predict_reason_codes(contributions: FeatureContributions, config: ReasonConfig) -> ReasonCodes:
    """Top-k positive contributions per row, largest first; ties go to the earlier model feature.

    A row where no feature pushes toward the event gets `no_adverse_code`, and is counted.
    Vectorised: one sort of the matrix, then the lists are cut from a flat array of code indices.
    """
    names = contributions.feature_names
    missing = [f for f in names if f not in config.codes]
    if missing:
        raise ValueError(f"reason table lacks codes for model feature(s) {missing}")
    codes = pa.array([config.codes[f].code for f in names] + [config.no_adverse_code], pa.string())
    texts = pa.array([config.codes[f].text for f in names] + [config.no_adverse_text], pa.string())
    values = contributions.values
    # Stable sort on the negated value keeps feature order among equal contributions.
    order = np.argsort(-values, axis=1, kind="stable")[:, : config.top_k]
    chosen = np.take_along_axis(values, order, axis=1) > 0
    # Sorted largest first, so a row's positive contributions are a prefix of its top k (k >= 1);
    # a row with none gets the no-adverse entry, the last of the code table.
    none = ~chosen[:, 0]
    order[none, 0] = len(names)
    chosen[none, 0] = True
    lengths = chosen.sum(axis=1)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    picked = pa.array(order[chosen].astype(np.int64))
    return ReasonCodes(
        codes=pa.ListArray.from_arrays(offsets, codes.take(picked)),
        texts=pa.ListArray.from_arrays(offsets, texts.take(picked)),
        without_adverse_factor=int(none.sum()),
    )
