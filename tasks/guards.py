"""Feature guards compiled from a Great Expectations suite into vectorised polars checks.

The suite JSON (`expectations/<job>.json`) is the source of truth: GX loads it as it is, and each
expectation's `meta.guard` says what to do with a row that breaks it:

- `repair` — substitute `default`, or (`repair: clip`) clip to the expectation's bounds;
- `quarantine` — the row is not scored; it is recorded with the expectations it failed;
- `fail` — the run stops with a message naming the column, the expectation and examples.

Every action is counted per expectation and recorded per row; nothing is dropped uncounted.
The suite is read as JSON here so that scoring does not pay GX's import on every run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import polars as pl

from tasks.errors import GuardFailure, SuiteError

Action = Literal["repair", "quarantine", "fail"]

_ACTION_COLUMNS = {
    "entity_id": pl.String,
    "expectation": pl.String,
    "column": pl.String,
    "action": pl.String,
    "old_value": pl.String,
    "new_value": pl.String,
}
"""One row per (row, expectation) acted on: what was repaired or why a row was quarantined."""


@dataclass(frozen=True)
class Expectation:
    """One compiled expectation: a violation test and the action it carries."""

    key: str
    type: str
    column: str
    kwargs: dict[str, Any]
    action: Action
    repair: Literal["default", "clip"] | None = None
    default: Any = None

    def violated(self, frame: pl.DataFrame) -> pl.Expr:
        return _VIOLATIONS[self.type](self, frame)

    def repaired_value(self, dtype: pl.DataType) -> pl.Expr:
        if self.repair == "default":
            return pl.lit(self.default, dtype=None)
        lo, hi = self.kwargs.get("min_value"), self.kwargs.get("max_value")
        col = pl.col(self.column)
        # NaN has no side to clip to: it becomes missing, which the model handles as such.
        clipped = col.clip(lower_bound=lo, upper_bound=hi)
        return pl.when(col.is_nan()).then(None).otherwise(clipped) if dtype.is_float() else clipped


def _numeric(exp: Expectation, frame: pl.DataFrame) -> pl.Expr:
    dtype = frame.schema[exp.column]
    if not dtype.is_numeric():
        raise GuardFailure(
            f"column {exp.column!r} has type {dtype}, but {exp.key} needs numbers "
            f"(e.g. a value {frame[exp.column].drop_nulls().head(1).to_list()})"
        )
    return pl.col(exp.column)


def _between(exp: Expectation, frame: pl.DataFrame) -> pl.Expr:
    col = _numeric(exp, frame)
    lo, hi = exp.kwargs.get("min_value"), exp.kwargs.get("max_value")
    # NaN sorts above every number in polars and ±inf compares like a number: neither is "between".
    ok = col.is_finite() if frame.schema[exp.column].is_float() else pl.lit(True)
    if lo is not None:
        ok = ok & ((col > lo) if exp.kwargs.get("strict_min") else (col >= lo))
    if hi is not None:
        ok = ok & ((col < hi) if exp.kwargs.get("strict_max") else (col <= hi))
    # Nulls are the not-null expectation's business; NaN and ±inf are never "between".
    return col.is_not_null() & ~ok.fill_null(False)


def _not_null(exp: Expectation, frame: pl.DataFrame) -> pl.Expr:
    col = pl.col(exp.column)
    if frame.schema[exp.column].is_float():
        return col.is_null() | col.is_nan()
    return col.is_null()


def _in_set(exp: Expectation, frame: pl.DataFrame) -> pl.Expr:
    values = exp.kwargs["value_set"]
    return pl.col(exp.column).is_not_null() & ~pl.col(exp.column).is_in(values)


def _regex(exp: Expectation, frame: pl.DataFrame) -> pl.Expr:
    if frame.schema[exp.column] != pl.String:
        raise GuardFailure(f"column {exp.column!r} has type {frame.schema[exp.column]}, but {exp.key} needs strings")
    return pl.col(exp.column).is_not_null() & ~pl.col(exp.column).str.contains(exp.kwargs["regex"])


_VIOLATIONS: dict[str, Callable[[Expectation, pl.DataFrame], pl.Expr]] = {
    "expect_column_values_to_be_between": _between,
    "expect_column_values_to_not_be_null": _not_null,
    "expect_column_values_to_be_in_set": _in_set,
    "expect_column_values_to_match_regex": _regex,
}
_REPAIRABLE = {"expect_column_values_to_be_between", "expect_column_values_to_not_be_null", "expect_column_values_to_be_in_set"}


@dataclass(frozen=True)
class GuardSuite:
    name: str
    path: Path
    required_columns: tuple[str, ...]
    expectations: tuple[Expectation, ...]


def load_guard_suite(path: Path) -> GuardSuite:
    """Compile a GX suite file; a malformed file or an expectation we cannot honour is an error."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise SuiteError(f"expectation suite {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise SuiteError(f"expectation suite {path} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("expectations"), list):
        raise SuiteError(f"expectation suite {path} has no `expectations` list")
    required: list[str] = []
    compiled: list[Expectation] = []
    for i, item in enumerate(doc["expectations"]):
        where = f"{path.name} expectation #{i}"
        etype, kwargs = item.get("type"), item.get("kwargs") or {}
        column = kwargs.get("column")
        guard = (item.get("meta") or {}).get("guard") or {}
        action = guard.get("action")
        if not column:
            raise SuiteError(f"{where} ({etype}) has no kwargs.column")
        if action not in ("repair", "quarantine", "fail"):
            raise SuiteError(f"{where} ({etype} on {column!r}) needs meta.guard.action repair|quarantine|fail, got {action!r}")
        if etype == "expect_column_to_exist":
            required.append(column)
            continue
        if etype not in _VIOLATIONS:
            raise SuiteError(f"{where}: expectation type {etype!r} on {column!r} is not supported by the guards")
        repair = guard.get("repair")
        if action == "repair":
            if etype not in _REPAIRABLE:
                raise SuiteError(f"{where}: {etype} cannot be repaired; use quarantine or fail")
            if repair not in ("default", "clip") or (repair == "clip" and etype != "expect_column_values_to_be_between"):
                raise SuiteError(f"{where}: repair must be `default`, or `clip` on a between expectation; got {repair!r}")
            if repair == "default" and "default" not in guard:
                raise SuiteError(f"{where}: repair=default needs meta.guard.default")
        key = f"{etype.removeprefix('expect_column_values_to_')}({column})"
        compiled.append(
            Expectation(key=key, type=etype, column=column, kwargs=kwargs, action=action, repair=repair, default=guard.get("default"))
        )
    keys = [e.key for e in compiled]
    if len(set(keys)) != len(keys):
        raise SuiteError(f"{path.name}: an expectation type appears twice for one column: {sorted({k for k in keys if keys.count(k) > 1})}")
    return GuardSuite(name=doc.get("name") or path.stem, path=path, required_columns=tuple(required), expectations=tuple(compiled))


@dataclass
class GuardCounts:
    """Per-expectation action counts, mergeable across chunks."""

    rows_in: int = 0
    rows_repaired: int = 0
    rows_quarantined: int = 0
    by_expectation: dict[str, dict[str, int]] = field(default_factory=dict)

    def merge(self, other: GuardCounts) -> None:
        self.rows_in += other.rows_in
        self.rows_repaired += other.rows_repaired
        self.rows_quarantined += other.rows_quarantined
        for key, counts in other.by_expectation.items():
            mine = self.by_expectation.setdefault(key, {})
            for action, n in counts.items():
                mine[action] = mine.get(action, 0) + n


@dataclass(frozen=True)
class GuardedChunk:
    scorable: pl.DataFrame
    quarantined: pl.DataFrame
    actions: pl.DataFrame
    counts: GuardCounts


def _as_text(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.String)


def guarded_chunk(frame: pl.DataFrame, suite: GuardSuite, *, entity_column: str) -> GuardedChunk:
    """Apply the suite to one chunk: repaired scorable rows, quarantined rows, and every action taken."""
    missing = [c for c in suite.required_columns if c not in frame.columns]
    if missing:
        raise GuardFailure(f"raw data lacks column(s) {missing} required by column_to_exist in {suite.path.name}")
    absent = sorted({e.column for e in suite.expectations if e.column not in frame.columns})
    if absent:
        raise GuardFailure(f"suite {suite.path.name} checks column(s) {absent} that the raw data does not have")

    counts = GuardCounts(rows_in=frame.height)
    work = frame.with_row_index("__row")
    quarantine_reasons: list[pl.DataFrame] = []
    actions: list[pl.DataFrame] = []
    repaired_rows = pl.Series("r", [False] * frame.height)
    for exp in suite.expectations:
        bad = work.select(exp.violated(work).fill_null(False)).to_series()
        n_bad = int(bad.sum())
        if n_bad == 0:
            continue
        if exp.action == "fail":
            examples = work.filter(bad)[exp.column].head(3).to_list()
            raise GuardFailure(
                f"{n_bad} row(s) break {exp.key} in {suite.path.name} (action fail); examples: {examples}"
            )
        hit = work.filter(bad)
        if exp.action == "quarantine":
            quarantine_reasons.append(hit.select("__row", pl.lit(exp.key).alias("expectation")))
            actions.append(
                hit.select(
                    _as_text(pl.col(entity_column)).alias("entity_id"),
                    pl.lit(exp.key).alias("expectation"),
                    pl.lit(exp.column).alias("column"),
                    pl.lit("quarantine").alias("action"),
                    _as_text(pl.col(exp.column)).alias("old_value"),
                    pl.lit(None, dtype=pl.String).alias("new_value"),
                )
            )
            counts.by_expectation[exp.key] = {"quarantine": n_bad}
            continue
        new_value = exp.repaired_value(work.schema[exp.column])
        actions.append(
            hit.select(
                _as_text(pl.col(entity_column)).alias("entity_id"),
                pl.lit(exp.key).alias("expectation"),
                pl.lit(exp.column).alias("column"),
                pl.lit("repair").alias("action"),
                _as_text(pl.col(exp.column)).alias("old_value"),
                _as_text(new_value.cast(work.schema[exp.column])).alias("new_value"),
            )
        )
        work = work.with_columns(
            pl.when(pl.Series(bad)).then(new_value).otherwise(pl.col(exp.column)).cast(work.schema[exp.column]).alias(exp.column)
        )
        repaired_rows = repaired_rows | bad
        counts.by_expectation[exp.key] = {"repair": n_bad}

    if quarantine_reasons:
        reasons = pl.concat(quarantine_reasons).group_by("__row").agg(pl.col("expectation").alias("failed_expectations"))
        flagged = work.join(reasons, on="__row", how="left")
        quarantined = flagged.filter(pl.col("failed_expectations").is_not_null()).sort("__row").drop("__row")
        scorable_mask = flagged.sort("__row")["failed_expectations"].is_null()
    else:
        quarantined = work.head(0).drop("__row").with_columns(pl.lit(None, dtype=pl.List(pl.String)).alias("failed_expectations"))
        scorable_mask = pl.Series([True] * frame.height)
    scorable = work.filter(scorable_mask).drop("__row")
    counts.rows_quarantined = quarantined.height
    counts.rows_repaired = int((repaired_rows & scorable_mask).sum())
    action_table = pl.concat(actions) if actions else pl.DataFrame(schema=_ACTION_COLUMNS)
    return GuardedChunk(scorable=scorable, quarantined=quarantined, actions=action_table, counts=counts)


def guard_limit_breaches(counts: GuardCounts, *, max_repaired_share: float, max_quarantined_share: float) -> list[str]:
    """Run-level limits that the counts break, as messages; empty when the run may go on."""
    if counts.rows_in == 0:
        return []
    breaches = []
    for what, n, limit in (
        ("repaired", counts.rows_repaired, max_repaired_share),
        ("quarantined", counts.rows_quarantined, max_quarantined_share),
    ):
        share = n / counts.rows_in
        if share > limit and not math.isclose(share, limit):
            breaches.append(f"{n} of {counts.rows_in} rows {what} ({share:.2%}) exceeds the job limit {limit:.2%}")
    return breaches
