"""`score validate` and the same checks before every run: each mistake in a job's inputs is one
`error:` line naming the file, the field and the value, all of them at once, exit 2, no
traceback, no ledger row and nothing written."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import DEMO_JOB, DemoEnv
from typer.testing import CliRunner

from cli.score import app
from tasks.errors import ExitCode, JobValidationError
from tasks.jobs.validation import job_problems
from tasks.settings import PROJECT_ROOT, current_settings

DAY = "2026-03-10"
SCORE = Path(sys.executable).parent / "score"


@dataclass(frozen=True)
class JobEnv:
    """An isolated copy of the demo inputs (data, jobs, expectations) the SCORING_* settings point at."""

    data: Path
    jobs: Path
    expectations: Path

    @property
    def spec_path(self) -> Path:
        return self.jobs / f"{DEMO_JOB}.yaml"

    @property
    def suite_path(self) -> Path:
        return self.expectations / f"{DEMO_JOB}.json"

    @property
    def metadata_path(self) -> Path:
        (path,) = (self.data / "models" / DEMO_JOB).glob("*/metadata.json")
        return path

    @property
    def raw_file(self) -> Path:
        (path,) = (self.data / "raw" / DEMO_JOB / f"date={DAY}").glob("*.parquet")
        return path

    def edit_spec(self, change: Callable[[dict], None]) -> None:
        spec = yaml.safe_load(self.spec_path.read_text())
        change(spec)
        self.spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))

    def edit_suite(self, change: Callable[[dict], None]) -> None:
        doc = json.loads(self.suite_path.read_text())
        change(doc)
        self.suite_path.write_text(json.dumps(doc))

    def edit_metadata(self, change: Callable[[dict], None]) -> None:
        meta = json.loads(self.metadata_path.read_text())
        change(meta)
        self.metadata_path.write_text(json.dumps(meta))

    def untouched(self) -> bool:
        """No ledger, no warehouse, no output folder: nothing was written."""
        return not (self.data / "warehouse.duckdb").exists() and not (self.data / "output").exists()


@pytest.fixture
def env(demo_env: DemoEnv, prefect_logging: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobEnv:
    data = tmp_path / "data"
    for part in ("raw", "labels", "models"):
        shutil.copytree(demo_env.data_dir / part, data / part)
    copy = JobEnv(data=data, jobs=tmp_path / "jobs", expectations=tmp_path / "expectations")
    shutil.copytree(PROJECT_ROOT / "jobs", copy.jobs)
    shutil.copytree(PROJECT_ROOT / "expectations", copy.expectations)
    monkeypatch.setenv("SCORING_DATA_DIR", str(data))
    monkeypatch.setenv("SCORING_JOBS_DIR", str(copy.jobs))
    monkeypatch.setenv("SCORING_EXPECTATIONS_DIR", str(copy.expectations))
    return copy


COMMANDS = {
    "validate": ["validate", DEMO_JOB],
    "run": ["run", DEMO_JOB, "--date", DAY],
    "backfill": ["backfill", DEMO_JOB, "--start", "2026-03-09", "--end", DAY],
}


def error_lines(args: list[str], count: int = 1) -> list[str]:
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, SystemExit) and result.exit_code == ExitCode.USER, result.output
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == count and all(line.startswith("error: ") for line in lines), result.output
    return lines


def reason_key_typo(env: JobEnv) -> list[str]:
    env.edit_spec(
        lambda s: s["prediction"]["reasons"]["codes"].update(
            loan_amout=s["prediction"]["reasons"]["codes"].pop("loan_amount")
        )
    )
    return [str(env.spec_path), "prediction.reasons.codes.loan_amout", "'loan_amout'", "did you mean 'loan_amount'?"]


def suite_column_missing(env: JobEnv) -> list[str]:
    env.edit_suite(
        lambda d: d["expectations"].append(
            {
                "type": "expect_column_values_to_not_be_null",
                "kwargs": {"column": "bureau_score"},
                "meta": {"guard": {"action": "quarantine"}},
            }
        )
    )
    # The line lists what the data does have, so a renamed column is easy to spot.
    return [str(env.raw_file), ": bureau_score: ", "'bureau_score'", ", ".join(pq.read_schema(env.raw_file).names)]


def unknown_spec_key(env: JobEnv) -> list[str]:
    env.edit_spec(lambda s: s["monitoring"].update(window_dayz=s["monitoring"].pop("window_days")))
    return [str(env.spec_path), "monitoring.window_dayz", "'window_dayz'", "did you mean 'window_days'?"]


def feature_list_mismatch(env: JobEnv) -> list[str]:
    def drop(meta: dict) -> None:
        meta["features"].remove("loan_purpose")
        meta["feature_dtypes"].pop("loan_purpose")
        meta["reference"].pop("loan_purpose")

    env.edit_metadata(drop)
    return [str(env.metadata_path), ": features: ", "only in the job: ['loan_purpose']", "13 features", "gives 14"]


def stale_sha256(env: JobEnv) -> list[str]:
    stale = "0" * 64
    env.edit_metadata(lambda m: m.update(sha256=stale))
    return [str(env.metadata_path), ": sha256: ", stale, "truncated or was replaced"]


def metadata_missing_a_field(env: JobEnv) -> list[str]:
    env.edit_metadata(lambda m: m.pop("feature_version"))
    return [str(env.metadata_path), ": feature_version: ", "Field required"]


def slice_column_typo(env: JobEnv) -> list[str]:
    env.edit_spec(lambda s: s["monitoring"].update(slices=["home_ownershp"]))
    return [str(env.spec_path), "monitoring.slices", "'home_ownershp'", "home_ownership"]


def health_level_out_of_range(env: JobEnv) -> list[str]:
    env.edit_spec(lambda s: s["monitoring"].update(health={"interval_level": 1.5}))
    return [str(env.spec_path), "monitoring.health.interval_level", "1.5"]


MISTAKES = [
    reason_key_typo,
    suite_column_missing,
    unknown_spec_key,
    feature_list_mismatch,
    stale_sha256,
    metadata_missing_a_field,
    slice_column_typo,
    health_level_out_of_range,
]


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: m.__name__)
def test_each_mistake_is_one_error_line_naming_file_field_and_value(
    env: JobEnv, mistake: Callable[[JobEnv], list[str]], command: str
) -> None:
    named = mistake(env)
    (line,) = error_lines(COMMANDS[command])
    assert all(part in line for part in named), (named, line)
    assert env.untouched()


def test_a_backfill_is_refused_before_any_partition_runs(env: JobEnv) -> None:
    named = reason_key_typo(env)
    (line,) = error_lines(COMMANDS["backfill"])
    assert all(part in line for part in named), line
    assert env.untouched()


def test_two_mistakes_in_a_spec_are_two_lines(env: JobEnv) -> None:
    def change(spec: dict) -> None:
        spec["monitoring"]["window_dayz"] = spec["monitoring"].pop("window_days")
        spec["chunk_rows"] = 0

    env.edit_spec(change)
    lines = error_lines(COMMANDS["validate"], count=2)
    assert any("monitoring.window_dayz" in line for line in lines), lines
    assert any(": chunk_rows: " in line and "(got 0)" in line for line in lines), lines


def test_mistakes_in_different_files_are_all_reported_at_once(env: JobEnv) -> None:
    found = [mistake(env) for mistake in (reason_key_typo, suite_column_missing, stale_sha256)]
    lines = error_lines(COMMANDS["run"], count=3)
    for named in found:
        assert any(all(part in line for part in named) for line in lines), (named, lines)
    assert env.untouched()


def test_a_spec_that_does_not_parse_skips_the_checks_that_need_it(env: JobEnv) -> None:
    unknown_spec_key(env)
    stale_sha256(env)
    # The model is named by the spec: with the spec unusable, its sha256 is not checked yet.
    problems = job_problems(DEMO_JOB, current_settings())
    assert [p.field for p in problems] == ["monitoring.window_dayz"]


def test_a_clean_job_validates_with_a_summary(env: JobEnv) -> None:
    result = CliRunner().invoke(app, COMMANDS["validate"])
    assert result.exit_code == 0, result.output
    meta = json.loads(env.metadata_path.read_text())
    assert result.output.startswith(f"ok: job {DEMO_JOB} ({env.spec_path})"), result.output
    expectations = len(json.loads(env.suite_path.read_text())["expectations"])
    assert f"{expectations} expectations" in result.output
    assert f"model {DEMO_JOB} {meta['version']} " in result.output and meta["sha256"][:12] in result.output
    assert f"version {meta['feature_version']}, {len(meta['features'])} features" in result.output
    assert f"raw partition {env.raw_file.parent}: 1 file(s) checked" in result.output
    assert env.untouched()


def test_the_date_picks_the_raw_partition_checked(env: JobEnv) -> None:
    (line,) = error_lines(["validate", DEMO_JOB, "--date", "2026-03-11"])
    assert "date=2026-03-11" in line and ": date: " in line and "no raw partition" in line, line


def test_a_label_column_the_labels_lack_is_named_with_the_columns_they_have(env: JobEnv) -> None:
    env.edit_spec(lambda s: s["monitoring"]["labels"].update(outcome_column="defaultd"))
    labels = sorted((env.data / "labels" / DEMO_JOB).glob("date=*/*.parquet"))[-1]
    (line,) = error_lines(COMMANDS["validate"])
    assert f"{env.spec_path}: monitoring.labels.outcome_column: 'defaultd'" in line, line
    assert str(labels) in line and ", ".join(pq.read_schema(labels).names) in line, line


def test_the_installed_command_prints_no_prefect_log_for_a_reason_key_typo(env: JobEnv) -> None:
    """The user's report: a typo in a reason key used to fail in predict-unit after 692 lines of logs."""
    named = reason_key_typo(env)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SCORING_")}
    environment.update(
        SCORING_DATA_DIR=str(env.data), SCORING_JOBS_DIR=str(env.jobs), SCORING_EXPECTATIONS_DIR=str(env.expectations)
    )
    result = subprocess.run(
        [str(SCORE), *COMMANDS["run"]],
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == ExitCode.USER, output
    assert output.strip().splitlines() == [output.strip()] and output.startswith("error: "), output
    assert all(part in output for part in named), output
    assert env.untouched()


@pytest.mark.usefixtures("prefect_harness")
def test_a_deployment_run_fails_in_prepare_run_with_every_problem_and_no_ledger_row(env: JobEnv) -> None:
    from flows.score_partition import score_partition

    named = reason_key_typo(env)
    suite_named = suite_column_missing(env)
    with pytest.raises(JobValidationError) as err:
        score_partition(DEMO_JOB, dt.date.fromisoformat(DAY))
    assert len(err.value.problems) == 2
    assert all(part in str(err.value) for part in named + suite_named), str(err.value)
    assert env.untouched()


def test_a_broken_version_with_a_loadable_fallback_validates_with_a_warning(env: JobEnv) -> None:
    good = env.metadata_path.parent
    broken = good.parent / "99"
    shutil.copytree(good, broken)
    meta = json.loads((broken / "metadata.json").read_text())
    (broken / "metadata.json").write_text(json.dumps({**meta, "version": "99", "sha256": "0" * 64}))
    env.edit_spec(lambda s: s["model"].update(version="99", fallback_version=good.name))
    result = CliRunner().invoke(app, COMMANDS["validate"])
    # The run would score every row with the fallback and count them: not a mistake, but said.
    assert result.exit_code == 0, result.output
    assert f"model {DEMO_JOB} {good.name} " in result.output
    warning = next(line for line in result.output.splitlines() if line.startswith("warning: "))
    assert f"{DEMO_JOB} 99 cannot be loaded, so fallback_version {good.name} would score every row" in warning
    assert f"{broken / 'metadata.json'}: sha256: " in warning, warning
