"""Feature guards inside a real flow run: the guard summary, and hostile raw partitions.

Each test rewrites one raw partition of a fresh copy of the demo inputs, runs `score_partition`
under Prefect's test harness, and checks the outcome in the warehouse, the Parquet outputs and
the run ledger: the run fails with a message naming the column and the expectation, or the rows
are repaired or quarantined and counted. Nothing may be dropped uncounted.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import duckdb
import polars as pl
import pytest
import yaml
from conftest import DEMO_JOB, DemoEnv

from tasks.errors import GuardFailure, JobValidationError, PartitionError
from tasks.settings import Settings, current_settings

pytestmark = pytest.mark.usefixtures("prefect_harness")


def query(settings: Settings, sql: str, params: list | None = None) -> pl.DataFrame:
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        return pl.from_arrow(con.sql(sql, params=params or []).to_arrow_table())


def the_run(settings: Settings, day: dt.date) -> dict:
    (run,) = query(settings, "SELECT * FROM runs WHERE partition_date = ?", [day]).to_dicts()
    return run


def rewrite_raw(settings: Settings, day: dt.date, change) -> pl.DataFrame:
    """Replace the raw partition of `day` with `change(raw)`; returns what was written."""
    folder = settings.raw_partition_dir(DEMO_JOB, day.isoformat())
    raw = pl.read_parquet(folder / "*.parquet")
    for f in folder.glob("*.parquet"):
        f.unlink()
    changed = change(raw)
    changed.write_parquet(folder / "part-0.parquet")
    return changed


def job_spec_with(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **limits) -> Settings:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    spec = yaml.safe_load((settings.jobs_dir / f"{DEMO_JOB}.yaml").read_text())
    spec["limits"].update(limits)
    (jobs / f"{DEMO_JOB}.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("SCORING_JOBS_DIR", str(jobs))
    return current_settings()


def suite_with(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Settings:
    folder = tmp_path / "expectations"
    folder.mkdir()
    (folder / f"{DEMO_JOB}.json").write_text(text)
    monkeypatch.setenv("SCORING_EXPECTATIONS_DIR", str(folder))
    return current_settings()


def assert_failed_cleanly(settings: Settings, day: dt.date, *needles: str) -> None:
    run = the_run(settings, day)
    assert run["status"] == "failed"
    for needle in needles:
        assert needle in run["error"], run["error"]
    assert not list(settings.data_dir.glob("output/**/*.parquet"))
    assert query(settings, "SELECT count(*) AS n FROM predictions")["n"].item() == 0


def assert_refused_before_the_lease(settings: Settings) -> None:
    """Found from the raw files' schemas before the run started: no ledger row, no output."""
    assert not settings.duckdb_path.exists()
    assert not list(settings.data_dir.glob("output/**/*.parquet"))


@pytest.fixture
def day(demo_env: DemoEnv) -> dt.date:
    return demo_env.plan.scoring_dates[-1]


def test_guard_summary_is_in_the_warehouse_parquet_and_a_prefect_artifact(fresh_data: Settings, day: dt.date) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.score_partition import score_partition

    settings = fresh_data
    result = score_partition(DEMO_JOB, day)
    suite_doc = json.loads((settings.expectations_dir / f"{DEMO_JOB}.json").read_text())
    summary = query(settings, "SELECT * FROM guard_summary WHERE partition_date = ? ORDER BY rowid", [day])
    # Every expectation of the suite is listed, hit or not, in the suite's order.
    assert summary.height == len(suite_doc["expectations"])
    assert summary["expectation_type"].to_list() == [e["type"] for e in suite_doc["expectations"]]
    assert set(summary["run_id"]) == {result.run_id}
    # Its counts are the per-row action records, expectation by expectation.
    actions = query(
        settings, "SELECT expectation, count(*) AS n FROM guard_actions WHERE partition_date = ? GROUP BY 1", [day]
    )
    hit = summary.filter(pl.col("rows") > 0)
    assert dict(hit.select("expectation", "rows").iter_rows()) == dict(actions.iter_rows())
    run = the_run(settings, day)
    assert {k: sum(v.values()) for k, v in json.loads(run["guard_counts"]).items()} == dict(actions.iter_rows())
    assert (hit["share"] - hit["rows"] / run["rows_read"]).abs().max() < 1e-12

    parquet = pl.read_parquet(settings.data_dir / "output" / DEMO_JOB / "guard_summary" / f"date={day}" / "*.parquet")
    assert parquet.select(summary.columns).sort("expectation").equals(summary.sort("expectation"))

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["guard-summary-credit-risk"]))
        )
    assert artifacts, "no guard-summary artifact"
    table = artifacts[-1].data if isinstance(artifacts[-1].data, list) else json.loads(artifacts[-1].data)
    assert {row["expectation"] for row in table} == set(summary["expectation"])


def test_a_missing_column_fails_the_run_naming_the_column_and_expectation(fresh_data: Settings, day: dt.date) -> None:
    from flows.score_partition import score_partition

    rewrite_raw(fresh_data, day, lambda raw: raw.drop("loan_amount"))
    with pytest.raises(JobValidationError, match="loan_amount") as err:
        score_partition(DEMO_JOB, day)
    (problem,) = err.value.problems
    assert problem.field == "loan_amount" and problem.file.parent == fresh_data.raw_partition_dir(
        DEMO_JOB, day.isoformat()
    )
    assert "to_exist(loan_amount)" in problem.message
    # The message lists what the file does have, so a renamed column is easy to spot.
    assert "the file's columns: entity_id, application_date, annual_income" in str(err.value)
    assert_refused_before_the_lease(fresh_data)


def test_strings_in_a_numeric_column_fail_the_run_naming_both(fresh_data: Settings, day: dt.date) -> None:
    from flows.score_partition import score_partition

    rewrite_raw(fresh_data, day, lambda raw: raw.with_columns(pl.col("annual_income").cast(pl.String)))
    with pytest.raises(JobValidationError) as err:
        score_partition(DEMO_JOB, day)
    assert "annual_income" in str(err.value) and "be_in_type_list(annual_income)" in str(err.value)
    assert_refused_before_the_lease(fresh_data)


def test_an_all_null_column_is_repaired_counted_and_stopped_by_the_repair_limit(
    fresh_data: Settings, day: dt.date
) -> None:
    from flows.score_partition import score_partition

    raw = rewrite_raw(
        fresh_data, day, lambda raw: raw.with_columns(pl.lit(None, dtype=pl.Float64).alias("employment_years"))
    )
    with pytest.raises(GuardFailure, match="repaired") as err:
        score_partition(DEMO_JOB, day)
    # Every scorable row was repaired (a default for the missing value): far over the 20 % limit.
    repaired = int(re.search(r"(\d+) of (\d+) rows repaired", str(err.value)).group(1))
    assert f"of {raw.height} rows repaired" in str(err.value) and repaired > 0.95 * raw.height
    assert_failed_cleanly(fresh_data, day, "repaired")


def test_an_all_null_column_within_limits_scores_every_row_with_the_default(
    fresh_data: Settings, day: dt.date, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.score_partition import score_partition

    settings = job_spec_with(fresh_data, tmp_path, monkeypatch, max_repaired_share=1.0)
    raw = rewrite_raw(
        settings, day, lambda raw: raw.with_columns(pl.lit(None, dtype=pl.Float64).alias("employment_years"))
    )
    score_partition(DEMO_JOB, day)
    run = the_run(settings, day)
    assert run["status"] == "succeeded" and run["rows_repaired"] == run["rows_scored"]
    repairs = query(settings, "SELECT * FROM guard_actions WHERE expectation = 'not_be_null(employment_years)'")
    assert repairs.height == raw.height
    assert set(repairs["new_value"]) == {"2.0"} and repairs["old_value"].is_null().all()


def test_nan_and_inf_are_repaired_or_quarantined_and_counted(fresh_data: Settings, day: dt.date) -> None:
    from flows.score_partition import score_partition

    settings = fresh_data
    nan, inf = float("nan"), float("inf")

    def poisoned(raw: pl.DataFrame) -> pl.DataFrame:
        util = raw["credit_utilization"].to_list()
        util[:4] = [nan, inf, -inf, 1.0]  # clip repair; NaN is missing, so not_null repairs it
        loan = raw["loan_amount"].to_list()
        loan[4:6] = [inf, nan]  # both are quarantined (between / not_null)
        return raw.with_columns(pl.Series("credit_utilization", util), pl.Series("loan_amount", loan))

    raw = rewrite_raw(settings, day, poisoned)
    score_partition(DEMO_JOB, day)
    ids = raw["entity_id"].to_list()
    actions = query(settings, "SELECT * FROM guard_actions WHERE partition_date = ?", [day])
    util = actions.filter(pl.col("entity_id").is_in(ids[:4]) & (pl.col("column_name") == "credit_utilization"))
    assert sorted(zip(util["entity_id"], util["new_value"], strict=True)) == sorted(
        [(ids[0], "0.35"), (ids[1], "1.0"), (ids[2], "0.0")]
    )
    quarantined = query(
        settings, "SELECT entity_id, failed_expectations FROM quarantine WHERE partition_date = ?", [day]
    )
    reasons = {r["entity_id"]: r["failed_expectations"] for r in quarantined.to_dicts()}
    assert reasons[ids[4]] == ["be_between(loan_amount)"]
    assert reasons[ids[5]] == ["not_be_null(loan_amount)"]
    preds = query(settings, "SELECT * FROM predictions WHERE partition_date = ?", [day])
    assert ids[3] in set(preds["entity_id"]) and not {ids[4], ids[5]} & set(preds["entity_id"])
    run = the_run(settings, day)
    assert run["rows_read"] == raw.height == run["rows_scored"] + run["rows_quarantined"]


def test_an_empty_partition_fails_by_default_and_scores_nothing_when_allowed(
    fresh_data: Settings, day: dt.date, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.score_partition import score_partition

    rewrite_raw(fresh_data, day, lambda raw: raw.head(0))
    with pytest.raises(PartitionError, match="0 raw rows") as err:
        score_partition(DEMO_JOB, day)
    assert "min_rows" in str(err.value)
    assert_failed_cleanly(fresh_data, day, "PartitionError")

    settings = job_spec_with(fresh_data, tmp_path, monkeypatch, min_rows=0)
    score_partition(DEMO_JOB, day)
    latest = query(settings, "SELECT * FROM runs WHERE partition_date = ? ORDER BY started_at DESC LIMIT 1", [day]).row(
        0, named=True
    )
    assert latest["status"] == "succeeded" and latest["rows_read"] == latest["rows_scored"] == 0
    assert query(settings, "SELECT count(*) AS n FROM predictions")["n"].item() == 0
    # The empty partition is published as such: readers see zero rows, with the schema.
    published = pl.read_parquet(settings.data_dir / "output" / DEMO_JOB / "predictions" / f"date={day}" / "*.parquet")
    assert published.height == 0 and "probability" in published.columns


def test_a_suite_naming_a_column_the_data_lacks_fails_the_run(
    fresh_data: Settings, day: dt.date, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.score_partition import score_partition

    doc = json.loads((fresh_data.expectations_dir / f"{DEMO_JOB}.json").read_text())
    doc["expectations"].append(
        {
            "type": "expect_column_values_to_not_be_null",
            "kwargs": {"column": "bureau_score"},
            "meta": {"guard": {"action": "quarantine"}},
        }
    )
    settings = suite_with(fresh_data, tmp_path, monkeypatch, json.dumps(doc))
    with pytest.raises(JobValidationError, match="bureau_score"):
        score_partition(DEMO_JOB, day)
    assert_refused_before_the_lease(settings)


def test_a_malformed_suite_file_fails_the_run_naming_the_file(
    fresh_data: Settings, day: dt.date, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.score_partition import score_partition

    settings = suite_with(fresh_data, tmp_path, monkeypatch, '{"name": "credit_risk", "expectations": [')
    with pytest.raises(JobValidationError, match="not valid JSON") as err:
        score_partition(DEMO_JOB, day)
    assert f"{DEMO_JOB}.json" in str(err.value)
    # Refused before the lease: no ledger row, no warehouse, no output.
    assert not settings.duckdb_path.exists()
    assert not list(settings.data_dir.glob("output/**/*.parquet"))


def test_guards_hold_one_chunk_of_raw_data_at_a_time(
    demo_env: DemoEnv, fresh_data: Settings, day: dt.date, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While chunk k is guarded, no raw table or frame of an earlier chunk is still alive."""
    import gc
    import weakref

    import tasks.scoring.unit_pass as unit_pass
    from tasks.scoring.prepared import prepared_job
    from tasks.scoring.summary import score_partition_chunks
    from tasks.scoring.units import WorkUnit
    from tasks.sinks.parquet_store import output_dirs

    alive: list[weakref.ref] = []
    most_alive = 0
    real_chunks, real_guard = unit_pass.unit_chunks, unit_pass.guarded_chunk

    def tracked_chunks(unit: WorkUnit, chunk_rows: int):
        for chunk_id, table in real_chunks(unit, chunk_rows):
            alive.append(weakref.ref(table))
            yield chunk_id, table

    def tracked_guard(frame: pl.DataFrame, suite, *, entity_column: str, **kwargs):
        nonlocal most_alive
        alive.append(weakref.ref(frame))
        gc.collect()
        most_alive = max(most_alive, sum(ref() is not None for ref in alive))
        return real_guard(frame, suite, entity_column=entity_column, **kwargs)

    monkeypatch.setattr(unit_pass, "unit_chunks", tracked_chunks)
    monkeypatch.setattr(unit_pass, "guarded_chunk", tracked_guard)
    prepared = prepared_job(DEMO_JOB, day, fresh_data)
    summary = score_partition_chunks(
        prepared, run_id="memory-check", partition_date=day, chunk_rows=500, dirs=output_dirs(fresh_data, DEMO_JOB)
    )
    assert summary.chunks == 6
    # The current chunk's Arrow table and its polars frame; nothing of the chunks before it.
    assert most_alive == 2
