"""The Delta Lake sink (`sinks: {delta: {url: …}}`, tasks/sinks/delta.py) on the demo job: on local
disk and on an S3 server (moto, with IAM checks), a kill between the Parquet swap and the Delta
writes finished by recovery, and a table that cannot be written. Every table is read back with
delta-rs and compared with the warehouse and the ledger."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import DEMO_JOB, DemoEnv, S3Server
from deltalake import DeltaTable, write_deltalake

from flows.steps.blocks import configured_warehouse
from tasks.catalog import PARTITION_DATASETS, table_schemas
from tasks.errors import ExitCode, SinkUnwritable
from tasks.jobspec import load_job_spec
from tasks.runs.recovery import recovered_job
from tasks.settings import PROJECT_ROOT, Settings, current_settings
from tasks.sinks.delta import DeltaTables, written_delta_partition

pytestmark = pytest.mark.usefixtures("prefect_harness")
sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
from forked_score import completed  # noqa: E402

PARTITIONED_SCHEMAS = table_schemas(PARTITION_DATASETS)
"""Every table a scoring run replaces per partition, with its schema (tasks/catalog.py)."""


def _with_delta_sink(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str) -> Settings:
    """The demo job spec with `sinks: {delta: {url}}`, in a tmp jobs folder `SCORING_JOBS_DIR` names."""
    jobs = tmp_path / "jobs"
    jobs.mkdir(exist_ok=True)
    spec = yaml.safe_load((settings.jobs_dir / f"{DEMO_JOB}.yaml").read_text())
    spec["sinks"] = {"delta": {"url": url}}
    (jobs / f"{DEMO_JOB}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    monkeypatch.setenv("SCORING_JOBS_DIR", str(jobs))
    changed = current_settings()
    assert load_job_spec(DEMO_JOB, changed).sinks.delta.url == url
    return changed


def _warehouse_partition(settings: Settings, table: str, day: dt.date) -> tuple[int, set[str]]:
    """(rows, run ids) of one table's partition in the DuckDB warehouse."""
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        rows = con.execute(
            f"SELECT run_id FROM {table} WHERE job = ? AND partition_date = ?", [DEMO_JOB, day]
        ).fetchall()
    return len(rows), {r[0] for r in rows}


def _ledger(settings: Settings, day: dt.date) -> list[dict]:
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        cursor = con.execute(
            "SELECT run_id, status, warnings FROM runs WHERE job = ? AND partition_date = ? ORDER BY started_at",
            [DEMO_JOB, day],
        )
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _delta_partition(url: str, day: dt.date) -> pa.Table:
    table = DeltaTable(url).to_pyarrow_table()
    return table.filter(pc.equal(table["partition_date"], pa.scalar(day, pa.date32())))


def _assert_delta_holds(settings: Settings, base: str, day: dt.date, run_id: str) -> None:
    """Every Delta table's partition is `run_id`'s rows, as many as the warehouse holds, and the
    ledger's succeeded run of the partition is `run_id`."""
    assert [r["run_id"] for r in _ledger(settings, day) if r["status"] == "succeeded"][-1] == run_id
    for name in PARTITIONED_SCHEMAS:
        rows, runs = _warehouse_partition(settings, name, day)
        delta = _delta_partition(f"{base}/{name}", day)
        assert delta.num_rows == rows, (name, delta.num_rows, rows)
        assert set(delta["run_id"].to_pylist()) <= {run_id} and runs <= {run_id}, (
            name,
            set(delta["run_id"].to_pylist()),
            runs,
        )
        assert set(delta["job"].to_pylist()) <= {DEMO_JOB}
    assert _delta_partition(f"{base}/predictions", day).num_rows > 0


def test_two_runs_leave_exactly_the_second_runs_rows_in_every_local_table(
    demo_env: DemoEnv,
    fresh_data: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.score_partition import score_partition

    settings = _with_delta_sink(fresh_data, tmp_path, monkeypatch, "delta/tables")
    base = str(settings.data_dir / "delta" / "tables")  # a relative url is under the data root
    other, day = demo_env.plan.scoring_dates[-2], demo_env.plan.scoring_dates[-1]
    kept = score_partition(DEMO_JOB, other)
    score_partition(DEMO_JOB, day)
    second = score_partition(DEMO_JOB, day)
    _assert_delta_holds(settings, base, day, second.run_id)
    _assert_delta_holds(settings, base, other, kept.run_id)
    for name in PARTITIONED_SCHEMAS:
        table = DeltaTable(f"{base}/{name}")
        assert table.metadata().partition_columns == ["partition_date"]
        # One commit per run and table: the other day's, then the day's two runs.
        assert table.version() == 2, (name, table.version())
        (last,) = table.history(1)
        assert last["operation"] == "WRITE" and last["operationParameters"]["mode"] == "Overwrite"
        assert last["run_id"] == second.run_id
    arrow = DeltaTable(f"{base}/predictions").schema().to_arrow()
    assert {f.name for f in arrow} == set(PARTITIONED_SCHEMAS["predictions"].names)


def test_an_empty_dataset_removes_the_previous_runs_rows_of_its_partition_only(tmp_path: Path) -> None:
    schema = PARTITIONED_SCHEMAS["quarantine"]
    day, other = dt.date(2026, 3, 10), dt.date(2026, 3, 9)

    def files(run_id: str, partition_date: dt.date, rows: int) -> dict[str, list[Path]]:
        path = tmp_path / f"{run_id}.parquet"
        pq.write_table(
            pa.Table.from_pylist(
                [
                    {
                        "run_id": run_id,
                        "job": DEMO_JOB,
                        "partition_date": partition_date,
                        "entity_id": str(i),
                        "failed_expectations": ["id_present"],
                        "raw_row": "{}",
                    }
                    for i in range(rows)
                ],
                schema=schema,
            ),
            path,
        )
        return {"quarantine": [path]}

    tables = DeltaTables(str(tmp_path / "tables"))
    for run_id, partition_date, rows in (("r-other", other, 3), ("r1", day, 5), ("r2", day, 0)):
        written = written_delta_partition(
            tables,
            job=DEMO_JOB,
            partition_date=partition_date,
            run_id=run_id,
            files=files(run_id, partition_date, rows),
        )
        assert written == {"quarantine": rows}
    url = tables.table_url("quarantine")
    assert _delta_partition(url, day).num_rows == 0
    assert set(_delta_partition(url, other)["run_id"].to_pylist()) == {"r-other"}
    assert DeltaTable(url).history(1)[0]["operationMetrics"]["num_removed_files"] == 1


def test_duckdb_reads_the_tables_current_version(
    demo_env: DemoEnv,
    fresh_data: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # delta_scan where DuckDB's delta extension loads (it is downloaded at run time, so not offline);
    # otherwise DuckDB reads the Parquet files the table's current version lists, which is what a
    # reader without a Delta library does.
    from flows.score_partition import score_partition

    settings = _with_delta_sink(fresh_data, tmp_path, monkeypatch, str(tmp_path / "tables"))
    day = demo_env.plan.scoring_dates[-1]
    score_partition(DEMO_JOB, day)
    run = score_partition(DEMO_JOB, day)
    url = str(tmp_path / "tables" / "predictions")
    con = duckdb.connect()
    try:
        con.execute("LOAD delta")
        source = f"delta_scan('{url}')"
    except duckdb.Error:
        files = ", ".join(f"'{uri}'" for uri in DeltaTable(url).file_uris())
        source = f"read_parquet([{files}], hive_partitioning = true)"
    rows, runs = con.execute(f"SELECT count(*), list(DISTINCT run_id) FROM {source}").fetchone()
    assert (rows, runs) == (_warehouse_partition(settings, "predictions", day)[0], [run.run_id])


def test_the_tables_on_s3_hold_exactly_the_second_runs_rows(
    demo_env: DemoEnv,
    fresh_data: Settings,
    s3_env: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.score_partition import score_partition

    base = f"s3://{s3_env.bucket}/{uuid.uuid4().hex}/tables"
    settings = _with_delta_sink(fresh_data, tmp_path, monkeypatch, base)
    day = demo_env.plan.scoring_dates[-1]
    score_partition(DEMO_JOB, day)
    second = score_partition(DEMO_JOB, day)
    _assert_delta_holds(settings, base, day, second.run_id)
    assert DeltaTable(f"{base}/drift_histograms").version() == 1


def _score(day: dt.date, **env: str) -> subprocess.CompletedProcess:
    """`score run` of `day` in a child process on this test's environment and Prefect server."""
    from prefect.settings import PREFECT_API_URL

    environment = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), **env}
    return completed(["run", DEMO_JOB, "--date", day.isoformat()], env=environment, cwd=PROJECT_ROOT, timeout=300)


def test_a_kill_between_the_parquet_swap_and_the_delta_writes_is_finished_by_recovery(
    demo_env: DemoEnv,
    fresh_data: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.score_partition import score_partition

    base = str(tmp_path / "tables")
    settings = _with_delta_sink(fresh_data, tmp_path, monkeypatch, base)
    day = demo_env.plan.scoring_dates[-1]
    first = score_partition(DEMO_JOB, day)
    killed = _score(day, SCORING_CRASH_AT="publish:swapped")
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-2000:] + killed.stderr[-2000:]
    _, stuck = _ledger(settings, day)
    assert stuck["status"] == "committed"
    # Parquet and the warehouse already show the killed run; the Delta tables still the first.
    assert _warehouse_partition(settings, "predictions", day)[1] == {stuck["run_id"]}
    assert set(_delta_partition(f"{base}/predictions", day)["run_id"].to_pylist()) == {first.run_id}
    (recovered,) = recovered_job(configured_warehouse(settings), settings, DEMO_JOB, recovering_run_id="recovery-test")
    assert (recovered.run_id, recovered.was, recovered.now) == (stuck["run_id"], "committed", "succeeded")
    assert "Delta tables" in recovered.action
    _assert_delta_holds(settings, base, day, stuck["run_id"])
    (closed,) = [r for r in _ledger(settings, day) if r["run_id"] == stuck["run_id"]]
    assert "published by recovery" in closed["warnings"] and "recovery wrote its Delta tables" in closed["warnings"]


def test_an_unwritable_table_fails_the_run_with_one_line_and_the_next_start_finishes_it(
    demo_env: DemoEnv,
    fresh_data: Settings,
    s3_env: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    prefect_logging: None,
) -> None:
    from typer.testing import CliRunner

    from cli.score import app

    # Someone else's table where the predictions should go: its entity_id is a number, ours text.
    broken = f"s3://{s3_env.bucket}/{uuid.uuid4().hex}/tables"
    write_deltalake(
        f"{broken}/predictions",
        pa.table({"entity_id": pa.array([1], pa.int64()), "partition_date": [dt.date(2020, 1, 1)]}),
        partition_by=["partition_date"],
    )
    settings = _with_delta_sink(fresh_data, tmp_path, monkeypatch, broken)
    day = demo_env.plan.scoring_dates[-1]
    result = CliRunner().invoke(app, ["run", DEMO_JOB, "--date", day.isoformat()])
    output = result.output
    assert result.exit_code == ExitCode.ENVIRONMENT, (output[-3000:], result.exception)
    assert "Traceback" not in output, output[-3000:]
    (line,) = [line for line in output.splitlines() if line.startswith("error:")]
    assert f"Delta table {broken}/predictions could not be written" in line, line
    assert "stays `committed`" in line and f"score recover {DEMO_JOB}" in line, line
    (run,) = _ledger(settings, day)
    assert run["status"] == "committed"
    assert _warehouse_partition(settings, "predictions", day)[1] == {run["run_id"]}
    parquet = pq.read_table(os.path.realpath(settings.output_dir(DEMO_JOB) / "predictions" / f"date={day}"))
    assert set(parquet["run_id"].to_pylist()) == {run["run_id"]}
    log_text = "".join(p.read_text(errors="replace") for p in settings.data_dir.rglob("*.log"))
    for secret in (s3_env.secret_key, s3_env.access_key):
        assert secret not in output and secret not in log_text
    # While the sink stays broken, recovery refuses to close the run; once the spec names a
    # writable place, the next start writes the tables and closes it.
    warehouse = configured_warehouse(settings)
    with pytest.raises(SinkUnwritable, match=f"{broken}/predictions"):
        recovered_job(warehouse, settings, DEMO_JOB, recovering_run_id="recovery-broken")
    assert _ledger(settings, day)[0]["status"] == "committed"
    base = f"s3://{s3_env.bucket}/{uuid.uuid4().hex}/tables"
    settings = _with_delta_sink(settings, tmp_path, monkeypatch, base)
    (recovered,) = recovered_job(warehouse, settings, DEMO_JOB, recovering_run_id="recovery-fixed")
    assert recovered.run_id == run["run_id"] and recovered.now == "succeeded"
    _assert_delta_holds(settings, base, day, run["run_id"])


def test_a_missing_bucket_is_found_before_the_run_starts(
    fresh_data: Settings,
    s3_env: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    prefect_logging: None,
) -> None:
    from typer.testing import CliRunner

    from cli.score import app

    missing = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
    settings = _with_delta_sink(fresh_data, tmp_path, monkeypatch, f"s3://{missing}/tables")
    result = CliRunner().invoke(app, ["run", DEMO_JOB, "--date", "2026-03-10"])
    assert result.exit_code == ExitCode.USER and "Traceback" not in result.output, result.output
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert line.startswith("error:") and "sinks.delta.url" in line and f"bucket '{missing}'" in line, line
    assert (
        not (settings.data_dir / "output" / DEMO_JOB).exists() and not (settings.data_dir / "warehouse.duckdb").exists()
    )


def test_refused_credentials_for_the_sink_fail_before_the_run_without_showing_them(
    fresh_data: Settings,
    s3_env: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    prefect_logging: None,
) -> None:
    from typer.testing import CliRunner

    from cli.score import app

    settings = _with_delta_sink(fresh_data, tmp_path, monkeypatch, f"s3://{s3_env.bucket}/{uuid.uuid4().hex}/tables")
    wrong = "wrong-secret-" + uuid.uuid4().hex
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    result = CliRunner().invoke(app, ["run", DEMO_JOB, "--date", "2026-03-10"])
    assert result.exit_code == ExitCode.ENVIRONMENT and "Traceback" not in result.output, result.output
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert line.startswith("error:") and "cannot be reached" in line and "AWS_SECRET_ACCESS_KEY" in line, line
    assert wrong not in result.output and s3_env.secret_key not in result.output
    assert not (settings.data_dir / "output" / DEMO_JOB).exists()


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """An empty read-only tmpfs: as root, chmod would stop nothing."""
    mount = tmp_path / "read-only"
    mount.mkdir()
    tried = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if tried.returncode != 0:
        pytest.skip(
            f"cannot mount a read-only tmpfs here ({tried.stderr.strip()}); run as root for the read-only Delta folder test"
        )
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _one_error_line(result: subprocess.CompletedProcess, code: int) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == code and "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Os {" not in output, output[-3000:]
    return errors[0]


def test_a_local_delta_folder_that_cannot_be_written_is_found_before_the_lease(
    demo_env: DemoEnv,
    fresh_data: Settings,
    read_only_folder: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    prefect_harness: None,
) -> None:
    base = read_only_folder / "tables"
    settings = _with_delta_sink(fresh_data, tmp_path, monkeypatch, str(base))
    line = _one_error_line(_score(demo_env.plan.scoring_dates[-1]), ExitCode.ENVIRONMENT)
    assert (
        f"sinks.delta.url: the Delta tables at {base} cannot be written: {read_only_folder}: Read-only file system"
        in line
    ), line
    # Before the lease: no ledger row, no output, nothing scored.
    assert (
        not (settings.data_dir / "warehouse.duckdb").exists() and not (settings.data_dir / "output" / DEMO_JOB).exists()
    )


def test_a_local_delta_url_naming_a_file_is_a_spec_problem(
    demo_env: DemoEnv,
    fresh_data: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    prefect_harness: None,
) -> None:
    (tmp_path / "tables").write_text("not a folder")
    settings = _with_delta_sink(fresh_data, tmp_path, monkeypatch, str(tmp_path / "tables"))
    line = _one_error_line(_score(demo_env.plan.scoring_dates[-1]), ExitCode.USER)
    assert "sinks.delta.url" in line and f"{tmp_path / 'tables'} is not a folder" in line, line
    assert (
        not (settings.data_dir / "warehouse.duckdb").exists() and not (settings.data_dir / "output" / DEMO_JOB).exists()
    )


def test_a_spec_whose_delta_url_could_never_be_written_is_refused_at_load(
    demo_env: DemoEnv,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tasks.errors import JobSpecError

    for url, problem in (
        ("gs://bucket/tables", "scheme 'gs' is not supported"),
        ("s3:///tables", "names its bucket"),
        ("../elsewhere", "stays inside the data root"),
        ("s3://key:secret@bucket/tables", "carries credentials"),
    ):
        with pytest.raises(JobSpecError, match=problem):
            _with_delta_sink(demo_env.settings, tmp_path, monkeypatch, url)
