"""`score` commands forked from one interpreter that has already imported the CLI, the domain and the ML runtimes.

A `score` command spends ~2-3 s of its life importing (the project, XGBoost, numba, SciPy, Prefect) before it does
anything. The crash trials start dozens of `score run` children to kill them, and the tests run hundreds of commands
as a user would, so both fork each one from a server process that imported them once (the zygote of an Android
phone, `multiprocessing`'s forkserver):

    with ScoreForks(env, with_prefect=True) as forks:
        child = forks.start(["run", "credit_risk", "--date", "2026-03-10"], log_path)
        child.wait(timeout=2.0)   # a `subprocess.Popen` look-alike: pid, poll, wait, returncode

    done = completed(["validate", "churn"], env=env, cwd=root)   # a `subprocess.run(..., capture_output=True)`

The server is `python scripts/forked_score.py`, started with the environment its children get. It imports every
module of `tasks` and `cli` and the libraries a run loads, but not Prefect: Prefect configures logging and takes
its settings (the environment, `prefect.toml`, `.env` and `[tool.prefect]` of the working folder) when it is
imported, and a command that never loads it (`score register`) must not print its log lines. A server
`with_prefect` (the crash trials: every child a `score run`) imports the flow and Prefect too. Either way a child
may change only `SCORING_*` variables (read by `Settings` at each use) and start in a folder that gives Prefect the
same; `start` refuses anything else, and `completed` starts a new server for it. Each child is a process group of
its own (kill it with `os.killpg`), has its output on the log file, and ends as `score` ends: through
`cli.score.main`, its threads and the interpreter's exit handlers (Prefect's log and event drains run), but not
the C library's (`_ended`), with `score`'s exit code, or -N when a signal N killed it. The console script itself, its start-up and Prefect's temporary API stay
covered by the tests that start it (test_terminal.py, the guides' walks, test_lazy_imports.py).

The server answers one child at a time: `start` waits for the previous child to end.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import NoReturn

REPO_ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("xgboost", "pandas", "scipy.special", "scipy.stats", "duckdb", "pyarrow.dataset", "pyarrow.parquet")
"""What a `score run` imports besides the project (`python -X importtime`), imported once by the server, with every
module of `tasks` (but the demo's, which load scikit-learn and torch) and `cli`."""
WITH_PREFECT = ("flows.score_partition", "prefect.flow_engine", "prefect.task_engine")
"""Imported too by a server `with_prefect`: Prefect configures logging and takes its settings when it is imported,
so its children show Prefect's log lines in commands that never load it (`score register`, `score validate`)."""
LEARNED = ("skops.io", "sklearn.ensemble", "lightgbm", "catboost", "onnxruntime", "great_expectations")
"""Imported by the server once a child has imported them (a job of that framework, a suite GX checks): skops alone
takes ~2.3 s (it loads torch through scikit-learn's array API), which a server of a module that never scores a
scikit-learn model should not pay."""


def _child(argv: list[str], environ: dict[str, str], cwd: str, log: str, errors: str) -> None:
    """The forked child: becomes `score argv` with its output on `log` (its errors on `errors`); never returns to
    the server's loop."""
    from tasks import TELEMETRY_OFF

    os.setpgid(0, 0)
    for target, path in ((1, log), (2, errors)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, target)
        os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.environ.clear()
    os.environ.update(environ)
    # What importing `tasks` does in a `score` process of its own (the server imported it before this environment).
    for name, value in TELEMETRY_OFF.items():
        os.environ.setdefault(name, value)
    os.chdir(cwd)
    sys.argv = ["score", *argv]
    from cli.score import main

    main()


def _child_exit_code(request: dict) -> int:
    """`score`'s exit code for the request, with what the interpreter would print of an exception that ends it."""
    try:
        _child(request["argv"], request["env"], request["cwd"], request["log"], request["errors"])
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _ended(code: int) -> NoReturn:
    """End a child as the interpreter ends `score` (its threads joined, its exit handlers run: Prefect's log and
    event drains), but without the C library's exit handlers: ONNX Runtime's joins a thread of its pool, which in
    a forked child can wait forever (a failed `score run` with an ONNX challenger hung after its last line)."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def _learn(imported: Path, with_prefect: bool) -> None:
    """Import what of LEARNED the last child imported (its module names in `imported`, written at its exit)."""
    import importlib

    try:
        names = set(json.loads(imported.read_text()))
    except (FileNotFoundError, ValueError):
        return  # killed before or while its exit handler wrote them
    finally:
        imported.unlink(missing_ok=True)
    for name in LEARNED:
        if name in names and name not in sys.modules:
            importlib.import_module(name)
    _check_forkable(with_prefect)


def _check_forkable(with_prefect: bool) -> None:
    """The server's imports left nothing a `score` process of its own would not have at its start."""
    import logging

    # No thread is copied into a child: a Python thread (one that an import started) could leave a lock held. The
    # native ones the imports start (OpenBLAS's pool, jemalloc's background threads of Arrow and Polars, Polars'
    # spill cleaner) are idle here, and those libraries take their locks around a fork (pthread_atfork).
    if threading.active_count() != 1:
        raise RuntimeError(f"the imports started threads; forking now is unsafe: {threading.enumerate()}")
    if not with_prefect and ("prefect" in sys.modules or logging.root.handlers):
        raise RuntimeError("the imports loaded Prefect or configured logging: children would not start as `score`")


def serve(with_prefect: bool) -> None:
    import importlib
    import pkgutil

    import cli
    import tasks  # telemetry off before anything loads Prefect, as in `score`

    for package in (tasks, cli):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if not module.name.startswith("tasks.demo"):
                importlib.import_module(module.name)
    for name in LIBRARIES + (WITH_PREFECT if with_prefect else ()):
        importlib.import_module(name)
    _check_forkable(with_prefect)
    answers = sys.stdout
    answers.write("ready\n")
    answers.flush()
    imported = Path(tempfile.mkdtemp(prefix="forked-score-")) / "imported.json"
    for line in sys.stdin:
        request = json.loads(line)
        answers.flush()
        pid = os.fork()
        if pid == 0:
            atexit.register(lambda: imported.write_text(json.dumps(sorted(sys.modules))))
            _ended(_child_exit_code(request))
        try:
            os.setpgid(pid, pid)
        except (PermissionError, ProcessLookupError):
            pass  # the child already set its group (and may have ended)
        answers.write(f"pid {pid}\n")
        answers.flush()
        _, status = os.waitpid(pid, 0)
        answers.write(f"exit {os.waitstatus_to_exitcode(status)}\n")
        answers.flush()
        _learn(imported, with_prefect)
    imported.parent.rmdir()


def _imported_with(env: dict[str, str]) -> dict[str, str]:
    """What of `env` the server's imports may have read: all but `SCORING_*` (read by `Settings` at each use) and
    the name of the test pytest is running (which no import reads)."""
    return {k: v for k, v in env.items() if not k.startswith("SCORING_") and k != "PYTEST_CURRENT_TEST"}


def _read_at_import(cwd: Path) -> list[str]:
    """What Prefect reads of the working folder when it is imported: its `prefect.toml`, `.env` and the
    `[tool.prefect]` of its `pyproject.toml`; a child may start in another folder that has the same."""
    found = [(cwd / name).read_text() for name in ("prefect.toml", ".env") if (cwd / name).is_file()]
    pyproject = cwd / "pyproject.toml"
    if pyproject.is_file() and "[tool.prefect" in pyproject.read_text():
        found.append(pyproject.read_text())
    return found


class ForkedChild:
    """A `subprocess.Popen` look-alike for one forked `score` command."""

    def __init__(self, forks: ScoreForks, pid: int, argv: list[str]) -> None:
        self._forks = forks
        self.pid = pid
        self.args = argv
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._forks._read_exit(self, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._forks._read_exit(self, timeout=timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode


class ScoreForks:
    """The server process and its children (see the module's docstring)."""

    def __init__(self, env: dict[str, str], cwd: Path = REPO_ROOT, *, with_prefect: bool = False) -> None:
        self.env = dict(env)
        self.cwd = Path(cwd)
        self._server = subprocess.Popen(
            [sys.executable, __file__, *(["--with-prefect"] if with_prefect else [])],
            # Without SCORING_* variables: no import may take them for every child.
            env={
                **_imported_with(env),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
            },
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._pending = b""
        self._running: ForkedChild | None = None
        if self._line(timeout=120) != "ready":
            self.close()
            raise RuntimeError("the score fork server did not start")

    def __enter__(self) -> ScoreForks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._running is not None and self._running.returncode is None:
            self._running.wait()
        if self._server.stdin:
            self._server.stdin.close()
        self._server.wait(timeout=30)

    def _line(self, timeout: float | None) -> str | None:
        """The server's next answer, or None when none came within `timeout` seconds (read unbuffered, so that
        `select` sees every answer that has not been taken yet)."""
        assert self._server.stdout is not None
        fd = self._server.stdout.fileno()
        while b"\n" not in self._pending:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the score fork server ended (exit {self._server.wait()})")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()

    def _read_exit(self, child: ForkedChild, timeout: float | None) -> None:
        line = self._line(timeout)
        if line is None:
            return
        kind, value = line.split(" ", 1)
        assert kind == "exit", line
        child.returncode = int(value)
        self._running = None

    def serves(self, env: dict[str, str], cwd: Path) -> bool:
        """Whether a child with `env` in `cwd` may be forked from this server."""
        return _read_at_import(cwd) == _read_at_import(self.cwd) and _imported_with(env) == _imported_with(self.env)

    def start(
        self,
        argv: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        errors: Path | None = None,
        cwd: Path | None = None,
    ) -> ForkedChild:
        """Fork `score argv` with the server's environment (or `env`, which may differ only in `SCORING_*`) in the
        server's folder (or `cwd`), its output on `log` (its errors too, or on `errors`)."""
        environ = env or self.env
        if not self.serves(environ, cwd or self.cwd):
            base, asked = _imported_with(self.env), _imported_with(environ)
            changed = {k for k in base.keys() | asked.keys() if base.get(k) != asked.get(k)}
            raise ValueError(f"a forked child may change only SCORING_* variables, not {sorted(changed)}")
        if self._running is not None:
            self._running.wait()
        for path in (log, errors or log):
            path.touch()  # there to read as soon as `start` returns, as a Popen's redirected output is
        assert self._server.stdin is not None
        request = {
            "argv": argv,
            "env": environ,
            "cwd": str(cwd or self.cwd),
            "log": str(log),
            "errors": str(errors or log),
        }
        self._server.stdin.write((json.dumps(request) + "\n").encode())
        self._server.stdin.flush()
        line = self._line(timeout=60)
        if line is None or not line.startswith("pid "):
            raise RuntimeError(f"the score fork server did not fork: {line!r}")
        self._running = ForkedChild(self, int(line.split()[1]), argv)
        return self._running

    def run(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> ForkedChild:
        """`start` and wait for the child's end, like `subprocess.run`."""
        child = self.start(argv, log, env)
        child.wait()
        return child


_shared: ScoreForks | None = None


def completed(
    argv: list[str], *, env: dict[str, str], cwd: Path, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """`subprocess.run(["score", *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)`, forked
    from this process's server; a new server replaces it when `env` (all but `SCORING_*`) or what Prefect reads of
    `cwd` differ."""
    global _shared
    if _shared is None or not _shared.serves(env, Path(cwd)):
        if _shared is not None:
            _shared.close()
        _shared = ScoreForks(env, Path(cwd))
        atexit.register(_shared.close)
    with tempfile.TemporaryDirectory(prefix="forked-score-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        child = _shared.start(argv, out, env, errors=err, cwd=Path(cwd))
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            raise
        return subprocess.CompletedProcess(["score", *argv], child.returncode, out.read_text(), err.read_text())


if __name__ == "__main__":
    serve(with_prefect="--with-prefect" in sys.argv[1:])
