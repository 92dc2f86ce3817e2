"""The flows under Prefect's test harness, on the demo data: Parquet + DuckDB outputs and the ledger.

Dates are shared out so that the tests stay independent of their order: the module fixture
backfills every demo date once; the re-run test re-scores the middle date, the determinism test
the first, the dirty-data test reads the last. Tests that need empty outputs, or that change the
registry or the job spec, work on a fresh copy of the demo inputs (`fresh_data`).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import operator
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pytest
import yaml
from conftest import DEMO_JOB, DemoEnv
from polars.testing import assert_frame_equal

from tasks.errors import GuardFailure, JobValidationError, PartitionsFailed
from tasks.features import credit_risk as fm
from tasks.jobspec import load_job_spec
from tasks.settings import Settings, current_settings

pytestmark = pytest.mark.usefixtures("prefect_harness")

_OPS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}


# --- helpers ----------------------------------------------------------------------------------


def query(settings: Settings, sql: str, params: list | None = None) -> pl.DataFrame:
    """A read-only look at the warehouse; the connection is closed before the next flow runs."""
    con = duckdb.connect(str(settings.duckdb_path), read_only=True)
    try:
        return pl.from_arrow(con.sql(sql, params=params or []).to_arrow_table())
    finally:
        con.close()


def warehouse_predictions(settings: Settings, day: dt.date) -> pl.DataFrame:
    return query(
        settings, "SELECT * FROM predictions WHERE job = ? AND partition_date = ? ORDER BY entity_id", [DEMO_JOB, day]
    )


def partition_dir(settings: Settings, day: dt.date, table: str = "predictions") -> Path:
    return settings.data_dir / "output" / DEMO_JOB / table / f"date={day.isoformat()}"


def parquet_files(settings: Settings, day: dt.date) -> list[Path]:
    return sorted(partition_dir(settings, day).glob("*.parquet"))


def parquet_predictions(settings: Settings, day: dt.date) -> pl.DataFrame:
    files = parquet_files(settings, day)
    assert files, f"no Parquet files for {day}"
    return pl.concat([pl.read_parquet(f, hive_partitioning=False) for f in files]).sort("entity_id")


def runs_of(settings: Settings, day: dt.date) -> pl.DataFrame:
    return query(
        settings, "SELECT * FROM runs WHERE job = ? AND partition_date = ? ORDER BY started_at", [DEMO_JOB, day]
    )


def run_row(settings: Settings, run_id: str) -> dict:
    rows = query(settings, "SELECT * FROM runs WHERE run_id = ?", [run_id]).to_dicts()
    assert len(rows) == 1, rows
    return rows[0]


def raw_rows(settings: Settings, day: dt.date) -> pl.DataFrame:
    return pl.read_parquet(settings.raw_partition_dir(DEMO_JOB, day.isoformat()))


def first_matching_rule(row: dict, rules) -> str:
    """The only rule whose conditions the row meets (the job's rule table is exclusive)."""
    matching = [
        r.id for r in rules if r.when and all(_OPS[op](row[f], t) for f, cmp in r.when.items() for op, t in cmp.items())
    ]
    assert len(matching) == 1, f"{row} matches {matching}"
    return matching[0]


@pytest.fixture(scope="module")
def backfilled(demo_env: DemoEnv) -> list[dict]:
    from flows.people import backfill

    dates = demo_env.plan.scoring_dates
    return backfill(DEMO_JOB, dates[0], dates[-1])


# --- 1. end to end ----------------------------------------------------------------------------


def test_backfill_scores_every_demo_date(demo_env: DemoEnv, backfilled: list[dict]) -> None:
    dates = demo_env.plan.scoring_dates
    assert [o["date"] for o in backfilled] == [d.isoformat() for d in dates]
    assert all(o["outcome"] == "succeeded" for o in backfilled), backfilled
    settings = demo_env.settings
    for day, outcome in zip(dates, backfilled, strict=True):
        files = parquet_files(settings, day)
        assert files, day
        stored = warehouse_predictions(settings, day)
        assert stored.height == outcome["rows_scored"] > 0
        assert stored["entity_id"].n_unique() == stored.height
        assert set(stored["entity_id"]) <= set(raw_rows(settings, day)["entity_id"])
        assert (stored["partition_date"] == day).all()


def test_every_prediction_row_keeps_the_contract(demo_env: DemoEnv, backfilled: list[dict]) -> None:
    settings = demo_env.settings
    spec = load_job_spec(DEMO_JOB, settings)
    reason_cfg = spec.prediction.reasons
    known_codes = {c.code for c in reason_cfg.codes.values()} | {reason_cfg.no_reason_code}
    for day in demo_env.plan.scoring_dates:
        rows = warehouse_predictions(settings, day)
        assert rows.height > 0
        assert rows.select(pl.all().null_count()).sum_horizontal().item() == 0
        assert (
            rows.filter(
                ~(
                    (pl.col("probability_low") >= 0)
                    & (pl.col("probability_low") <= pl.col("probability"))
                    & (pl.col("probability") <= pl.col("probability_high"))
                    & (pl.col("probability_high") <= 1)
                )
            ).height
            == 0
        )
        assert rows["score"].is_between(0, 100).all()
        # Score is a monotone map of the probability.
        by_p = rows.sort("probability", "score")
        assert (by_p["score"].diff().drop_nulls() >= 0).all()
        # The decision and rule are those of the first spec rule the row matches.
        for row in rows.select(
            "probability", "probability_low", "probability_high", "score", "rule_id", "decision"
        ).to_dicts():
            assert row["rule_id"] == first_matching_rule(row, spec.prediction.rules)
        rule_decision = {r.id: r.decision for r in spec.prediction.rules}
        assert all(rule_decision[r] == d for r, d in zip(rows["rule_id"], rows["decision"], strict=True))
        # Reasons on every row whose decision is not approve, and only there.
        n_codes = rows["reason_codes"].list.len()
        needs = rows["decision"].is_in(reason_cfg.for_decisions)
        assert ((rows["decision"] != "approve") == needs).all()
        assert (n_codes.filter(needs) >= 1).all()
        assert (n_codes.filter(needs) <= reason_cfg.top_k).all()
        assert (n_codes.filter(~needs) == 0).all()
        assert (rows["reason_texts"].list.len() == n_codes).all()
        assert set(rows["reason_codes"].explode().drop_nulls()) <= known_codes
        assert set(rows["model_version"]) == {demo_env.plan.model_version}
        assert set(rows["feature_version"]) == {fm.FEATURE_VERSION}
        assert rows["run_id"].n_unique() == 1


def test_parquet_rows_equal_warehouse_rows(demo_env: DemoEnv, backfilled: list[dict]) -> None:
    for day in demo_env.plan.scoring_dates:
        assert_frame_equal(parquet_predictions(demo_env.settings, day), warehouse_predictions(demo_env.settings, day))


def test_the_model_ranks_real_defaults_above_non_defaults(demo_env: DemoEnv, backfilled: list[dict]) -> None:
    settings = demo_env.settings
    frames = []
    for day in demo_env.plan.scoring_dates:
        labels = pl.read_parquet(settings.labels_partition_dir(DEMO_JOB, day.isoformat()))
        frames.append(warehouse_predictions(settings, day).join(labels, on="entity_id", how="inner"))
    joined = pl.concat(frames)
    pos = joined.filter(pl.col("defaulted") == 1)["raw_margin"].to_numpy()
    neg = joined.filter(pl.col("defaulted") == 0)["raw_margin"].to_numpy()
    # AUC by pair counting on a subsample: P(margin of a default > margin of a non-default).
    auc = (pos[:, None] > neg[None, :2000]).mean()
    assert auc > 0.58, auc
    assert abs(joined["probability"].mean() - joined["defaulted"].mean()) < 0.05


# --- 2. re-running a date ---------------------------------------------------------------------


def test_rerunning_a_date_replaces_it(demo_env: DemoEnv, backfilled: list[dict]) -> None:
    from flows.score_partition import score_partition

    settings = demo_env.settings
    day = demo_env.plan.scoring_dates[1]
    before = warehouse_predictions(settings, day)
    (first_run,) = before["run_id"].unique().to_list()

    result = score_partition(DEMO_JOB, day)
    second_run = result.run_id
    assert second_run != first_run

    after = warehouse_predictions(settings, day)
    assert after.height == before.height
    assert after["entity_id"].n_unique() == after.height
    assert set(after["run_id"]) == {second_run}
    assert_frame_equal(after.drop("run_id"), before.drop("run_id"))

    runs = runs_of(settings, day).filter(pl.col("run_id").is_in([first_run, second_run]))
    assert runs.height == 2
    assert set(runs["status"]) == {"succeeded"}
    assert (runs["ended_at"].is_not_null()).all()

    files = parquet_files(settings, day)
    assert files and all(second_run in f.name for f in files), [f.name for f in files]
    assert_frame_equal(parquet_predictions(settings, day), after)
    for table in ("quarantine", "guard_actions"):
        assert set(
            query(settings, f"SELECT DISTINCT run_id FROM {table} WHERE partition_date = ?", [day])["run_id"]
        ) == {second_run}
        assert all(second_run in f.name for f in partition_dir(settings, day, table).glob("*.parquet"))
    # Nothing of either run is left in staging, and no half-swapped folder remains.
    staging = settings.data_dir / "output" / DEMO_JOB / "_staging"
    assert not [p for p in staging.rglob("*") if first_run in p.name or second_run in p.name]
    assert not list((settings.data_dir / "output" / DEMO_JOB / "predictions").glob(".replaced-*"))


# --- 3. feature-version mismatch ---------------------------------------------------------------


def add_mismatched_model(settings: Settings, source_version: str) -> None:
    """Registry version 99 = the demo model (same file, valid sha256) claiming other features."""
    registry = settings.model_registry_dir(DEMO_JOB)
    fake = registry / "99"
    shutil.copytree(registry / source_version, fake)
    meta = json.loads((fake / "metadata.json").read_text())
    meta.update(version="99", feature_version="0.9.0")
    (fake / "metadata.json").write_text(json.dumps(meta))


@pytest.fixture
def mismatched_env(demo_env: DemoEnv, fresh_data: Settings) -> Settings:
    """A fresh data folder (never scored) whose latest model version claims other features."""
    add_mismatched_model(fresh_data, demo_env.plan.model_version)
    return fresh_data


def test_feature_version_mismatch_stops_the_run_before_anything_is_written(mismatched_env: Settings) -> None:
    from flows.score_partition import score_partition

    settings = mismatched_env
    day = dt.date(2026, 3, 10)
    with pytest.raises(JobValidationError) as err:
        score_partition(DEMO_JOB, day)
    message = str(err.value)
    assert "0.9.0" in message and fm.FEATURE_VERSION in message

    assert not partition_dir(settings, day).exists()
    assert not list(settings.data_dir.glob("output/**/*.parquet"))
    # Checked before the lease: a user mistake leaves no ledger row, not even a warehouse file.
    assert not settings.duckdb_path.exists()
    assert not list(settings.data_dir.glob("output/*/_staging/*/*"))


def test_a_failed_rerun_leaves_the_previous_outputs_untouched(demo_env: DemoEnv, fresh_data: Settings) -> None:
    from flows.score_partition import score_partition

    settings = fresh_data
    day = demo_env.plan.scoring_dates[-1]
    first = score_partition(DEMO_JOB, day)
    before_wh, before_pq = warehouse_predictions(settings, day), parquet_predictions(settings, day)
    add_mismatched_model(settings, demo_env.plan.model_version)
    with pytest.raises(JobValidationError):
        score_partition(DEMO_JOB, day)
    assert_frame_equal(warehouse_predictions(settings, day), before_wh)
    assert_frame_equal(parquet_predictions(settings, day), before_pq)
    assert set(before_wh["run_id"]) == {first.run_id}
    # The mismatch is found before the lease, so the refused re-run leaves no ledger row.
    statuses = runs_of(settings, day)["status"].to_list()
    assert statuses == ["succeeded"]


def test_breaking_a_guard_limit_fails_the_run_and_publishes_nothing(
    demo_env: DemoEnv, fresh_data: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.score_partition import score_partition

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    spec = yaml.safe_load((fresh_data.jobs_dir / f"{DEMO_JOB}.yaml").read_text())
    spec["limits"]["max_quarantined_share"] = 0.0  # the demo always quarantines blank ids
    (jobs / f"{DEMO_JOB}.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("SCORING_JOBS_DIR", str(jobs))
    settings = current_settings()
    day = demo_env.plan.scoring_dates[-1]
    with pytest.raises(GuardFailure, match="quarantined") as err:
        score_partition(DEMO_JOB, day, 1000)
    assert day.isoformat() in str(err.value)
    (run,) = runs_of(settings, day).to_dicts()
    assert run["status"] == "failed" and "GuardFailure" in run["error"]
    # Chunks were staged before the limit was checked; the failure discards them, publishes nothing.
    assert not list(settings.data_dir.glob("output/*/_staging/*/*"))
    assert not list(settings.data_dir.glob("output/**/*.parquet"))
    assert query(settings, "SELECT count(*) AS n FROM predictions")["n"].item() == 0


def test_backfill_goes_on_after_a_failed_date_and_lists_it(demo_env: DemoEnv, fresh_data: Settings) -> None:
    from flows.people import backfill

    settings = fresh_data
    last = demo_env.plan.scoring_dates[-1]
    missing = last + dt.timedelta(days=1)  # no raw partition
    with pytest.raises(PartitionsFailed, match=missing.isoformat()) as err:
        backfill(DEMO_JOB, last, missing)
    assert "1 of 2" in str(err.value)
    assert "no raw partition" in str(err.value)  # each failed partition with its own error
    assert warehouse_predictions(settings, last).height > 0
    assert [r["status"] for r in runs_of(settings, last).to_dicts()] == ["succeeded"]
    # A partition with no raw data is refused before the lease: listed as failed, a `refused` ledger row.
    assert [r["status"] for r in runs_of(settings, missing).to_dicts()] == ["refused"]
    assert "no raw partition" in str(err.value) or missing.isoformat() in str(err.value)


# --- 4. dirty data in the ledger ---------------------------------------------------------------


def test_ledger_counts_agree_with_the_guard_tables(demo_env: DemoEnv, backfilled: list[dict]) -> None:
    settings = demo_env.settings
    day = demo_env.plan.scoring_dates[-1]
    preds = warehouse_predictions(settings, day)
    (run_id,) = preds["run_id"].unique().to_list()
    run = run_row(settings, run_id)
    assert run["status"] == "succeeded"
    assert run["rows_repaired"] > 0 and run["rows_quarantined"] > 0
    assert run["rows_read"] == raw_rows(settings, day).height
    assert run["rows_read"] == run["rows_scored"] + run["rows_quarantined"]
    assert run["rows_scored"] == preds.height

    actions = query(settings, "SELECT * FROM guard_actions WHERE job = ? AND partition_date = ?", [DEMO_JOB, day])
    assert set(actions["run_id"]) == {run_id}
    repaired_scored = actions.filter(pl.col("action") == "repair").join(
        preds.select("entity_id"), on="entity_id", how="semi"
    )
    assert repaired_scored["entity_id"].n_unique() == run["rows_repaired"]

    quarantine = query(settings, "SELECT * FROM quarantine WHERE job = ? AND partition_date = ?", [DEMO_JOB, day])
    assert quarantine.height == run["rows_quarantined"]
    assert not set(quarantine["entity_id"]) & set(preds["entity_id"])
    assert (quarantine["failed_expectations"].list.len() >= 1).all()
    json.loads(quarantine["raw_row"][0])  # the raw row is kept as JSON

    # Per-expectation counts in the ledger equal the recorded actions.
    guard_counts = json.loads(run["guard_counts"])
    recorded = {
        (r["expectation"], r["action"]): r["len"] for r in actions.group_by("expectation", "action").len().to_dicts()
    }
    assert recorded == {(k, a): n for k, per in guard_counts.items() for a, n in per.items()}
    decisions = json.loads(run["decisions"])
    assert decisions == dict(preds.group_by("decision").len().iter_rows())

    # What was repaired never reaches the model as dirt.
    income_fixes = actions.filter((pl.col("column_name") == "annual_income") & (pl.col("action") == "repair"))
    assert income_fixes.height > 0 and (income_fixes["new_value"].cast(pl.Float64) > 0).all()
    util_fixes = actions.filter(pl.col("column_name") == "credit_utilization")
    assert util_fixes.height > 0 and (util_fixes["new_value"].cast(pl.Float64) <= 1).all()


# --- 9. determinism across chunk sizes ----------------------------------------------------------


def test_chunk_size_does_not_change_any_prediction(demo_env: DemoEnv, backfilled: list[dict]) -> None:
    from flows.score_partition import score_partition

    settings = demo_env.settings
    day = demo_env.plan.scoring_dates[0]
    n_raw = raw_rows(settings, day).height
    by_chunks = {}
    # 777 does not divide the partition: the last chunk is a short one.
    for chunk_rows in (500, 3000, 777):
        result = score_partition(DEMO_JOB, day, chunk_rows)
        run = run_row(settings, result.run_id)
        assert run["status"] == "succeeded"
        assert json.loads(run["inference"])["chunks"] == math.ceil(n_raw / chunk_rows)
        frame = warehouse_predictions(settings, day)
        assert set(frame["run_id"]) == {result.run_id}
        by_chunks[chunk_rows] = frame.drop("run_id")
    assert by_chunks[500].height > 0
    assert_frame_equal(by_chunks[500], by_chunks[3000])
    assert_frame_equal(by_chunks[777], by_chunks[3000])


# --- 7. nightly ---------------------------------------------------------------------------------


def test_nightly_scores_every_configured_job_for_the_given_day(
    demo_env: DemoEnv, fresh_data: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.people import nightly

    # The demo data holds the credit job only; a jobs folder with its spec alone configures just it.
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    shutil.copy(fresh_data.jobs_dir / f"{DEMO_JOB}.yaml", jobs)
    monkeypatch.setenv("SCORING_JOBS_DIR", str(jobs))
    # Only the given day: the catch-up of earlier days has its own test (tests/test_ledger_truth.py).
    monkeypatch.setenv("SCORING_CATCH_UP_DAYS", "0")
    day = demo_env.plan.scoring_dates[0]
    state = nightly(day, return_state=True)
    outcomes = state.result()
    assert [(o["job"], o["date"], o["outcome"]) for o in outcomes] == [(DEMO_JOB, day.isoformat(), "succeeded")]
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        assert client.read_flow_run(state.state_details.flow_run_id).name == f"nightly {day}"
    assert warehouse_predictions(fresh_data, day).height == outcomes[0]["rows_scored"] > 0
