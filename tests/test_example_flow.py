"""The examples of composed flows (flows/examples/) run on the shared flows as they are: score_when_landed, and
side_by_side, whose typed results are checked against the published Parquet files and the ledger read here."""

from __future__ import annotations

import datetime as dt
import shutil
import threading
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
import yaml
from conftest import DEMO_JOB, DemoEnv

from flows.steps.blocks import configured_warehouse
from tasks.errors import ExitCode, PartitionError, user_facing_error
from tasks.results import PartitionResult
from tasks.settings import Settings, current_settings

pytestmark = pytest.mark.usefixtures("prefect_harness")

TWIN = f"{DEMO_JOB}_twin"
"""A second job: the demo's spec under another name, scoring its own copy of the demo's raw partitions."""


def test_a_landed_partition_is_scored_and_its_labels_ingested(demo_env: DemoEnv, fresh_data: Settings) -> None:
    from flows.examples.score_when_landed import score_when_landed

    day = demo_env.plan.scoring_dates[0]
    result = score_when_landed(DEMO_JOB, day, outcomes_from=day, outcomes_to=day)
    assert result["raw_files"] >= 1
    assert result["scored"].rows_scored > 0.9 * result["scored"].rows_read
    (ingested,) = result["outcomes"]
    assert ingested["date"] == day.isoformat() and ingested["labels"] > 0
    (run,) = configured_warehouse(fresh_data).latest_partition_runs(DEMO_JOB, first_date=day, last_date=day)
    assert run["status"] == "succeeded"


def test_a_partition_that_never_lands_fails_before_scoring(fresh_data: Settings) -> None:
    from flows.examples.score_when_landed import score_when_landed

    day = dt.date(2026, 1, 1)
    with pytest.raises(PartitionError, match="has not landed"):
        score_when_landed(DEMO_JOB, day)
    assert configured_warehouse(fresh_data).latest_partition_runs(DEMO_JOB, first_date=day, last_date=day) == []


@pytest.fixture
def two_jobs(demo_env: DemoEnv, fresh_data: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The demo job and its twin in a jobs folder of their own, the twin's raw partitions a copy of the demo's."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    spec = yaml.safe_load((fresh_data.jobs_dir / f"{DEMO_JOB}.yaml").read_text())
    (jobs / f"{DEMO_JOB}.yaml").write_text(yaml.safe_dump(spec))
    (jobs / f"{TWIN}.yaml").write_text(yaml.safe_dump({**spec, "name": TWIN}))
    shutil.copytree(fresh_data.data_dir / "raw" / DEMO_JOB, fresh_data.data_dir / "raw" / TWIN)
    monkeypatch.setenv("SCORING_JOBS_DIR", str(jobs))
    return current_settings()


def test_two_jobs_are_scored_side_by_side_and_their_results_are_what_was_published(
    demo_env: DemoEnv, two_jobs: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Side by side: each run waits here, before scoring, until the other has come as far. Run one after the other,
    # the first would wait in vain, fail, and the example with it.
    import flows.steps.units as unit_steps
    from flows.examples.side_by_side import score_side_by_side

    both_scoring = threading.Barrier(2, timeout=300)
    scored_summary = unit_steps.scored_summary

    def scored_beside_the_other(ticket: Any) -> Any:
        both_scoring.wait()
        return scored_summary(ticket)

    monkeypatch.setattr(unit_steps, "scored_summary", scored_beside_the_other)
    day = demo_env.plan.scoring_dates[0]
    results = score_side_by_side([DEMO_JOB, TWIN], day)

    assert list(results) == [DEMO_JOB, TWIN]
    for job, result in results.items():
        assert isinstance(result, PartitionResult)
        assert (result.job, result.partition_date) == (job, day)
        raw = pl.read_parquet(two_jobs.raw_partition_dir(job, day.isoformat()) / "*.parquet")
        assert result.rows_read == raw.height
        predictions = pl.read_parquet(two_jobs.output_dir(job) / "predictions" / f"date={day}" / "*.parquet")
        assert predictions["run_id"].unique().to_list() == [result.run_id]
        assert result.rows_scored == predictions.height > 0
        counted = dict(predictions.group_by("decision").len().iter_rows())
        assert result.decisions == counted
        assert result.decision_shares == pytest.approx({d: n / predictions.height for d, n in counted.items()})
        quarantined = pl.read_parquet(two_jobs.output_dir(job) / "quarantine" / f"date={day}" / "*.parquet")
        assert result.rows_quarantined == quarantined.height > 0
        assert result.quarantined_share == pytest.approx(result.rows_quarantined / raw.height)
        assert result.run_page is not None and result.run_page.is_file()
        assert result.run_id in result.run_page.read_text()
    # The same rows for both (the twin scores a copy of the demo's data with the same model), in two runs.
    first, twin = results.values()
    assert first.decisions == twin.decisions and first.run_id != twin.run_id
    with duckdb.connect(str(two_jobs.duckdb_path), read_only=True) as con:
        ledger = con.sql(
            "SELECT run_id, status FROM runs WHERE partition_date = ? ORDER BY job", params=[day]
        ).fetchall()
    assert ledger == [(first.run_id, "succeeded"), (twin.run_id, "succeeded")]
    assert both_scoring.n_waiting == 0 and not both_scoring.broken


def test_the_example_fails_in_one_sentence_over_its_quarantine_limit(demo_env: DemoEnv, two_jobs: Settings) -> None:
    from flows.examples.side_by_side import SideBySideFailed, score_side_by_side

    day = demo_env.plan.scoring_dates[-1]
    with pytest.raises(SideBySideFailed) as caught:
        score_side_by_side([DEMO_JOB], day, max_quarantined_share=0.0)
    message, code = user_facing_error(caught.value)
    assert code == ExitCode.USER
    assert message.startswith(f"{day}: {DEMO_JOB} quarantined ") and message.endswith("of its rows (limit 0.0%)")
    assert "\n" not in str(caught.value)
