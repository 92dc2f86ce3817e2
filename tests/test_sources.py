"""Raw partitions where they live: Parquet on an S3-compatible server, a DuckDB table, a PostgreSQL
table (all real, on 127.0.0.1) score the same rows as the local folder; every mistake in a source
is one `error:` line naming it, with nothing written."""

from __future__ import annotations

import datetime as dt
import shutil
import uuid
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from pydantic import SecretStr
from typer.testing import CliRunner

from cli.score import app
from tasks.settings import PROJECT_ROOT, Settings
from tasks.sources import ParquetPartition, opened_parquet

from conftest import DEMO_END, DEMO_JOB, S3Server

DAY = DEMO_END
COMPARED = ["entity_id", "probability", "probability_low", "probability_high", "score", "decision", "rule_id",
            "reason_codes", "reason_texts", "raw_margin", "model_version"]


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

    client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                          aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key)
    for path in files:
        client.put_object(Bucket=server.bucket, Key=f"{prefix}/date={DAY}/{path.name}", Body=path.read_bytes())
    return f"s3://{server.bucket}/{prefix}/date={{date}}/"


def all_raw_rows(settings: Settings) -> pa.Table:
    tables = [pq.read_table(p) for p in sorted(settings.data_dir.glob(f"raw/{DEMO_JOB}/date=*/*.parquet"))]
    return pa.concat_tables(tables).cast(pa.schema([
        pa.field(f.name, pa.string() if pa.types.is_large_string(f.type) else f.type) for f in tables[0].schema
    ]))


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
    on_s3 = scored(fresh_data, job_with_source(fresh_data, jobs, "from_s3", {"parquet": {"url": url}}), "--chunk-rows", "700")
    assert on_s3.equals(local)

    rows = all_raw_rows(fresh_data)
    with duckdb.connect(str(fresh_data.data_dir / "source.duckdb")) as con:
        con.register("incoming", rows)
        con.execute("CREATE TABLE applications AS SELECT * FROM incoming")
    query = "select * from applications where application_date = :partition_date order by entity_id"
    from_duckdb = scored(fresh_data, job_with_source(
        fresh_data, jobs, "from_duckdb", {"sql": {"warehouse": "duckdb", "database": "source.duckdb", "query": query}}
    ))
    assert from_duckdb.equals(local)

    with adbc_driver_postgresql.dbapi.connect(postgres_database_url) as con, con.cursor() as cursor:
        cursor.adbc_ingest("applications", rows, mode="create")
        con.commit()
    monkeypatch.setenv("SCORING_SOURCE_URL", postgres_database_url)
    from_postgres = scored(fresh_data, job_with_source(
        fresh_data, jobs, "from_postgres", {"sql": {"warehouse": "postgresql", "query": query}}
    ), "--chunk-rows", "1300")
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
    assert files == ["memory://landing/date=2026-03-10/part-0.parquet", "memory://landing/date=2026-03-10/part-1.parquet"]
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
    assert _one_error_line(result, 3).startswith(f"error: cannot read the raw source {url.format(date=DAY).rstrip('/')}")
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
    query = "select * from applications where application_date = :partition_date and application_date < date '2000-01-01'"
    job, result = source_job({"sql": {"warehouse": "duckdb", "database": "source.duckdb", "query": query}})
    assert result.exit_code == 2 and "no raw partition" in result.output and "holds 0 raw rows" in result.output, result.output


def test_a_partition_day_bound_as_a_parameter_selects_that_day(fresh_data: Settings) -> None:
    from tasks.sources import raw_partition
    from tasks.sources.config import SourceConfig

    with duckdb.connect(str(fresh_data.data_dir / "source.duckdb")) as con:
        con.register("incoming", all_raw_rows(fresh_data))
        con.execute("CREATE TABLE applications AS SELECT * FROM incoming")
    source = SourceConfig.model_validate({"sql": {
        "warehouse": "duckdb", "database": "source.duckdb",
        "query": "select entity_id, application_date::date as d from applications where application_date = :partition_date;",
    }})
    for day in (DAY, DAY - dt.timedelta(days=1)):
        raw = raw_partition(source, fresh_data, DEMO_JOB, day)
        with raw.batches(256) as reader:
            got = reader.read_all()
        assert got.num_rows == 3000 and set(got.column("d").to_pylist()) == {day}


def test_a_postgres_source_shows_its_url_without_the_password(fresh_data: Settings) -> None:
    from tasks.sources import raw_partition
    from tasks.sources.config import SourceConfig

    password = "pw-" + uuid.uuid4().hex
    settings = fresh_data.model_copy(update={"source_url": SecretStr(f"postgresql://scorer:{password}@db.internal:5432/raw")})
    source = SourceConfig.model_validate({"sql": {"warehouse": "postgresql", "query": "select * from t where d = :partition_date"}})
    raw = raw_partition(source, settings, DEMO_JOB, DAY)
    assert str(raw) == "postgresql query on postgresql://scorer:***@db.internal:5432/raw"
    assert password not in repr(raw) and password not in str(raw)


def test_a_corrupt_or_misshapen_remote_file_is_named_by_its_url(source_job, fresh_data: Settings, s3_env: S3Server) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=s3_env.endpoint, region_name="us-east-1",
                          aws_access_key_id=s3_env.access_key, aws_secret_access_key=s3_env.secret_key)
    prefix = uuid.uuid4().hex
    client.put_object(Bucket=s3_env.bucket, Key=f"{prefix}/date={DAY}/part-0.parquet", Body=b"PAR1 not really parquet")
    job, result = source_job({"parquet": {"url": f"s3://{s3_env.bucket}/{prefix}/date={{date}}/"}})
    line = _one_error_line(result, 2)
    assert f"s3://{s3_env.bucket}/{prefix}/date={DAY}/part-0.parquet" in line and "not a readable Parquet file" in line
    _nothing_written(fresh_data, job)

    narrow = pq.read_table(raw_files(fresh_data)[0]).drop_columns(["annual_income"])
    sink = pa.BufferOutputStream()
    pq.write_table(narrow, sink)
    client.put_object(Bucket=s3_env.bucket, Key=f"{prefix}/date={DAY}/part-0.parquet", Body=sink.getvalue().to_pybytes())
    job, result = source_job({"parquet": {"url": f"s3://{s3_env.bucket}/{prefix}/date={{date}}/"}}, name="misshapen")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"s3://{s3_env.bucket}/{prefix}/date={DAY}/part-0.parquet: annual_income" in result.output.replace("\n", "")
    _nothing_written(fresh_data, job)
