"""What the command line prints: the console, JSON on stdout, the `error:`, `warning:` and `note:` lines, the
progress bars, and how a command's fault or signal becomes one `error:` line and an exit code."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import typer
from rich.console import Console
from rich.progress import TaskID
from rich.text import Text

from tasks.errors import ExitCode, JobValidationError, OrchestrationLost, RunStopped, user_facing_error
from tasks.scoring.progress import progress_listener
from tasks.settings import current_settings

_T = TypeVar("_T")

# Off a terminal (CI logs, pipes) rich would wrap the summary table at 80 columns.
console = Console() if sys.stdout.isatty() else Console(width=160)


def print_json(value: object) -> None:
    # Plain stdout, no rich markup or wrapping: a program reads it.
    sys.stdout.write(
        json.dumps(value, default=lambda v: v.isoformat() if hasattr(v, "isoformat") else str(v), indent=2) + "\n"
    )


def print_error(message: str) -> None:
    # Plain text on one line: messages carry paths and pydantic's [type=...] details, not markup.
    console.print(Text("error: ", style="red") + Text(" ".join(message.split())), highlight=False, soft_wrap=True)


def print_warning(message: str) -> None:
    console.print(Text("warning: ", style="yellow") + Text(message), highlight=False, soft_wrap=True)


def print_note(message: str) -> None:
    console.print(Text("note: ") + Text(message), highlight=False, soft_wrap=True)


def print_line(line: str) -> None:
    # Text, not markup: a path or a column name may hold brackets.
    console.print(Text(line), highlight=False, soft_wrap=True)


@contextmanager
def progress_bars(*, show: bool = True) -> Iterator[None]:
    """A rich progress bar per thing the flows report (partitions of a backfill, units of a partition); none
    when not `show` (a command printing JSON keeps stdout for it)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    # Off a terminal the bars would only repeat what the flow logs already say.
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not (show and console.is_terminal),
    ) as bars:
        tasks_by_name: dict[str, TaskID] = {}

        def advance(what: str, done: int, total: int) -> None:
            if what not in tasks_by_name:
                tasks_by_name[what] = bars.add_task(what, total=total)
            bars.update(tasks_by_name[what], completed=done, total=total)

        with progress_listener(advance):
            yield


class _Terminated(BaseException):
    """SIGTERM reached the command (outside a flow run, or passed on by one once it closed its run)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum


def _terminated(signum: int, frame: object) -> None:  # noqa: ARG001
    raise _Terminated(signum)


def run_action(action: Callable[[], _T]) -> _T:
    """Run a command's action: a user or environment fault ends as one `error:` line and exit code 2 or 3
    (tasks/errors.py: user_facing_error); a bug keeps its traceback. SIGTERM and Ctrl-C end as one line
    and exit code 128 + the signal's number, as a shell reports a process a signal ended; a flow run
    closes its ledger row on the way out (flows/score_partition.py)."""
    # Without a handler SIGTERM would kill the process at once, before anything could be closed.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main else None
    try:
        return action()
    except (typer.Exit, typer.Abort):
        raise
    except (KeyboardInterrupt, _Terminated) as stop:
        signum = stop.signum if isinstance(stop, _Terminated) else signal.SIGINT
        print_error(str(RunStopped(signum)))
        raise typer.Exit(128 + signum) from None
    except JobValidationError as error:
        for problem in error.problems:
            print_error(str(problem))
        raise typer.Exit(ExitCode.USER) from None
    except Exception as error:
        error = _orchestration_lost(error) or error
        message, code = user_facing_error(error, path_hint=_data_dir_or_none())
        if code == ExitCode.BUG:
            raise
        print_error(message)
        if isinstance(error, OrchestrationLost):
            # At exit Prefect drains its queued task-run events to the lost API, ~7 s an event (its events
            # client's 10 reconnection attempts, which no setting changes): minutes of waiting for nothing.
            # The run's ledger row is closed and its log file written; only those events are dropped.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        raise typer.Exit(code) from None
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def _orchestration_lost(error: BaseException) -> OrchestrationLost | None:
    """The lost Prefect API `error` amounts to: the flow engine's last word then is the HTTP error of
    reporting the run's state, raised over the run's own failure."""
    if "prefect" not in sys.modules:
        return None
    from flows.steps.api import orchestration_lost

    return orchestration_lost(error)


def user_facing(error: BaseException) -> tuple[str, int]:
    return user_facing_error(_orchestration_lost(error) or error)


def _data_dir_or_none() -> Path | None:
    """Where a full disk most likely is when the error names no file; None when the settings are the problem."""
    try:
        return current_settings().data_dir
    except Exception:  # noqa: BLE001  (a settings fault: the error being reported comes first)
        return None
