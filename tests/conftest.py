"""Shared fixtures: a demo data environment in a tmp folder, and Prefect's test harness.

Both are session-scoped: generating the demo data, training the demo model and starting the
temporary Prefect server are the expensive parts of the suite, and every test that needs them
only reads them or writes to partitions it owns.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid

# Importing `tasks` turns telemetry off (tasks.TELEMETRY_OFF) before anything imports Prefect or Great Expectations.
from tasks import TELEMETRY_OFF

# Prefect's temporary API gets 20 s to start; on a busy 2-core machine a `score` subprocess needed more.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
# Under pytest-xdist each worker keeps its own Prefect home: the temporary API that a `score` subprocess starts
# uses the home's SQLite database, and two workers' servers on one file answered 503 (database locked).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix=f"prefect-home-{os.environ['PYTEST_XDIST_WORKER']}-")

import datetime as dt
import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import tasks  # noqa: F401  (telemetry off before Prefect loads)
from tasks.demo.setup import DemoPlan, prepared_demo
from tasks.settings import PROJECT_ROOT, Settings, current_settings
from tasks.sinks.duckdb_warehouse import DuckDBWarehouse
from tasks.sinks.postgres_warehouse import PostgresWarehouse
from tasks.sinks.warehouse import Warehouse

DEMO_JOB = "credit_risk"
DEMO_END = dt.date(2026, 3, 10)
DEMO_ARGS = {"days": 3, "rows_per_day": 3000, "train_days": 5, "seed": 7, "end": DEMO_END}

# Every `SCORING_*` variable Settings reads; the demo environment controls all of them.
_SCORING_VARS = (
    "SCORING_DATA_DIR",
    "SCORING_JOBS_DIR",
    "SCORING_EXPECTATIONS_DIR",
    "SCORING_WAREHOUSE_PATH",
    "SCORING_WAREHOUSE_URL",
    "SCORING_WAREHOUSE_SECRET_BLOCK",
    "SCORING_SOURCE_URL",
    "SCORING_SOURCE_SECRET_BLOCK",
    "SCORING_TIMEZONE",
)


CRASH_SUMMARY: list[str] = []
"""One line per crash-test backend, printed at the end of the session (trial counts, outcomes)."""


def pytest_sessionfinish(session: pytest.Session) -> None:
    # An xdist worker hands its crash-trial lines to the controller, which prints the summary.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["crash_summary"] = list(CRASH_SUMMARY)


if importlib.util.find_spec("xdist") is not None:

    def pytest_testnodedown(node, error) -> None:
        CRASH_SUMMARY.extend(getattr(node, "workeroutput", {}).get("crash_summary", []))


def pytest_terminal_summary(terminalreporter) -> None:
    if CRASH_SUMMARY:
        terminalreporter.section("crash trials (SIGKILL at random points and inside publish)")
        for line in CRASH_SUMMARY:
            terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gx: imports Great Expectations itself (a slow import, a few seconds)")
    config.addinivalue_line(
        "markers", "crash: kills `score run` child processes with SIGKILL and checks the outputs (slow)"
    )
    config.addinivalue_line(
        "markers", "server: starts a real Prefect server, deploys prefect.yaml and runs a process worker (slow)"
    )
    config.addinivalue_line(
        "markers",
        "browser: drives Debian's chromium headless through playwright (skipped without it, unless CI is set)",
    )
    config.addinivalue_line(
        "markers",
        "slow: runs flows on a Prefect server, starts PostgreSQL or S3, or spawns `score` processes: "
        "left out of `make test-fast`, run by `make test` (CI)",
    )
    # `tasks` routes the `scoring` loggers to Prefect; outside a flow run (unit tests) Prefect warns
    # that it cannot ship those lines to its API. That is expected here.
    config.addinivalue_line("filterwarnings", "ignore:Logger 'scoring:UserWarning")


SLOW_FIXTURES = frozenset({"prefect_harness", "postgres_url", "s3_server", "live_server"})
"""A test that uses one of these (directly or through another fixture) runs flows or starts a server: `slow`."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        # any_warehouse asks for its PostgreSQL database only when its parameter is "postgres".
        on_postgres = getattr(getattr(item, "callspec", None), "params", {}).get("any_warehouse") == "postgres"
        if (
            on_postgres
            or SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ()))
            or any(item.get_closest_marker(name) for name in ("server", "browser", "crash"))
        ):
            item.add_marker(pytest.mark.slow)
    # The modules that kill runs or drive a Prefect server and worker are the suite's longest (1-4 minutes each, on
    # one worker: `--dist loadfile`); started first, the other workers' short modules fill in around them instead of
    # one worker running the last long module alone. Every worker sorts alike (xdist asks for one order).
    long_modules = {
        item.module.__name__
        for item in items
        if isinstance(item, pytest.Function) and any(item.get_closest_marker(m) for m in ("server", "crash"))
    }
    items.sort(key=lambda item: getattr(getattr(item, "module", None), "__name__", "") not in long_modules)


@dataclass(frozen=True)
class DemoEnv:
    """A prepared demo: raw partitions, labels and a trained model under `data_dir`."""

    data_dir: Path
    settings: Settings
    plan: DemoPlan


@pytest.fixture(scope="session")
def demo_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoEnv]:
    """`SCORING_DATA_DIR` points at a tmp folder holding the demo data for the whole session."""
    data_dir = tmp_path_factory.mktemp("scoring-data")
    with pytest.MonkeyPatch.context() as mp:
        for name in _SCORING_VARS:
            mp.delenv(name, raising=False)
        mp.setenv("SCORING_DATA_DIR", str(data_dir))
        settings = current_settings()
        # Guard against writing into the repository's own data/ folder.
        assert settings.data_dir == data_dir
        assert settings.jobs_dir == PROJECT_ROOT / "jobs"
        plan = prepared_demo(settings, **DEMO_ARGS)
        yield DemoEnv(data_dir=data_dir, settings=settings, plan=plan)


@pytest.fixture(scope="session")
def prefect_logging() -> None:
    """Let Prefect configure its logging now, on the session's stderr.

    Prefect sets up logging once, on the first `from prefect import flow`, and its console handler
    keeps the `sys.stderr` of that moment. If that happens inside typer's CliRunner (the CLI imports
    the flows lazily), the handler holds CliRunner's stream, closed after the invocation, and every
    later flow run fails with "I/O operation on closed file" and a RecursionError.
    """
    import prefect.main  # noqa: F401


@pytest.fixture(scope="session")
def prefect_harness(prefect_logging: None) -> Iterator[None]:
    """A temporary Prefect server and database for flow runs (started once per session).

    The session's in-process flow runs beat no heartbeat: Prefect joins a run's heartbeat thread at its end, and that
    thread sleeps in whole seconds, ~0.5 s a run that no test looks at (the one that does turns it back on).

    The server neither stores the runs' events nor evaluates automations on them (no test reads an event or fires an
    automation on this server; test_server_e2e.py's server keeps both): ~10 % less CPU for a module of flow runs."""
    from prefect.testing.utilities import prefect_test_harness

    from flows.steps.partitions import subflow_without_heartbeat

    with contextlib.ExitStack() as stack:
        with pytest.MonkeyPatch.context() as starting:  # read by the server process as it starts, by no one else
            starting.setenv("PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED", "false")
            starting.setenv("PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED", "false")
            stack.enter_context(prefect_test_harness(server_startup_timeout=180))
        stack.enter_context(subflow_without_heartbeat())
        yield


@pytest.fixture
def fresh_data(demo_env: DemoEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A never-scored copy of the demo inputs (raw, labels, models) in its own data folder.

    For tests that must start from empty outputs or that change the registry or the job spec;
    `SCORING_DATA_DIR` points at the copy for the duration of the test only.
    """
    data = tmp_path / "data"
    for part in ("raw", "labels", "models"):
        shutil.copytree(demo_env.data_dir / part, data / part)
    monkeypatch.setenv("SCORING_DATA_DIR", str(data))
    settings = current_settings()
    assert settings.data_dir == data
    return settings


def user_project_env(root: Path) -> dict[str, str]:
    """The environment of a user's own project under `root` (empty jobs and expectations folders, their
    own data folder), for `score` run as a subprocess; no `SCORING_*` variable of the test run leaks in.

    Made while the session's Prefect server runs (the module asks for `prefect_harness`), its runs talk to that
    server, as a set-up workstation's do; otherwise each `score` that runs a flow starts Prefect's temporary API
    (~7 s to start and stop), as a terminal without a server does (the quick start and the bring-your-own guide's
    walk keep that path)."""
    from prefect.settings import PREFECT_API_URL

    (root / "jobs").mkdir()
    (root / "expectations").mkdir()
    server = PREFECT_API_URL.value()
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("SCORING_")},
        **({"PREFECT_API_URL": server} if server else {}),
        "SCORING_DATA_DIR": str(root / "data"),
        "SCORING_JOBS_DIR": str(root / "jobs"),
        "SCORING_EXPECTATIONS_DIR": str(root / "expectations"),
        **TELEMETRY_OFF,
    }


def _postgres_bin_dir() -> Path | None:
    """A folder with initdb, pg_ctl and postgres: the one `initdb` on PATH lives in, else Debian's newest."""
    candidates = [Path(found).resolve().parent] if (found := shutil.which("initdb")) else []
    candidates += sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    return next((d for d in candidates if all((d / name).is_file() for name in ("initdb", "pg_ctl", "postgres"))), None)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server for the session: the URL (with its random password) of an empty database.

    PostgreSQL refuses to run as root, so as root initdb and pg_ctl run as the `postgres` user, in a
    folder under /tmp that user owns (pytest's own tmp folders are private to root).
    """
    bin_dir = _postgres_bin_dir()
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if bin_dir is None or (as_postgres and shutil.which("runuser") is None):
        message = (
            "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found on PATH nor under "
            "/usr/lib/postgresql/*/bin (as root, runuser too): install Debian's `postgresql` package"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="scoring-pg-"))
    password = secrets.token_urlsafe(18)
    (root / "pwfile").write_text(password + "\n")
    (root / "sockets").mkdir()
    if as_postgres:
        for path in (root, root / "pwfile", root / "sockets"):
            shutil.chown(path, "postgres")
    data, port = root / "data", _free_port()

    def pg(*args: str) -> None:
        subprocess.run([*as_postgres, *args], check=True, capture_output=True, text=True, timeout=120)

    try:
        pg(
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            f"--pwfile={root / 'pwfile'}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--no-sync",
        )
        pg(
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(root / "server.log"),
            "-w",
            "-t",
            "60",
            "-o",
            f"-c listen_addresses=127.0.0.1 -p {port} -k {root / 'sockets'} -c fsync=off",
            "start",
        )
    except subprocess.CalledProcessError as exc:
        server_log = (root / "server.log").read_text() if (root / "server.log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"could not start a throwaway PostgreSQL: {exc.stderr}\n{server_log}")
    try:
        base = f"postgresql://postgres:{password}@127.0.0.1:{port}"
        _run_admin_sql(f"{base}/postgres", 'CREATE DATABASE "scoring"')
        yield f"{base}/scoring"
    finally:
        subprocess.run(
            [*as_postgres, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


def _run_admin_sql(url: str, sql: str) -> None:
    """One statement outside a transaction (CREATE/DROP DATABASE refuse to run inside one)."""
    import adbc_driver_postgresql.dbapi

    with adbc_driver_postgresql.dbapi.connect(url, autocommit=True) as con, con.cursor() as cursor:
        cursor.execute(sql)


@pytest.fixture
def postgres_database_url(postgres_url: str) -> Iterator[str]:
    """The URL of a new, empty database on the session's server, dropped after the test."""
    server, _, admin_db = postgres_url.rpartition("/")
    name = f"test_{uuid.uuid4().hex[:12]}"
    _run_admin_sql(postgres_url, f'CREATE DATABASE "{name}"')
    yield f"{server}/{name}"
    _run_admin_sql(f"{server}/{admin_db}", f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(params=["duckdb", "postgres"])
def any_warehouse(request: pytest.FixtureRequest, tmp_path: Path) -> Warehouse:
    """An empty warehouse on each backend in turn: a new DuckDB file, a new PostgreSQL database."""
    if request.param == "duckdb":
        return DuckDBWarehouse(tmp_path / "warehouse.duckdb")
    return PostgresWarehouse(request.getfixturevalue("postgres_database_url"))


@dataclass(frozen=True)
class S3Server:
    """An S3-compatible server (moto) on 127.0.0.1 and a key that may use it."""

    endpoint: str
    access_key: str
    secret_key: str
    bucket: str

    def environment(self) -> dict[str, str]:
        """What pyarrow, delta-rs and boto3 read to reach this server with the scorer's key."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
        }


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's server mode on 127.0.0.1 for the session, bucket `scoring`, with IAM checks on: after
    the first four requests (the bucket, an IAM user, its key, its policy) only that user's key is
    accepted, so a wrong or missing credential fails as it would on AWS."""
    folder = tmp_path_factory.mktemp("moto")
    import boto3

    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log_path = folder / "moto.log"
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "4"}
    # The venv's own moto first: with the venv not on PATH, `which` finds whatever moto another
    # Python installed, and moto 5.2.1 rejects delta-rs's (object_store's) S3 signatures.
    own = Path(sys.executable).with_name("moto_server")
    with open(log_path, "wb") as log_file:
        server = subprocess.Popen(
            [
                str(own) if own.is_file() else shutil.which("moto_server") or "moto_server",
                "-H",
                "127.0.0.1",
                "-p",
                str(port),
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto_server did not start on {endpoint}: {log_path.read_text()[-2000:]}")
                time.sleep(0.2)
        bootstrap = {
            "endpoint_url": endpoint,
            "region_name": "us-east-1",
            "aws_access_key_id": "bootstrap",
            "aws_secret_access_key": "bootstrap",
        }
        boto3.client("s3", **bootstrap).create_bucket(Bucket="scoring")
        iam = boto3.client("iam", **bootstrap)
        iam.create_user(UserName="scorer")
        key = iam.create_access_key(UserName="scorer")["AccessKey"]
        iam.put_user_policy(
            UserName="scorer",
            PolicyName="everything",
            PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
            ),
        )
        yield S3Server(endpoint, key["AccessKeyId"], key["SecretAccessKey"], "scoring")
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """This test's process environment pointed at the session's S3 server, with the scorer's key."""
    for name, value in s3_server.environment().items():
        monkeypatch.setenv(name, value)
    return s3_server


def key_numbers_table(markdown: str) -> dict[str, str]:
    """The key-numbers artifact's Markdown table read back as {measure: value}: a link as its address, code as its text."""
    rows = {}
    for line in markdown.splitlines()[2:]:
        measure, value = (c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1])
        link = re.fullmatch(r"\[(.*)\]\((\S+)\)", value)
        rows[measure] = link.group(2) if link else value.strip("`")
    return rows
