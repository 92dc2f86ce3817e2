"""tasks/guards/ against Great Expectations itself, on generated data, and on bad input.

The compiled guards claim that their per-expectation counts are the unexpected counts GX reports for
the same data. The parity tests here generate seeded data with injected violations, run the guards,
then run GX's own validation of the same suite on the same data (converted to pandas) and compare
counts and the exact rows, expectation by expectation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tasks.errors import GuardFailure, SuiteError
from tasks.guards import GuardCounts, GuardSuite, guard_summary_rows, guarded_chunk, load_guard_suite

NAN, INF = float("nan"), float("inf")
SEEDS = (11, 2024, 977)
N_ROWS = 3000


# --- suite helpers (same shape as tests/test_guards.py) -----------------------------------------


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


def lengths(column: str, guard: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return _exp("expect_column_value_lengths_to_be_between", column, guard, **kwargs)


def exists(column: str) -> dict[str, Any]:
    return _exp("expect_column_to_exist", column, {"action": "fail"})


def of_type(column: str, type_: str) -> dict[str, Any]:
    return _exp("expect_column_values_to_be_of_type", column, {"action": "fail"}, type_=type_)


def in_type_list(column: str, type_list: list[str]) -> dict[str, Any]:
    return _exp("expect_column_values_to_be_in_type_list", column, {"action": "fail"}, type_list=type_list)


def not_in_set(column: str, guard: dict[str, Any], values: list[Any]) -> dict[str, Any]:
    return _exp("expect_column_values_to_not_be_in_set", column, guard, value_set=values)


def not_match_regex(column: str, guard: dict[str, Any], pattern: str) -> dict[str, Any]:
    return _exp("expect_column_values_to_not_match_regex", column, guard, regex=pattern)


QUARANTINE = {"action": "quarantine"}
FAIL = {"action": "fail"}
CLIP = {"action": "repair", "repair": "clip"}


def default(value: Any) -> dict[str, Any]:
    return {"action": "repair", "repair": "default", "default": value}


def suite_doc(*expectations: dict[str, Any], name: str = "t") -> dict[str, Any]:
    return {"name": name, "expectations": list(expectations)}


def write_suite(folder: Path, doc: dict[str, Any]) -> Path:
    path = folder / f"{doc['name']}.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def make_suite(tmp_path: Path):
    def make(*expectations: dict[str, Any], name: str = "t") -> GuardSuite:
        return load_guard_suite(write_suite(tmp_path, suite_doc(*expectations, name=name)))

    return make


def guard(frame: pl.DataFrame, suite: GuardSuite, entity_column: str = "id"):
    return guarded_chunk(frame, suite, entity_column=entity_column)


def ids(n: int) -> list[str]:
    return [f"e{i}" for i in range(n)]


def acted_ids(actions: pl.DataFrame, key: str) -> list[str]:
    return sorted(actions.filter(pl.col("expectation") == key)["entity_id"].to_list())


# --- GX itself ----------------------------------------------------------------------------------


class GxValidator:
    """GX's own validation of a polars frame (as pandas), through one shared ephemeral context."""

    def __init__(self) -> None:
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self._gx = gx
        context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        asset = context.data_sources.add_pandas("parity").add_dataframe_asset("frame")
        self._batch_definition = asset.add_batch_definition_whole_dataframe("whole")

    def validate(self, frame: pl.DataFrame, doc: dict[str, Any]) -> dict[tuple[str, str], Any]:
        """{(expectation type, column): GX's result} for every expectation of `doc`."""
        from great_expectations.core import ExpectationSuite

        batch = self._batch_definition.get_batch(batch_parameters={"dataframe": frame.to_pandas()})
        result = batch.validate(
            ExpectationSuite(**json.loads(json.dumps(doc))), result_format={"result_format": "COMPLETE"}
        )
        by_key = {(r.expectation_config.type, r.expectation_config.kwargs["column"]): r for r in result.results}
        assert len(by_key) == len(doc["expectations"])
        for r in by_key.values():
            assert not r.exception_info.get("raised_exception"), r.exception_info
        return by_key


@pytest.fixture(scope="module")
def gx_validator() -> GxValidator:
    return GxValidator()


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gx-suites")


# --- generated data -----------------------------------------------------------------------------


def _with_nulls(values: list[Any], null_at: np.ndarray) -> list[Any]:
    out = list(values)
    for i in null_at:
        out[int(i)] = None
    return out


def generated_frame(seed: int, n: int = N_ROWS) -> pl.DataFrame:
    """Seeded rows with violations injected into every checked column."""
    rng = np.random.default_rng(seed)

    def pick(k: int) -> np.ndarray:
        return rng.choice(n, size=k, replace=False)

    # x: two-sided [0, 10]; values on both bounds, just outside them, NaN, ±inf, nulls.
    x = rng.uniform(-2.0, 12.0, n)
    x[pick(80)] = 0.0
    x[pick(80)] = 10.0
    x[pick(15)] = np.nextafter(0.0, -1.0)
    x[pick(15)] = np.nextafter(10.0, 11.0)
    x[pick(40)] = NAN
    x[pick(20)] = INF
    x[pick(20)] = -INF
    # y: strictly positive, minimum only; values exactly on the minimum, -0.0, NaN, -inf, nulls, no +inf.
    y = rng.normal(1.0, 1.0, n)
    y[pick(60)] = 0.0
    y[pick(10)] = -0.0
    y[pick(30)] = NAN
    y[pick(20)] = -INF
    # n: int64 in [0, 100), values on both bounds and beyond, nulls.
    counts = rng.integers(-10, 111, n)
    counts[pick(40)] = 0
    counts[pick(40)] = 100
    # category: a set of four, with near-misses (case, whitespace, empty) and nulls.
    cats = rng.choice(
        ["RENT", "OWN", "MORTGAGE", "OTHER", "CASTLE", "rent", " RENT", ""],
        size=n,
        p=[0.3, 0.25, 0.2, 0.13, 0.04, 0.03, 0.03, 0.02],
    ).tolist()
    # app_id: APP-ddddd (length 9), with regex breaks of right length, wrong lengths, unicode digits.
    app = [f"APP-{k:05d}" for k in rng.integers(0, 100_000, n)]
    bad_ids = [
        "app-12345",  # length 9, breaks the regex
        "APP-1234",  # length 8: passes lengths 8..10, breaks the regex
        "APP-12",  # too short and breaks the regex
        "APP-123456789",  # too long and breaks the regex
        "",  # empty
        "XAPP-12345",  # length 10, breaks the anchored regex
        "APP-12345 ",  # trailing space
        "APP-１２３４５",  # fullwidth digits are \d in both regex engines
        "APP-ÄÖÜ12",  # non-ASCII letters, length 9
    ]
    for bad, i in zip(rng.choice(bad_ids, size=200).tolist(), pick(200), strict=True):
        app[int(i)] = bad
    # code: letters, lengths 0..8; strictly between 3 and 6 means 4 or 5.
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    code = ["".join(rng.choice(letters, size=int(k))) for k in rng.integers(0, 9, n)]

    return pl.DataFrame(
        {
            "row_id": [f"r{i:05d}" for i in range(n)],
            "x": pl.Series(_with_nulls(x.tolist(), pick(60)), dtype=pl.Float64),
            "y": pl.Series(_with_nulls(y.tolist(), pick(40)), dtype=pl.Float64),
            "n": pl.Series(_with_nulls(counts.tolist(), pick(40)), dtype=pl.Int64),
            "category": pl.Series(_with_nulls(cats, pick(50)), dtype=pl.String),
            "app_id": pl.Series(_with_nulls(app, pick(30)), dtype=pl.String),
            "code": pl.Series(_with_nulls(code, pick(30)), dtype=pl.String),
        }
    )


CATEGORIES = ["RENT", "OWN", "MORTGAGE", "OTHER"]
APP_ID = r"^APP-\d{5}$"

# Every compiled row-level type, each with action quarantine so that every violation is counted.
PARITY_EXPECTATIONS = (
    not_null("x", QUARANTINE),
    between("x", QUARANTINE, min_value=0, max_value=10),
    not_null("y", QUARANTINE),
    between("y", QUARANTINE, min_value=0, strict_min=True),
    not_null("n", QUARANTINE),
    between("n", QUARANTINE, min_value=0, max_value=100, strict_max=True),
    not_null("category", QUARANTINE),
    in_set("category", QUARANTINE, CATEGORIES),
    not_null("app_id", QUARANTINE),
    regex("app_id", QUARANTINE, APP_ID),
    lengths("app_id", QUARANTINE, min_value=8, max_value=10),
    lengths("code", QUARANTINE, min_value=3, max_value=6, strict_min=True, strict_max=True),
)
PARITY_KEYS = {
    ("expect_column_values_to_not_be_null", "x"): "not_be_null(x)",
    ("expect_column_values_to_be_between", "x"): "be_between(x)",
    ("expect_column_values_to_not_be_null", "y"): "not_be_null(y)",
    ("expect_column_values_to_be_between", "y"): "be_between(y)",
    ("expect_column_values_to_not_be_null", "n"): "not_be_null(n)",
    ("expect_column_values_to_be_between", "n"): "be_between(n)",
    ("expect_column_values_to_not_be_null", "category"): "not_be_null(category)",
    ("expect_column_values_to_be_in_set", "category"): "be_in_set(category)",
    ("expect_column_values_to_not_be_null", "app_id"): "not_be_null(app_id)",
    ("expect_column_values_to_match_regex", "app_id"): "match_regex(app_id)",
    ("expect_column_value_lengths_to_be_between", "app_id"): "value_lengths_to_be_between(app_id)",
    ("expect_column_value_lengths_to_be_between", "code"): "value_lengths_to_be_between(code)",
}


def test_generated_data_has_the_injected_cases() -> None:
    frame = generated_frame(SEEDS[0])
    assert frame.height == N_ROWS
    x = frame["x"]
    assert x.null_count() > 0 and x.is_nan().sum() > 0
    assert (x == INF).sum() > 0 and (x == -INF).sum() > 0
    assert (x == 0.0).sum() > 0 and (x == 10.0).sum() > 0
    assert (frame["y"] == INF).sum() == 0 and (frame["y"] == 0.0).sum() > 0
    assert frame.schema["n"] == pl.Int64 and frame["n"].null_count() > 0
    assert (frame["n"] == 0).sum() > 0 and (frame["n"] == 100).sum() > 0
    assert frame["category"].null_count() > 0
    assert frame["row_id"].n_unique() == N_ROWS


@pytest.mark.gx
@pytest.mark.parametrize("seed", SEEDS)
def test_compiled_counts_and_rows_equal_gx_validation(seed: int, gx_validator: GxValidator, suite_dir: Path) -> None:
    frame = generated_frame(seed)
    doc = suite_doc(*PARITY_EXPECTATIONS, name=f"parity_{seed}")
    suite = load_guard_suite(write_suite(suite_dir, doc))
    assert all(e.evaluated_by == "compiled" for e in suite.expectations)
    assert {e.key for e in suite.expectations} == set(PARITY_KEYS.values())

    g = guarded_chunk(frame, suite, entity_column="row_id")
    gx_results = gx_validator.validate(frame, doc)

    row_ids = frame["row_id"].to_list()
    for gx_key, key in PARITY_KEYS.items():
        gx_result = gx_results[gx_key]
        gx_count = gx_result.result["unexpected_count"]
        gx_ids = sorted(row_ids[i] for i in gx_result.result["unexpected_index_list"])
        # The injected violations must exist, or the comparison says nothing.
        assert gx_count > 0 and not gx_result.success, key
        assert g.counts.by_expectation.get(key) == {"quarantine": gx_count}, key
        assert acted_ids(g.actions, key) == gx_ids, key

    # Every row is scored or quarantined, and a row is quarantined iff GX flags it somewhere.
    flagged = {row_ids[i] for r in gx_results.values() for i in r.result["unexpected_index_list"]}
    assert g.scorable.height + g.quarantined.height == frame.height
    assert set(g.quarantined["row_id"]) == flagged
    assert g.counts.rows_quarantined == len(flagged)
    assert g.counts.rows_repaired == 0


@pytest.mark.gx
@pytest.mark.parametrize("seed", SEEDS)
def test_inf_on_an_open_bound_is_the_documented_difference_from_gx(
    seed: int, gx_validator: GxValidator, suite_dir: Path
) -> None:
    # Guards flag +inf on a minimum-only between and -inf on a maximum-only between; GX lets both pass.
    rng = np.random.default_rng(seed)
    lo = rng.normal(1.0, 2.0, 500)
    hi = rng.normal(1.0, 2.0, 500)
    lo[rng.choice(500, 25, replace=False)] = INF
    hi[rng.choice(500, 25, replace=False)] = -INF
    lo[rng.choice(500, 10, replace=False)] = NAN
    frame = pl.DataFrame({"row_id": [f"r{i}" for i in range(500)], "lo": lo, "hi": hi})
    doc = suite_doc(between("lo", QUARANTINE, min_value=0), between("hi", QUARANTINE, max_value=2), name=f"inf_{seed}")
    g = guarded_chunk(frame, load_guard_suite(write_suite(suite_dir, doc)), entity_column="row_id")
    gx_results = gx_validator.validate(frame, doc)

    row_ids = frame["row_id"].to_list()
    for column, key, inf in (("lo", "be_between(lo)", INF), ("hi", "be_between(hi)", -INF)):
        gx_ids = {
            row_ids[i]
            for i in gx_results[("expect_column_values_to_be_between", column)].result["unexpected_index_list"]
        }
        inf_ids = set(frame.filter(pl.col(column) == inf)["row_id"])
        assert len(inf_ids) >= 20 and len(gx_ids) > 0
        assert not gx_ids & inf_ids  # GX lets the infinity pass the open side
        assert set(acted_ids(g.actions, key)) == gx_ids | inf_ids  # the guards add exactly the infinities
        assert g.counts.by_expectation[key] == {"quarantine": len(gx_ids) + len(inf_ids)}


@pytest.mark.gx
@pytest.mark.parametrize("seed", SEEDS)
def test_sets_of_every_size_equal_gx_validation(seed: int, gx_validator: GxValidator, suite_dir: Path) -> None:
    # Small sets compile to equality chains and large ones to `is_in`; both, on strings, integers
    # and floats with NaN, must flag exactly GX's rows.
    frame = generated_frame(seed)
    rng = np.random.default_rng(seed)
    words = [f"w{i:02d}" for i in range(40)]
    frame = frame.with_columns(
        pl.Series("word", rng.choice([*words, "W01", "w1", "w40"], size=frame.height).tolist()),
        pl.Series("level", rng.integers(-3, 25, frame.height)),
    )
    doc = suite_doc(
        in_set("word", QUARANTINE, words[:3]),
        in_set("n", QUARANTINE, list(range(0, 100, 3))),
        in_set("x", QUARANTINE, [0.0, 10.0]),
        in_set("level", QUARANTINE, list(range(20))),
        name=f"sets_{seed}",
    )
    suite = load_guard_suite(write_suite(suite_dir, doc))
    keys = {(e.type, e.column): e.key for e in suite.expectations}
    g = guarded_chunk(frame, suite, entity_column="row_id")
    gx_results = gx_validator.validate(frame, doc)

    row_ids = frame["row_id"].to_list()
    for item in doc["expectations"]:
        gx_result = gx_results[(item["type"], item["kwargs"]["column"])]
        key = keys[(item["type"], item["kwargs"]["column"])]
        gx_ids = sorted(row_ids[i] for i in gx_result.result["unexpected_index_list"])
        assert acted_ids(g.actions, key) == gx_ids, key
        assert g.counts.by_expectation.get(key, {}).get("quarantine", 0) == gx_result.result["unexpected_count"], key
    assert g.scorable.height + g.quarantined.height == frame.height


@pytest.mark.gx
def test_regex_end_anchor_before_a_trailing_newline_matches_gx(gx_validator: GxValidator, suite_dir: Path) -> None:
    frame = pl.DataFrame({"row_id": ["a", "b", "c"], "app_id": ["APP-12345\n", "APP-12345", "APP-1"]})
    doc = suite_doc(regex("app_id", QUARANTINE, APP_ID), name="newline")
    g = guarded_chunk(frame, load_guard_suite(write_suite(suite_dir, doc)), entity_column="row_id")
    gx_result = gx_validator.validate(frame, doc)[("expect_column_values_to_match_regex", "app_id")]
    gx_ids = sorted(frame["row_id"][i] for i in gx_result.result["unexpected_index_list"])
    assert gx_ids == ["c"]
    assert acted_ids(g.actions, "match_regex(app_id)") == gx_ids


@pytest.mark.gx
@pytest.mark.parametrize("pattern", [r"^(?!TEST)", r"^APP-\d+\Z"])
def test_a_python_only_regex_is_a_suite_error_or_matches_gx(
    pattern: str, gx_validator: GxValidator, suite_dir: Path
) -> None:
    frame = pl.DataFrame({"row_id": ["a", "b", "c"], "app_id": ["APP-12345", "TEST-1", "x"]})
    doc = suite_doc(regex("app_id", QUARANTINE, pattern), name="pyregex")
    try:
        suite = load_guard_suite(write_suite(suite_dir, doc))
    except SuiteError:
        return
    g = guarded_chunk(frame, suite, entity_column="row_id")
    gx_result = gx_validator.validate(frame, doc)[("expect_column_values_to_match_regex", "app_id")]
    gx_ids = sorted(frame["row_id"][i] for i in gx_result.result["unexpected_index_list"])
    assert acted_ids(g.actions, "match_regex(app_id)") == gx_ids


# --- column-type checks against GX --------------------------------------------------------------

TYPED_FRAME = pl.DataFrame(
    {
        "s": ["a", "b", None],
        "f": [1.5, None, NAN],
        "i": pl.Series([1, 2, 3], dtype=pl.Int64),
        "num_as_text": ["50000", "n/a", "12.5"],
    }
)


@pytest.mark.gx
@pytest.mark.parametrize(
    ("expectation", "gx_success"),
    [
        pytest.param(of_type("s", "str"), True, id="str-of-type-str"),
        pytest.param(of_type("f", "float64"), True, id="float-of-type-float64"),
        pytest.param(of_type("i", "int64"), True, id="int-of-type-int64"),
        pytest.param(in_type_list("f", ["int64", "float64"]), True, id="float-in-int-float"),
        pytest.param(in_type_list("i", ["int64", "float64"]), True, id="int-in-int-float"),
        pytest.param(of_type("num_as_text", "float64"), False, id="strings-of-type-float64"),
        pytest.param(in_type_list("num_as_text", ["int64", "float64"]), False, id="strings-in-int-float"),
        pytest.param(of_type("f", "str"), False, id="float-of-type-str"),
        pytest.param(of_type("i", "float64"), False, id="int-of-type-float64"),
    ],
)
def test_type_checks_pass_iff_gx_reports_success(
    expectation: dict[str, Any], gx_success: bool, gx_validator: GxValidator, suite_dir: Path
) -> None:
    doc = suite_doc(exists("s"), expectation, name="types")
    column = expectation["kwargs"]["column"]
    gx_result = gx_validator.validate(TYPED_FRAME, doc)[(expectation["type"], column)]
    assert gx_result.success is gx_success  # the case means what its id says, in GX
    suite = load_guard_suite(write_suite(suite_dir, doc))
    key = {
        "expect_column_values_to_be_of_type": "be_of_type",
        "expect_column_values_to_be_in_type_list": "be_in_type_list",
    }[expectation["type"]] + f"({column})"
    if gx_success:
        g = guarded_chunk(TYPED_FRAME, suite, entity_column="s")
        assert g.scorable.height == TYPED_FRAME.height
    else:
        with pytest.raises(GuardFailure, match=rf"column '{column}'") as err:
            guarded_chunk(TYPED_FRAME, suite, entity_column="s")
        assert key in str(err.value)


def test_the_pandas_2_name_object_is_refused_for_strings(suite_dir: Path) -> None:
    # Under pandas 3 GX calls string columns `str` and fails `object` on them: refusing the old
    # name at load is clearer than a check that means different things to GX and to the guards.
    with pytest.raises(SuiteError, match="object"):
        load_guard_suite(write_suite(suite_dir, suite_doc(of_type("s", "object"), name="objtype")))


@pytest.mark.gx
def test_in_type_list_str_is_the_documented_difference_from_gx(gx_validator: GxValidator, suite_dir: Path) -> None:
    # GX 1.24 on pandas 3 fails in_type_list ["str"] on a `str` column although it passes
    # of_type "str" on the same column; the guards accept both.
    doc = suite_doc(in_type_list("s", ["str"]), name="strtypes")
    assert gx_validator.validate(TYPED_FRAME, doc)[("expect_column_values_to_be_in_type_list", "s")].success is False
    g = guarded_chunk(TYPED_FRAME, load_guard_suite(write_suite(suite_dir, doc)), entity_column="s")
    assert g.scorable.height == TYPED_FRAME.height


# --- GX fallback for types the guards do not compile ----------------------------------------------

FALLBACK_FRAME = pl.DataFrame(
    {
        "id": ids(7),
        "home": ["RENT", "CASTLE", None, "OWN", "TENT", "CASTLE", "OTHER"],
        "ref": ["ok-1", "tmp-2", "ok-3", None, "tmp-5", "ok-6", "TMP-7"],
        "x": [0.5, 0.2, 2.0, 0.1, 0.3, 0.4, 0.9],
    }
)


# A compiled expectation that never fires on FALLBACK_FRAME, so that these suites mix both kinds;
# a suite of GX-evaluated expectations only has its own test below.
SENTINEL = not_null("id", QUARANTINE)


@pytest.mark.gx
def test_gx_fallback_quarantines_exactly_the_unexpected_rows(make_suite) -> None:
    suite = make_suite(SENTINEL, not_in_set("home", QUARANTINE, ["CASTLE", "TENT"]))
    exp = suite.expectations[1]
    assert exp.evaluated_by == "great_expectations"
    assert suite.expectations[0].evaluated_by == "compiled"
    assert exp.key == "not_be_in_set(home)"
    g = guard(FALLBACK_FRAME, suite)
    assert g.quarantined["id"].to_list() == ["e1", "e4", "e5"]
    assert g.quarantined["failed_expectations"].to_list() == [["not_be_in_set(home)"]] * 3
    assert g.scorable["id"].to_list() == ["e0", "e2", "e3", "e6"]  # the null is not this expectation's business
    assert g.counts.by_expectation == {"not_be_in_set(home)": {"quarantine": 3}}
    assert g.counts.rows_quarantined == 3
    assert acted_ids(g.actions, "not_be_in_set(home)") == ["e1", "e4", "e5"]
    summary = guard_summary_rows(suite, g.counts)
    assert [(r["expectation"], r["evaluated_by"], r["rows"]) for r in summary] == [
        ("not_be_null(id)", "compiled", 0),
        ("not_be_in_set(home)", "great_expectations", 3),
    ]


@pytest.mark.gx
def test_gx_fallback_not_match_regex_quarantines_matching_rows(make_suite) -> None:
    suite = make_suite(SENTINEL, not_match_regex("ref", QUARANTINE, r"^tmp-"))
    assert suite.expectations[1].evaluated_by == "great_expectations"
    g = guard(FALLBACK_FRAME, suite)
    assert g.quarantined["id"].to_list() == ["e1", "e4"]  # case-sensitive: TMP-7 passes; null is skipped
    assert g.counts.by_expectation == {"not_match_regex(ref)": {"quarantine": 2}}


@pytest.mark.gx
def test_gx_fallback_repair_default_substitutes_and_counts(make_suite) -> None:
    suite = make_suite(SENTINEL, not_in_set("home", default("OTHER"), ["CASTLE", "TENT"]))
    g = guard(FALLBACK_FRAME, suite)
    assert g.scorable["id"].to_list() == ids(7)
    assert g.scorable["home"].to_list() == ["RENT", "OTHER", None, "OWN", "OTHER", "OTHER", "OTHER"]
    assert g.quarantined.height == 0
    assert g.counts.by_expectation == {"not_be_in_set(home)": {"repair": 3}}
    assert g.counts.rows_repaired == 3
    actions = g.actions.sort("entity_id")
    assert actions["entity_id"].to_list() == ["e1", "e4", "e5"]
    assert actions["old_value"].to_list() == ["CASTLE", "TENT", "CASTLE"]
    assert actions["new_value"].to_list() == ["OTHER"] * 3


@pytest.mark.gx
def test_gx_fallback_fail_raises_naming_the_expectation(make_suite) -> None:
    suite = make_suite(SENTINEL, not_in_set("home", FAIL, ["TENT"]))
    with pytest.raises(GuardFailure, match=r"not_be_in_set\(home\)") as err:
        guard(FALLBACK_FRAME, suite)
    assert "1 row(s)" in str(err.value)
    assert "TENT" in str(err.value)  # an example of the bad values


@pytest.mark.gx
def test_gx_fallback_fail_without_violations_passes(make_suite) -> None:
    suite = make_suite(SENTINEL, not_in_set("home", FAIL, ["PALACE"]))
    assert guard(FALLBACK_FRAME, suite).scorable.height == FALLBACK_FRAME.height


@pytest.mark.gx
def test_gx_fallback_and_compiled_expectations_are_both_honoured(make_suite) -> None:
    suite = make_suite(
        exists("id"),
        not_in_set("home", default("OTHER"), ["CASTLE", "TENT"]),
        in_set("home", QUARANTINE, ["RENT", "OWN", "OTHER"]),
        not_match_regex("ref", QUARANTINE, r"^tmp-"),
        between("x", CLIP, min_value=0, max_value=1),
    )
    by = {e.key: e.evaluated_by for e in suite.expectations}
    assert by == {
        "not_be_in_set(home)": "great_expectations",
        "be_in_set(home)": "compiled",
        "not_match_regex(ref)": "great_expectations",
        "be_between(x)": "compiled",
    }
    g = guard(FALLBACK_FRAME, suite)
    # Every check judges the raw chunk: CASTLE/TENT are repaired to OTHER but also break be_in_set.
    assert g.counts.by_expectation == {
        "not_be_in_set(home)": {"repair": 3},
        "be_in_set(home)": {"quarantine": 3},
        "not_match_regex(ref)": {"quarantine": 2},
        "be_between(x)": {"repair": 1},
    }
    assert g.quarantined["id"].to_list() == ["e1", "e4", "e5"]
    assert sorted(g.quarantined.filter(pl.col("id") == "e1")["failed_expectations"].item()) == [
        "be_in_set(home)",
        "not_match_regex(ref)",
    ]
    assert g.scorable["id"].to_list() == ["e0", "e2", "e3", "e6"]
    assert g.scorable["x"].to_list() == [0.5, 1.0, 0.1, 0.9]  # e2 clipped
    assert g.counts.rows_repaired == 1  # e2; the home repairs were on quarantined rows
    assert g.scorable.height + g.quarantined.height == FALLBACK_FRAME.height


@pytest.mark.gx
def test_gx_fallback_on_an_empty_chunk_counts_nothing(make_suite) -> None:
    suite = make_suite(not_in_set("home", QUARANTINE, ["CASTLE"]), not_match_regex("ref", default("ok-0"), r"^tmp-"))
    g = guard(FALLBACK_FRAME.head(0), suite)
    assert g.scorable.height == 0 and g.quarantined.height == 0 and g.actions.height == 0
    assert g.counts.by_expectation == {}
    assert (g.counts.rows_in, g.counts.rows_repaired, g.counts.rows_quarantined) == (0, 0, 0)


@pytest.mark.gx
def test_gx_fallback_only_suite_on_a_mixed_frame_keeps_row_alignment(make_suite) -> None:
    # No compiled row expectation at all: the masks come only from GX.
    suite = make_suite(not_in_set("home", QUARANTINE, ["OWN"]), not_match_regex("ref", QUARANTINE, r"-7$"))
    g = guard(FALLBACK_FRAME, suite)
    assert g.quarantined["id"].to_list() == ["e3", "e6"]
    assert g.counts.by_expectation == {
        "not_be_in_set(home)": {"quarantine": 1},
        "not_match_regex(ref)": {"quarantine": 1},
    }


@pytest.mark.gx
def test_aggregate_expectation_is_a_suite_error_saying_it_judges_the_whole_column(make_suite) -> None:
    with pytest.raises(SuiteError, match="judges the whole column") as err:
        make_suite(_exp("expect_column_mean_to_be_between", "x", QUARANTINE, min_value=0, max_value=1))
    assert "expect_column_mean_to_be_between" in str(err.value)


@pytest.mark.gx
def test_unknown_expectation_type_is_a_suite_error_naming_it(make_suite) -> None:
    with pytest.raises(SuiteError, match="expect_nonsense_type"):
        make_suite(_exp("expect_nonsense_type", "x", QUARANTINE))


@pytest.mark.gx
def test_kwargs_gx_rejects_are_a_suite_error(make_suite) -> None:
    with pytest.raises(SuiteError, match="expect_column_values_to_not_be_in_set") as err:
        make_suite(_exp("expect_column_values_to_not_be_in_set", "home", QUARANTINE))
    assert "value_set" in str(err.value)


@pytest.mark.gx
def test_gx_fallback_repair_default_breaking_a_compiled_check_is_a_suite_error(make_suite) -> None:
    with pytest.raises(SuiteError, match=r"not_be_in_set\(home\)") as err:
        make_suite(
            not_in_set("home", default("PALACE"), ["CASTLE"]),
            in_set("home", QUARANTINE, ["RENT", "OWN", "OTHER"]),
        )
    assert "be_in_set(home)" in str(err.value)


# --- bad input at guard level ---------------------------------------------------------------------


def test_all_null_column_repair_default_repairs_and_counts_every_row(make_suite) -> None:
    suite = make_suite(not_null("x", default(0.5)), between("x", QUARANTINE, min_value=0, max_value=1))
    frame = pl.DataFrame({"id": ids(4), "x": [None] * 4}, schema={"id": pl.String, "x": pl.Float64})
    g = guard(frame, suite)
    assert g.scorable["x"].to_list() == [0.5] * 4
    assert g.scorable.schema["x"] == pl.Float64
    assert g.quarantined.height == 0
    assert g.counts.by_expectation == {"not_be_null(x)": {"repair": 4}}
    assert g.counts.rows_repaired == 4
    assert g.actions["new_value"].to_list() == ["0.5"] * 4


def test_all_null_untyped_column_repair_default_really_repairs(make_suite) -> None:
    suite = make_suite(not_null("x", default(0.5)))
    frame = pl.DataFrame({"id": ids(3), "x": [None, None, None]})
    assert frame.schema["x"] == pl.Null
    g = guard(frame, suite)
    assert g.counts.rows_repaired == 3
    assert g.scorable["x"].to_list() == [0.5] * 3


def test_all_null_column_quarantine_quarantines_every_row_and_loses_none(make_suite) -> None:
    suite = make_suite(not_null("x", QUARANTINE), between("x", QUARANTINE, min_value=0, max_value=1))
    frame = pl.DataFrame({"id": ids(5), "x": [None, NAN, None, NAN, None]}, schema={"id": pl.String, "x": pl.Float64})
    g = guard(frame, suite)
    assert g.scorable.height == 0
    assert g.quarantined["id"].to_list() == ids(5)
    assert g.quarantined["failed_expectations"].to_list() == [["not_be_null(x)"]] * 5
    assert g.counts.by_expectation == {"not_be_null(x)": {"quarantine": 5}}
    assert g.counts.rows_quarantined == 5
    assert g.scorable.height + g.quarantined.height == frame.height


def test_empty_chunk_gives_empty_outputs_and_zero_counts(make_suite) -> None:
    suite = make_suite(
        exists("id"),
        not_null("x", default(0.5)),
        between("x", CLIP, min_value=0, max_value=1),
        in_set("c", QUARANTINE, ["a", "b"]),
        regex("id", QUARANTINE, r"^e\d+$"),
    )
    frame = pl.DataFrame(schema={"id": pl.String, "x": pl.Float64, "c": pl.String})
    g = guard(frame, suite)
    assert g.scorable.height == 0 and g.quarantined.height == 0 and g.actions.height == 0
    assert g.scorable.schema == frame.schema
    assert (g.counts.rows_in, g.counts.rows_repaired, g.counts.rows_quarantined) == (0, 0, 0)
    assert g.counts.by_expectation == {}


def test_empty_chunk_with_only_repairs_gives_empty_outputs(make_suite) -> None:
    suite = make_suite(not_null("x", default(0.5)))
    g = guard(pl.DataFrame(schema={"id": pl.String, "x": pl.Float64}), suite)
    assert g.scorable.height == 0 and g.counts.rows_repaired == 0


@pytest.mark.parametrize(
    "expectation",
    [
        pytest.param(exists("annual_income"), id="exists"),
        pytest.param(not_null("annual_income", default(1.0)), id="not-null"),
        pytest.param(between("annual_income", QUARANTINE, min_value=0), id="between"),
        pytest.param(of_type("annual_income", "float64"), id="of-type"),
    ],
)
def test_a_column_the_data_lacks_raises_naming_it(make_suite, expectation: dict[str, Any]) -> None:
    suite = make_suite(expectation)
    with pytest.raises(GuardFailure, match="annual_income"):
        guard(pl.DataFrame({"id": ids(2), "income": [1.0, 2.0]}), suite)


@pytest.mark.parametrize(
    ("expectation", "key"),
    [
        pytest.param(of_type("amount", "float64"), "be_of_type(amount)", id="of-type"),
        pytest.param(in_type_list("amount", ["int64", "float64"]), "be_in_type_list(amount)", id="in-type-list"),
        pytest.param(between("amount", QUARANTINE, min_value=0), "be_between(amount)", id="between"),
    ],
)
def test_column_type_mismatch_raises_naming_column_and_expectation(
    make_suite, expectation: dict[str, Any], key: str
) -> None:
    suite = make_suite(expectation)
    frame = pl.DataFrame({"id": ids(2), "amount": ["50000", "n/a"]})
    with pytest.raises(GuardFailure, match="'amount'") as err:
        guard(frame, suite)
    assert key in str(err.value)


def test_regex_on_a_numeric_column_raises_naming_it(make_suite) -> None:
    suite = make_suite(regex("code", QUARANTINE, r"^\d+$"))
    with pytest.raises(GuardFailure, match=r"'code'.*match_regex\(code\)"):
        guard(pl.DataFrame({"id": ids(2), "code": [1, 2]}), suite)


@pytest.mark.parametrize(
    "expectation",
    [
        pytest.param(between("x", QUARANTINE, min_value=0, mostly=0.95), id="between"),
        pytest.param(not_null("x", QUARANTINE) | {"kwargs": {"column": "x", "mostly": 0.5}}, id="not-null"),
    ],
)
def test_mostly_is_a_suite_error(tmp_path: Path, expectation: dict[str, Any]) -> None:
    with pytest.raises(SuiteError, match="mostly"):
        load_guard_suite(write_suite(tmp_path, suite_doc(expectation)))


@pytest.mark.parametrize(
    ("repairer", "other", "message"),
    [
        pytest.param(
            not_null("x", default(-1.0)),
            between("x", QUARANTINE, min_value=0, max_value=1),
            r"not_be_null\(x\).*be_between\(x\)",
            id="below-min",
        ),
        pytest.param(
            not_null("x", default(0.0)),
            between("x", QUARANTINE, min_value=0, strict_min=True),
            r"not_be_null\(x\).*be_between\(x\)",
            id="on-strict-min",
        ),
        pytest.param(
            in_set("c", default("Z"), ["A", "B"]),
            not_null("c", QUARANTINE),
            r"be_in_set\(c\).*be_in_set\(c\)",
            id="not-in-its-own-set",
        ),
        pytest.param(
            not_null("c", default("ZZ")),
            in_set("c", QUARANTINE, ["A", "B"]),
            r"not_be_null\(c\).*be_in_set\(c\)",
            id="null-default-outside-set",
        ),
    ],
)
def test_a_repair_default_that_breaks_its_column_is_a_suite_error(
    tmp_path: Path, repairer: dict[str, Any], other: dict[str, Any], message: str
) -> None:
    with pytest.raises(SuiteError, match=message):
        load_guard_suite(write_suite(tmp_path, suite_doc(repairer, other)))


def test_a_repair_default_that_passes_its_column_loads(make_suite) -> None:
    suite = make_suite(not_null("x", default(0.0)), between("x", CLIP, min_value=0, max_value=1))
    assert [e.key for e in suite.expectations] == ["not_be_null(x)", "be_between(x)"]


def test_value_lengths_with_strict_bounds(make_suite) -> None:
    suite = make_suite(lengths("code", QUARANTINE, min_value=2, max_value=4, strict_min=True, strict_max=True))
    frame = pl.DataFrame({"id": ids(7), "code": ["ab", "abc", "abcd", "", None, "äöü", "abcde"]})
    g = guard(frame, suite)
    # Only length 3 is strictly between 2 and 4; a null is left to not_be_null; ä counts as one char.
    assert g.scorable["id"].to_list() == ["e1", "e4", "e5"]
    assert g.quarantined["id"].to_list() == ["e0", "e2", "e3", "e6"]
    assert g.counts.by_expectation == {"value_lengths_to_be_between(code)": {"quarantine": 4}}


def test_value_lengths_with_inclusive_bounds_and_one_side(make_suite) -> None:
    suite = make_suite(
        lengths("code", QUARANTINE, min_value=2, max_value=3),
        lengths("ref", QUARANTINE, max_value=1),
    )
    frame = pl.DataFrame({"id": ids(4), "code": ["a", "ab", "abc", "abcd"], "ref": ["", "x", "xy", None]})
    g = guard(frame, suite)
    assert acted_ids(g.actions, "value_lengths_to_be_between(code)") == ["e0", "e3"]
    assert acted_ids(g.actions, "value_lengths_to_be_between(ref)") == ["e2"]


def test_value_lengths_cannot_be_repaired(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="cannot be repaired"):
        load_guard_suite(write_suite(tmp_path, suite_doc(lengths("code", default("abc"), min_value=1))))


@pytest.mark.parametrize(
    "expectation", [between("x", QUARANTINE), lengths("code", QUARANTINE)], ids=["between", "lengths"]
)
def test_a_range_without_bounds_is_a_suite_error(tmp_path: Path, expectation: dict[str, Any]) -> None:
    # GX refuses it too; guessing what an unbounded range means would judge rows differently.
    with pytest.raises(SuiteError, match="needs min_value, max_value or both"):
        load_guard_suite(write_suite(tmp_path, suite_doc(expectation)))


@pytest.mark.parametrize("action", ["quarantine", "repair"])
def test_column_level_checks_must_fail(tmp_path: Path, action: str) -> None:
    item = of_type("x", "float64") | {"meta": {"guard": {"action": action, "repair": "default", "default": 1.0}}}
    with pytest.raises(SuiteError, match="must be fail"):
        load_guard_suite(write_suite(tmp_path, suite_doc(item)))


def test_unknown_type_name_is_a_suite_error(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="decimal128"):
        load_guard_suite(write_suite(tmp_path, suite_doc(of_type("x", "decimal128"))))


# --- guard_summary_rows ---------------------------------------------------------------------------


SUMMARY_EXPECTATIONS = (
    exists("id"),
    of_type("x", "float64"),
    not_null("x", default(0.5)),
    between("x", QUARANTINE, min_value=0, max_value=1),
    in_set("c", default("a"), ["a", "b"]),
    regex("id", FAIL, r"^e\d+$"),
    not_null("c", QUARANTINE),
)
SUMMARY_FRAME = pl.DataFrame(
    {"id": ids(8), "x": [None, 0.5, 2.0, -1.0, NAN, 0.1, 3.0, 0.9], "c": ["a", "b", "a", "z", "b", "a", "b", "a"]}
)


def test_summary_lists_every_expectation_in_suite_order_with_counts_and_shares(make_suite) -> None:
    suite = make_suite(*SUMMARY_EXPECTATIONS)
    g = guard(SUMMARY_FRAME, suite)
    rows = guard_summary_rows(suite, g.counts)
    assert [(r["expectation"], r["action"], r["rows"], r["share"]) for r in rows] == [
        ("to_exist(id)", "fail", 0, 0.0),
        ("be_of_type(x)", "fail", 0, 0.0),
        ("not_be_null(x)", "repair:default", 2, 2 / 8),  # None and NaN
        ("be_between(x)", "quarantine", 3, 3 / 8),  # 2.0, -1.0, 3.0
        ("be_in_set(c)", "repair:default", 1, 1 / 8),  # z
        ("match_regex(id)", "fail", 0, 0.0),  # zero hits still listed
        ("not_be_null(c)", "quarantine", 0, 0.0),
    ]
    assert [r["column_name"] for r in rows] == ["id", "x", "x", "x", "c", "id", "c"]
    assert [r["expectation_type"] for r in rows] == [e["type"] for e in SUMMARY_EXPECTATIONS]
    assert {r["evaluated_by"] for r in rows} == {"compiled"}


def test_summary_of_merged_chunks_uses_the_merged_totals(make_suite) -> None:
    suite = make_suite(*SUMMARY_EXPECTATIONS)
    counts = GuardCounts()
    counts.merge(guard(SUMMARY_FRAME.head(4), suite).counts)  # x: None, 2.0, -1.0 ; c: z
    counts.merge(guard(SUMMARY_FRAME.tail(4), suite).counts)  # x: NaN, 3.0
    assert counts.rows_in == 8
    rows = {r["expectation"]: (r["rows"], r["share"]) for r in guard_summary_rows(suite, counts)}
    assert rows["not_be_null(x)"] == (2, 0.25)
    assert rows["be_between(x)"] == (3, 0.375)
    assert rows["be_in_set(c)"] == (1, 0.125)
    assert rows["match_regex(id)"] == (0, 0.0)
    assert len(rows) == len(SUMMARY_EXPECTATIONS)


def test_summary_of_an_empty_run_has_zero_shares(make_suite) -> None:
    suite = make_suite(*SUMMARY_EXPECTATIONS)
    rows = guard_summary_rows(suite, GuardCounts())
    assert len(rows) == len(SUMMARY_EXPECTATIONS)
    assert all(r["rows"] == 0 and r["share"] == 0.0 for r in rows)


def test_summary_keeps_suite_order_when_column_checks_are_interleaved(make_suite) -> None:
    suite = make_suite(
        exists("id"),
        regex("id", FAIL, r"^e\d+$"),
        exists("x"),
        between("x", QUARANTINE, min_value=0, max_value=1),
    )
    rows = guard_summary_rows(suite, guard(SUMMARY_FRAME, suite).counts)
    assert [r["expectation"] for r in rows] == ["to_exist(id)", "match_regex(id)", "to_exist(x)", "be_between(x)"]
