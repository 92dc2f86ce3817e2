"""One row per entity: duplicated entity ids across a whole partition, found before scoring.

The flow tests build their own raw partition from guard-clean demo rows (three files of 300-row
row groups) and plant duplicates whose first and later rows lie in other files, other row groups
and, with small chunks, other work units:

- ids of rows 0..99 again on rows 2300..2399 (file a → file c),
- ids of rows 1000..1009 again on rows 1500..1509 (two row groups of file b),
- the id of row 0 a third time on row 2000 (file c),
- a missing loan amount on row 1 (a first occurrence) and row 2399 (a later one).

That is 110 duplicated ids on 221 rows, 111 of them later occurrences. Every count is checked in
predictions, quarantine, guard_actions, guard_summary, the fallback report and the runs ledger.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import DEMO_JOB, DemoEnv
from test_flow_guards import assert_failed_cleanly, job_spec_with, query, suite_with

from tasks.errors import GuardFailure, SuiteError
from tasks.guards import GuardCounts, guard_summary_rows, guarded_chunk, load_guard_suite
from tasks.guards.duplicates import duplicated_entity_ids, partition_row_groups
from tasks.settings import Settings
from tasks.sources import ParquetPartition

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
pytestmark = pytest.mark.slow

UNIQUE = "be_unique(entity_id)"
LOAN_NULL = "not_be_null(loan_amount)"
ROWS = 2400
FILES = {"part-a.parquet": (0, 1000), "part-b.parquet": (1000, 2000), "part-c.parquet": (2000, 2400)}
LATER_ROWS = [*range(1500, 1510), 2000, *range(2300, 2400)]
FIRST_ROWS = [*range(0, 100), *range(1000, 1010)]
OUTPUT_TABLES = ("predictions", "quarantine", "guard_actions", "guard_summary", "fallback_report")


@pytest.fixture
def day(demo_env: DemoEnv) -> dt.date:
    return demo_env.plan.scoring_dates[-1]


def clean_rows(settings: Settings, day: dt.date) -> pl.DataFrame:
    """Demo rows that no expectation of the job's suite acts on, so every count below is planted."""
    folder = settings.raw_partition_dir(DEMO_JOB, day.isoformat())
    raw = pl.read_parquet(folder / "*.parquet")
    guarded = guarded_chunk(
        raw, load_guard_suite(settings.expectations_dir / f"{DEMO_JOB}.json"), entity_column="entity_id"
    )
    touched = set(guarded.actions["entity_id"].to_list())
    return raw.filter(~pl.col("entity_id").is_in(touched))


def replace_raw(settings: Settings, day: dt.date, files: dict[str, pl.DataFrame]) -> None:
    folder = settings.raw_partition_dir(DEMO_JOB, day.isoformat())
    for f in folder.glob("*.parquet"):
        f.unlink()
    for name, frame in files.items():
        pq.write_table(frame.to_arrow(), folder / name, row_group_size=300)


def planted(settings: Settings, day: dt.date) -> pl.DataFrame:
    """The partition of the module docstring, written as three files; returns it in partition order."""
    base = clean_rows(settings, day).head(ROWS)
    assert base.height == ROWS
    ids = base["entity_id"].to_list()
    ids[2300:2400] = ids[0:100]
    ids[1500:1510] = ids[1000:1010]
    ids[2000] = ids[0]
    loan = base["loan_amount"].to_list()
    loan[1] = loan[2399] = None
    frame = base.with_columns(
        pl.Series("entity_id", ids), pl.Series("loan_amount", loan, dtype=base["loan_amount"].dtype)
    )
    replace_raw(settings, day, {name: frame[lo:hi] for name, (lo, hi) in FILES.items()})
    return frame


def suite_action(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, action: str | None) -> Settings:
    """The job's suite with the entity key's action set, or (None) without the uniqueness expectation."""
    doc = json.loads((settings.expectations_dir / f"{DEMO_JOB}.json").read_text())
    (unique,) = [e for e in doc["expectations"] if e["type"] == "expect_column_values_to_be_unique"]
    if action is None:
        doc["expectations"].remove(unique)
    else:
        unique["meta"]["guard"]["action"] = action
    return suite_with(settings, tmp_path, monkeypatch, json.dumps(doc))


def outputs(settings: Settings, day: dt.date) -> dict[str, pl.DataFrame]:
    """Every output table of the partition without its run id, in a stable order."""
    tables = {}
    for table in OUTPUT_TABLES:
        frame = query(settings, f"SELECT * FROM {table} WHERE partition_date = ?", [day]).drop("run_id")
        tables[table] = frame.sort(frame.columns, maintain_order=False) if table != "guard_summary" else frame
    return tables


def fallback_lines(settings: Settings, day: dt.date) -> dict[tuple[str, str], int]:
    report = query(settings, "SELECT kind, detail, rows FROM fallback_report WHERE partition_date = ?", [day])
    return {(r["kind"], r["detail"]): r["rows"] for r in report.to_dicts()}


def unique_summary_row(settings: Settings, day: dt.date) -> dict:
    (row,) = query(
        settings, "SELECT * FROM guard_summary WHERE partition_date = ? AND expectation = ?", [day, UNIQUE]
    ).to_dicts()
    return row


def latest_run(settings: Settings, day: dt.date) -> dict:
    return query(settings, "SELECT * FROM runs WHERE partition_date = ? ORDER BY started_at DESC LIMIT 1", [day]).row(
        0, named=True
    )


def assert_ledger(
    settings: Settings, day: dt.date, *, read: int, scored: int, quarantined: int, guard_counts: dict
) -> dict:
    run = latest_run(settings, day)
    assert run["status"] == "succeeded"
    assert (run["rows_read"], run["rows_scored"], run["rows_quarantined"], run["rows_failed"]) == (
        read,
        scored,
        quarantined,
        0,
    )
    assert run["rows_read"] == run["rows_scored"] + run["rows_quarantined"] + run["rows_failed"]
    assert json.loads(run["guard_counts"]) == guard_counts
    return run


def test_quarantine_all_quarantines_every_row_of_a_duplicated_id_across_files(
    fresh_data: Settings, day: dt.date, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.score_partition import score_partition

    settings = job_spec_with(fresh_data, tmp_path, monkeypatch, max_quarantined_share=1.0)
    frame = planted(settings, day)
    score_partition(DEMO_JOB, day, chunk_rows=700)

    ids = frame["entity_id"].to_list()
    duplicated = {ids[i] for i in FIRST_ROWS}
    preds = query(settings, "SELECT entity_id FROM predictions WHERE partition_date = ?", [day])
    assert preds.height == ROWS - 221 and preds["entity_id"].n_unique() == preds.height
    assert not duplicated & set(preds["entity_id"])
    quarantine = query(
        settings, "SELECT entity_id, failed_expectations FROM quarantine WHERE partition_date = ?", [day]
    )
    assert quarantine.height == 221 and set(quarantine["entity_id"]) == duplicated
    reasons = quarantine["failed_expectations"].to_list()
    # One quarantined row per raw row; a row also missing its loan amount lists both, in suite order.
    assert sorted(map(tuple, reasons)) == sorted([(UNIQUE,)] * 219 + [(UNIQUE, LOAN_NULL)] * 2)
    actions = query(
        settings,
        "SELECT expectation, action, count(*) AS n FROM guard_actions WHERE partition_date = ? GROUP BY 1, 2",
        [day],
    )
    assert {(r["expectation"], r["action"]): r["n"] for r in actions.to_dicts()} == {
        (UNIQUE, "quarantine"): 221,
        (LOAN_NULL, "quarantine"): 2,
    }
    summary = unique_summary_row(settings, day)
    assert (summary["rows"], summary["action"], summary["evaluated_by"]) == (221, "quarantine_all", "partition_prepass")
    assert summary["share"] == pytest.approx(221 / ROWS)
    lines = fallback_lines(settings, day)
    assert (lines[("quarantine", "all")], lines[("quarantine", UNIQUE)], lines[("quarantine", LOAN_NULL)]) == (
        221,
        221,
        2,
    )
    assert_ledger(
        settings,
        day,
        read=ROWS,
        scored=ROWS - 221,
        quarantined=221,
        guard_counts={UNIQUE: {"quarantine": 221}, LOAN_NULL: {"quarantine": 2}},
    )


def test_keep_first_scores_the_first_occurrence_and_is_the_same_for_any_chunk_size(
    fresh_data: Settings, day: dt.date, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.score_partition import score_partition

    settings = job_spec_with(fresh_data, tmp_path, monkeypatch, max_quarantined_share=1.0)
    settings = suite_action(settings, tmp_path, monkeypatch, "keep_first")
    frame = planted(settings, day)
    score_partition(DEMO_JOB, day, chunk_rows=50_000)
    one_unit = outputs(settings, day)
    ids, income = frame["entity_id"].to_list(), frame["annual_income"].to_list()

    preds = query(settings, "SELECT entity_id FROM predictions WHERE partition_date = ?", [day])
    # Every row but the 111 later occurrences and row 1 (a first occurrence missing its loan amount).
    assert preds.height == ROWS - 112 and preds["entity_id"].n_unique() == preds.height
    assert {ids[i] for i in FIRST_ROWS} - set(preds["entity_id"]) == {ids[1]}
    quarantine = query(
        settings, "SELECT entity_id, failed_expectations, raw_row FROM quarantine WHERE partition_date = ?", [day]
    )
    quarantined_rows = {
        (r["entity_id"], json.loads(r["raw_row"])["annual_income"]): r["failed_expectations"]
        for r in quarantine.to_dicts()
    }
    # The later rows are the ones quarantined, with their own features; row 1 only for its loan amount.
    expected = {(ids[i], income[i]): [UNIQUE] for i in LATER_ROWS} | {(ids[2399], income[2399]): [UNIQUE, LOAN_NULL]}
    assert quarantined_rows == expected | {(ids[1], income[1]): [LOAN_NULL]}
    actions = query(
        settings,
        "SELECT expectation, action, count(*) AS n FROM guard_actions WHERE partition_date = ? GROUP BY 1, 2",
        [day],
    )
    assert {(r["expectation"], r["action"]): r["n"] for r in actions.to_dicts()} == {
        (UNIQUE, "quarantine"): 111,
        (LOAN_NULL, "quarantine"): 2,
    }
    summary = unique_summary_row(settings, day)
    assert (summary["rows"], summary["action"], summary["evaluated_by"]) == (111, "keep_first", "partition_prepass")
    lines = fallback_lines(settings, day)
    assert (lines[("quarantine", "all")], lines[("quarantine", UNIQUE)], lines[("quarantine", LOAN_NULL)]) == (
        112,
        111,
        2,
    )
    counts = {UNIQUE: {"quarantine": 111}, LOAN_NULL: {"quarantine": 2}}
    assert_ledger(settings, day, read=ROWS, scored=ROWS - 112, quarantined=112, guard_counts=counts)

    # 170-row chunks in units of one 300-row group: duplicates straddle chunks, units and files.
    score_partition(DEMO_JOB, day, chunk_rows=170)
    assert latest_run(settings, day)["status"] == "succeeded"
    many_units = outputs(settings, day)
    for table in OUTPUT_TABLES:
        assert many_units[table].equals(one_unit[table]), table
    assert_ledger(settings, day, read=ROWS, scored=ROWS - 112, quarantined=112, guard_counts=counts)


def test_fail_stops_the_run_before_scoring_naming_files_column_count_and_examples(
    fresh_data: Settings, day: dt.date, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import flows.steps.units as steps
    from flows.score_partition import score_partition

    settings = suite_action(fresh_data, tmp_path, monkeypatch, "fail")
    frame = planted(settings, day)
    scored_units = []
    real_scored_unit = steps.scored_unit

    def tracked(*args, **kwargs):
        scored_units.append(args[1].unit_id)
        return real_scored_unit(*args, **kwargs)

    monkeypatch.setattr(steps, "scored_unit", tracked)
    with pytest.raises(GuardFailure) as err:
        score_partition(DEMO_JOB, day, chunk_rows=700)
    message = str(err.value)
    assert "110 entity id(s)" in message and "'entity_id'" in message and "221 rows" in message
    assert all(name in message for name in FILES) and UNIQUE in message and "action fail" in message
    assert frame["entity_id"][0] in message
    assert scored_units == []
    assert_failed_cleanly(settings, day, "GuardFailure", "110 entity id(s)")


def test_the_same_file_placed_twice_is_caught_by_the_same_rule(
    fresh_data: Settings, day: dt.date, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.score_partition import score_partition

    base = clean_rows(fresh_data, day).head(1200)
    replace_raw(fresh_data, day, {"part-0.parquet": base[:1000], "part-1.parquet": base[1000:]})
    folder = fresh_data.raw_partition_dir(DEMO_JOB, day.isoformat())
    shutil.copy(folder / "part-1.parquet", folder / "part-1-copy.parquet")

    # The demo suite quarantines both copies of each of the 200 ids: beyond the job's 5 % limit.
    with pytest.raises(GuardFailure, match="400 of 1400 rows quarantined"):
        score_partition(DEMO_JOB, day)
    assert_failed_cleanly(fresh_data, day, "400 of 1400 rows quarantined")

    # Without the declaration the rule still holds, as the contract's implicit quarantine_all.
    settings = job_spec_with(fresh_data, tmp_path, monkeypatch, max_quarantined_share=1.0)
    settings = suite_action(settings, tmp_path, monkeypatch, None)
    score_partition(DEMO_JOB, day, chunk_rows=300)
    preds = query(settings, "SELECT entity_id FROM predictions WHERE partition_date = ?", [day])
    assert sorted(preds["entity_id"]) == sorted(base["entity_id"][:1000])
    quarantine = query(
        settings, "SELECT entity_id, failed_expectations FROM quarantine WHERE partition_date = ?", [day]
    )
    assert sorted(quarantine["entity_id"]) == sorted(base["entity_id"][1000:].to_list() * 2)
    assert set(map(tuple, quarantine["failed_expectations"].to_list())) == {(UNIQUE,)}
    summary = query(settings, "SELECT * FROM guard_summary WHERE partition_date = ? ORDER BY rowid", [day]).to_dicts()
    assert (summary[-1]["expectation"], summary[-1]["rows"], summary[-1]["action"], summary[-1]["evaluated_by"]) == (
        UNIQUE,
        400,
        "quarantine_all",
        "implicit",
    )
    assert fallback_lines(settings, day)[("quarantine", UNIQUE)] == 400
    assert query(settings, "SELECT count(*) AS n FROM guard_actions WHERE expectation = ?", [UNIQUE])["n"].item() == 400
    assert_ledger(settings, day, read=1400, scored=1000, quarantined=400, guard_counts={UNIQUE: {"quarantine": 400}})


# --- the suite and the pre-pass alone ------------------------------------------------------------


def _suite(tmp_path: Path, *items: dict, entity_column: str | None = "entity_id"):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"name": "job", "expectations": list(items)}))
    return load_guard_suite(path, entity_column=entity_column)


def _unique(column: str, **guard) -> dict:
    return {"type": "expect_column_values_to_be_unique", "kwargs": {"column": column}, "meta": {"guard": guard}}


NOT_NULL_X = {
    "type": "expect_column_values_to_not_be_null",
    "kwargs": {"column": "x"},
    "meta": {"guard": {"action": "quarantine"}},
}


def test_uniqueness_on_another_column_is_refused_naming_the_file_and_column(tmp_path: Path) -> None:
    with pytest.raises(SuiteError) as err:
        _suite(tmp_path, _unique("x", action="quarantine_all"))
    assert "job.json" in str(err.value) and "'x'" in str(err.value) and "'entity_id'" in str(err.value)


def test_the_demo_suites_declare_the_entity_key_with_quarantine_all() -> None:
    from tasks.settings import PROJECT_ROOT

    for job, entity in (("credit_risk", "entity_id"), ("gearbox", "entity_id"), ("store_sales", "store_item")):
        suite = load_guard_suite(PROJECT_ROOT / "expectations" / f"{job}.json", entity_column=entity)
        assert (
            suite.entity_key is not None
            and suite.entity_key.declared
            and suite.entity_key.on_duplicate == "quarantine_all"
        )


@pytest.mark.parametrize("guard", [{"action": "quarantine"}, {"action": "repair"}, {"action": "keep_last"}])
def test_only_the_three_duplicate_actions_are_accepted(tmp_path: Path, guard: dict) -> None:
    with pytest.raises(SuiteError, match="keep_first|quarantine_all|fail"):
        _suite(tmp_path, _unique("entity_id", **guard))


def test_no_declaration_means_an_implicit_quarantine_all_listed_last(tmp_path: Path) -> None:
    suite = _suite(tmp_path, NOT_NULL_X)
    assert (
        suite.entity_key is not None
        and not suite.entity_key.declared
        and suite.entity_key.on_duplicate == "quarantine_all"
    )
    rows = guard_summary_rows(suite, GuardCounts(rows_in=10, by_expectation={UNIQUE: {"quarantine": 4}}))
    assert [(r["expectation"], r["action"], r["evaluated_by"], r["rows"]) for r in rows] == [
        ("not_be_null(x)", "quarantine", "compiled", 0),
        (UNIQUE, "quarantine_all", "implicit", 4),
    ]
    declared = _suite(tmp_path, _unique("entity_id"), NOT_NULL_X)
    assert declared.entity_key.on_duplicate == "quarantine_all" and declared.entity_key.declared
    assert [r["expectation"] for r in guard_summary_rows(declared, GuardCounts())] == [UNIQUE, "not_be_null(x)"]


def test_a_chunk_quarantines_the_rows_it_is_told_and_lists_every_reason(tmp_path: Path) -> None:
    suite = _suite(tmp_path, _unique("entity_id", action="keep_first"), NOT_NULL_X)
    frame = pl.DataFrame({"entity_id": ["a", "b", "a", "c"], "x": [1.0, None, None, 2.0]})
    g = guarded_chunk(frame, suite, entity_column="entity_id", duplicate_rows=np.array([False, False, True, False]))
    assert g.scorable["entity_id"].to_list() == ["a", "c"]
    assert g.quarantined["failed_expectations"].to_list() == [["not_be_null(x)"], [UNIQUE, "not_be_null(x)"]]
    assert (g.counts.rows_quarantined, g.counts.by_expectation) == (
        2,
        {UNIQUE: {"quarantine": 1}, "not_be_null(x)": {"quarantine": 2}},
    )
    assert sorted(g.actions.filter(pl.col("expectation") == UNIQUE)["old_value"]) == ["a"]


def _write_partition(folder: Path, files: dict[str, list], row_group_size: int = 2) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    for name, values in files.items():
        pq.write_table(pl.DataFrame({"entity_id": values}).to_arrow(), folder / name, row_group_size=row_group_size)
    return [v for name in sorted(files) for v in files[name]]


def _expected_rows(values: list) -> list[tuple]:
    first: dict = {}
    for row, v in enumerate(values):
        first.setdefault(v, row)
    repeated = {v for v in first if v is not None and values.count(v) > 1}
    return [(str(v), row, first[v] == row) for row, v in enumerate(values) if v in repeated]


@pytest.mark.parametrize("hashes", ["real", "all_collide"])
@pytest.mark.parametrize("per_bucket", [2_000_000, 3])
def test_prepass_finds_exactly_the_duplicated_ids_in_partition_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashes: str, per_bucket: int
) -> None:
    import tasks.guards.duplicates as duplicates

    if hashes == "all_collide":
        # Every id shares one hash: only the comparison of the values themselves can tell them apart.
        monkeypatch.setattr(duplicates, "_hashes", lambda ids: np.zeros(len(ids), dtype=np.uint64))
    monkeypatch.setattr(duplicates, "_HASHES_PER_BUCKET", per_bucket)
    values = _write_partition(
        tmp_path / "raw",
        {"b.parquet": ["k", "m", None, "n", "k"], "a.parquet": ["x", "k", None, "y"], "a-copy.parquet": ["z", "y"]},
    )
    found = duplicated_entity_ids(
        partition_row_groups(ParquetPartition(str(tmp_path / "raw"))), "entity_id", scratch_parent=tmp_path / "scratch"
    )
    assert list(found.rows.select("entity_id", "row", "first").iter_rows()) == _expected_rows(values)
    assert found.id_count == 2
    assert found.quarantined_rows("keep_first").tolist() == [r for _, r, first in _expected_rows(values) if not first]
    assert not list((tmp_path / "scratch").iterdir()), "the hash buckets are removed"


def test_prepass_on_integer_ids_and_a_clean_partition(tmp_path: Path) -> None:
    _write_partition(tmp_path / "ints", {"p.parquet": [3, 1, 2, 3]})
    found = duplicated_entity_ids(
        partition_row_groups(ParquetPartition(str(tmp_path / "ints"))), "entity_id", scratch_parent=tmp_path / "s"
    )
    assert list(found.rows.select("entity_id", "row", "first").iter_rows()) == [("3", 0, True), ("3", 3, False)]
    _write_partition(tmp_path / "clean", {"p.parquet": ["a", "b", None, None]})
    clean = duplicated_entity_ids(
        partition_row_groups(ParquetPartition(str(tmp_path / "clean"))), "entity_id", scratch_parent=tmp_path / "s"
    )
    assert clean.rows.is_empty() and clean.id_count == 0
