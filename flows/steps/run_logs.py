"""What a flow run leaves an analyst besides its outputs: every `scoring.*` line in the flow run's log in the Prefect
UI, a log file of its own with the full tracebacks (Settings.run_log_path), and, when the run fails, the `error:`
sentence as the flow run's state message and as one line of its UI log, without the traceback of a fault the user or
operator can act on.

Set up when a flow run starts, not at import: a worker's flow-run process imports Prefect and configures its logging
before `tasks` sets PREFECT_LOGGING_EXTRA_LOGGERS, so Prefect never gave the `scoring` logger its API handler there.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prefect import Flow, flow
from prefect.context import FlowRunContext, get_run_context
from prefect.exceptions import MissingContextError
from prefect.logging.formatters import PrefectFormatter
from prefect.logging.handlers import APILogHandler
from prefect.logging.loggers import flow_run_logger
from prefect.runtime import flow_run
from prefect.states import Failed

from flows.steps.api import orchestration_lost
from tasks.errors import ExitCode, user_facing_error
from tasks.jobspec import checked_job_name
from tasks.runs.calendar import parse_partition_date
from tasks.settings import current_settings

DOMAIN_LOGGER = "scoring"
_API_LOGGERS = ("prefect.flow_runs", "prefect.task_runs", "prefect.extra", DOMAIN_LOGGER)


class _OneLineFaults(logging.Formatter):
    """The UI log's format: a user or environment fault without its traceback (the run's log file keeps it), as on
    the terminal; a bug keeps its traceback. Prefect logs a failed task's state with `exc_info=True` outside any
    `except`, which formats as a stray "NoneType: None" line: dropped too."""

    def format(self, record: logging.LogRecord) -> str:
        error = record.exc_info[1] if record.exc_info else None
        if record.exc_info and (error is None or user_facing_error(error)[1] != ExitCode.BUG):
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None, "stack_info": None})
        return super().format(record)


class _QuietFile(logging.FileHandler):
    """Opened, folder and all, by the run's first line: a run refused before it logged anything writes nothing."""

    def _open(self):  # noqa: ANN202  (logging.FileHandler's)
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: ARG002
        # On a full or read-only disk the log file fails too; logging's own traceback would bury the run's error.
        return

    @property
    def written(self) -> bool:
        return self.stream is not None


class _RunLogFiles(logging.Handler):
    """On the root logger: each record to the log file of the flow run it was logged in, when that run keeps one.
    One handler for every run of the process, so the partitions a backfill scores at once keep their own files."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.files: dict[str, logging.Handler] = {}

    def emit(self, record: logging.LogRecord) -> None:
        file = self.files.get(_flow_run_of(record) or "")
        if file is not None and getattr(record, "run_log_file", True):
            file.handle(record)


_run_log_files = _RunLogFiles()


def _flow_run_of(record: logging.LogRecord) -> str | None:
    """The flow run a record was logged in: Prefect's run loggers name it, a domain logger's record is placed by
    the run context of the thread that logged it (a task run's, or a subflow's inside a backfill's task)."""
    if run_id := getattr(record, "flow_run_id", None):
        return str(run_id)
    try:
        context = get_run_context()
    except MissingContextError:
        return None
    if (run := getattr(context, "flow_run", None)) is not None:
        return str(run.id)
    task_run = getattr(context, "task_run", None)
    return str(task_run.flow_run_id) if task_run is not None else None


def attach_ui_logging() -> None:
    """The `scoring` loggers send to the flow run's UI log, with Prefect's own handler (that of its extra loggers),
    and the UI log shows a fault in one line. Idempotent: a `score` command had it from the import order already."""
    domain = logging.getLogger(DOMAIN_LOGGER)
    # Prefect's API handler only: under pytest `prefect.extra` also holds caplog's handlers, and copying them made
    # every domain record captured twice.
    if not any(isinstance(h, APILogHandler) for h in domain.handlers):
        for handler in logging.getLogger("prefect.extra").handlers:
            if isinstance(handler, APILogHandler):
                domain.addHandler(handler)
    for name in _API_LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, APILogHandler) and not isinstance(handler.formatter, _OneLineFaults):
                handler.setFormatter(_OneLineFaults())
                handler.addFilter(_no_engine_echo)


def _no_engine_echo(record: logging.LogRecord) -> bool:
    """Prefect's flow-run process ends every failed run with "Engine execution exited with unexpected exception": for a
    fault the run has already said in its `error:` line, that is neither unexpected nor news."""
    error = record.exc_info[1] if record.exc_info else None
    return not (
        record.getMessage().startswith("Engine execution exited")
        and error is not None
        and user_facing_error(error)[1] != ExitCode.BUG
    )


@contextlib.contextmanager
def run_log_file(run_id: str, path: Path | None) -> Iterator[_QuietFile | None]:
    """The lines of flow run `run_id` and its tasks, tracebacks included, appended to `path` while the block runs;
    no file when `path` is None."""
    if path is None:
        yield None
        return
    file = _QuietFile(path, delay=True, encoding="utf-8")
    file.setLevel(logging.INFO)
    file.setFormatter(
        PrefectFormatter(
            "%(asctime)s %(levelname)-7s %(name)s - %(message)s",
            flow_run_fmt="%(asctime)s %(levelname)-7s Flow run %(flow_run_name)r - %(message)s",
            task_run_fmt="%(asctime)s %(levelname)-7s Task run %(task_run_name)r - %(message)s",
        )
    )
    root = logging.getLogger()
    if _run_log_files not in root.handlers:
        root.addHandler(_run_log_files)
    _run_log_files.files[run_id] = file
    try:
        yield file
    finally:
        _run_log_files.files.pop(run_id, None)
        with contextlib.suppress(OSError):
            file.close()


def run_log_location(path: Path) -> str:
    """Where an analyst opens a run's log file: its address under SCORING_REPORT_BASE_URL, else its path."""
    settings = current_settings()
    if not settings.report_base_url:
        return str(path)
    return f"{settings.report_base_url.rstrip('/')}/{path.relative_to(settings.inside_data_root('output')).as_posix()}"


def _log_path(run_id: str, arguments: dict[str, Any], partition: bool) -> Path | None:
    """The run's log file. None for a dry run, for a partition run whose job or date is refused (like its ledger
    row and outputs, no file is written under a name the input gave), and when the settings themselves are
    unusable: the run then fails saying so."""
    if arguments.get("dry_run"):
        return None
    try:
        settings = current_settings()
        if not partition:
            return settings.run_log_path(str(flow_run.flow_name), run_id)
        job = checked_job_name(arguments.get("job"), settings)
        day = parse_partition_date(arguments.get("date"))
        return settings.run_log_path(str(flow_run.flow_name), run_id, job=job, partition=day.isoformat())
    except Exception:  # noqa: BLE001  (the run's own first step reports the same fault as its error)
        return None


_REFUSED = "refused_before_its_lease"


@contextlib.contextmanager
def refusal_writes_no_log() -> Iterator[None]:
    """A fault of the block (a run's checks before its lease) marks the run refused: its log file is dropped."""
    try:
        yield
    except Exception as error:
        with contextlib.suppress(AttributeError, TypeError):
            setattr(error, _REFUSED, True)
        raise


def _discarded(file: _QuietFile) -> None:
    """`file` closed and deleted; the run's later lines go to no file."""
    for run_id, open_file in list(_run_log_files.files.items()):
        if open_file is file:
            del _run_log_files.files[run_id]
    with contextlib.suppress(OSError):
        file.close()
        path = Path(file.baseFilename)
        path.unlink(missing_ok=True)
        # And the folders its first line made (`output/<job>/logs/date=…`), up to the first that holds something else.
        for folder in path.parents:
            if any(folder.iterdir()):
                break
            folder.rmdir()
            if folder.name == "output":
                break


def logged_flow(*, partition: bool = False, **flow_options: Any) -> Callable[[Callable[..., Any]], Flow]:
    """Prefect's `@flow(**flow_options)`, whose runs log as the module says. `partition`: the flow takes `job` and
    `date` and logs beside that partition's outputs.

    A failure ends the run Failed with the `error:` sentence (tasks/errors.py: user_facing_error) as its state message,
    not Prefect's "Flow run encountered an exception: PartitionError: …"; the caller still gets the exception."""

    def decorate(fn: Callable[..., Any]) -> Flow:
        # Resolved here, in the flow module's namespace: Prefect validates the parameters against the annotations
        # in the namespace of the function it was given, which is this module's for the wrapper.
        signature = inspect.signature(fn, eval_str=True)

        @functools.wraps(fn)
        def logged(*args: Any, **kwargs: Any) -> Any:
            attach_ui_logging()
            run_id = str(flow_run.id)
            path = _log_path(run_id, signature.bind_partial(*args, **kwargs).arguments, partition)
            with run_log_file(run_id, path) as file:
                # The flow run's own logger: inside a backfill's task, Prefect's run logger would be that task's.
                context = FlowRunContext.get()
                logger = flow_run_logger(context.flow_run, context.flow)
                try:
                    return fn(*args, **kwargs)
                except Exception as error:
                    message = user_facing_error(error)[0]
                    if getattr(error, _REFUSED, False) and file is not None:
                        # Refused before it opened a ledger row (tasks/errors.py's bad input: spec, model, raw data): bad
                        # input writes nothing, and the refused row of a backfill's day keeps the error and its traceback.
                        _discarded(file)
                        file = None
                    # A run refused before it logged a line (a backfill's wrong range) leaves no file: bad input writes nothing.
                    logger.error(
                        "error: %s", message, exc_info=error, extra={"run_log_file": file is not None and file.written}
                    )
                    if orchestration_lost(error) is not None:
                        # No state reaches a lost API, and Prefect's failed attempt to set one would replace the error
                        # the caller reports ("run … is not published") with its own transport error.
                        raise
                    return Failed(message=message, data=error)
                finally:
                    if file is not None and file.written:
                        logger.info("this run's log file: %s", run_log_location(path))

        logged.__signature__ = signature  # type: ignore[attr-defined]
        return flow(**flow_options)(logged)

    return decorate
