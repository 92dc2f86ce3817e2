"""Features declared in a job spec's `features:` section: tabular jobs need no Python module.

Each declared column is one model feature computed from one raw column, by one polars expression
per feature over the whole chunk:

- numeric: the number, clipped when `clip` is given; null and NaN are missing;
- boolean: the raw value's text, trimmed and lower-cased, in `true_values` → 1, in `false_values`
  → 0, anything else missing (a polars Boolean column is 1/0 as it is; a numeric one compares its
  numbers with the lists' numbers);
- categorical: the position of the raw value (as text) in `categories`; an unseen value is
  missing, never a wrong code.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from tasks.contracts import FeatureKind
from tasks.errors import JobSpecError
from tasks.features.config import DeclaredColumn
from tasks.features.config import DeclaredFeatures as DeclaredFeaturesSpec


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _accepts(column: DeclaredColumn, dtype: pl.DataType) -> bool:
    if dtype == pl.Null:
        return True
    if column.kind == "numeric":
        return dtype.is_numeric() or dtype == pl.Boolean
    if column.kind == "boolean":
        return dtype.is_numeric() or dtype in (pl.Boolean, pl.String, pl.Categorical) or isinstance(dtype, pl.Enum)
    return dtype.is_integer() or dtype in (pl.Boolean, pl.String, pl.Categorical) or isinstance(dtype, pl.Enum)


_NEEDS = {
    "numeric": "numbers (an integer, float or boolean column)",
    "boolean": "true/false values (a boolean, string or numeric column)",
    "categorical": "categories (a string, integer or boolean column)",
}


def _feature(column: DeclaredColumn, dtype: pl.DataType) -> pl.Expr:
    raw = pl.col(column.raw_column)
    if dtype == pl.Null:
        return pl.lit(None, dtype=pl.Float32)
    if column.kind == "numeric":
        value = raw.cast(pl.Float64)
        if column.clip is not None:
            value = value.clip(lower_bound=column.clip[0], upper_bound=column.clip[1])
        return value.cast(pl.Float32)
    if column.kind == "boolean":
        if dtype == pl.Boolean:
            return raw.cast(pl.Float32)
        if dtype.is_numeric():
            number = raw.cast(pl.Float64)
            truthy = number.is_in([float(v) for v in column.truthy if _is_number(v)])
            falsy = number.is_in([float(v) for v in column.falsy if _is_number(v)])
        else:
            text = raw.cast(pl.String).str.strip_chars().str.to_lowercase()
            truthy, falsy = text.is_in(list(column.truthy)), text.is_in(list(column.falsy))
        return pl.when(truthy).then(pl.lit(1.0, pl.Float32)).when(falsy).then(pl.lit(0.0, pl.Float32)).otherwise(None)
    categories = list(column.categories or ())
    return raw.cast(pl.String).replace_strict(
        categories, list(range(len(categories))), default=None, return_dtype=pl.Float32
    )


class DeclaredFeatures:
    """A job spec's declared features as a FeatureModule (see tasks/features/__init__.py)."""

    def __init__(self, spec: DeclaredFeaturesSpec) -> None:
        self.spec = spec
        self.FEATURE_VERSION: str = spec.version
        self.FEATURES: tuple[str, ...] = tuple(c.name for c in spec.columns)
        self.FEATURE_KINDS: dict[str, FeatureKind] = {c.name: c.kind for c in spec.columns}
        self.CATEGORIES: dict[str, tuple[str, ...]] = {
            c.name: tuple(c.categories or ()) for c in spec.columns if c.kind == "categorical"
        }

    def __repr__(self) -> str:
        return f"DeclaredFeatures(version={self.FEATURE_VERSION!r}, features={list(self.FEATURES)})"

    def checked_schema(self, schema: pl.Schema, *, where: str) -> None:
        """Every declared feature's raw column is in `schema` with a type its kind can read, or a
        JobSpecError naming `where`, the column, its type and the columns there are."""
        problems = []
        for column in self.spec.columns:
            dtype = schema.get(column.raw_column)
            if dtype is None:
                problems.append(f"feature {column.name!r} needs raw column {column.raw_column!r}, which is missing")
            elif not _accepts(column, dtype):
                hint = (
                    " (numbers stored as text: cast them upstream, or declare the feature categorical)"
                    if dtype == pl.String
                    else ""
                )
                problems.append(
                    f"feature {column.name!r} is {column.kind} and needs {_NEEDS[column.kind]}, "
                    f"but raw column {column.raw_column!r} has type {dtype}{hint}"
                )
        if problems:
            raise JobSpecError(f"{where}: " + "; ".join(problems) + f"; the columns there: {', '.join(schema.names())}")

    def checked_raw_schema(self, schema: pa.Schema, *, where: str) -> None:
        """`checked_schema` on a raw Parquet file's Arrow schema, before anything is read or scored."""
        self.checked_schema(pl.from_arrow(schema.empty_table()).schema, where=where)

    def feature_matrix(self, frame: pl.DataFrame) -> np.ndarray:
        """The model input: rows × FEATURES as a C-contiguous float32 array, NaN where missing."""
        self.checked_schema(frame.schema, where="features declared in the job spec")
        encoded = frame.select(
            _feature(c, frame.schema[c.raw_column]).cast(pl.Float32).alias(c.name) for c in self.spec.columns
        )
        return np.ascontiguousarray(encoded.to_numpy(order="c"), dtype=np.float32)
