"""A multiclass job's labels as they arrive (text, whole numbers, booleans) read as indices into target.classes."""

from __future__ import annotations

from collections.abc import Sequence

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
        as_int = pl.when(whole).then(labels.cast(pl.Int64, strict=False).cast(pl.String)).otherwise(labels.cast(pl.String))
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
