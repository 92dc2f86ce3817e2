"""Odd input from forms and shells is refused with a clear error before anything is read or written."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from conftest import DEMO_JOB, DemoEnv
from prefect.exceptions import ParameterTypeError
from typer.testing import CliRunner

from cli.score import app
from tasks.errors import JobSpecError, PartitionError, UnsafePath
from tasks.jobspec import checked_job_name
from tasks.runs.calendar import parse_partition_date, partition_range
from tasks.settings import Settings

BAD_DATES = {
    "2024-13-01": "not a real date",
    "2024-02-30": "not a real date",
    "../x": "YYYY-MM-DD",
    "/etc/passwd": "YYYY-MM-DD",
    "2024-01-01\x00": "YYYY-MM-DD",
    "2024-01-01/../../x": "YYYY-MM-DD",
    "2024-1-1": "YYYY-MM-DD",
    " 2024-01-01": "YYYY-MM-DD",
    "20240101": "YYYY-MM-DD",
    "0001-01-01": "outside",
    "9999-12-31": "outside",
    "": "YYYY-MM-DD",
}


@pytest.mark.parametrize("value", sorted(BAD_DATES))
def test_bad_dates_are_refused_naming_the_value(value: str) -> None:
    with pytest.raises(PartitionError) as err:
        parse_partition_date(value, what="start date")
    message = str(err.value)
    assert "start date" in message and BAD_DATES[value] in message
    assert "\x00" not in message  # control bytes are shown escaped, never raw in a log line


def test_timestamps_and_other_types_are_not_dates() -> None:
    with pytest.raises(PartitionError, match="timestamp"):
        parse_partition_date(dt.datetime(2024, 1, 1, 3, 0))
    with pytest.raises(PartitionError, match="YYYY-MM-DD"):
        parse_partition_date(20240101)
    assert parse_partition_date("2024-02-29") == dt.date(2024, 2, 29)


def test_ranges_end_before_start_and_absurd_lengths_are_refused() -> None:
    with pytest.raises(PartitionError, match="before start date"):
        partition_range(dt.date(2024, 2, 1), dt.date(2024, 1, 1))
    with pytest.raises(PartitionError, match="days"):
        partition_range(dt.date(1970, 1, 1), dt.date(2199, 12, 31))
    assert len(partition_range("2024-02-27", "2024-03-01")) == 4


@pytest.mark.parametrize(
    "job",
    [
        "../credit_risk",
        "credit_risk/../../etc",
        "/etc/passwd",
        "credit_risk\x00",
        "Credit_Risk",
        "a" * 65,
        "",
        "no_such_job",
    ],
)
def test_job_names_are_allow_listed(demo_env: DemoEnv, job: str) -> None:
    with pytest.raises(JobSpecError) as err:
        checked_job_name(job, demo_env.settings)
    assert "\x00" not in str(err.value)
    assert checked_job_name(DEMO_JOB, demo_env.settings) == DEMO_JOB


@pytest.mark.parametrize("part", ["..", "../outside", "/etc", "a/../../b", "x\x00y", ""])
def test_paths_stay_inside_the_data_root(tmp_path: Path, part: str) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    with pytest.raises(UnsafePath, match="leaves the data root"):
        settings.inside_data_root("raw", part)


def test_names_are_checked_and_an_operators_symlinks_followed(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    (tmp_path / "data").mkdir()
    (tmp_path / "models-mount").mkdir()
    (tmp_path / "data" / "models").symlink_to(tmp_path / "models-mount")
    assert settings.model_registry_dir("credit_risk").resolve() == tmp_path / "models-mount" / "credit_risk"
    assert (
        settings.raw_partition_dir("credit_risk", "2024-01-01")
        == tmp_path / "data" / "raw" / "credit_risk" / "date=2024-01-01"
    )
    with pytest.raises(UnsafePath):
        settings.raw_partition_dir("credit_risk", "../2024-01-01")


def _files_under(root: Path) -> set[Path]:
    return {Path(dirpath) / name for dirpath, _, names in os.walk(root) for name in names}


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["run", "../../etc", "--date", "2026-03-10"], "../../etc"),
        (["run", DEMO_JOB, "--date", "../x"], "../x"),
        (["run", DEMO_JOB, "--date", "/tmp/x"], "/tmp/x"),
        (["backfill", DEMO_JOB, "--start", "2026-03-10", "--end", "2026-13-01"], "2026-13-01"),
        (["backfill", DEMO_JOB, "--start", "1970-01-01", "--end", "2199-12-31"], "days"),
    ],
)
def test_the_cli_refuses_before_any_io(demo_env: DemoEnv, prefect_logging: None, args: list[str], named: str) -> None:
    before = _files_under(demo_env.data_dir)
    result = CliRunner().invoke(app, args, catch_exceptions=True)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and named in lines[0], result.output
    assert _files_under(demo_env.data_dir) == before


@pytest.mark.usefixtures("prefect_harness")
def test_the_flow_refuses_a_path_as_job_before_opening_a_run(fresh_data: Settings) -> None:
    from flows.score_partition import score_partition

    with pytest.raises(JobSpecError, match="not allowed"):
        score_partition("../credit_risk", dt.date(2026, 3, 10))
    # Prefect validates the typed parameter first; the flow's own check is the same for callers
    # that bypass it.
    with pytest.raises(ParameterTypeError, match="date"):
        score_partition(DEMO_JOB, "2026-02-30")
    # No run was opened: no ledger, no outputs.
    assert not fresh_data.duckdb_path.exists()
    assert not (fresh_data.data_dir / "output").exists()
