"""The expectation types the guards compile to polars expressions, evaluated together once per chunk
on the raw values, so per-expectation counts are the unexpected counts GX itself reports for the same data.

Semantics shared with GX: nulls and NaN are both missing, which only `not_be_null` flags. One
deliberate difference: ±inf is never `between`, even when a bound is open, because no model
input may be infinite (GX lets +inf pass a minimum-only check).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import polars as pl

from tasks.errors import GuardFailure

Action = Literal["repair", "quarantine", "fail"]
EvaluatedBy = Literal["compiled", "great_expectations", "partition_prepass", "implicit"]

TYPE_FAMILIES: dict[str, Callable[[pl.DataType], bool]] = {
    **dict.fromkeys(("float", "float32", "float64", "double"), lambda t: t.is_float()),
    **dict.fromkeys(("int", "int8", "int16", "int32", "int64", "integer", "bigint"), lambda t: t.is_integer()),
    **dict.fromkeys(("str", "string", "varchar"), lambda t: t == pl.String),
    **dict.fromkeys(("bool", "boolean"), lambda t: t == pl.Boolean),
}
"""`expect_column_values_to_be_of_type` type names (as GX writes them for pandas) → polars dtype test."""


@dataclass(frozen=True)
class Expectation:
    """One row-level expectation: a violation test and the action it carries."""

    key: str
    type: str
    column: str
    kwargs: dict[str, Any]
    action: Action
    evaluated_by: EvaluatedBy = "compiled"
    repair: Literal["default", "clip"] | None = None
    default: Any = None

    def violated(self, frame: pl.DataFrame) -> pl.Expr:
        if frame.get_column(self.column).dtype == pl.Null:
            # A column without a single value: only "not null" can be broken, by every row.
            col = pl.col(self.column)
            return col.is_null() if self.type == "expect_column_values_to_not_be_null" else col.is_not_null()
        return VIOLATIONS[self.type](self, frame)

    def repaired_value(self, dtype: pl.DataType) -> pl.Expr:
        if self.repair == "default":
            return pl.lit(self.default, dtype=None)
        lo, hi = self.kwargs.get("min_value"), self.kwargs.get("max_value")
        # ±inf clip to the bounds; an open side leaves them infinite, so clip those to missing.
        clipped = pl.col(self.column).clip(lower_bound=lo, upper_bound=hi)
        return pl.when(clipped.is_infinite()).then(None).otherwise(clipped) if dtype.is_float() else clipped


def _needs(exp: Expectation, frame: pl.DataFrame, ok: Callable[[pl.DataType], bool], what: str) -> pl.DataType:
    dtype = frame.get_column(exp.column).dtype
    if not ok(dtype):
        example = frame[exp.column].drop_nulls().head(1).to_list()
        raise GuardFailure(
            f"column {exp.column!r} has type {dtype}, but {exp.key} needs {what} (e.g. a value {example})"
        )
    return dtype


def _between(exp: Expectation, frame: pl.DataFrame) -> pl.Expr:
    dtype = _needs(exp, frame, lambda t: t.is_numeric(), "numbers")
    col = pl.col(exp.column)
    lo, hi = exp.kwargs.get("min_value"), exp.kwargs.get("max_value")
    strict_min, strict_max = bool(exp.kwargs.get("strict_min")), bool(exp.kwargs.get("strict_max"))
    if lo is not None and hi is not None:
        closed = {(False, False): "both", (True, False): "right", (False, True): "left", (True, True): "none"}
        ok = col.is_between(lo, hi, closed=closed[strict_min, strict_max])
    elif lo is not None:
        ok = (col > lo) if strict_min else (col >= lo)
    else:
        ok = (col < hi) if strict_max else (col <= hi)
    if not dtype.is_float():
        return ~ok
    if lo is None or hi is None:
        # Two finite bounds already leave ±inf out; an open side would let it through.
        ok = ok & ~col.is_infinite()
    # Missing values only break not_be_null: a null stays null here (callers fill it as False),
    # and NaN, which polars orders above every number, is let through explicitly.
    return ~(ok | col.is_nan())


def _not_null(exp: Expectation, frame: pl.DataFrame) -> pl.Expr:
    col = pl.col(exp.column)
    return (col.is_null() | col.is_nan()) if frame.get_column(exp.column).dtype.is_float() else col.is_null()


_EQUALITY_CHAIN_MAX = 16
"""Sets up to this size are checked as a chain of equalities: polars compares string views by
their inline prefix, about 3 times faster than hashing every value for `is_in`."""


def _in_set(exp: Expectation, frame: pl.DataFrame) -> pl.Expr:
    col, values = pl.col(exp.column), exp.kwargs["value_set"]
    if values and len(values) <= _EQUALITY_CHAIN_MAX and not any(v is None for v in values):
        member = functools.reduce(operator.or_, (col == v for v in values))
    else:
        member = col.is_in(values)
    # A null stays null (callers fill it as False); NaN is missing, not a value outside the set.
    return (~member & ~col.is_nan()) if frame.get_column(exp.column).dtype.is_float() else ~member


def _regex(exp: Expectation, frame: pl.DataFrame) -> pl.Expr:
    _needs(exp, frame, lambda t: t == pl.String, "strings")
    return ~pl.col(exp.column).str.contains(exp.kwargs["compiled_regex"])


def rust_regex(pattern: str) -> str | None:
    r"""`pattern` with Python's `re` meaning in polars' regex dialect, or None when it has no equivalent.

    GX matches with Python's `re.search`, where a bare `$` also matches before a final newline;
    polars' `$` does not, so it becomes `\n?\z`. Python-only syntax (look-around, `\Z`) does not
    compile in polars: such a pattern is left to GX.
    """
    out, i, in_class = [], 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                out.append("[^")
                i += 2
                if pattern[i : i + 1] == "]":
                    out.append("]")
                    i += 1
                continue
            if pattern[i + 1 : i + 2] == "]":
                out.append("[]")
                i += 2
                continue
        elif ch == "$":
            out.append(r"(?:\n?\z)")
            i += 1
            continue
        out.append(ch)
        i += 1
    translated = "".join(out)
    try:
        pl.Series([""], dtype=pl.String).str.contains(translated)
    except pl.exceptions.PolarsError:
        return None
    return translated


def _lengths(exp: Expectation, frame: pl.DataFrame) -> pl.Expr:
    dtype = _needs(exp, frame, lambda t: t == pl.String or isinstance(t, pl.List | pl.Array), "strings or lists")
    # A list's length is its number of elements (e.g. samples in a vibration window), as in GX's pandas.
    length = pl.col(exp.column).str.len_chars() if dtype == pl.String else pl.col(exp.column).list.len()
    lo, hi = exp.kwargs.get("min_value"), exp.kwargs.get("max_value")
    ok = pl.lit(True)
    if lo is not None:
        ok = ok & ((length > lo) if exp.kwargs.get("strict_min") else (length >= lo))
    if hi is not None:
        ok = ok & ((length < hi) if exp.kwargs.get("strict_max") else (length <= hi))
    return ~ok


VIOLATIONS: dict[str, Callable[[Expectation, pl.DataFrame], pl.Expr]] = {
    "expect_column_values_to_be_between": _between,
    "expect_column_values_to_not_be_null": _not_null,
    "expect_column_values_to_be_in_set": _in_set,
    "expect_column_values_to_match_regex": _regex,
    "expect_column_value_lengths_to_be_between": _lengths,
}
COLUMN_LEVEL_TYPES = (
    "expect_column_to_exist",
    "expect_column_values_to_be_of_type",
    "expect_column_values_to_be_in_type_list",
)
COMPILED_TYPES = frozenset(VIOLATIONS) | frozenset(COLUMN_LEVEL_TYPES)
BOUNDED_TYPES = ("expect_column_values_to_be_between", "expect_column_value_lengths_to_be_between")


@dataclass(frozen=True)
class ColumnCheck:
    """A column-level expectation (exists, has a type); breaking one always fails the run."""

    key: str
    type: str
    column: str
    type_names: tuple[str, ...] = ()


def expectation_key(etype: str, column: str) -> str:
    return f"{etype.removeprefix('expect_column_values_to_').removeprefix('expect_column_')}({column})"
