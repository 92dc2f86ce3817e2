"""Measured child processes, medians, JSON lines and the closing table of the bench scripts."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from _data import REPO_ROOT, BenchData, warmup_flow

PYTHON = sys.executable
SCORE = str(Path(sys.executable).with_name("score"))
PREFECT = str(Path(sys.executable).with_name("prefect"))


@dataclass
class ChildRun:
    """One measured child process: wall seconds from spawn to exit, and its memory high-water marks."""

    cmd: list[str]
    rc: int
    wall_s: float
    maxrss_mb: float
    """ru_maxrss from wait4 of this child: the largest RSS of the child or any descendant it waited for."""
    tree_peak_rss_mb: float
    """Largest sum of RSS over the child and all its descendants, sampled every `sample_s`."""
    log_path: Path
    cpu_s: float = 0.0
    """User + system CPU seconds of the child and the descendants it waited for (wait4): on a shared machine whose
    neighbours take its cores now and then, what a run costs moves far less than its wall time."""
    stdout: str = field(repr=False, default="")

    def log_tail(self, lines: int = 25) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def child_env(data: BenchData, *, jobs_dir: Path | None = None) -> dict[str, str]:
    from tasks import TELEMETRY_OFF

    env = {
        **os.environ,
        "SCORING_DATA_DIR": str(data.data_dir),
        "SCORING_WAREHOUSE_PATH": str(data.data_dir / "warehouse.duckdb"),
        "PREFECT_HOME": str(data.prefect_home),
        **TELEMETRY_OFF,
        # The summary table of `score run` is printed to a file: keep it on one line per row.
        "COLUMNS": "200",
    }
    if jobs_dir is not None:
        env["SCORING_JOBS_DIR"] = str(jobs_dir)
    else:
        env.pop("SCORING_JOBS_DIR", None)
    return env


def _tree_rss_sampler(pid: int, sample_s: float, peak: list[int], done: threading.Event) -> None:
    try:
        import psutil
    except ImportError:  # the wait4 figure still comes back
        return
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return
    while not done.is_set():
        total = 0
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for proc in procs:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                pass
        peak[0] = max(peak[0], total)
        done.wait(sample_s)


def measured_child(cmd: list[str], *, env: dict[str, str], log_path: Path, sample_s: float = 0.1) -> ChildRun:
    """Run `cmd` (stdout kept, stderr to `log_path`) and measure it. Its own rusage comes from
    wait4 on its pid, so earlier children do not mask it (RUSAGE_CHILDREN is a max over all)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=log, text=True)
        peak = [0]
        done = threading.Event()
        sampler = threading.Thread(target=_tree_rss_sampler, args=(proc.pid, sample_s, peak, done), daemon=True)
        sampler.start()
        chunks: list[str] = []
        reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()), daemon=True)
        reader.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        done.set()
        reader.join()
        sampler.join()
    stdout = "".join(chunks)
    with open(log_path, "a") as log:
        log.write("\n--- stdout ---\n" + stdout)
    return ChildRun(
        cmd=cmd,
        rc=proc.returncode,
        wall_s=wall,
        maxrss_mb=usage.ru_maxrss / 1024,
        tree_peak_rss_mb=peak[0] / 2**20,
        log_path=log_path,
        cpu_s=usage.ru_utime + usage.ru_stime,
        stdout=stdout,
    )


def checked(run: ChildRun, what: str) -> ChildRun:
    if run.rc != 0:
        print(
            json.dumps({"bench": "error", "what": what, "rc": run.rc, "cmd": run.cmd, "log": str(run.log_path)}),
            flush=True,
        )
        print(run.log_tail(), file=sys.stderr)
        raise SystemExit(1)
    return run


def last_json_line(text: str) -> dict:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in the child's output")


def median(values: list[float]) -> float:
    return statistics.median(values)


def added_shares(runs: dict[str, list[float]], variant: str, base: str) -> tuple[float, float]:
    """What `variant` adds to `base`'s wall, as a share of it: by the medians, and by the median of each
    round's own ratio (each round runs the variants back to back, so that one is less moved by the
    machine's drift over the bench than the ratio of the medians)."""
    added = (median(runs[variant]) - median(runs[base])) / median(runs[base])
    paired = median([(v - b) / b for v, b in zip(runs[variant], runs[base], strict=True)])
    return added, paired


def emit(record: dict) -> None:
    print(json.dumps(record, default=str), flush=True)


def print_table(title: str, columns: list[str], rows: list[list]) -> None:
    """A short table for people, after the JSON lines; on stderr when stdout is piped to a JSON consumer."""
    out = sys.stdout if sys.stdout.isatty() else sys.stderr
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title, file=out)
        for row in [columns, *rows]:
            print("  ".join(str(c) for c in row), file=out)
        return
    table = Table(title=title)
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*[str(c) for c in row])
    Console(file=out, width=160).print(table)


def add_repeat_argument(parser, default: int = 3) -> None:  # noqa: ANN001
    parser.add_argument(
        "--repeat", type=int, default=default, help=f"runs per figure; the median is reported (default {default})"
    )


def add_api_argument(parser) -> None:  # noqa: ANN001
    parser.add_argument(
        "--api",
        choices=("server", "ephemeral"),
        default="server",
        help="server: the bench starts `prefect server` on 127.0.0.1 and every child talks to it, as "
        "deployments run (default); ephemeral: each child starts Prefect's temporary API itself",
    )


@contextlib.contextmanager
def prefect_api(data: BenchData, api: str) -> Iterator[str | None]:
    """For the block, children (child_env copies os.environ) talk to a `prefect server` started here,
    with its own database under the bench's PREFECT_HOME and stopped on exit; yields its API URL.
    `ephemeral`: PREFECT_API_URL is unset, so each child starts Prefect's temporary API; yields None."""
    saved = os.environ.pop("PREFECT_API_URL", None)
    try:
        if api == "ephemeral":
            yield None
            return
        with _started_server(data) as url:
            os.environ["PREFECT_API_URL"] = url
            yield url
    finally:
        os.environ.pop("PREFECT_API_URL", None)
        if saved is not None:
            os.environ["PREFECT_API_URL"] = saved


_SERVER_PIDS: list[int] = []
"""The `prefect server` processes prefect_api has running now."""


def api_server_cpu_s() -> float | None:
    """User + system CPU seconds so far of the `prefect server` prefect_api started (its workers included): a child's
    run costs the server's CPU too, on the same cores. None without a server, or without psutil."""
    try:
        import psutil
    except ImportError:
        return None
    if not _SERVER_PIDS:
        return None
    total = 0.0
    for pid in _SERVER_PIDS:
        try:
            root = psutil.Process(pid)
            for process in (root, *root.children(recursive=True)):
                times = process.cpu_times()
                total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


@contextlib.contextmanager
def _started_server(data: BenchData) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = child_env(data)
    # A database of its own, made at start and dropped at exit: one kept under PREFECT_HOME grows with every bench
    # run's flow runs, events and logs (to hundreds of MB), and the server's and the clients' CPU per run grew with
    # it (30-40 % between two back-to-back backfills), so figures of two runs were not comparable.
    database_dir = Path(tempfile.mkdtemp(prefix="server-db-", dir=data.prefect_home))
    env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = f"sqlite+aiosqlite:///{database_dir / 'prefect.db'}"
    log_path = data.data_dir / "bench-logs" / "prefect-server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as cleanup, log_path.open("w") as log:
        cleanup.callback(shutil.rmtree, database_dir, True)
        server = subprocess.Popen(
            [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while True:
                if server.poll() is not None:
                    raise SystemExit(f"error: prefect server exited {server.returncode}; see {log_path}")
                try:
                    with urllib.request.urlopen(f"{url}/api/health", timeout=5) as response:
                        if json.loads(response.read()) is True:
                            break
                except (OSError, ValueError):
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit(f"error: prefect server not healthy in 120 s; see {log_path}")
                time.sleep(0.5)
            # The server's first flow run (its rows, first events and logs in an empty database) would cost the first
            # timed child ~1-2 s more than the next ones.
            warmup_flow({**env, "PREFECT_API_URL": f"{url}/api"}, f"against {url}")
            print(f"prefect server on {url} (log {log_path})", file=sys.stderr, flush=True)
            _SERVER_PIDS.append(server.pid)
            yield f"{url}/api"
        finally:
            if server.pid in _SERVER_PIDS:
                _SERVER_PIDS.remove(server.pid)
            for sig, wait in ((signal.SIGINT, 30), (signal.SIGKILL, 10)):
                if server.poll() is not None:
                    break
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(server.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    server.wait(timeout=wait)
