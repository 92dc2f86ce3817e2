"""The public API for composing flows (`flows`): the typed result of score_partition and the reader of a published
partition, checked against the published Parquet files and the warehouse read here on their own (polars, duckdb).
The example that scores two jobs side by side is tests/test_example_flow.py's."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest
import yaml
from conftest import DEMO_JOB, DemoEnv
from polars.testing import assert_frame_equal

from tasks.catalog import PREDICTIONS
from tasks.errors import ExitCode, user_facing_error
from tasks.results import DecisionMonitoring, PartitionResult, Recovery
from tasks.settings import PROJECT_ROOT, Settings

pytestmark = pytest.mark.usefixtures("prefect_harness")


def warehouse_rows(settings: Settings, sql: str, *params: object) -> pl.DataFrame:
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        return pl.from_arrow(con.sql(sql, params=list(params)).to_arrow_table())  # type: ignore[return-value]


def test_the_reader_gives_the_published_run_and_keeps_it_after_a_failed_run(
    demo_env: DemoEnv, fresh_data: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.results import read_published_run
    from flows.score_partition import score_partition
    from tasks.results import NotPublished

    day = demo_env.plan.scoring_dates[1]
    result = score_partition(DEMO_JOB, day)
    published = read_published_run(DEMO_JOB, day)

    assert (published.job, published.partition_date, published.run_id) == (DEMO_JOB, day, result.run_id)
    assert published.ledger is not None and published.latest_run_published
    assert (published.ledger.run_id, published.ledger.status) == (result.run_id, "succeeded")
    assert published.ledger.counts["rows_scored"] == result.rows_scored
    assert published.ledger.counts["rows_quarantined"] == result.rows_quarantined
    assert published.ledger.decisions == result.decisions
    for dataset, read in (
        ("predictions", published.predictions),
        ("quarantine", published.quarantine),
        ("guard_actions", published.guard_actions),
    ):
        columns = read().columns
        warehouse = warehouse_rows(
            fresh_data,
            f"SELECT {', '.join(columns)} FROM {dataset} WHERE job = ? AND partition_date = ?",
            DEMO_JOB,
            day,
        )
        assert warehouse.height > 0, dataset
        order = [c for c in columns if warehouse.schema[c] not in (pl.List, pl.Struct)]
        assert_frame_equal(read().sort(order), warehouse.sort(order), check_dtypes=False)
    assert published.scan(PREDICTIONS).select(pl.len()).collect().item() == result.rows_scored
    assert published.run_page.is_file() and published.run_page.resolve() == published.version_dir / "report.html"
    assert published.model_card is not None and published.model_card.is_file()
    assert published.monitoring_page is None  # written by an outcomes run, not by scoring

    # A later run of the day that fails leaves the published run as it was; the ledger says what became of it.
    jobs = tmp_path / "strict-jobs"
    jobs.mkdir()
    spec = yaml.safe_load((fresh_data.jobs_dir / f"{DEMO_JOB}.yaml").read_text())
    spec["limits"]["max_quarantined_share"] = 0.0  # the demo always quarantines blank ids
    (jobs / f"{DEMO_JOB}.yaml").write_text(yaml.safe_dump(spec))
    with monkeypatch.context() as strict:
        strict.setenv("SCORING_JOBS_DIR", str(jobs))
        with pytest.raises(Exception, match="exceeds the job limit"):
            score_partition(DEMO_JOB, day)
    after = read_published_run(DEMO_JOB, day.isoformat())
    assert after.run_id == result.run_id and not after.latest_run_published
    assert (
        after.ledger is not None
        and after.ledger.status == "failed"
        and "exceeds the job limit" in (after.ledger.error or "")
    )
    assert_frame_equal(after.predictions(), published.predictions())

    never = demo_env.plan.scoring_dates[-1]
    with pytest.raises(NotPublished) as caught:
        read_published_run(DEMO_JOB, never)
    message, code = user_facing_error(caught.value)
    assert code == ExitCode.USER
    assert message.startswith(f"{DEMO_JOB} {never} was never published")


def test_the_result_round_trips_through_its_json_form() -> None:
    result = PartitionResult(
        job="j",
        partition_date=dt.date(2026, 3, 10),
        run_id="r",
        run_page=Path("/d/output/j/reports/html/date=2026-03-10.html"),
        rows_read=10,
        rows_scored=8,
        rows_repaired=1,
        rows_quarantined=2,
        rows_failed=0,
        rows_fallback=0,
        rows_with_reasons=3,
        rows_without_adverse_reason=0,
        rows_straddling=1,
        decisions={"approve": 6, "decline": 2},
        guard_counts={"ids": 2},
        inference={"chunks": 1},
        model_health={"flagged": []},
        challenger=None,
        drift_flags=("income warn",),
        forecast=None,
        classification=None,
        warnings=("page late",),
        decision_monitoring=DecisionMonitoring(
            measures=4,
            shifted=("decision_share:decline",),
            shifted_slices=(),
            window_days=7,
            without_baseline=0,
            shifts=({"measure": "decision_share", "item": "decline", "value": 0.25, "baseline": 0.1, "delta": 0.15},),
        ),
        recovered=(Recovery("old", "j", dt.date(2026, 3, 9), "running", "failed", "outputs dropped"),),
    )
    as_json = json.loads(json.dumps(result.to_dict(), default=str))
    assert PartitionResult.from_dict(as_json) == result
    assert result.decision_shares == {"approve": 0.75, "decline": 0.25}
    assert result.quarantined_share == 0.2
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.rows_scored = 9  # type: ignore[misc]


def test_the_guides_imports_are_where_it_says() -> None:
    """Every import the composing-flows guide shows runs, and gives the flows and types it names."""
    guide = (PROJECT_ROOT / "docs" / "guides" / "composing-flows.md").read_text()
    imports = guide.split("```python\n", 1)[1].split("```", 1)[0]
    code = imports + (
        "from prefect import Flow\n"
        "assert all(isinstance(f, Flow) for f in (score_partition, backfill, nightly, outcomes))\n"
        "assert callable(read_published_run) and PartitionResult.__module__ == 'tasks.results'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
