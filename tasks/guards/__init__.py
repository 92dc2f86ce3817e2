"""Feature guards compiled from a Great Expectations suite into vectorised polars checks.

The suite JSON (`expectations/<job>.json`) is the source of truth: GX loads it as it is, and each
expectation's `meta.guard` says what to do with a row that breaks it:

- `repair` — substitute `default`, or (`repair: clip`) clip to the expectation's bounds;
- `quarantine` — the row is not scored; it is recorded with the expectations it failed;
- `fail` — the run stops with a message naming the column, the expectation and examples.

One expectation judges the whole partition rather than a row: `expect_column_values_to_be_unique`
on the job's entity column (the contract is one row per entity). Its action is `keep_first`,
`quarantine_all` (the default, also when the suite does not declare it) or `fail`; the planner
finds the duplicated ids across every file before scoring (`tasks/guards/duplicates.py`) and each chunk
quarantines the rows it is told to, with the same records and counts as any other quarantine.

The expectation types the jobs use are compiled to polars expressions and evaluated together,
once per chunk, on the raw values, so per-expectation counts are the unexpected counts GX itself
reports for the same data. Any other row-level (column map) expectation runs through GX on the
chunk: slower, but honoured. Every action is counted per expectation and recorded per row.

Semantics shared with GX: nulls and NaN are both missing, which only `not_be_null` flags. One
deliberate difference: ±inf is never `between`, even when a bound is open, because no model
input may be infinite (GX lets +inf pass a minimum-only check).
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl
import pyarrow as pa

from tasks.errors import GuardFailure, SuiteError

log = logging.getLogger("scoring.guards")

Action = Literal["repair", "quarantine", "fail"]
EvaluatedBy = Literal["compiled", "great_expectations", "partition_prepass", "implicit"]
OnDuplicate = Literal["keep_first", "quarantine_all", "fail"]
UNIQUE_TYPE = "expect_column_values_to_be_unique"

_ACTION_COLUMNS = {
    "entity_id": pl.String,
    "expectation": pl.String,
    "column": pl.String,
    "action": pl.String,
    "old_value": pl.String,
    "new_value": pl.String,
}
"""One row per (row, expectation) acted on: what was repaired or why a row was quarantined."""

_TYPE_FAMILIES: dict[str, Callable[[pl.DataType], bool]] = {
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
        return _VIOLATIONS[self.type](self, frame)

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
        raise GuardFailure(f"column {exp.column!r} has type {dtype}, but {exp.key} needs {what} (e.g. a value {example})")
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


def _rust_regex(pattern: str) -> str | None:
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


_VIOLATIONS: dict[str, Callable[[Expectation, pl.DataFrame], pl.Expr]] = {
    "expect_column_values_to_be_between": _between,
    "expect_column_values_to_not_be_null": _not_null,
    "expect_column_values_to_be_in_set": _in_set,
    "expect_column_values_to_match_regex": _regex,
    "expect_column_value_lengths_to_be_between": _lengths,
}
_COLUMN_LEVEL = ("expect_column_to_exist", "expect_column_values_to_be_of_type", "expect_column_values_to_be_in_type_list")
COMPILED_TYPES = frozenset(_VIOLATIONS) | frozenset(_COLUMN_LEVEL)
_BOUNDED = ("expect_column_values_to_be_between", "expect_column_value_lengths_to_be_between")


@dataclass(frozen=True)
class ColumnCheck:
    """A column-level expectation (exists, has a type); breaking one always fails the run."""

    key: str
    type: str
    column: str
    type_names: tuple[str, ...] = ()


class GreatExpectationsRowChecks:
    """Row-level expectations the guards do not compile, validated by GX itself on each chunk."""

    def __init__(self, expectations: list[Expectation], configs: list[Any]) -> None:
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.expectations = expectations
        self.configs = configs
        context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        asset = context.data_sources.add_pandas("guards").add_dataframe_asset("chunk")
        self._batch_definition = asset.add_batch_definition_whole_dataframe("whole_chunk")

    def violation_masks(self, frame: pl.DataFrame) -> dict[str, np.ndarray]:
        columns = sorted({e.column for e in self.expectations})
        batch = self._batch_definition.get_batch(batch_parameters={"dataframe": frame.select(columns).to_pandas()})
        masks: dict[str, np.ndarray] = {}
        for exp, config in zip(self.expectations, self.configs, strict=True):
            result = batch.validate(config, result_format={"result_format": "COMPLETE"})
            if result.exception_info.get("raised_exception"):
                raise GuardFailure(
                    f"Great Expectations could not evaluate {exp.key} on column {exp.column!r}: "
                    f"{result.exception_info.get('exception_message')}"
                )
            mask = np.zeros(frame.height, dtype=bool)
            mask[np.asarray(result.result.get("unexpected_index_list") or [], dtype=np.int64)] = True
            masks[exp.key] = mask
        return masks


@dataclass(frozen=True)
class EntityKeyRule:
    """Each entity id appears once in the partition; what to do with the rows of one that does not."""

    column: str
    on_duplicate: OnDuplicate = "quarantine_all"
    declared: bool = True
    """False when the suite does not name the rule and the contract's default applies."""

    @property
    def key(self) -> str:
        return _key(UNIQUE_TYPE, self.column)

    @property
    def expectation(self) -> Expectation:
        """The rule as a row expectation whose violations (rows the pre-pass picked) are quarantined."""
        return Expectation(
            key=self.key, type=UNIQUE_TYPE, column=self.column, kwargs={}, action="quarantine",
            evaluated_by="partition_prepass" if self.declared else "implicit",
        )


@dataclass(frozen=True)
class GuardSuite:
    name: str
    path: Path
    column_checks: tuple[ColumnCheck, ...]
    expectations: tuple[Expectation, ...]
    gx_checks: GreatExpectationsRowChecks | None = None
    order: tuple[str, ...] = ()
    """Keys of every expectation in the suite file's order."""
    entity_key: EntityKeyRule | None = None
    """The partition's uniqueness rule; None only for a suite loaded without knowing the entity column."""

    @property
    def row_rules(self) -> tuple[Expectation, ...]:
        """The row expectations and the entity-key rule, in suite order (an implicit rule last)."""
        if self.entity_key is None:
            return self.expectations
        rank = {key: i for i, key in enumerate(self.order)}
        rules = (*self.expectations, self.entity_key.expectation)
        return tuple(sorted(rules, key=lambda e: rank.get(e.key, len(rank))))

    _sums_by_schema: dict[tuple, list[pl.Expr]] = field(default_factory=dict, init=False, compare=False, repr=False)
    """Counting expressions of the compiled expectations per chunk schema: chunks of one partition
    share theirs, and building 60 expressions costs ~1 ms a chunk."""

    @property
    def required_columns(self) -> tuple[str, ...]:
        return tuple(c.column for c in self.column_checks if c.type == "expect_column_to_exist")

    def violation_sums(self, frame: pl.DataFrame) -> list[pl.Expr] | None:
        """One expression per compiled expectation counting the rows of `frame` that break it."""
        compiled = [e for e in self.expectations if e.evaluated_by == "compiled"]
        if not compiled:
            return None
        schema = tuple(frame.schema.items())
        sums = self._sums_by_schema.get(schema)
        if sums is None:
            sums = [e.violated(frame).fill_null(False).sum().alias(e.key) for e in compiled]
            self._sums_by_schema[schema] = sums
        return sums


def _key(etype: str, column: str) -> str:
    return f"{etype.removeprefix('expect_column_values_to_').removeprefix('expect_column_')}({column})"


def _gx_map_expectation(etype: str, kwargs: dict[str, Any], where: str) -> Any:
    """The GX expectation object for a type we do not compile; only row-level types can guard rows."""
    from great_expectations.exceptions import ExpectationNotFoundError
    from great_expectations.expectations.expectation import ColumnMapExpectation
    from great_expectations.expectations.registry import get_expectation_impl

    try:
        impl = get_expectation_impl(etype)
    except ExpectationNotFoundError:
        raise SuiteError(f"{where}: {etype!r} is not a Great Expectations expectation type") from None
    if not issubclass(impl, ColumnMapExpectation):
        raise SuiteError(
            f"{where}: {etype} judges the whole column, not rows, so it cannot guard rows; "
            "check it in the drift report or a separate validation instead"
        )
    try:
        return impl(**kwargs)
    except Exception as exc:
        raise SuiteError(f"{where}: Great Expectations rejects the kwargs of {etype}: {exc}") from None


def _entity_key_rule(
    path: Path, where: str, column: str, kwargs: dict[str, Any], guard: dict[str, Any], entity_column: str | None
) -> EntityKeyRule:
    if entity_column is not None and column != entity_column:
        raise SuiteError(
            f"{path.name}: {UNIQUE_TYPE} on column {column!r} is not accepted; uniqueness is checked across the "
            f"partition only for the job's entity column {entity_column!r}"
        )
    action = guard.get("action", "quarantine_all")
    if action not in ("keep_first", "quarantine_all", "fail"):
        raise SuiteError(f"{where} needs meta.guard.action keep_first|quarantine_all|fail, got {action!r}")
    extra = sorted(set(kwargs) - {"column"})
    if extra:
        raise SuiteError(f"{where}: kwargs {extra} have no meaning for the partition's entity key")
    return EntityKeyRule(column=column, on_duplicate=action)


def load_guard_suite(path: Path, *, entity_column: str | None = None) -> GuardSuite:
    """Compile a GX suite file; a malformed file or an expectation we cannot honour is an error.

    With the job's `entity_column`, the suite always has its entity-key rule: the declared one,
    or an implicit `quarantine_all`; uniqueness declared on any other column is refused.
    """
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise SuiteError(f"expectation suite {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise SuiteError(f"expectation suite {path} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("expectations"), list):
        raise SuiteError(f"expectation suite {path} has no `expectations` list")
    column_checks: list[ColumnCheck] = []
    rows: list[Expectation] = []
    gx_rows: list[tuple[Expectation, Any]] = []
    entity_key: EntityKeyRule | None = None
    for i, item in enumerate(doc["expectations"]):
        if not isinstance(item, dict):
            raise SuiteError(f"{path.name} expectation #{i} is not an object: {item!r}")
        etype, kwargs = item.get("type"), item.get("kwargs") or {}
        column = kwargs.get("column")
        guard = (item.get("meta") or {}).get("guard") or {}
        action = guard.get("action")
        where = f"{path.name} expectation #{i} ({etype} on {column!r})"
        if not etype or not column:
            raise SuiteError(f"{where} needs a `type` and kwargs.column")
        if etype == UNIQUE_TYPE:
            entity_key = _entity_key_rule(path, where, column, kwargs, guard, entity_column)
            continue
        if action not in ("repair", "quarantine", "fail"):
            raise SuiteError(f"{where} needs meta.guard.action repair|quarantine|fail, got {action!r}")
        if "mostly" in kwargs:
            raise SuiteError(f"{where}: `mostly` has no meaning for a row guard; set the job's run-level limits instead")
        key = _key(etype, column)
        if etype in _COLUMN_LEVEL:
            if action != "fail":
                raise SuiteError(f"{where} checks the whole column, so its action must be fail, got {action!r}")
            type_names = {
                "expect_column_values_to_be_of_type": [kwargs.get("type_")],
                "expect_column_values_to_be_in_type_list": kwargs.get("type_list") or [None],
            }.get(etype, [])
            unknown = [t for t in type_names if str(t).lower() not in _TYPE_FAMILIES]
            if unknown:
                raise SuiteError(f"{where}: type(s) {unknown} are not among {sorted(_TYPE_FAMILIES)}")
            column_checks.append(ColumnCheck(key=key, type=etype, column=column, type_names=tuple(type_names)))
            continue
        repair = guard.get("repair")
        if action == "repair":
            if etype == "expect_column_values_to_match_regex" or etype == "expect_column_value_lengths_to_be_between":
                raise SuiteError(f"{where}: an id that breaks {etype} cannot be repaired; use quarantine or fail")
            if repair not in ("default", "clip") or (repair == "clip" and etype != "expect_column_values_to_be_between"):
                raise SuiteError(f"{where}: repair must be `default`, or `clip` on a between expectation; got {repair!r}")
            if repair == "default" and "default" not in guard:
                raise SuiteError(f"{where}: repair=default needs meta.guard.default")
        if etype in _BOUNDED and kwargs.get("min_value") is None and kwargs.get("max_value") is None:
            raise SuiteError(f"{where} needs min_value, max_value or both (Great Expectations refuses neither)")
        evaluated_by: EvaluatedBy = "compiled" if etype in _VIOLATIONS else "great_expectations"
        if etype == "expect_column_values_to_match_regex":
            compiled_regex = _rust_regex(str(kwargs.get("regex", "")))
            if compiled_regex is None:
                evaluated_by = "great_expectations"
            else:
                kwargs = {**kwargs, "compiled_regex": compiled_regex}
        exp = Expectation(
            key=key, type=etype, column=column, kwargs=kwargs, action=action,
            evaluated_by=evaluated_by, repair=repair, default=guard.get("default"),
        )
        rows.append(exp)
        if evaluated_by == "great_expectations":
            gx_rows.append((exp, _gx_map_expectation(etype, item.get("kwargs") or {}, where)))
    keys = [_key(item["type"], item["kwargs"]["column"]) for item in doc["expectations"]]
    if len(set(keys)) != len(keys):
        raise SuiteError(f"{path.name}: an expectation type appears twice for one column: {sorted({k for k in keys if keys.count(k) > 1})}")
    _check_defaults(rows, path)
    if entity_key is None and entity_column is not None:
        entity_key = EntityKeyRule(column=entity_column, declared=False)
    gx_checks = None
    if gx_rows:
        log.warning(
            "suite %s: %d expectation(s) are not compiled and run through Great Expectations per chunk (slower): %s",
            path.name, len(gx_rows), [e.key for e, _ in gx_rows],
        )
        gx_checks = GreatExpectationsRowChecks([e for e, _ in gx_rows], [c for _, c in gx_rows])
    return GuardSuite(
        name=doc.get("name") or path.stem, path=path, column_checks=tuple(column_checks),
        expectations=tuple(rows), gx_checks=gx_checks, order=tuple(keys), entity_key=entity_key,
    )


def _check_defaults(rows: list[Expectation], path: Path) -> None:
    """A repair default must itself pass the compiled checks of its column, or repairs would lie."""
    for exp in rows:
        if exp.repair != "default":
            continue
        probe = pl.DataFrame({exp.column: [exp.default]})
        for other in rows:
            if other.column != exp.column or other.evaluated_by != "compiled":
                continue
            try:
                bad = probe.select(other.violated(probe).fill_null(False)).item()
            except (GuardFailure, pl.exceptions.PolarsError):
                bad = True
            if bad:
                raise SuiteError(f"{path.name}: the repair default {exp.default!r} of {exp.key} itself breaks {other.key}")


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
        if check.type_names and not any(_TYPE_FAMILIES[t.lower()](dtype) for t in check.type_names):
            mistyped.append((check.column, (
                f"column {check.column!r} has type {dtype}, but {check.key} in {suite.path.name} "
                f"wants {' or '.join(check.type_names)}"
            )))
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
    return [(column, problem + has) for column, problem in _column_problems(pl.from_arrow(schema.empty_table()).schema, suite)]


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
            *frame.select(e.violated(frame).fill_null(False).alias(e.key) for e in hits if e.key not in given).get_columns(),
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
    new_values = {e.key: e.repaired_value(work.get_column(e.column).dtype).cast(work.get_column(e.column).dtype) for e in repairs}
    plans = [
        _action_rows(flagged.lazy(), e, mask_of[e.key], entity_column, new_values.get(e.key, pl.lit(None, dtype=pl.String)))
        for e in hits
    ]
    action_table = pl.concat(plans).collect()

    repaired_columns: dict[str, pl.Expr] = {}
    for exp in repairs:
        current = repaired_columns.get(exp.column, pl.col(exp.column))
        repaired_columns[exp.column] = pl.when(pl.col(mask_of[exp.key])).then(new_values[exp.key]).otherwise(current)
    quarantine_keys = [e.key for e in hits if e.action == "quarantine"]
    is_quarantined = pl.any_horizontal([pl.col(mask_of[k]) for k in quarantine_keys]) if quarantine_keys else pl.lit(False)
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
            [flagged.lazy().filter(pl.col(mask_of[k])).select("__row", pl.lit(k).alias("failed_expectations")) for k in quarantine_keys]
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


def guard_summary_rows(suite: GuardSuite, counts: GuardCounts) -> list[dict[str, Any]]:
    """Every expectation of the suite with what it did in the run, in suite order: the readable summary."""
    by_key: dict[str, dict[str, Any]] = {
        c.key: {"expectation": c.key, "column_name": c.column, "expectation_type": c.type, "action": "fail",
                "evaluated_by": "compiled", "rows": 0, "share": 0.0}
        for c in suite.column_checks
    }
    for exp in suite.row_rules:
        n = counts.by_expectation.get(exp.key, {}).get(exp.action, 0)
        action = exp.action if exp.action != "repair" else f"repair:{exp.repair}"
        by_key[exp.key] = {
            "expectation": exp.key, "column_name": exp.column, "expectation_type": exp.type,
            "action": suite.entity_key.on_duplicate if exp.type == UNIQUE_TYPE else action,
            "evaluated_by": exp.evaluated_by, "rows": n, "share": n / counts.rows_in if counts.rows_in else 0.0,
        }
    implicit = (suite.entity_key.key,) if suite.entity_key is not None and not suite.entity_key.declared else ()
    return [by_key[k] for k in (*suite.order, *implicit)]


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
            breaches.append(f"{n} of {counts.rows_in} rows {what} ({share:.2%}) exceeds the job limit {limit:.2%}{_most_hit(counts, what)}")
    return breaches


def _most_hit(counts: GuardCounts, what: str) -> str:
    """`; most by <expectation> (n rows), …`: the expectations an operator should look at first."""
    actions = {"repaired": ("repair",), "quarantined": ("quarantine",)}[what]
    hit = sorted(
        ((sum(n for action, n in by.items() if action in actions), key) for key, by in counts.by_expectation.items()),
        key=lambda pair: (-pair[0], pair[1]),
    )
    top = [f"{key} ({n} rows)" for n, key in hit[:3] if n]
    return f"; most by {', '.join(top)}" if top else ""
