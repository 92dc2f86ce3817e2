"""The fallback report: every kind counted, matching the demo's injected dirt, and its limits enforced."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import duckdb
import polars as pl
import pytest
import yaml
from conftest import DEMO_JOB, DemoEnv

from tasks.demo.credit_data import DIRTY_RATES
from tasks.errors import FallbackLimitExceeded
from tasks.quality.fallback_report import FALLBACK_KINDS
from tasks.settings import Settings, current_settings

pytestmark = pytest.mark.usefixtures("prefect_harness")

# Which report line each kind of injected dirt must land on.
DIRT_TO_REPORT = {
    "annual_income_sentinel": ("guard_repair", "annual_income: be_between(annual_income)"),
    "annual_income_null": ("guard_repair", "annual_income: not_be_null(annual_income)"),
    "debt_to_income_null": ("guard_repair", "debt_to_income: not_be_null(debt_to_income)"),
    "credit_utilization_over_one": ("guard_repair", "credit_utilization: be_between(credit_utilization)"),
    "employment_years_null": ("guard_repair", "employment_years: not_be_null(employment_years)"),
    "entity_id_blank": ("quarantine", "match_regex(entity_id)"),
}


def report_of(settings: Settings, day: dt.date) -> pl.DataFrame:
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        return pl.from_arrow(
            con.sql("SELECT * FROM fallback_report WHERE partition_date = ?", params=[day]).to_arrow_table()
        )


def test_fallback_counts_match_the_injected_dirt_within_sampling_noise(demo_env: DemoEnv, fresh_data: Settings) -> None:
    from flows.score_partition import score_partition

    day = demo_env.plan.scoring_dates[0]
    score_partition(DEMO_JOB, day)
    report = report_of(fresh_data, day)
    n = pl.read_parquet(fresh_data.raw_partition_dir(DEMO_JOB, day.isoformat()) / "*.parquet").height
    lines = {(r["kind"], r["detail"]): r["rows"] for r in report.to_dicts()}
    assert set(DIRTY_RATES) == set(DIRT_TO_REPORT)
    for dirt, rate in DIRTY_RATES.items():
        expected = n * rate
        tolerance = 4 * math.sqrt(n * rate * (1 - rate)) + 1
        got = lines[DIRT_TO_REPORT[dirt]]
        assert abs(got - expected) <= tolerance, (dirt, got, expected)
    # One total line per kind, always present; nothing on paths the demo never takes.
    totals = report.filter(
        pl.col("detail").is_in(
            [
                "all",
                "primary model loaded",
                "table kernel in use",
                "training reference in use",
                "model-health reference in use",
                "every row that needed reasons got them",
            ]
        )
    )
    # `challenger_failed` is counted only for a job that names a challenger; the demo names none.
    assert sorted(totals["kind"]) == sorted(k for k in FALLBACK_KINDS if k != "challenger_failed")
    assert lines[("fallback_model", "primary model loaded")] == 0 and lines[("failed_chunk", "all")] == 0
    # The demo model passes the kernel's load-time check, so no reasons fell back to XGBoost.
    assert lines[("reasons_by_framework", "table kernel in use")] == 0
    assert lines[("reasons_unavailable", "every row that needed reasons got them")] == 0
    assert lines[("no_drift_reference", "training reference in use")] == 0
    assert lines[("no_health_reference", "model-health reference in use")] == 0
    assert (report["share"] - report["rows"] / n).abs().max() < 1e-12
    # The same report in Parquet, for the same run.
    parquet = pl.read_parquet(
        fresh_data.data_dir / "output" / DEMO_JOB / "reports" / "fallback" / f"date={day}" / "*.parquet"
    )
    assert parquet.sort("kind", "detail").equals(report.sort("kind", "detail"))


def test_a_fallback_limit_fails_the_run_naming_the_kind(
    demo_env: DemoEnv, fresh_data: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.score_partition import score_partition

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    spec = yaml.safe_load((fresh_data.jobs_dir / f"{DEMO_JOB}.yaml").read_text())
    spec["limits"]["max_fallback_share"] = {"guard_repair": 0.01, "failed_chunk": 0.0}
    (jobs / f"{DEMO_JOB}.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("SCORING_JOBS_DIR", str(jobs))
    settings = current_settings()
    day = demo_env.plan.scoring_dates[0]
    with pytest.raises(FallbackLimitExceeded, match="guard_repair") as err:
        score_partition(DEMO_JOB, day)
    assert "failed_chunk" not in str(err.value)
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        ((status, error),) = con.sql("SELECT status, error FROM runs WHERE partition_date = ?", params=[day]).fetchall()
        assert con.sql("SELECT count(*) FROM fallback_report").fetchall() == [(0,)]
    assert status == "failed" and "max_fallback_share.guard_repair" in error
    assert not list(settings.data_dir.glob("output/**/*.parquet"))


def test_an_unknown_fallback_kind_in_the_spec_is_refused(fresh_data: Settings, tmp_path: Path) -> None:
    from tasks.errors import JobSpecError
    from tasks.jobspec import load_job_spec

    spec = yaml.safe_load((fresh_data.jobs_dir / f"{DEMO_JOB}.yaml").read_text())
    spec["limits"]["max_fallback_share"] = {"stale_cache": 0.1}
    (tmp_path / f"{DEMO_JOB}.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(JobSpecError, match="max_fallback_share"):
        load_job_spec(DEMO_JOB, Settings(jobs_dir=tmp_path))
