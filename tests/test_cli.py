"""The command line (cli/): user mistakes end in one `error:` line naming the problem, exit code 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import DemoEnv
from typer.testing import CliRunner

from cli.score import app
from tasks.settings import PROJECT_ROOT

SCORE = Path(sys.executable).parent / "score"


@pytest.fixture
def cli(demo_env: DemoEnv, prefect_logging: None):
    """Invoke `score ...` in-process, with SCORING_DATA_DIR pointing at the demo data."""
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, list(args), catch_exceptions=True)

    return invoke


def one_error_line(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    # typer.Exit is how the CLI exits; anything else escaping would be a bug.
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error:"), lines[0]
    return lines[0]


def test_unknown_job_is_one_line_naming_the_job(cli) -> None:
    line = one_error_line(cli("run", "no_such_job", "--date", "2026-03-10"))
    assert "no_such_job" in line
    assert "credit_risk" in line  # the configured jobs are listed


def test_invalid_date_names_the_bad_value(cli) -> None:
    line = one_error_line(cli("run", "credit_risk", "--date", "2026-13-45"))
    assert "2026-13-45" in line and "--date" in line


def test_backfill_with_end_before_start_fails_clearly(cli, demo_env: DemoEnv) -> None:
    line = one_error_line(cli("backfill", "credit_risk", "--start", "2026-03-10", "--end", "2026-03-01"))
    assert "2026-03-01" in line and "2026-03-10" in line and "before" in line
    # Nothing ran: no partition of the range outside the demo dates was written.
    assert not list(demo_env.data_dir.glob("output/*/*/date=2026-03-0[1-7]"))


def test_backfill_invalid_end_date_names_the_option(cli) -> None:
    line = one_error_line(cli("backfill", "credit_risk", "--start", "2026-03-01", "--end", "yesterday"))
    assert "--end" in line and "yesterday" in line


def test_missing_partition_is_one_line_naming_the_date(cli) -> None:
    line = one_error_line(cli("run", "credit_risk", "--date", "2025-01-01"))
    assert "2025-01-01" in line


def test_the_installed_score_command_prints_one_line_and_no_traceback(demo_env: DemoEnv) -> None:
    assert SCORE.is_file(), f"{SCORE} is not installed"
    env = {**os.environ, "SCORING_DATA_DIR": str(demo_env.data_dir)}
    result = subprocess.run(
        [str(SCORE), "run", "no_such_job", "--date", "2026-03-10"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error:") and "no_such_job" in lines[0]


@pytest.mark.usefixtures("prefect_harness")
def test_run_scores_the_date_and_prints_its_summary(fresh_data, prefect_logging: None) -> None:
    day = "2026-03-10"
    result = CliRunner().invoke(app, ["run", "credit_risk", "--date", day, "--chunk-rows", "1000"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert day in result.output and "succeeded" in result.output
    files = list((fresh_data.data_dir / "output" / "credit_risk" / "predictions" / f"date={day}").glob("*.parquet"))
    assert files
    scored = sum(pq.read_metadata(f).num_rows for f in files)
    (row,) = [line for line in result.output.splitlines() if day in line and "run report" not in line]
    assert str(scored) in row.split()
    report = fresh_data.data_dir / "output" / "credit_risk" / "reports" / "html" / f"date={day}.html"
    assert f"run report: {report}" in result.output.replace("\n", "") and report.stat().st_size > 10_000
    (health,) = [line for line in result.output.splitlines() if line.startswith("model health:")]
    assert "expected event rate " in health and "expected AUC 0." in health and "flagged: " in health


def test_a_long_error_message_is_still_one_line(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / ("a-long-folder-name-" * 6) / "data"
    data.mkdir(parents=True)
    monkeypatch.setenv("SCORING_DATA_DIR", str(data))  # no model registry and no raw partition here: two user mistakes
    result = cli("run", "credit_risk", "--date", "2026-03-10")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    # Each problem stays on its own line however long it is: rich must not wrap it.
    assert len(lines) == 2 and all(line.startswith("error:") and str(data) in line for line in lines), result.output


def test_an_invalid_job_spec_error_keeps_the_offending_value(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = yaml.safe_load((PROJECT_ROOT / "jobs" / "credit_risk.yaml").read_text())
    spec["chunk_rows"] = 0
    (tmp_path / "credit_risk.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("SCORING_JOBS_DIR", str(tmp_path))
    result = cli("run", "credit_risk", "--date", "2026-03-10")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "chunk_rows" in result.output
    line = one_error_line(result)
    assert "chunk_rows" in line and "(got 0)" in line, line


def test_outcomes_with_end_before_start_fails_clearly(cli) -> None:
    line = one_error_line(cli("outcomes", "credit_risk", "--start", "2026-03-10", "--end", "2026-03-01"))
    assert "2026-03-01" in line and "2026-03-10" in line and "before" in line


def test_features_of_a_missing_file_names_it(cli, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.parquet"
    line = one_error_line(
        cli("features", "credit_risk", "--from", str(missing), "--out", str(tmp_path / "out.parquet"))
    )
    assert str(missing) in line
    assert not (tmp_path / "out.parquet").exists()


def test_features_writes_the_model_inputs_of_raw_rows_in_the_models_order(
    cli, demo_env: DemoEnv, tmp_path: Path
) -> None:
    import polars as pl

    from tasks.features.credit_risk import FEATURES

    raw = demo_env.settings.raw_partition_dir("credit_risk", demo_env.plan.scoring_dates[0].isoformat())
    result = cli("features", "credit_risk", "--from", str(raw), "--out", str(tmp_path / "inputs.parquet"))
    assert result.exit_code == 0, result.output
    inputs = pl.read_parquet(tmp_path / "inputs.parquet")
    assert inputs.columns == ["entity_id", *FEATURES]  # no outcome column in a raw partition
    rows = pl.read_parquet(raw).height
    assert 0 < inputs.height <= rows and f"{inputs.height:,} rows" in result.output
