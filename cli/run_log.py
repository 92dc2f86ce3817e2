"""The log plumbing of a command: the run log file, and what of Prefect's console lines a person sees."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cli.console import user_facing
from tasks.errors import ExitCode
from tasks.settings import Settings

_options = {"verbose": False}


def show_state_lines(verbose: bool) -> None:
    """`-v`: Prefect's per-task state lines on the console too."""
    _options["verbose"] = verbose


class _NoFaultTracebacks(logging.Formatter):
    """Prefect's console format, without the traceback of an expected fault.

    Prefect logs every failed task and flow run with its traceback; for a user or environment
    fault the CLI prints one `error:` line instead, and the traceback stays in the run log file
    (and the Prefect API). A bug's traceback is still shown.
    """

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and user_facing(error)[1] != ExitCode.BUG:
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None, "stack_info": None})
        return self.inner.format(record)


def _no_state_lines(record: logging.LogRecord) -> bool:
    """False for Prefect's per-task "Finished in state Completed()" lines: a run has dozens, and the progress bars
    and `[INF]`/`[PRED]` lines say the same; `-v` shows them, deployments keep them in the Prefect log."""
    return not (
        record.levelno == logging.INFO
        and record.name.startswith("prefect.task_runs")
        and "Finished in state Completed()" in record.getMessage()
    )


def _no_failure_echo(record: logging.LogRecord) -> bool:
    """False for Prefect's lines that only echo a failure the CLI reports itself: a task or flow run
    failing with a user or environment fault, and the "Finished in state Failed" summaries (INFO for a
    flow whose run ends Failed with its `error:` sentence, flows/steps/run_logs.py). They stay in the run
    log file and the Prefect API; a bug's traceback is still shown."""
    if not record.name.startswith("prefect"):
        return True
    if record.levelno < logging.ERROR:
        return not record.getMessage().startswith("Finished in state Failed")
    error = record.exc_info[1] if record.exc_info else None
    if error is not None:
        return user_facing(error)[1] == ExitCode.BUG
    return "Finished in state Failed" not in record.getMessage()


def _no_lost_api_echo(record: logging.LogRecord) -> bool:
    """False for Prefect's lines that a lost API leaves behind it: its events client cannot connect, its
    events service fails an event (a line of the whole event per task state), the flow run "finished in
    state Running()". The CLI's error line names the lost API; the run log file keeps the lines of the
    loggers that reach it."""
    if record.levelno < logging.WARNING:
        # The flow engine's closing line when it could not report the run's end: a run that failed.
        return not (record.name == "prefect.flow_runs" and record.getMessage() == "Finished in state Running()")
    if record.name == "prefect.events.clients":
        return False
    return not (
        record.name == "prefect._internal.concurrency"
        and record.getMessage().startswith("Service 'EventsWorker' failed")
    )


class _RunLogFile(logging.FileHandler):
    def handleError(self, record: logging.LogRecord) -> None:  # noqa: ARG002
        # On a full or read-only disk the log file fails too; logging's own traceback would bury the error line.
        return


@contextmanager
def run_log(settings: Settings) -> Iterator[Path | None]:
    """Flow and task logs, tracebacks included, in `<data_dir>/output/logs/score-<UTC time>-<pid>.log`
    for the duration of a command; the console keeps the progress lines but no fault tracebacks."""
    from flows.steps.console import prefect_console_handlers

    # Prefect's log shipper writes "--- Error logging to API ---" and the error to stderr when its API is
    # gone, as logging's own handler errors do, unless told this is production; the run log keeps the lines.
    logging.raiseExceptions = False
    root = logging.getLogger()
    for handler in logging.getLogger("prefect._internal").handlers:
        if _no_lost_api_echo not in handler.filters:
            handler.addFilter(_no_lost_api_echo)
    for handler in prefect_console_handlers():
        if not isinstance(handler.formatter, _NoFaultTracebacks):
            handler.setFormatter(_NoFaultTracebacks(handler.formatter))
            handler.addFilter(_no_failure_echo)
            handler.addFilter(_no_lost_api_echo)
        if _options["verbose"]:
            handler.removeFilter(_no_state_lines)
        else:
            handler.addFilter(_no_state_lines)
    path = settings.command_log_path(f"score-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}-{os.getpid()}.log")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        yield None
        return
    file = _RunLogFile(path, delay=True, encoding="utf-8")
    file.setLevel(logging.INFO)
    file.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s - %(message)s"))
    root.addHandler(file)
    try:
        yield path
    finally:
        root.removeHandler(file)
        # Closing flushes: on a full disk that fails too, and must not replace the error the command reports.
        with contextlib.suppress(OSError):
            file.close()
