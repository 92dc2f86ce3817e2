"""Applying a suite to a chunk: the column checks, then every row expectation judged on the raw values,
and the repairs, quarantines and records of every action taken."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa

from tasks.errors import GuardFailure
from tasks.guards.compiled import TYPE_FAMILIES, Expectation
from tasks.guards.suite import GuardSuite

_ACTION_COLUMNS = {
    "entity_id": pl.String,
    "expectation": pl.String,
    "column": pl.String,
    "action": pl.String,
    "old_value": pl.String,
    "new_value": pl.String,
}
"""One row per (row, expectation) acted on: what was repaired or why a row was quarantined."""


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


def _column_problems(schema: pl.Schema, suite: GuardSuite) -> list[tuple[str, str]]:
    """(column, problem) for every column the suite needs that the schema lacks (one problem per
    column, naming every expectation that needs it) or types otherwise."""
    missing: dict[str, list[str]] = {}
    mistyped: list[tuple[str, str]] = []
    for check in suite.column_checks:
        if check.column not in schema:
            missing.setdefault(check.column, []).append(check.key)
            continue
        dtype = schema[check.column]
        if check.type_names and not any(TYPE_FAMILIES[t.lower()](dtype) for t in check.type_names):
            mistyped.append(
                (
                    check.column,
                    (
                        f"column {check.column!r} has type {dtype}, but {check.key} in {suite.path.name} "
                        f"wants {' or '.join(check.type_names)}"
                    ),
                )
            )
    for exp in suite.expectations:
        if exp.column not in schema:
            missing.setdefault(exp.column, []).append(exp.key)

    def near(column: str) -> str:
        # A column the data has under a close name is most likely a typo in the suite or upstream.
        close = difflib.get_close_matches(column, [c for c in schema.names() if c not in missing], n=1, cutoff=0.75)
        return f" (did you mean {close[0]!r}?)" if close else ""

    lacking = [
        (column, f"raw data lacks column {column!r}{near(column)} required by {', '.join(keys)} in {suite.path.name}")
        for column, keys in missing.items()
    ]
    return lacking + mistyped


def _checked_columns(frame: pl.DataFrame, suite: GuardSuite) -> None:
    problems = _column_problems(frame.schema, suite)
    if problems:
        raise GuardFailure("; ".join(problem for _, problem in problems))


def raw_schema_problems(schema: pa.Schema, suite: GuardSuite) -> list[tuple[str, str]]:
    """(column, problem) for each of the suite's column checks (presence, column types, every column
    it names) that a raw file's schema fails, read from the schema alone so that a missing or
    mistyped column is found before the run starts; each problem lists the columns the file has."""
    has = f"; the file's columns: {', '.join(schema.names)}"
    return [
        (column, problem + has)
        for column, problem in _column_problems(pl.from_arrow(schema.empty_table()).schema, suite)
    ]


def _gx_violation_masks(frame: pl.DataFrame, suite: GuardSuite) -> dict[str, np.ndarray]:
    if suite.gx_checks is None:
        return {}
    if frame.height == 0:
        return {e.key: np.zeros(0, dtype=bool) for e in suite.gx_checks.expectations}
    return suite.gx_checks.violation_masks(frame)


def _compiled_violation_counts(frame: pl.DataFrame, suite: GuardSuite) -> dict[str, int]:
    sums = suite.violation_sums(frame)
    if sums is None:
        return {}
    # The expressions are built for this schema and share nothing worth optimizing: planning 60
    # of them costs more per chunk than it saves.
    counted = frame.lazy().select(sums).collect(optimizations=pl.QueryOptFlags.none())
    return dict(zip(counted.columns, counted.row(0), strict=True))


def guard_violation_counts(frame: pl.DataFrame, suite: GuardSuite) -> dict[str, int]:
    """Rows of the chunk that break each row expectation (GX's unexpected counts), nothing else."""
    _checked_columns(frame, suite)
    gx_masks = _gx_violation_masks(frame, suite)
    return {**_compiled_violation_counts(frame, suite), **{k: int(m.sum()) for k, m in gx_masks.items()}}


def _as_text(column: str, dtype: pl.DataType) -> pl.Expr:
    if isinstance(dtype, pl.List | pl.Array):
        # A whole vibration window is no use in an audit row; its length is what the checks judge.
        return pl.format("<{} values>", pl.col(column).list.len())
    return pl.col(column).cast(pl.String)


def _action_rows(
    flagged: pl.LazyFrame, exp: Expectation, mask: str, entity_column: str, new_value: pl.Expr
) -> pl.LazyFrame:
    return flagged.filter(pl.col(mask)).select(
        pl.col(entity_column).cast(pl.String).alias("entity_id"),
        pl.lit(exp.key).alias("expectation"),
        pl.lit(exp.column).alias("column"),
        pl.lit(exp.action).alias("action"),
        _as_text(exp.column, flagged.collect_schema()[exp.column]).alias("old_value"),
        new_value.cast(pl.String).alias("new_value"),
    )


def guarded_chunk(
    frame: pl.DataFrame, suite: GuardSuite, *, entity_column: str, duplicate_rows: np.ndarray | None = None
) -> GuardedChunk:
    """Apply the suite to one chunk: repaired scorable rows, quarantined rows, and every action taken.

    Every expectation is judged on the raw values, so counts are what GX reports for the chunk;
    when two repairs hit the same cell, the later expectation in the suite wins. `duplicate_rows`
    marks the chunk's rows that the partition's entity-key rule quarantines (found by the planner's
    pre-pass over the whole partition; a chunk alone cannot tell). A row that breaks it and other
    quarantine expectations is one quarantined row listing all of them, and counts once per
    expectation, as any row breaking two expectations does.
    """
    _checked_columns(frame, suite)
    given = _gx_violation_masks(frame, suite)
    if suite.entity_key is not None and duplicate_rows is not None:
        given[suite.entity_key.key] = duplicate_rows
    # Counting first is cheap; masks are materialised only for the expectations a chunk breaks.
    violations = {**_compiled_violation_counts(frame, suite), **{k: int(m.sum()) for k, m in given.items()}}
    hits = [e for e in suite.row_rules if violations.get(e.key)]
    if not hits:
        return GuardedChunk(
            scorable=frame,
            quarantined=frame.head(0).with_columns(pl.lit(None, dtype=pl.List(pl.String)).alias("failed_expectations")),
            actions=pl.DataFrame(schema=_ACTION_COLUMNS),
            counts=GuardCounts(rows_in=frame.height),
        )
    masks = pl.DataFrame(
        [
            *frame.select(
                e.violated(frame).fill_null(False).alias(e.key) for e in hits if e.key not in given
            ).get_columns(),
            *(pl.Series(e.key, given[e.key], dtype=pl.Boolean) for e in hits if e.key in given),
        ]
    )
    failing = [e for e in hits if e.action == "fail"]
    if failing:
        raise GuardFailure(
            "; ".join(
                f"{violations[e.key]} row(s) break {e.key} in {suite.path.name} (action fail); "
                f"examples: {frame.filter(masks[e.key])[e.column].head(3).to_list()}"
                for e in failing
            )
        )

    counts = GuardCounts(rows_in=frame.height, by_expectation={e.key: {e.action: violations[e.key]} for e in hits})
    return _applied(frame, masks, hits, counts, entity_column)


def _applied(
    frame: pl.DataFrame, masks: pl.DataFrame, hits: list[Expectation], counts: GuardCounts, entity_column: str
) -> GuardedChunk:
    """The chunk with the repairs and quarantines that the violation masks call for, and their records."""
    mask_of = {e.key: f"__violates {e.key}" for e in hits}
    work = frame.with_columns(
        # A column with no value at all has no type of its own; a repair gives it the default's.
        pl.col(e.column).cast(pl.select(pl.lit(e.default)).to_series().dtype)
        for e in hits
        if e.action == "repair" and frame.get_column(e.column).dtype == pl.Null
    )
    flagged = pl.concat([work.with_row_index("__row"), masks.rename(mask_of)], how="horizontal")
    repairs = [e for e in hits if e.action == "repair"]
    new_values = {
        e.key: e.repaired_value(work.get_column(e.column).dtype).cast(work.get_column(e.column).dtype) for e in repairs
    }
    plans = [
        _action_rows(
            flagged.lazy(), e, mask_of[e.key], entity_column, new_values.get(e.key, pl.lit(None, dtype=pl.String))
        )
        for e in hits
    ]
    action_table = pl.concat(plans).collect()

    repaired_columns: dict[str, pl.Expr] = {}
    for exp in repairs:
        current = repaired_columns.get(exp.column, pl.col(exp.column))
        repaired_columns[exp.column] = pl.when(pl.col(mask_of[exp.key])).then(new_values[exp.key]).otherwise(current)
    quarantine_keys = [e.key for e in hits if e.action == "quarantine"]
    is_quarantined = (
        pl.any_horizontal([pl.col(mask_of[k]) for k in quarantine_keys]) if quarantine_keys else pl.lit(False)
    )
    was_repaired = pl.any_horizontal([pl.col(mask_of[e.key]) for e in repairs]) if repairs else pl.lit(False)
    flagged = flagged.with_columns(
        *(expr.alias(column) for column, expr in repaired_columns.items()),
        is_quarantined.alias("__quarantined"),
        was_repaired.alias("__repaired"),
    )
    scorable = flagged.filter(~pl.col("__quarantined")).select(frame.columns)
    # Reasons in suite order, gathered from the (few) flagged rows rather than tested on every row.
    reasons = (
        pl.concat(
            [
                flagged.lazy().filter(pl.col(mask_of[k])).select("__row", pl.lit(k).alias("failed_expectations"))
                for k in quarantine_keys
            ]
        )
        .group_by("__row")
        .agg("failed_expectations")
        .collect()
        if quarantine_keys
        else pl.DataFrame(schema={"__row": pl.UInt32, "failed_expectations": pl.List(pl.String)})
    )
    quarantined = (
        flagged.filter(pl.col("__quarantined"))
        .select("__row", *frame.columns)
        .join(reasons, on="__row", how="left", maintain_order="left")
        .drop("__row")
    )
    counts.rows_quarantined = quarantined.height
    counts.rows_repaired = int(flagged.select((pl.col("__repaired") & ~pl.col("__quarantined")).sum()).item())
    return GuardedChunk(scorable=scorable, quarantined=quarantined, actions=action_table, counts=counts)
