"""Reason codes: the features that pushed a row's margin most toward the event (binary jobs),
or that moved a forecast most, up or down (forecast jobs).

A reason's text may depend on the row's own value of the feature (`by_band`, `by_cut`,
`by_value` in the job spec); the explained rows' values come with their contributions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa

from tasks.contracts import FeatureContributions, FeatureKind
from tasks.prediction.config import ReasonCode, ReasonConfig

_BOOLEAN_KEYS = {"0": 0.0, "1": 1.0, "false": 0.0, "true": 1.0}


@dataclass(frozen=True)
class ReasonCodes:
    """Per explained row, its reason codes and texts (lists, largest contribution first)."""

    codes: pa.ListArray
    texts: pa.ListArray
    without_pushing_factor: int


@dataclass(frozen=True)
class ValueTexts:
    """How one feature's value picks its reason text: ranges between `cuts`, or exact `values`.

    Values and cuts are compared as float32, the precision of the model input, so a value written
    as 0.35 in the data lands where the spec's cut 0.35 puts it.
    """

    texts: tuple[str, ...]
    cuts: np.ndarray | None = None
    cut_side: Literal["left", "right"] = "right"
    """`right`: a value on a cut belongs to the range above it (by_cut); `left`: below (by_band's median)."""
    values: np.ndarray | None = None

    def variant(self, x: np.ndarray) -> np.ndarray:
        """Index into `texts` per value; -1 (the default text) for a missing or uncovered value."""
        x = np.asarray(x, dtype=np.float32)
        if self.cuts is not None:
            index = np.searchsorted(self.cuts, x, side=self.cut_side)
        else:
            assert self.values is not None, "a ValueTexts has its cuts or its values"
            order = np.argsort(self.values, kind="stable")
            sorted_values = self.values[order]
            pos = np.minimum(np.searchsorted(sorted_values, x), len(sorted_values) - 1)
            index = np.where(sorted_values[pos] == x, order[pos], -1)
        return np.where(np.isnan(x), -1, index)


@dataclass(frozen=True)
class ReasonTexts:
    """The job's value-dependent reason texts, resolved against its features and the model's medians."""

    by_feature: Mapping[str, ValueTexts] = field(default_factory=dict)
    defaulted: frozenset[str] = frozenset()
    """Features whose variants could not be resolved by the job's choice (no training median): default text."""


def _meant_value(key: str, kind: FeatureKind, names: tuple[str, ...]) -> float | None:
    """The feature value a by_value key stands for (a categorical's code, a boolean's 0/1), or None."""
    if kind == "categorical" and names:
        return float(names.index(key)) if key in names else None
    if kind == "boolean":
        if key.lower() in _BOOLEAN_KEYS:
            return _BOOLEAN_KEYS[key.lower()]
        number = _number(key)
        return number if number in (0.0, 1.0) else None
    return _number(key)


def _number(key: str) -> float | None:
    try:
        value = float(key)
    except ValueError:
        return None
    return value if np.isfinite(value) else None


def _value_problems(feature: str, reason: ReasonCode, kind: FeatureKind, names: tuple[str, ...]) -> list[str]:
    where = f"prediction.reasons.codes.{feature}"
    problems = [
        f"{where}.{variant}: {feature} is {kind}, which has no order to band or cut; use by_value"
        for variant in ("by_band", "by_cut")
        if getattr(reason, variant) is not None and kind != "numeric"
    ]
    meant: dict[float, str] = {}
    for key in reason.by_value or {}:
        value = _meant_value(key, kind, names)
        if value is None and kind == "categorical" and names:
            problems.append(
                f"{where}.by_value: key {key!r} is not a category of {feature} (categories: {', '.join(names)})"
            )
        elif value is None and kind == "boolean":
            problems.append(
                f"{where}.by_value: key {key!r} is not a value of the boolean {feature} (use 0/1 or true/false)"
            )
        elif value is None:
            problems.append(f"{where}.by_value: key {key!r} is not a number (the {kind} {feature} has numeric values)")
        elif value in meant:
            problems.append(f"{where}.by_value: keys {meant[value]!r} and {key!r} name the same value")
        else:
            meant[value] = key
    return problems


def predict_reason_text_problems(
    reasons: ReasonConfig, *, kinds: Mapping[str, FeatureKind], categories: Mapping[str, tuple[str, ...]]
) -> list[str]:
    """What in the reason texts does not fit the features: `prediction.reasons.codes.<feature>.<variant>: …`
    per problem (a by_value key that is not a category, by_band on a categorical feature, …).

    Features missing from `kinds` (e.g. a feature model's output) are numeric.
    """
    problems = []
    for feature, reason in reasons.codes.items():
        problems += _value_problems(feature, reason, kinds.get(feature, "numeric"), tuple(categories.get(feature, ())))
    return problems


def predict_reason_texts(
    reasons: ReasonConfig,
    *,
    kinds: Mapping[str, FeatureKind],
    categories: Mapping[str, tuple[str, ...]],
    medians: Mapping[str, float],
    bands_without_median: Literal["refuse", "default_text"] = "refuse",
) -> ReasonTexts:
    """The value-dependent texts resolved: category names to their codes, by_band to the training median.

    Raises ValueError naming the field when the spec does not fit the features, or when a by_band
    feature has no training median in `medians` — unless `bands_without_median="default_text"` (a
    model scored without a training reference by the job's choice), where such a feature's rows get
    its default `text`.
    """
    problems = predict_reason_text_problems(reasons, kinds=kinds, categories=categories)
    missing = [f for f, r in reasons.codes.items() if r.by_band is not None and f not in medians]
    unbanded = set(missing) if bands_without_median == "default_text" else set()
    missing = [f for f in missing if f not in unbanded]
    problems += [
        f"prediction.reasons.codes.{f}.by_band: the model's training reference has no median (quantiles.p50) of {f}"
        for f in missing
    ]
    if problems:
        raise ValueError("; ".join(problems))
    resolved: dict[str, ValueTexts] = {}
    for feature, reason in reasons.codes.items():
        kind = kinds.get(feature, "numeric")
        if feature in unbanded:
            continue
        if reason.by_band is not None:
            resolved[feature] = ValueTexts(
                texts=(reason.by_band.low, reason.by_band.high),
                cuts=np.array([medians[feature]], dtype=np.float32),
                cut_side="left",
            )
        elif reason.by_cut is not None:
            resolved[feature] = ValueTexts(
                texts=tuple(reason.by_cut.texts), cuts=np.array(reason.by_cut.cuts, dtype=np.float32)
            )
        elif reason.by_value:
            names = tuple(categories.get(feature, ()))
            values = [_meant_value(k, kind, names) for k in reason.by_value]
            resolved[feature] = ValueTexts(
                texts=tuple(reason.by_value.values()), values=np.array(values, dtype=np.float32)
            )
    return ReasonTexts(by_feature=resolved, defaulted=frozenset(unbanded))


FORECAST_DIRECTIONS = (("_UP", "raised the forecast"), ("_DOWN", "lowered the forecast"))
"""A forecast reason's code suffix and the words after its text, for a contribution above and below 0."""


def _checked_texts(
    contributions: FeatureContributions, config: ReasonConfig, texts: ReasonTexts | None
) -> tuple[Mapping[str, ValueTexts], list[int]]:
    names = contributions.feature_names
    missing = [f for f in names if f not in config.codes]
    if missing:
        raise ValueError(f"reason table lacks codes for model feature(s) {missing}")
    by_feature = texts.by_feature if texts is not None else {}
    defaulted = texts.defaulted if texts is not None else frozenset()
    unresolved = [f for f in names if config.codes[f].varies and f not in by_feature and f not in defaulted]
    if unresolved:
        raise ValueError(
            f"reason texts of {unresolved} depend on the value, but were not resolved (predict_reason_texts)"
        )
    varying = [j for j, f in enumerate(names) if f in by_feature]
    if varying and contributions.feature_values is None:
        raise ValueError(
            f"reason texts of {[names[j] for j in varying]} depend on the value, but the "
            "contributions carry no feature values"
        )
    return by_feature, varying


def predict_forecast_reason_codes(
    contributions: FeatureContributions, config: ReasonConfig, texts: ReasonTexts | None = None
) -> ReasonCodes:
    """Top-k contributions by size per row, largest first, each saying whether it raised (`<CODE>_UP`,
    "<text> raised the forecast") or lowered (`<CODE>_DOWN`) the forecast; ties go to the earlier
    model feature. A feature contributing exactly 0 is never a reason; a row where none moves the
    forecast gets an empty list and is counted in `without_pushing_factor`."""
    names = contributions.feature_names
    by_feature, varying = _checked_texts(contributions, config, texts)
    codes = pa.array([config.codes[f].code + suffix for f in names for suffix, _ in FORECAST_DIRECTIONS], pa.string())
    # The text table: per feature its default text and variants, each once raised then once lowered.
    text_list: list[str] = []
    first_text = np.zeros(len(names), dtype=np.int64)
    for j, f in enumerate(names):
        first_text[j] = len(text_list)
        for _, words in FORECAST_DIRECTIONS:
            text_list += [
                f"{t} {words}" for t in (config.codes[f].text, *(by_feature[f].texts if f in by_feature else ()))
            ]
    variants = np.array([1 + (len(by_feature[f].texts) if f in by_feature else 0) for f in names], dtype=np.int64)
    values = contributions.values
    order = np.argsort(-np.abs(values), axis=1, kind="stable")[:, : config.top_k]
    picked_values = np.take_along_axis(values, order, axis=1)
    chosen = picked_values != 0
    down = picked_values < 0
    text_index = first_text[order] + down * variants[order]
    for j in varying:
        assert contributions.feature_values is not None, "_checked_texts refuses varying texts without feature values"
        at = chosen & (order == j)
        rows = np.nonzero(at)[0]
        text_index[at] += 1 + by_feature[names[j]].variant(contributions.feature_values[rows, j])
    lengths = chosen.sum(axis=1)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    code_index = (2 * order + down)[chosen].astype(np.int64)
    return ReasonCodes(
        codes=pa.ListArray.from_arrays(offsets, codes.take(pa.array(code_index))),
        texts=pa.ListArray.from_arrays(offsets, pa.array(text_list, pa.string()).take(pa.array(text_index[chosen]))),
        without_pushing_factor=int((lengths == 0).sum()),
    )


def predict_reason_codes(
    contributions: FeatureContributions, config: ReasonConfig, texts: ReasonTexts | None = None
) -> ReasonCodes:
    """Top-k positive contributions per row, largest first; ties go to the earlier model feature.

    A row where no feature pushes toward the event (a multiclass job: its predicted class) gets
    `no_reason_code` (an empty list where the spec gives none), and is counted. A
    feature with value-dependent texts (`texts`) gets the text its value in that row picks, the
    default `text` where the value is missing or no variant covers it.
    Vectorised: one sort of the matrix, then the lists are cut from a flat array of code indices.
    """
    names = contributions.feature_names
    by_feature, varying = _checked_texts(contributions, config, texts)
    codes = pa.array([config.codes[f].code for f in names] + [config.no_reason_code], pa.string())
    # The text table: each feature's default text, then its variants; the no-reason text (or null) last.
    text_list: list[str | None] = []
    first_text = np.zeros(len(names) + 1, dtype=np.int64)
    for j, f in enumerate(names):
        first_text[j] = len(text_list)
        text_list += [config.codes[f].text, *(by_feature[f].texts if f in by_feature else ())]
    first_text[-1] = len(text_list)
    text_list.append(config.no_reason_text)
    values = contributions.values
    # Stable sort on the negated value keeps feature order among equal contributions.
    order = np.argsort(-values, axis=1, kind="stable")[:, : config.top_k]
    chosen = np.take_along_axis(values, order, axis=1) > 0
    # Sorted largest first, so a row's positive contributions are a prefix of its top k (k >= 1);
    # a row with none gets the no-reason entry, the last of the code table.
    none = ~chosen[:, 0]
    if config.no_reason_code is not None:
        order[none, 0] = len(names)
        chosen[none, 0] = True
    text_index = first_text[order]
    for j in varying:
        assert contributions.feature_values is not None, "_checked_texts refuses varying texts without feature values"
        at = chosen & (order == j)
        rows = np.nonzero(at)[0]
        text_index[at] += 1 + by_feature[names[j]].variant(contributions.feature_values[rows, j])
    lengths = chosen.sum(axis=1)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    picked = pa.array(order[chosen].astype(np.int64))
    return ReasonCodes(
        codes=pa.ListArray.from_arrays(offsets, codes.take(picked)),
        texts=pa.ListArray.from_arrays(offsets, pa.array(text_list, pa.string()).take(pa.array(text_index[chosen]))),
        without_pushing_factor=int(none.sum()),
    )
