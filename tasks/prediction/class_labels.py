"""Labels as they arrive (text, whole numbers, booleans): a multiclass job's read as indices into target.classes, a
binary job's as 1 (the event) and 0, where the event is 1, true, or the value the job names (`positive`)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl


def predict_class_label_text(labels: pl.Series) -> pl.Series:
    """The labels as the text a class name is compared with: whole numbers without a decimal point (a
    label column read as float gives `2.0` for class `2`), booleans as true/false, text as it is."""
    dtype = labels.dtype
    if dtype == pl.Boolean:
        return labels.cast(pl.String).str.to_lowercase()
    if dtype.is_float():
        whole = labels.is_not_null() & labels.is_finite() & (labels == labels.round(0))
        as_int = (
            pl.when(whole).then(labels.cast(pl.Int64, strict=False).cast(pl.String)).otherwise(labels.cast(pl.String))
        )
        return pl.select(as_int.alias(labels.name)).to_series()
    return labels.cast(pl.String)


def predict_class_label_indices(labels: pl.Series, classes: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Each label's index into `classes` (-1 where it names none of them, or is missing), and the label values
    that name no class (sorted, missing shown as `null`), which a caller refuses or counts."""
    text = predict_class_label_text(labels)
    lookup = pl.DataFrame({"_label": list(classes), "_index": np.arange(len(classes), dtype=np.int64)})
    joined = pl.DataFrame({"_label": text}).join(lookup, on="_label", how="left", maintain_order="left")
    indices = joined["_index"].fill_null(-1).to_numpy()
    unknown = sorted({"null" if v is None else v for v in text.filter(joined["_index"].is_null()).to_list()})
    return indices, unknown


_TRUE_WORDS = ("1", "true", "yes", "y", "t")


@dataclass(frozen=True)
class BinaryLabels:
    """A binary job's labels read as events: `events` is 1 (the event), 0 or null (no label yet) per row, and None
    with a `problem` (what the labels hold, and what to say, without where they came from) when they cannot be read."""

    events: pl.Series | None
    problem: str | None = None
    suggested: str | None = None
    """The value a two-valued label without `positive` would most likely name as the event, for the caller's hint."""


def predict_binary_label_events(
    labels: pl.Series,
    *,
    positive: str | None,
    negative: str | None = None,
    flag: bool = True,
) -> BinaryLabels:
    """`labels` as 1 (the event) / 0 / null. Without `positive`: booleans (true is the event) or 0/1, and two other
    values are a problem naming them and the `--positive` to add (`flag`; else the spec's monitoring.labels.positive),
    since guessing the event would silently invert every probability when wrong. With `positive` (compared with the
    labels' text, `predict_class_label_text`): that value is 1, `negative` (or, when not given, the one other value) 0;
    any further value is a problem, never a 0."""
    present = labels.drop_nulls()
    if positive is None:
        if labels.dtype == pl.Boolean:
            return BinaryLabels(labels.cast(pl.Int8))
        numbers = (
            labels.cast(pl.Float64, strict=False) if labels.dtype.is_numeric() or labels.dtype == pl.String else None
        )
        zero_one = None if numbers is None else numbers.is_in([0.0, 1.0]).fill_null(False)
        if numbers is not None and zero_one is not None and int(zero_one.sum()) == present.len():
            return BinaryLabels(numbers.cast(pl.Int8))
        counts = predict_class_label_text(present).value_counts(name="n", sort=True)
        found = sorted(counts[counts.columns[0]].to_list())
        if len(found) == 2:
            rarer = counts[counts.columns[0]][-1]
            likely = next((v for v in found if v.strip().lower() in _TRUE_WORDS), rarer)
            other = found[1 - found.index(likely)]
            shown = sorted(present.unique().to_list()) if labels.dtype.is_numeric() else found
            said = (
                f"with --positive {shlex.quote(likely)} (or --positive {shlex.quote(other)})"
                if flag
                else f"as positive: {json.dumps(likely)} (or {json.dumps(other)}) under "
                "monitoring.labels in the job spec"
            )
            return BinaryLabels(None, f"has values {shown}: say which is the event {said}", suggested=likely)
        wrong = present if zero_one is None else labels.filter(labels.is_not_null() & ~zero_one)
        return BinaryLabels(
            None,
            (
                f"must be 1 (the event) or 0 (or true/false); {wrong.len():,} row(s) are not, e.g. "
                f"{sorted(wrong.unique().head(5).to_list())}"
            ),
        )
    text = predict_class_label_text(labels)
    event = positive.lower() if labels.dtype == pl.Boolean and positive.lower() in ("true", "false") else positive
    values = sorted(set(text.drop_nulls().to_list()))
    others = [v for v in values if v != event]
    quoted = (
        "; YAML reads an unquoted yes/no/on/off as true/false: quote the value in the spec"
        if event in ("true", "false") and labels.dtype != pl.Boolean
        else ""
    )
    if negative is None and len(others) > 1:
        what = (
            f"none of them the event {event!r} (compared exactly, as text)"
            if event not in values
            else f"but besides the event {event!r} one other value is read as 0, and a third is "
            "refused rather than read as 0"
        )
        return BinaryLabels(None, f"has values {values}, {what}{quoted}")
    unexpected = [v for v in others if v != negative] if negative is not None else []
    if unexpected:
        rows = int(text.is_in(unexpected).sum())
        return BinaryLabels(
            None,
            (
                f"holds {unexpected[:5]} on {rows:,} row(s), neither the event {event!r} nor {negative!r}: a label "
                f"the job does not know is refused, not read as 0{quoted}"
            ),
        )
    return BinaryLabels(
        pl.select(
            pl.when(text.is_null()).then(None).otherwise((text == event).cast(pl.Int8)).alias(labels.name)
        ).to_series()
    )
