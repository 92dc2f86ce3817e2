"""Runs cut short from outside — the PostgreSQL warehouse going away, a full disk, SIGTERM and Ctrl-C —
end with the exit code, the terminal and the ledger telling the same story, and the next runs of the
job work (issue 32, items 1 and 4 and the signal item).

Each test runs `score` in child processes against its own copy of the demo data (the signal test the
console script itself; the others forked from a process that imported `score` once, scripts/forked_score.py);
the faults are real: a PostgreSQL server of the test's own stopped with `pg_ctl -m immediate`,
a size-limited tmpfs, signals sent to the child.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest
from conftest import DEMO_JOB, DemoEnv, _free_port, _postgres_bin_dir, _run_admin_sql
from test_operator_faults import tmpfs  # noqa: F401  (the fixture)

from tasks.runs.recovery import pending_ledger_dir
from tasks.settings import PROJECT_ROOT, Settings, current_settings

pytestmark = pytest.mark.usefixtures("prefect_harness")
sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
from forked_score import completed  # noqa: E402

SCORE = Path(sys.executable).parent / "score"


@dataclass
class PostgresServer:
    """A PostgreSQL server of one test's own, which the test may stop and start again."""

    bin_dir: Path
    data: Path
    log: Path
    port: int
    password: str
    as_postgres: list[str]

    @property
    def url(self) -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/scoring"

    def pg_ctl(self, *args: str) -> None:
        subprocess.run(
            [*self.as_postgres, str(self.bin_dir / "pg_ctl"), "-D", str(self.data), *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def start(self) -> None:
        self.pg_ctl(
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data.parent / 'sockets'} -c fsync=off",
            "start",
        )

    def stop_immediately(self) -> None:
        self.pg_ctl("-m", "immediate", "-w", "stop")


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A throwaway server for this test alone (the session's server must not go away under other tests)."""
    bin_dir = _postgres_bin_dir()
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if bin_dir is None or (as_postgres and shutil.which("runuser") is None):
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's `postgresql` package")
    root = Path(tempfile.mkdtemp(prefix="scoring-pg-stop-"))
    password = secrets.token_urlsafe(18)
    (root / "pwfile").write_text(password + "\n")
    (root / "sockets").mkdir()
    if as_postgres:
        for path in (root, root / "pwfile", root / "sockets"):
            shutil.chown(path, "postgres")
    server = PostgresServer(bin_dir, root / "data", root / "server.log", _free_port(), password, as_postgres)
    try:
        subprocess.run(
            [
                *as_postgres,
                str(bin_dir / "initdb"),
                "-D",
                str(server.data),
                "-U",
                "postgres",
                f"--pwfile={root / 'pwfile'}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        server.start()
        _run_admin_sql(server.url.rpartition("/")[0] + "/postgres", 'CREATE DATABASE "scoring"')
        yield server
    finally:
        subprocess.run(
            [*as_postgres, str(bin_dir / "pg_ctl"), "-D", str(server.data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


def _environment(settings: Settings, **extra: str) -> dict[str, str]:
    from prefect.settings import PREFECT_API_URL

    environment = {k: v for k, v in os.environ.items() if not k.startswith("SCORING_")}
    return {
        **environment,
        "SCORING_DATA_DIR": str(settings.data_dir),
        "PREFECT_API_URL": str(PREFECT_API_URL.value()),
        **extra,
    }


def score(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return completed(list(args), env=env, cwd=PROJECT_ROOT, timeout=300)


def started(env: dict[str, str], *args: str) -> subprocess.Popen:
    """`score ARGS` in a child process whose output (stdout and stderr together) the test reads line by line."""
    return subprocess.Popen(
        [str(SCORE), *args],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def output_until(child: subprocess.Popen, marker: str, timeout_s: float = 120) -> str:
    """The child's output up to and including its first line holding `marker`."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    for line in child.stdout:
        seen.append(line)
        if marker in line:
            return "".join(seen)
        if time.monotonic() > deadline:
            break
    child.kill()
    raise AssertionError(f"no line with {marker!r} in:\n{''.join(seen)[-3000:]}")


def one_error_line(output: str, returncode: int, code: int) -> str:
    assert returncode == code, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output[-3000:]
    return errors[0]


def ledger(settings: Settings, day: dt.date) -> list[dict]:
    from flows.steps.blocks import configured_warehouse

    warehouse = configured_warehouse(settings)
    with warehouse._session(write=False) as session:
        return session.rows(
            "SELECT run_id, status, error, warnings FROM runs WHERE job = $job AND partition_date = $day ORDER BY started_at",
            {"job": DEMO_JOB, "day": day},
        )


def partition_problems(settings: Settings, day: dt.date, expected_run: str | None) -> list[str]:
    """What is wrong with the partition's predictions and quarantine in Parquet and the warehouse: rows of another
    run than `expected_run` (None: the partition was never published, so neither store may hold rows of it), or a
    raw id in neither table."""
    import pyarrow.parquet as pq

    from flows.steps.blocks import configured_warehouse

    raw_ids = set(
        pq.read_table(settings.raw_partition_dir(DEMO_JOB, day.isoformat())).column("entity_id").to_pylist()
    ) - {None}
    warehouse = configured_warehouse(settings)
    problems = []
    for store in ("parquet", "warehouse"):
        ids: set[str] = set()
        for table in ("predictions", "quarantine"):
            if store == "parquet":
                link = settings.output_dir(DEMO_JOB) / table / f"date={day}"
                rows = (
                    pq.read_table(os.path.realpath(link)).select(["run_id", "entity_id"]).to_pylist()
                    if os.path.lexists(link)
                    else []
                )
            else:
                with warehouse._session(write=False) as session:
                    rows = session.rows(
                        f"SELECT run_id, entity_id FROM {table} WHERE job = $job AND partition_date = $day",
                        {"job": DEMO_JOB, "day": day},
                    )
            runs = {r["run_id"] for r in rows}
            if runs - {expected_run}:
                problems.append(f"{store} {table} holds runs {sorted(runs)}, expected {expected_run}")
            ids |= {r["entity_id"] for r in rows}
        if expected_run is not None and raw_ids - ids:
            problems.append(f"{store}: {len(raw_ids - ids)} raw id(s) in neither predictions nor quarantine")
    return problems


@pytest.mark.parametrize("first_start", ["recover", "run-another-date"])
def test_postgres_gone_mid_run_keeps_its_failure_and_blocks_no_later_run(
    demo_env: DemoEnv,
    fresh_data: Settings,
    own_postgres: PostgresServer,
    monkeypatch: pytest.MonkeyPatch,
    first_start: str,
) -> None:
    monkeypatch.setenv("SCORING_WAREHOUSE_URL", own_postgres.url)
    settings = current_settings()
    env = _environment(settings, SCORING_WAREHOUSE_URL=own_postgres.url)
    other, day = demo_env.plan.scoring_dates[-2:]
    child = started(env, "run", DEMO_JOB, "--date", day.isoformat(), "--chunk-rows", "100")
    before = output_until(child, "[PRED]")
    # Frozen while the server goes away, so the fault lands mid-run whatever the machine's speed.
    os.kill(child.pid, signal.SIGSTOP)
    own_postgres.stop_immediately()
    os.kill(child.pid, signal.SIGCONT)
    rest, _ = child.communicate(timeout=300)
    output = before + rest
    line = one_error_line(output, child.returncode, 3)
    assert "cannot connect to the PostgreSQL warehouse postgresql://postgres:***@" in line, line
    assert own_postgres.password not in output
    (pending,) = pending_ledger_dir(settings, DEMO_JOB).glob("*.json")
    failed_run = json.loads(pending.read_text())["run_id"]

    own_postgres.start()
    (stuck,) = ledger(settings, day)
    assert (stuck["run_id"], stuck["status"]) == (failed_run, "running")
    if first_start == "recover":
        recovered = score(env, "recover", DEMO_JOB)
        assert recovered.returncode == 0, (recovered.stdout + recovered.stderr)[-3000:]
        assert failed_run in recovered.stdout
    other_run = score(env, "run", DEMO_JOB, "--date", other.isoformat())
    assert other_run.returncode == 0, (other_run.stdout + other_run.stderr)[-3000:]
    (closed,) = ledger(settings, day)
    assert closed["status"] == "failed" and closed["error"].startswith("WarehouseUnreachable: cannot connect"), closed[
        "error"
    ]
    assert own_postgres.password not in closed["error"]
    assert not [
        p for p in (settings.data_dir / "output" / "logs").glob("*.log") if own_postgres.password in p.read_text()
    ]
    assert not pending.exists()

    backfill = score(
        env, "backfill", DEMO_JOB, "--start", day.isoformat(), "--end", day.isoformat(), "--mode", "failed"
    )
    assert backfill.returncode == 0, (backfill.stdout + backfill.stderr)[-3000:]
    failed, rescored = ledger(settings, day)
    assert failed["run_id"] == failed_run and failed["status"] == "failed" and rescored["status"] == "succeeded"
    assert not partition_problems(settings, day, rescored["run_id"])


def _ledger_files(settings: Settings) -> list[str]:
    folder = pending_ledger_dir(settings, DEMO_JOB)
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _two_thousand_rows_on(tmpfs: Path, demo_env: DemoEnv, monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, dt.date]:
    """The demo inputs under `tmpfs` with a 2,000-row last day, and the settings whose data root (warehouse, outputs, run
    log) is there."""
    import pyarrow.parquet as pq
    from test_operator_faults import copied_demo

    monkeypatch.setenv("SCORING_DATA_DIR", str(copied_demo(demo_env, tmpfs)))
    settings = current_settings()
    day = demo_env.plan.scoring_dates[-1]
    (raw,) = settings.raw_partition_dir(DEMO_JOB, day.isoformat()).glob("*.parquet")
    pq.write_table(pq.read_table(raw).slice(0, 2000), raw)
    return settings, day


def _filled(tmpfs: Path, free_kib: int) -> Path:
    filler = tmpfs / "filler"
    with filler.open("wb") as file:
        file.write(b"\0" * max(0, shutil.disk_usage(tmpfs).free - free_kib * 1024))
    return filler


@pytest.mark.parametrize("free_kib", [300, 1536], ids=["no-room-to-start", "failure-kept-for-the-next-start"])
def test_a_full_disk_before_the_publish_ends_failed_with_its_cause(
    demo_env: DemoEnv,
    tmpfs: Path,
    monkeypatch: pytest.MonkeyPatch,
    free_kib: int,
) -> None:
    """A 2,000-row partition with the data root on a tmpfs filled to `free_kib` (amounts found by trying; the run's
    writes are the same each time). With ~0.3 MiB the run cannot set aside room for its failure record and stops
    at its start; with ~1.5 MiB the duplicate pass fails, and then the ledger's own write: the failure is kept in
    the room set aside, and the next start records the real cause, not "abandoned"."""
    settings, day = _two_thousand_rows_on(tmpfs, demo_env, monkeypatch)
    filler = _filled(tmpfs, free_kib)
    result = score(_environment(settings), "run", DEMO_JOB, "--date", day.isoformat())
    filler.unlink()
    line = one_error_line(result.stdout + result.stderr, result.returncode, 3)
    assert line.startswith("error: disk full: no space left on device"), line
    assert not partition_problems(settings, day, None)
    runs = ledger(settings, day)
    if free_kib < 1024:
        assert "the room a run sets aside for its failure record" in line, line
        # The ledger's write of the failed row may not fit either: then there is no row, and nothing left behind.
        assert [r["status"] for r in runs] in ([], ["failed"]), runs
        assert _ledger_files(settings) == []
        return
    (run,) = runs
    assert run["status"] == "running" and _ledger_files(settings) == [f"{run['run_id']}.json"], (
        run,
        _ledger_files(settings),
    )
    recovered = score(_environment(settings), "recover", DEMO_JOB)
    assert recovered.returncode == 0, (recovered.stdout + recovered.stderr)[-3000:]
    (closed,) = ledger(settings, day)
    assert closed["status"] == "failed" and closed["error"].startswith("OSError: disk full: no space left on device"), (
        closed["error"]
    )
    assert _ledger_files(settings) == []


@contextlib.contextmanager
def _kept_full(tmpfs: Path) -> Iterator[None]:
    """`tmpfs` full for the block: what the run frees meanwhile (DuckDB truncating its log at a checkpoint) is taken
    again within milliseconds, as on a disk that other writers fill, so which step fails does not depend on the order
    in which the run frees and writes."""
    filler = _filled(tmpfs, 0)
    stop = threading.Event()

    def refill() -> None:
        fd = os.open(filler, os.O_WRONLY | os.O_APPEND)
        try:
            while not stop.wait(0.001):
                free = shutil.disk_usage(tmpfs).free
                if free:
                    with contextlib.suppress(OSError):
                        os.write(fd, b"\0" * free)
        finally:
            os.close(fd)

    refiller = threading.Thread(target=refill, daemon=True)
    refiller.start()
    try:
        yield
    finally:
        stop.set()
        refiller.join()
        filler.unlink()


def test_a_full_disk_after_the_publish_is_a_succeeded_run_with_warnings(
    demo_env: DemoEnv,
    tmpfs: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The disk fills up once the run is published (its page is linked; the filler takes the last byte while the
    run is frozen, and keeps taking what the run frees): decision monitoring, the model card and the ledger's warnings
    do not fit. The run is succeeded, the terminal says what failed on `warning:` lines, exit 0."""
    settings, day = _two_thousand_rows_on(tmpfs, demo_env, monkeypatch)
    child = started(_environment(settings), "run", DEMO_JOB, "--date", day.isoformat())
    # The warehouse's line of the publish: decision monitoring, the model card and the artifacts come after it.
    before = output_until(child, f"partition ({DEMO_JOB}, {day.isoformat()}) replaced")
    os.kill(child.pid, signal.SIGSTOP)
    with _kept_full(tmpfs):
        os.kill(child.pid, signal.SIGCONT)
        rest, _ = child.communicate(timeout=300)
    output = before + rest
    assert child.returncode == 0 and "Traceback" not in output and "error:" not in output, output[-3000:]
    (run,) = ledger(settings, day)
    assert run["status"] == "succeeded", run
    warnings = [line for line in output.splitlines() if line.startswith("warning: ")]
    # What comes after the publish (decision monitoring, the model card, the ledger's warnings) fails on the full disk
    # as far as the frozen child had not gone: which step is first depends on where SIGSTOP caught it. Each failure is a
    # `warning:` line, kept on the ledger row or said not to be.
    full = [w.removeprefix("warning: ") for w in warnings if "disk full" in w and "not in the ledger row" not in w]
    assert full, output[-3000:]
    unrecorded = any(f"not in the ledger row of run {run['run_id']}" in w for w in warnings)
    assert unrecorded or all(w in (run["warnings"] or "") for w in full), (run, warnings)
    assert not partition_problems(settings, day, run["run_id"])
    assert _ledger_files(settings) == []


def test_sigterm_and_ctrl_c_close_the_run_failed_on_the_way_out(demo_env: DemoEnv, fresh_data: Settings) -> None:
    """`score run` stopped mid-scoring by SIGTERM, then by SIGINT (what Ctrl-C sends): exit 128 + N, one line,
    the ledger row `failed` with the signal, the lease released, the staging removed, the previous outputs
    untouched; not a row left `running` until the next start."""
    from test_operator_faults import outputs_fingerprint

    env = _environment(fresh_data)
    day = demo_env.plan.scoring_dates[-1]
    first = score(env, "run", DEMO_JOB, "--date", day.isoformat())
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    (previous,) = ledger(fresh_data, day)
    published = outputs_fingerprint(fresh_data.data_dir)
    for signum, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
        child = started(env, "run", DEMO_JOB, "--date", day.isoformat(), "--chunk-rows", "50")
        before = output_until(child, "[PRED]")
        child.send_signal(signum)
        rest, _ = child.communicate(timeout=300)
        line = one_error_line(before + rest, child.returncode, 128 + signum)
        assert line == f"error: stopped by signal {signum} ({name})", line
        stopped = ledger(fresh_data, day)[-1]
        assert (
            stopped["status"] == "failed" and stopped["error"] == f"RunStopped: stopped by signal {signum} ({name})"
        ), stopped
        assert not [p for p in fresh_data.output_dir(DEMO_JOB).rglob("*") if "_staging" in p.parts and p.is_file()]
        assert _ledger_files(fresh_data) == []
        with duckdb.connect(str(fresh_data.duckdb_path), read_only=True) as con:
            assert con.execute("SELECT * FROM partition_leases").fetchall() == []
        assert outputs_fingerprint(fresh_data.data_dir) == published
        assert not partition_problems(fresh_data, day, previous["run_id"])
    assert [r["status"] for r in ledger(fresh_data, day)] == ["succeeded", "failed", "failed"]
