"""Raw partitions where they live: Parquet on an S3-compatible server, a DuckDB table, a PostgreSQL
table (all real, on 127.0.0.1) score the same rows as the local folder; every mistake in a source
is one `error:` line naming it, with nothing written."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import DEMO_END, DEMO_JOB, S3Server
from pydantic import SecretStr
from typer.testing import CliRunner

from cli.score import app
from tasks.settings import PROJECT_ROOT, Settings
from tasks.sources import ParquetPartition, opened_parquet

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
pytestmark = pytest.mark.slow

DAY = DEMO_END
COMPARED = [
    "entity_id",
    "probability",
    "probability_low",
    "probability_high",
    "score",
    "decision",
    "rule_id",
    "reason_codes",
    "reason_texts",
    "raw_margin",
    "model_version",
]


def job_with_source(settings: Settings, jobs_dir: Path, name: str, source: dict | None) -> str:
    """A copy of the demo credit job named `name`, reading from `source`, in `jobs_dir` beside the demo jobs."""
    if not jobs_dir.exists():
        shutil.copytree(PROJECT_ROOT / "jobs", jobs_dir)
    spec = yaml.safe_load((PROJECT_ROOT / "jobs" / f"{DEMO_JOB}.yaml").read_text())
    spec["name"] = name
    if source is not None:
        spec["source"] = source
    (jobs_dir / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return name


def scored(settings: Settings, job: str, *extra: str) -> pl.DataFrame:
    result = CliRunner().invoke(app, ["run", job, "--date", DAY.isoformat(), *extra])
    assert result.exit_code == 0, (result.output, result.exception)
    folder = settings.data_dir / "output" / job / "predictions" / f"date={DAY}"
    return pl.read_parquet(sorted(folder.glob("*.parquet"))).select(COMPARED).sort("entity_id")


def raw_files(settings: Settings) -> list[Path]:
    return sorted(settings.raw_partition_dir(DEMO_JOB, DAY.isoformat()).glob("*.parquet"))


def uploaded(server: S3Server, files: list[Path], prefix: str) -> str:
    """`files` copied byte for byte (row groups and all) under s3://bucket/prefix/date=DAY/; the url template."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name="us-east-1",
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
    )
    for path in files:
        client.put_object(Bucket=server.bucket, Key=f"{prefix}/date={DAY}/{path.name}", Body=path.read_bytes())
    return f"s3://{server.bucket}/{prefix}/date={{date}}/"


def all_raw_rows(settings: Settings) -> pa.Table:
    tables = [pq.read_table(p) for p in sorted(settings.data_dir.glob(f"raw/{DEMO_JOB}/date=*/*.parquet"))]
    return pa.concat_tables(tables).cast(
        pa.schema(
            [pa.field(f.name, pa.string() if pa.types.is_large_string(f.type) else f.type) for f in tables[0].schema]
        )
    )


@pytest.mark.usefixtures("prefect_harness")
def test_every_source_scores_the_rows_of_the_local_folder(
    fresh_data: Settings, s3_env: S3Server, postgres_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import adbc_driver_postgresql.dbapi

    jobs = tmp_path / "jobs"
    monkeypatch.setenv("SCORING_JOBS_DIR", str(jobs))
    # The demo job reads its local folder; the copies read the same rows from elsewhere.
    local = scored(fresh_data, job_with_source(fresh_data, jobs, DEMO_JOB, None), "--chunk-rows", "1000")
    assert local.height > 2900  # the demo partition has 3000 rows, a few of them quarantined

    url = uploaded(s3_env, raw_files(fresh_data), f"{uuid.uuid4().hex}/raw")
    # A different chunk size on purpose: the rows must not depend on it.
    on_s3 = scored(
        fresh_data, job_with_source(fresh_data, jobs, "from_s3", {"parquet": {"url": url}}), "--chunk-rows", "700"
    )
    assert on_s3.equals(local)

    rows = all_raw_rows(fresh_data)
    with duckdb.connect(str(fresh_data.data_dir / "source.duckdb")) as con:
        con.register("incoming", rows)
        con.execute("CREATE TABLE applications AS SELECT * FROM incoming")
    query = "select * from applications where application_date = :partition_date order by entity_id"
    from_duckdb = scored(
        fresh_data,
        job_with_source(
            fresh_data,
            jobs,
            "from_duckdb",
            {"sql": {"warehouse": "duckdb", "database": "source.duckdb", "query": query}},
        ),
    )
    assert from_duckdb.equals(local)

    with adbc_driver_postgresql.dbapi.connect(postgres_database_url) as con, con.cursor() as cursor:
        cursor.adbc_ingest("applications", rows, mode="create")
        con.commit()
    monkeypatch.setenv("SCORING_SOURCE_URL", postgres_database_url)
    from_postgres = scored(
        fresh_data,
        job_with_source(fresh_data, jobs, "from_postgres", {"sql": {"warehouse": "postgresql", "query": query}}),
        "--chunk-rows",
        "1300",
    )
    assert from_postgres.equals(local)


def test_an_fsspec_url_is_listed_and_read_by_row_group(tmp_path: Path) -> None:
    import fsspec

    memory = fsspec.filesystem("memory")
    table = pa.table({"entity_id": [f"e{i}" for i in range(1000)], "x": list(range(1000))})
    for name in ("part-1.parquet", "part-0.parquet", "_SUCCESS", ".hidden.parquet"):
        with memory.open(f"/landing/date=2026-03-10/{name}", "wb") as out:
            pq.write_table(table, out, row_group_size=300)
    raw = ParquetPartition("memory://landing/date=2026-03-10")
    files = raw.files()
    assert files == [
        "memory://landing/date=2026-03-10/part-0.parquet",
        "memory://landing/date=2026-03-10/part-1.parquet",
    ]
    opened = opened_parquet(files[1])
    assert opened.metadata.num_row_groups == 4
    assert opened.read_row_group(3).column("x").to_pylist() == list(range(900, 1000))


# Mistakes in a source: one line, the right exit code, nothing written.


def _one_error_line(result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    return lines[0]


def _nothing_written(settings: Settings, job: str) -> None:
    assert not (settings.data_dir / "output" / job).exists()
    warehouse = settings.data_dir / "warehouse.duckdb"
    if warehouse.exists():
        with duckdb.connect(str(warehouse), read_only=True) as con:
            tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
            if "runs" in tables:
                assert con.execute("SELECT count(*) FROM runs WHERE job = ?", [job]).fetchone() == (0,)


@pytest.fixture
def source_job(fresh_data: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefect_logging: None):
    jobs = tmp_path / "jobs"
    monkeypatch.setenv("SCORING_JOBS_DIR", str(jobs))

    def run_with(source: dict, name: str = "sourced") -> tuple[str, object]:
        job = job_with_source(fresh_data, jobs, name, source)
        return job, CliRunner().invoke(app, ["run", job, "--date", DAY.isoformat()])

    return run_with


def test_an_empty_prefix_is_no_raw_partition(source_job, fresh_data: Settings, s3_env: S3Server) -> None:
    url = f"s3://{s3_env.bucket}/{uuid.uuid4().hex}/date={{date}}/"
    job, result = source_job({"parquet": {"url": url}})
    line = _one_error_line(result, 2)
    assert "no raw partition" in line and url.format(date=DAY).rstrip("/") in line
    _nothing_written(fresh_data, job)


def test_a_wrong_bucket_is_named(source_job, fresh_data: Settings, s3_env: S3Server) -> None:
    job, result = source_job({"parquet": {"url": "s3://no-such-bucket/raw/date={date}/"}})
    line = _one_error_line(result, 2)
    assert "'no-such-bucket' does not exist" in line and "source.parquet.url" in line
    _nothing_written(fresh_data, job)


def test_refused_credentials_are_the_environment_and_never_shown(
    source_job, fresh_data: Settings, s3_env: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = s3_env
    # The first request, for the bucket, already carries the credentials; no file is needed.
    url = f"s3://{server.bucket}/{uuid.uuid4().hex}/raw/date={{date}}/"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-" + uuid.uuid4().hex)
    job, result = source_job({"parquet": {"url": url}})
    line = _one_error_line(result, 3)
    assert url.format(date=DAY).rstrip("/") in line and "AWS_SECRET_ACCESS_KEY" in line
    assert server.secret_key not in result.output and "not-the-secret-" not in result.output
    _nothing_written(fresh_data, job)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    job, result = source_job({"parquet": {"url": url}}, name="no_credentials")
    assert _one_error_line(result, 3).startswith(
        f"error: cannot read the raw source {url.format(date=DAY).rstrip('/')}"
    )
    _nothing_written(fresh_data, job)


def test_an_endpoint_that_does_not_answer_is_the_environment(
    source_job, fresh_data: Settings, s3_env: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import _free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    job, result = source_job({"parquet": {"url": f"s3://{s3_env.bucket}/raw/date={{date}}/"}})
    line = _one_error_line(result, 3)
    assert f"s3://{s3_env.bucket}/raw/date={DAY}" in line and "connect" in line.lower()
    _nothing_written(fresh_data, job)


def test_a_query_with_a_syntax_error_names_the_query(source_job, fresh_data: Settings) -> None:
    with duckdb.connect(str(fresh_data.data_dir / "source.duckdb")) as con:
        con.execute("CREATE TABLE applications (entity_id VARCHAR, application_date DATE)")
    query = "selec * from applications where application_date = :partition_date"
    job, result = source_job({"sql": {"warehouse": "duckdb", "database": "source.duckdb", "query": query}})
    line = _one_error_line(result, 2)
    assert query in line and "source.sql.query" in line and "syntax error" in line.lower()
    _nothing_written(fresh_data, job)


def test_a_query_without_the_partition_date_is_refused_before_it_runs(source_job, fresh_data: Settings) -> None:
    query = "select * from applications"
    job, result = source_job({"sql": {"warehouse": "duckdb", "database": "source.duckdb", "query": query}})
    line = _one_error_line(result, 2)
    assert "source.sql.query" in line and ":partition_date" in line
    _nothing_written(fresh_data, job)


def test_a_postgres_source_that_does_not_answer_hides_its_password(
    source_job, fresh_data: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import _free_port

    password = "pw-" + uuid.uuid4().hex
    monkeypatch.setenv("SCORING_SOURCE_URL", f"postgresql://scorer:{password}@127.0.0.1:{_free_port()}/raw")
    query = "select * from applications where application_date = :partition_date"
    job, result = source_job({"sql": {"warehouse": "postgresql", "query": query}})
    line = _one_error_line(result, 3)
    assert "postgresql://scorer:***@127.0.0.1" in line and password not in result.output
    _nothing_written(fresh_data, job)


def test_a_spec_url_with_credentials_is_refused(source_job, fresh_data: Settings) -> None:
    job, result = source_job({"parquet": {"url": "s3://bucket/raw/date={date}/?access_key=AKIA&secret_key=shh"}})
    line = _one_error_line(result, 2)
    assert "source.parquet.url" in line and "credentials" in line and "shh" not in result.output
    _nothing_written(fresh_data, job)


def test_an_empty_query_is_no_raw_partition(source_job, fresh_data: Settings, prefect_harness: None) -> None:
    with duckdb.connect(str(fresh_data.data_dir / "source.duckdb")) as con:
        con.register("incoming", all_raw_rows(fresh_data))
        con.execute("CREATE TABLE applications AS SELECT * FROM incoming")
    query = (
        "select * from applications where application_date = :partition_date and application_date < date '2000-01-01'"
    )
    job, result = source_job({"sql": {"warehouse": "duckdb", "database": "source.duckdb", "query": query}})
    assert result.exit_code == 2 and "no raw partition" in result.output and "holds 0 raw rows" in result.output, (
        result.output
    )


def test_a_partition_day_bound_as_a_parameter_selects_that_day(fresh_data: Settings) -> None:
    from tasks.sources import raw_partition
    from tasks.sources.config import SourceConfig

    with duckdb.connect(str(fresh_data.data_dir / "source.duckdb")) as con:
        con.register("incoming", all_raw_rows(fresh_data))
        con.execute("CREATE TABLE applications AS SELECT * FROM incoming")
    source = SourceConfig.model_validate(
        {
            "sql": {
                "warehouse": "duckdb",
                "database": "source.duckdb",
                "query": "select entity_id, application_date::date as d from applications where application_date = :partition_date;",
            }
        }
    )
    for day in (DAY, DAY - dt.timedelta(days=1)):
        raw = raw_partition(source, fresh_data, DEMO_JOB, day)
        with raw.batches(256) as reader:
            got = reader.read_all()
        assert got.num_rows == 3000 and set(got.column("d").to_pylist()) == {day}


def test_a_postgres_source_shows_its_url_without_the_password(fresh_data: Settings) -> None:
    from tasks.sources import raw_partition
    from tasks.sources.config import SourceConfig

    password = "pw-" + uuid.uuid4().hex
    settings = fresh_data.model_copy(
        update={"source_url": SecretStr(f"postgresql://scorer:{password}@db.internal:5432/raw")}
    )
    source = SourceConfig.model_validate(
        {"sql": {"warehouse": "postgresql", "query": "select * from t where d = :partition_date"}}
    )
    raw = raw_partition(source, settings, DEMO_JOB, DAY)
    assert str(raw) == "postgresql query on postgresql://scorer:***@db.internal:5432/raw"
    assert password not in repr(raw) and password not in str(raw)


def test_a_corrupt_or_misshapen_remote_file_is_named_by_its_url(
    source_job, fresh_data: Settings, s3_env: S3Server
) -> None:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=s3_env.endpoint,
        region_name="us-east-1",
        aws_access_key_id=s3_env.access_key,
        aws_secret_access_key=s3_env.secret_key,
    )
    prefix = uuid.uuid4().hex
    client.put_object(Bucket=s3_env.bucket, Key=f"{prefix}/date={DAY}/part-0.parquet", Body=b"PAR1 not really parquet")
    job, result = source_job({"parquet": {"url": f"s3://{s3_env.bucket}/{prefix}/date={{date}}/"}})
    line = _one_error_line(result, 2)
    assert f"s3://{s3_env.bucket}/{prefix}/date={DAY}/part-0.parquet" in line and "not a readable Parquet file" in line
    _nothing_written(fresh_data, job)

    narrow = pq.read_table(raw_files(fresh_data)[0]).drop_columns(["annual_income"])
    sink = pa.BufferOutputStream()
    pq.write_table(narrow, sink)
    client.put_object(
        Bucket=s3_env.bucket, Key=f"{prefix}/date={DAY}/part-0.parquet", Body=sink.getvalue().to_pybytes()
    )
    job, result = source_job({"parquet": {"url": f"s3://{s3_env.bucket}/{prefix}/date={{date}}/"}}, name="misshapen")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"s3://{s3_env.bucket}/{prefix}/date={DAY}/part-0.parquet: annual_income" in result.output.replace("\n", "")
    _nothing_written(fresh_data, job)


# A store that stops answering, or cannot be found: a warning within seconds while it is retried,
# then one line and exit 3 within the retry budget (SCORING_SOURCE_TIMEOUT_S), never a silent hang.

SCORE = Path(sys.executable).parent / "score"
PLANTED_SECRET = "planted-secret-" + uuid.uuid4().hex


@dataclass
class ChildRun:
    """A `score` child process, its output lines as they came, each with the monotonic time it arrived."""

    process: subprocess.Popen
    lines: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def first(self, text: str, timeout_s: float) -> float | None:
        """When the first line holding `text` came, waiting up to `timeout_s` for it; None if it did not."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = next((at for at, line in list(self.lines) if text in line), None)
            if found is not None:
                return found
            if self.process.poll() is not None and not self._reader.is_alive():
                return None
            time.sleep(0.02)
        return None

    def ended(self, timeout_s: float) -> tuple[int, float, str]:
        """(exit code, when it ended, all output)."""
        code = self.process.wait(timeout=timeout_s)
        ended = time.monotonic()
        self._reader.join(timeout=10)
        return code, ended, "\n".join(line for _, line in self.lines)


def score_child(
    data: Path, jobs: Path, job: str, env: dict[str, str], *extra: str, wrapper: tuple[str, ...] = ()
) -> ChildRun:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("SCORING_", "AWS_"))}
    environment.update(
        {
            "SCORING_DATA_DIR": str(data),
            "SCORING_JOBS_DIR": str(jobs),
            "PYTHONUNBUFFERED": "1",
            # On a loaded machine the ephemeral API takes longer than Prefect's default 20 s to start.
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
            **env,
        }
    )
    process = subprocess.Popen(
        [*wrapper, str(SCORE), "run", job, "--date", DAY.isoformat(), *extra],
        cwd=PROJECT_ROOT,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return ChildRun(process)


def only_error_line(output: str) -> str:
    assert "Traceback" not in output, output[-4000:]
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output[-4000:]
    return errors[0]


def ledger(settings: Settings, job: str) -> list[tuple[str, str]]:
    if not settings.duckdb_path.exists():
        return []
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        if not con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'runs'").fetchall()[0][0]:
            return []
        return con.execute("SELECT status, error FROM runs WHERE job = ?", [job]).fetchall()


@pytest.fixture
def own_store(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """A moto S3 server of this test alone (it gets stopped or killed), with a bucket `hung`."""
    import boto3
    from conftest import _free_port

    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    own = Path(sys.executable).with_name("moto_server")
    with open(tmp_path / "moto.log", "wb") as log_file:
        server = subprocess.Popen(
            [str(own), "-H", "127.0.0.1", "-p", str(port)], stdout=log_file, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "moto.log").read_text()[
                    -2000:
                ]
                time.sleep(0.2)
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="scorer",
            aws_secret_access_key=PLANTED_SECRET,
        ).create_bucket(Bucket="hung")
        yield endpoint, server
    finally:
        server.kill()  # also ends a stopped server
        server.wait(timeout=30)


def _store_environment(endpoint: str, timeout_s: float) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "scorer",
        "AWS_SECRET_ACCESS_KEY": PLANTED_SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_EC2_METADATA_DISABLED": "true",
        "SCORING_SOURCE_TIMEOUT_S": str(timeout_s),
    }


def _job_on_own_store(settings: Settings, tmp_path: Path, endpoint: str, name: str) -> tuple[Path, str, str]:
    """The demo partition uploaded in row groups of 100 rows (30 reads), and a job reading it: (jobs, job, the day's URL)."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="scorer",
        aws_secret_access_key=PLANTED_SECRET,
    )
    sink = pa.BufferOutputStream()
    pq.write_table(pq.read_table(raw_files(settings)[0]), sink, row_group_size=100)
    client.put_object(Bucket="hung", Key=f"raw/date={DAY}/part-0.parquet", Body=sink.getvalue().to_pybytes())
    jobs = tmp_path / "jobs"
    job = job_with_source(settings, jobs, name, {"parquet": {"url": "s3://hung/raw/date={date}/"}})
    return jobs, job, f"s3://hung/raw/date={DAY}"


def test_a_store_stopped_before_the_run_is_retried_then_one_line_and_nothing_written(
    fresh_data: Settings, tmp_path: Path, own_store: tuple[str, subprocess.Popen]
) -> None:
    endpoint, server = own_store
    jobs, job, url = _job_on_own_store(fresh_data, tmp_path, endpoint, "stopped_store")
    os.kill(server.pid, signal.SIGSTOP)  # a frozen store: connections are accepted, nothing answers
    started = time.monotonic()
    child = score_child(fresh_data.data_dir, jobs, job, _store_environment(endpoint, 1))
    code, ended, output = child.ended(timeout_s=120)
    assert code == 3, output[-4000:]
    line = only_error_line(output)
    assert url in line and "stopped answering" in line and "SCORING_SOURCE_TIMEOUT_S" in line, line
    assert (
        "retrying (attempt 2 of 3, up to 4 s more)" in output and "retrying (attempt 3 of 3, up to 2 s more)" in output
    ), output
    assert PLANTED_SECRET not in output
    # Before the lease (the footers are read there): no ledger row, no output; ~5 s of tries, not a hang.
    _nothing_written(fresh_data, job)
    assert ended - started < 60, ended - started


@pytest.mark.parametrize("fault", ["stopped", "killed"])
def test_a_store_lost_mid_read_is_reported_within_seconds_and_the_run_fails_within_its_budget(
    fresh_data: Settings, tmp_path: Path, own_store: tuple[str, subprocess.Popen], fault: str
) -> None:
    endpoint, server = own_store
    jobs, job, url = _job_on_own_store(fresh_data, tmp_path, endpoint, f"{fault}_store")
    child = score_child(fresh_data.data_dir, jobs, job, _store_environment(endpoint, 1), "--chunk-rows", "100")
    # The first scored chunk: the footers and the duplicate pre-pass are read, the units read their row groups now.
    assert child.first("chunk=0", timeout_s=120) is not None, child.ended(timeout_s=60)[2][-4000:]
    os.kill(server.pid, signal.SIGSTOP if fault == "stopped" else signal.SIGKILL)
    lost = time.monotonic()
    warned = child.first("retrying (attempt 2 of 3", timeout_s=30)
    code, ended, output = child.ended(timeout_s=120)
    assert warned is not None and warned - lost < 4, (warned and warned - lost, output[-4000:])
    warning = next(line for line in output.splitlines() if "retrying (attempt 2 of 3" in line)
    assert f"{url}/part-0.parquet" in warning and "stopped answering" in warning and "up to 4 s more" in warning, (
        warning
    )
    assert code == 3, output[-4000:]
    line = only_error_line(output)
    assert f"{url}/part-0.parquet" in line, line
    assert (
        ("stopped answering: no answer within 1 s, 3 times" in line)
        if fault == "stopped"
        else ("Could not connect" in line)
    ), line
    # Three tries of 1 s with a pause of 1 s between, then the failure is recorded and the process ends.
    assert ended - lost < 30, "\n".join(f"{at - lost:7.2f} {text}" for at, text in child.lines)
    assert PLANTED_SECRET not in output
    ((status, error),) = ledger(fresh_data, job)
    assert status == "failed" and f"{url}/part-0.parquet" in error, (status, error)
    assert not (fresh_data.data_dir / "output" / job / "predictions" / f"date={DAY}").exists()


def _resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return False
    return True


def test_an_s3_source_whose_host_does_not_resolve_is_one_line_naming_it(fresh_data: Settings, tmp_path: Path) -> None:
    bucket = f"scoring-{uuid.uuid4().hex[:20]}"
    jobs = tmp_path / "jobs"
    job = job_with_source(fresh_data, jobs, "unresolvable", {"parquet": {"url": f"s3://{bucket}/raw/date={{date}}/"}})
    # No network: a network namespace of its own (root), else this machine's own lack of DNS.
    wrapper: tuple[str, ...] = ()
    if os.geteuid() == 0 and shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"]).returncode == 0:
        wrapper = ("unshare", "-n", "sh", "-c", 'ip link set lo up 2>/dev/null; exec "$0" "$@"')
    elif _resolves(f"{bucket}.s3.us-east-1.amazonaws.com"):
        pytest.skip("this machine resolves AWS host names and cannot make a network namespace (needs root and unshare)")
    child = score_child(
        fresh_data.data_dir,
        jobs,
        job,
        {
            "AWS_ACCESS_KEY_ID": "scorer",
            "AWS_SECRET_ACCESS_KEY": PLANTED_SECRET,
            "AWS_EC2_METADATA_DISABLED": "true",
        },
        wrapper=wrapper,
    )
    code, _, output = child.ended(timeout_s=120)
    assert code == 3, output[-4000:]
    line = only_error_line(output)
    assert f"s3://{bucket}/raw/date={DAY}" in line and "cannot be reached" in line and "does not resolve" in line, line
    assert "no AWS_ENDPOINT_URL" in line and PLANTED_SECRET not in output
    _nothing_written(fresh_data, job)
