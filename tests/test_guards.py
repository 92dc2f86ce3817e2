"""tasks/guards/: the GX suite compiled into polars checks, on small hand-built frames."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tasks.errors import GuardFailure, SuiteError
from tasks.guards import GuardCounts, GuardSuite, guard_limit_breaches, guarded_chunk, load_guard_suite
from tasks.guards.compiled import VIOLATIONS
from tasks.settings import PROJECT_ROOT

SUITE_PATH = PROJECT_ROOT / "expectations" / "credit_risk.json"
NAN, INF = float("nan"), float("inf")


def _exp(etype: str, column: str, guard: dict[str, Any] | None, **kwargs: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"type": etype, "kwargs": {"column": column, **kwargs}}
    if guard is not None:
        item["meta"] = {"guard": guard}
    return item


def between(column: str, guard: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return _exp("expect_column_values_to_be_between", column, guard, **kwargs)


def not_null(column: str, guard: dict[str, Any]) -> dict[str, Any]:
    return _exp("expect_column_values_to_not_be_null", column, guard)


def in_set(column: str, guard: dict[str, Any], values: list[Any]) -> dict[str, Any]:
    return _exp("expect_column_values_to_be_in_set", column, guard, value_set=values)


def regex(column: str, guard: dict[str, Any], pattern: str) -> dict[str, Any]:
    return _exp("expect_column_values_to_match_regex", column, guard, regex=pattern)


def exists(column: str) -> dict[str, Any]:
    return _exp("expect_column_to_exist", column, {"action": "fail"})


QUARANTINE = {"action": "quarantine"}
FAIL = {"action": "fail"}
CLIP = {"action": "repair", "repair": "clip"}


def default(value: Any) -> dict[str, Any]:
    return {"action": "repair", "repair": "default", "default": value}


@pytest.fixture
def make_suite(tmp_path: Path):
    def make(*expectations: dict[str, Any], name: str = "t") -> GuardSuite:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"name": name, "expectations": list(expectations)}))
        return load_guard_suite(path)

    return make


def guard(frame: pl.DataFrame, suite: GuardSuite):
    return guarded_chunk(frame, suite, entity_column="id")


def ids(n: int) -> list[str]:
    return [f"e{i}" for i in range(n)]


# --- repair -----------------------------------------------------------------------------------


def test_between_repair_default_replaces_out_of_range_values(make_suite) -> None:
    suite = make_suite(between("x", default(7.0), min_value=0, max_value=10, strict_min=True))
    frame = pl.DataFrame({"id": ids(5), "x": [-1.0, 5.0, 0.0, 20.0, 10.0]})
    g = guard(frame, suite)
    # -1 is below, 0 is on the strict minimum, 20 is above; 5 and 10 (inclusive max) are fine.
    assert g.scorable["x"].to_list() == [7.0, 5.0, 7.0, 7.0, 10.0]
    assert g.scorable["id"].to_list() == ids(5)
    assert g.quarantined.height == 0
    assert g.counts.rows_in == 5
    assert g.counts.rows_repaired == 3
    assert g.counts.rows_quarantined == 0
    assert g.counts.by_expectation == {"be_between(x)": {"repair": 3}}
    actions = g.actions.sort("entity_id")
    assert actions["entity_id"].to_list() == ["e0", "e2", "e3"]
    assert set(actions["action"]) == {"repair"}
    assert set(actions["column"]) == {"x"}
    assert [float(v) for v in actions["old_value"]] == [-1.0, 0.0, 20.0]
    assert [float(v) for v in actions["new_value"]] == [7.0, 7.0, 7.0]


def test_between_repair_clip_clips_to_the_bounds(make_suite) -> None:
    suite = make_suite(between("x", CLIP, min_value=0, max_value=1))
    frame = pl.DataFrame({"id": ids(4), "x": [-2.0, 0.5, 3.0, 1.0]})
    g = guard(frame, suite)
    assert g.scorable["x"].to_list() == [0.0, 0.5, 1.0, 1.0]
    assert g.counts.rows_repaired == 2
    actions = g.actions.sort("entity_id")
    assert actions["entity_id"].to_list() == ["e0", "e2"]
    assert [float(v) for v in actions["old_value"]] == [-2.0, 3.0]
    assert [float(v) for v in actions["new_value"]] == [0.0, 1.0]


def test_not_null_repair_fills_the_default_and_keeps_the_dtype(make_suite) -> None:
    suite = make_suite(not_null("n", default(9)))
    frame = pl.DataFrame({"id": ids(3), "n": [None, 2, None]}, schema={"id": pl.String, "n": pl.Int64})
    g = guard(frame, suite)
    assert g.scorable["n"].to_list() == [9, 2, 9]
    assert g.scorable.schema["n"] == pl.Int64
    assert g.counts.rows_repaired == 2
    assert g.actions["old_value"].to_list() == [None, None]
    assert g.actions["new_value"].to_list() == ["9", "9"]


def test_not_null_treats_nan_as_missing_in_float_columns(make_suite) -> None:
    suite = make_suite(not_null("x", default(0.25)))
    frame = pl.DataFrame({"id": ids(3), "x": [NAN, 0.5, None]})
    g = guard(frame, suite)
    assert g.scorable["x"].to_list() == [0.25, 0.5, 0.25]
    assert g.counts.rows_repaired == 2


def test_in_set_repair_default_and_quarantine(make_suite) -> None:
    suite = make_suite(
        in_set("home", default("OTHER"), ["RENT", "OWN", "OTHER"]),
        in_set("term", QUARANTINE, [36, 60]),
    )
    frame = pl.DataFrame({"id": ids(4), "home": ["RENT", "CASTLE", None, "OWN"], "term": [36, 60, 48, 60]})
    g = guard(frame, suite)
    # A null is not the in-set expectation's business; CASTLE is repaired; term 48 is quarantined.
    assert g.scorable["id"].to_list() == ["e0", "e1", "e3"]
    assert g.scorable["home"].to_list() == ["RENT", "OTHER", "OWN"]
    assert g.quarantined["id"].to_list() == ["e2"]
    assert g.quarantined["failed_expectations"].to_list() == [["be_in_set(term)"]]
    assert g.counts.rows_repaired == 1
    assert g.counts.rows_quarantined == 1


# --- quarantine -------------------------------------------------------------------------------


def test_regex_quarantines_non_matching_strings_only(make_suite) -> None:
    suite = make_suite(regex("id", QUARANTINE, r"^APP-\d{3}$"))
    frame = pl.DataFrame({"id": ["APP-001", "", "APP-1", None, "APP-002"], "x": [1, 2, 3, 4, 5]})
    g = guard(frame, suite)
    assert g.scorable["id"].to_list() == ["APP-001", None, "APP-002"]  # null is the not-null expectation's business
    assert g.quarantined["id"].to_list() == ["", "APP-1"]
    assert g.quarantined["x"].to_list() == [2, 3]  # the raw row is kept with the quarantined entity
    assert g.quarantined["failed_expectations"].to_list() == [["match_regex(id)"], ["match_regex(id)"]]
    assert g.counts.rows_quarantined == 2
    assert g.counts.rows_repaired == 0
    assert g.actions.height == 2
    assert set(g.actions["action"]) == {"quarantine"}
    assert g.actions["new_value"].to_list() == [None, None]


def test_a_row_failing_two_quarantines_is_quarantined_once_with_both_reasons(make_suite) -> None:
    suite = make_suite(
        between("a", QUARANTINE, min_value=0, max_value=10),
        between("b", QUARANTINE, min_value=0, max_value=10),
    )
    frame = pl.DataFrame({"id": ids(4), "a": [1, 11, 12, 3], "b": [1, 2, 13, 3]})
    g = guard(frame, suite)
    assert g.scorable["id"].to_list() == ["e0", "e3"]
    assert g.quarantined["id"].to_list() == ["e1", "e2"]
    assert sorted(g.quarantined.filter(pl.col("id") == "e2")["failed_expectations"].item()) == [
        "be_between(a)",
        "be_between(b)",
    ]
    assert g.counts.rows_quarantined == 2  # rows, not violations
    assert g.counts.by_expectation == {"be_between(a)": {"quarantine": 2}, "be_between(b)": {"quarantine": 1}}
    assert g.actions.height == 3  # one action row per (row, expectation)


def test_a_repaired_row_that_is_also_quarantined_counts_only_as_quarantined(make_suite) -> None:
    suite = make_suite(
        not_null("x", default(1.0)),
        between("y", QUARANTINE, min_value=0, max_value=1),
    )
    frame = pl.DataFrame({"id": ids(3), "x": [None, None, 0.5], "y": [0.5, 5.0, 0.5]})
    g = guard(frame, suite)
    assert g.scorable["id"].to_list() == ["e0", "e2"]
    assert g.counts.rows_repaired == 1  # e1 was repaired, but it is not scored
    assert g.counts.rows_quarantined == 1
    # Both actions on e1 are still recorded.
    assert sorted(g.actions.filter(pl.col("entity_id") == "e1")["action"].to_list()) == ["quarantine", "repair"]


# --- fail and structural errors ---------------------------------------------------------------


def test_fail_action_raises_naming_the_column(make_suite) -> None:
    suite = make_suite(between("loan_amount", FAIL, min_value=100, max_value=1000))
    frame = pl.DataFrame({"id": ids(3), "loan_amount": [500, 50, 2000]})
    with pytest.raises(GuardFailure, match="loan_amount") as err:
        guard(frame, suite)
    assert "2 row(s)" in str(err.value)


def test_fail_action_without_violations_passes(make_suite) -> None:
    suite = make_suite(between("loan_amount", FAIL, min_value=100, max_value=1000))
    frame = pl.DataFrame({"id": ids(2), "loan_amount": [100, 1000]})
    assert guard(frame, suite).scorable.height == 2


def test_missing_required_column_raises_naming_it(make_suite) -> None:
    suite = make_suite(exists("annual_income"), exists("id"))
    with pytest.raises(GuardFailure, match="annual_income"):
        guard(pl.DataFrame({"id": ids(2)}), suite)


def test_missing_checked_column_raises_naming_it(make_suite) -> None:
    suite = make_suite(not_null("debt_to_income", default(0.25)))
    with pytest.raises(GuardFailure, match="debt_to_income"):
        guard(pl.DataFrame({"id": ids(2), "other": [1, 2]}), suite)


def test_strings_in_a_numeric_column_raise_naming_the_column(make_suite) -> None:
    suite = make_suite(between("annual_income", CLIP, min_value=0, max_value=10))
    frame = pl.DataFrame({"id": ids(2), "annual_income": ["50000", "n/a"]})
    with pytest.raises(GuardFailure, match="annual_income"):
        guard(frame, suite)


# --- between: NaN, inf and bounds -------------------------------------------------------------


def test_inf_violates_a_two_sided_between_and_nan_is_left_to_not_null(make_suite) -> None:
    # GX's semantics: NaN is missing like null, so only not_be_null flags it.
    suite = make_suite(between("x", QUARANTINE, min_value=0, max_value=10))
    frame = pl.DataFrame({"id": ids(4), "x": [1.0, NAN, INF, -INF]})
    g = guard(frame, suite)
    assert g.quarantined["id"].to_list() == ["e2", "e3"]
    assert g.scorable["id"].to_list() == ["e0", "e1"]


def test_inf_violates_a_between_with_only_a_minimum(make_suite) -> None:
    # Stricter than GX on purpose: no model input may be infinite.
    suite = make_suite(between("x", QUARANTINE, min_value=0))
    frame = pl.DataFrame({"id": ids(3), "x": [1.0, NAN, INF]})
    assert guard(frame, suite).quarantined["id"].to_list() == ["e2"]


def test_minus_inf_violates_a_between_with_only_a_maximum(make_suite) -> None:
    suite = make_suite(between("x", QUARANTINE, max_value=10))
    frame = pl.DataFrame({"id": ids(2), "x": [1.0, -INF]})
    assert guard(frame, suite).quarantined["id"].to_list() == ["e1"]


def test_clip_repair_leaves_no_value_out_of_bounds(make_suite) -> None:
    suite = make_suite(between("x", CLIP, min_value=0, max_value=1))
    frame = pl.DataFrame({"id": ids(4), "x": [0.5, NAN, 2.0, -INF]})
    g = guard(frame, suite)
    x = g.scorable["x"]
    assert x.to_list()[2:] == [1.0, 0.0]
    assert x.filter(x.is_not_nan()).is_between(0.0, 1.0).all(), x.to_list()
    assert g.counts.rows_repaired == 2
    assert guard(g.scorable, suite).actions.height == 0


def test_clip_repair_of_inf_beyond_an_open_bound_makes_it_missing(make_suite) -> None:
    suite = make_suite(between("x", CLIP, min_value=0))
    g = guard(pl.DataFrame({"id": ids(2), "x": [INF, -5.0]}), suite)
    assert g.scorable["x"].to_list() == [None, 0.0]
    assert g.actions["new_value"].to_list() == [None, "0.0"]


def test_values_on_the_bounds_pass_inclusive_between(make_suite) -> None:
    suite = make_suite(between("x", QUARANTINE, min_value=0, max_value=1))
    frame = pl.DataFrame({"id": ids(4), "x": [0.0, 1.0, -1e-9, 1.0 + 1e-9]})
    g = guard(frame, suite)
    assert g.scorable["id"].to_list() == ["e0", "e1"]
    assert g.quarantined["id"].to_list() == ["e2", "e3"]


@pytest.mark.parametrize(
    ("strict", "failing"),
    [
        ({"strict_min": True}, ["e0"]),
        ({"strict_max": True}, ["e1"]),
        ({"strict_min": True, "strict_max": True}, ["e0", "e1"]),
    ],
)
def test_values_on_a_strict_bound_fail(make_suite, strict: dict[str, bool], failing: list[str]) -> None:
    suite = make_suite(between("x", QUARANTINE, min_value=0, max_value=1, **strict))
    frame = pl.DataFrame({"id": ids(3), "x": [0.0, 1.0, 0.5]})
    assert guard(frame, suite).quarantined["id"].to_list() == failing


def test_integer_columns_are_checked_as_numbers(make_suite) -> None:
    suite = make_suite(between("n", QUARANTINE, min_value=0, max_value=50))
    frame = pl.DataFrame({"id": ids(3), "n": [0, 51, 50]}, schema={"id": pl.String, "n": pl.Int16})
    assert guard(frame, suite).quarantined["id"].to_list() == ["e1"]


# --- suite loading ----------------------------------------------------------------------------


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param("{not json", id="invalid-json"),
        pytest.param(json.dumps({"name": "x"}), id="no-expectations-list"),
        pytest.param(json.dumps({"expectations": [between("x", None, min_value=0)]}), id="missing-meta-guard"),
        pytest.param(
            json.dumps({"expectations": [between("x", {"repair": "clip"}, min_value=0)]}), id="missing-action"
        ),
        pytest.param(
            json.dumps({"expectations": [between("x", {"action": "ignore"}, min_value=0)]}), id="unknown-action"
        ),
        pytest.param(
            json.dumps({"expectations": [_exp("expect_column_mean_to_be_between", "x", QUARANTINE, min_value=0)]}),
            id="unknown-expectation-type",
        ),
        pytest.param(json.dumps({"expectations": [regex("x", CLIP, "a")]}), id="regex-cannot-be-repaired"),
        pytest.param(json.dumps({"expectations": [not_null("x", CLIP)]}), id="clip-needs-between"),
        pytest.param(
            json.dumps({"expectations": [not_null("x", {"action": "repair", "repair": "default"})]}),
            id="default-without-value",
        ),
        pytest.param(
            json.dumps(
                {
                    "expectations": [
                        {"type": "expect_column_values_to_not_be_null", "kwargs": {}, "meta": {"guard": FAIL}}
                    ]
                }
            ),
            id="no-column",
        ),
        pytest.param(
            json.dumps({"expectations": [not_null("x", FAIL), not_null("x", QUARANTINE)]}), id="duplicate-expectation"
        ),
    ],
)
def test_malformed_suite_is_a_suite_error(tmp_path: Path, doc: str) -> None:
    with pytest.raises(SuiteError):
        load_guard_suite(_write(tmp_path, doc))


def test_unknown_expectation_type_is_named(tmp_path: Path) -> None:
    doc = json.dumps({"expectations": [_exp("expect_column_mean_to_be_between", "income", QUARANTINE)]})
    with pytest.raises(SuiteError, match="expect_column_mean_to_be_between"):
        load_guard_suite(_write(tmp_path, doc))


def test_missing_suite_file_is_a_suite_error(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="does not exist"):
        load_guard_suite(tmp_path / "nope.json")


def test_job_suite_compiles_every_expectation() -> None:
    doc = json.loads(SUITE_PATH.read_text())
    suite = load_guard_suite(SUITE_PATH)
    exist = [e["kwargs"]["column"] for e in doc["expectations"] if e["type"] == "expect_column_to_exist"]
    assert list(suite.required_columns) == exist
    # The entity key's uniqueness is the one partition-level rule, declared in the job's suite.
    assert (
        suite.entity_key is not None and suite.entity_key.declared and suite.entity_key.on_duplicate == "quarantine_all"
    )
    assert len(suite.expectations) + len(suite.column_checks) + 1 == len(doc["expectations"])
    assert [e.action for e in suite.expectations] == [
        e["meta"]["guard"]["action"] for e in doc["expectations"] if e["type"] in VIOLATIONS
    ]
    # The job's own suite never pays for Great Expectations at scoring time.
    assert suite.gx_checks is None and {e.evaluated_by for e in suite.expectations} == {"compiled"}


@pytest.mark.gx
def test_job_suite_loads_in_great_expectations() -> None:
    from great_expectations.core import ExpectationSuite

    doc = json.loads(SUITE_PATH.read_text())
    gx_suite = ExpectationSuite(**json.loads(SUITE_PATH.read_text()))
    assert len(gx_suite.expectations) == len(doc["expectations"])
    assert gx_suite.name == doc["name"]
    # Each expectation keeps its guard action through GX's own model.
    assert [e.meta["guard"]["action"] for e in gx_suite.expectations] == [
        e["meta"]["guard"]["action"] for e in doc["expectations"]
    ]


# --- counts and limits ------------------------------------------------------------------------


def test_actions_table_records_every_counted_action(make_suite) -> None:
    suite = make_suite(
        not_null("a", default(0.0)),
        between("a", CLIP, min_value=0, max_value=1),
        in_set("c", QUARANTINE, ["x", "y"]),
    )
    frame = pl.DataFrame({"id": ids(6), "a": [None, 2.0, 0.5, -1.0, 0.1, None], "c": ["x", "z", "y", "x", "q", "y"]})
    g = guard(frame, suite)
    counted = sum(n for per in g.counts.by_expectation.values() for n in per.values())
    assert g.actions.height == counted == 6
    grouped = {
        (r["expectation"], r["action"]): r["len"] for r in g.actions.group_by("expectation", "action").len().to_dicts()
    }
    assert grouped == {(k, a): n for k, per in g.counts.by_expectation.items() for a, n in per.items()}
    # Every row is either scored or quarantined, none dropped.
    assert g.scorable.height + g.quarantined.height == frame.height


def test_guard_counts_merge_adds_up() -> None:
    a = GuardCounts(rows_in=10, rows_repaired=2, rows_quarantined=1, by_expectation={"k": {"repair": 2}})
    b = GuardCounts(
        rows_in=5, rows_repaired=1, rows_quarantined=3, by_expectation={"k": {"repair": 1}, "j": {"quarantine": 3}}
    )
    a.merge(b)
    assert (a.rows_in, a.rows_repaired, a.rows_quarantined) == (15, 3, 4)
    assert a.by_expectation == {"k": {"repair": 3}, "j": {"quarantine": 3}}


def test_limits_at_the_limit_pass_and_above_it_breach() -> None:
    limits = {"max_repaired_share": 0.2, "max_quarantined_share": 0.05}
    assert guard_limit_breaches(GuardCounts(rows_in=100, rows_repaired=20, rows_quarantined=5), **limits) == []
    breaches = guard_limit_breaches(GuardCounts(rows_in=100, rows_repaired=21, rows_quarantined=6), **limits)
    assert len(breaches) == 2
    assert "21 of 100 rows repaired" in breaches[0]
    assert "6 of 100 rows quarantined" in breaches[1]
    only_q = guard_limit_breaches(GuardCounts(rows_in=100, rows_repaired=0, rows_quarantined=6), **limits)
    assert len(only_q) == 1 and "quarantined" in only_q[0]


def test_limits_of_an_empty_partition_never_breach() -> None:
    assert guard_limit_breaches(GuardCounts(), max_repaired_share=0.0, max_quarantined_share=0.0) == []
