"""Loading a suite: the GX suite file (`expectations/<job>.json`) compiled into a `GuardSuite`.

The file is the source of truth: GX loads it as it is, and each expectation's `meta.guard` says what
to do with a row that breaks it:

- `repair` — substitute `default`, or (`repair: clip`) clip to the expectation's bounds;
- `quarantine` — the row is not scored; it is recorded with the expectations it failed;
- `fail` — the run stops with a message naming the column, the expectation and examples.

One expectation judges the whole partition rather than a row: `expect_column_values_to_be_unique`
on the job's entity column (the contract is one row per entity). Its action is `keep_first`,
`quarantine_all` (the default, also when the suite does not declare it) or `fail`; the planner
finds the duplicated ids across every file before scoring (`tasks/guards/duplicates.py`) and each chunk
quarantines the rows it is told to, with the same records and counts as any other quarantine.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import polars as pl

from tasks.errors import GuardFailure, SuiteError
from tasks.guards.compiled import (
    BOUNDED_TYPES,
    COLUMN_LEVEL_TYPES,
    TYPE_FAMILIES,
    VIOLATIONS,
    ColumnCheck,
    EvaluatedBy,
    Expectation,
    expectation_key,
    rust_regex,
)
from tasks.guards.gx import GreatExpectationsRowChecks, gx_map_expectation

log = logging.getLogger("scoring.guards")

OnDuplicate = Literal["keep_first", "quarantine_all", "fail"]
UNIQUE_TYPE = "expect_column_values_to_be_unique"


@dataclass(frozen=True)
class EntityKeyRule:
    """Each entity id appears once in the partition; what to do with the rows of one that does not."""

    column: str
    on_duplicate: OnDuplicate = "quarantine_all"
    declared: bool = True
    """False when the suite does not name the rule and the contract's default applies."""

    @property
    def key(self) -> str:
        return expectation_key(UNIQUE_TYPE, self.column)

    @property
    def expectation(self) -> Expectation:
        """The rule as a row expectation whose violations (rows the pre-pass picked) are quarantined."""
        return Expectation(
            key=self.key,
            type=UNIQUE_TYPE,
            column=self.column,
            kwargs={},
            action="quarantine",
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
            raise SuiteError(
                f"{where}: `mostly` has no meaning for a row guard; set the job's run-level limits instead"
            )
        key = expectation_key(etype, column)
        if etype in COLUMN_LEVEL_TYPES:
            if action != "fail":
                raise SuiteError(f"{where} checks the whole column, so its action must be fail, got {action!r}")
            type_names = {
                "expect_column_values_to_be_of_type": [kwargs.get("type_")],
                "expect_column_values_to_be_in_type_list": kwargs.get("type_list") or [None],
            }.get(etype, [])
            unknown = [t for t in type_names if str(t).lower() not in TYPE_FAMILIES]
            if unknown:
                raise SuiteError(f"{where}: type(s) {unknown} are not among {sorted(TYPE_FAMILIES)}")
            column_checks.append(ColumnCheck(key=key, type=etype, column=column, type_names=tuple(type_names)))
            continue
        repair = guard.get("repair")
        if action == "repair":
            if etype == "expect_column_values_to_match_regex" or etype == "expect_column_value_lengths_to_be_between":
                raise SuiteError(f"{where}: an id that breaks {etype} cannot be repaired; use quarantine or fail")
            if repair not in ("default", "clip") or (
                repair == "clip" and etype != "expect_column_values_to_be_between"
            ):
                raise SuiteError(
                    f"{where}: repair must be `default`, or `clip` on a between expectation; got {repair!r}"
                )
            if repair == "default" and "default" not in guard:
                raise SuiteError(f"{where}: repair=default needs meta.guard.default")
        if etype in BOUNDED_TYPES and kwargs.get("min_value") is None and kwargs.get("max_value") is None:
            raise SuiteError(f"{where} needs min_value, max_value or both (Great Expectations refuses neither)")
        evaluated_by: EvaluatedBy = "compiled" if etype in VIOLATIONS else "great_expectations"
        if etype == "expect_column_values_to_match_regex":
            compiled_regex = rust_regex(str(kwargs.get("regex", "")))
            if compiled_regex is None:
                evaluated_by = "great_expectations"
            else:
                kwargs = {**kwargs, "compiled_regex": compiled_regex}
        exp = Expectation(
            key=key,
            type=etype,
            column=column,
            kwargs=kwargs,
            action=action,
            evaluated_by=evaluated_by,
            repair=repair,
            default=guard.get("default"),
        )
        rows.append(exp)
        if evaluated_by == "great_expectations":
            gx_rows.append((exp, gx_map_expectation(etype, item.get("kwargs") or {}, where)))
    keys = [expectation_key(item["type"], item["kwargs"]["column"]) for item in doc["expectations"]]
    if len(set(keys)) != len(keys):
        raise SuiteError(
            f"{path.name}: an expectation type appears twice for one column: {sorted({k for k in keys if keys.count(k) > 1})}"
        )
    _check_defaults(rows, path)
    if entity_key is None and entity_column is not None:
        entity_key = EntityKeyRule(column=entity_column, declared=False)
    gx_checks = None
    if gx_rows:
        log.warning(
            "suite %s: %d expectation(s) are not compiled and run through Great Expectations per chunk (slower): %s",
            path.name,
            len(gx_rows),
            [e.key for e, _ in gx_rows],
        )
        gx_checks = GreatExpectationsRowChecks([e for e, _ in gx_rows], [c for _, c in gx_rows])
    return GuardSuite(
        name=doc.get("name") or path.stem,
        path=path,
        column_checks=tuple(column_checks),
        expectations=tuple(rows),
        gx_checks=gx_checks,
        order=tuple(keys),
        entity_key=entity_key,
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
                raise SuiteError(
                    f"{path.name}: the repair default {exp.default!r} of {exp.key} itself breaks {other.key}"
                )
