"""The `score` command: a thin entry point over the flows."""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import json
import logging
import os
import signal
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import TaskID
from rich.table import Table
from rich.text import Text

import tasks  # noqa: F401  (telemetry off before Prefect loads)
from tasks.jobs.calendar import backfill_dates, parse_partition_date, partition_range, yesterday
from tasks.errors import ExitCode, JobSpecError, JobValidationError, OrchestrationLost, RunStopped, ScoringError, user_facing_error
from tasks.jobspec import checked_job_name, load_job_spec
from tasks.scoring.progress import progress_listener
from tasks.reports.reporting import partition_summaries, partition_summary_table
from tasks.scoring.prepared import preloaded_job
from tasks.settings import current_settings
from tasks.sources import SqlPartition, raw_partition
from tasks.jobs.validation import ValidatedJob, latest_version_warnings, raw_partition_problems, validated_job
from flows.steps.blocks import configured_warehouse, with_warehouse_url

app = typer.Typer(no_args_is_help=True, help="Batch scoring: demo, single partitions, backfills.")
# Off a terminal (CI logs, pipes) rich would wrap the summary table at 80 columns.
console = Console() if sys.stdout.isatty() else Console(width=160)
_options = {"verbose": False}


@app.callback()
def _global_options(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show Prefect's per-task state lines too (the run log file always has them).")] = False,
) -> None:
    """Batch scoring: demo, single partitions, backfills."""
    _options["verbose"] = verbose


def _print_json(value: object) -> None:
    # Plain stdout, no rich markup or wrapping: a program reads it.
    sys.stdout.write(json.dumps(value, default=lambda v: v.isoformat() if hasattr(v, "isoformat") else str(v), indent=2) + "\n")


JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout instead of tables.")]
PositiveOption = Annotated[
    str | None,
    typer.Option(
        help="A binary job's event as the label's value when the labels are not 1/0 (e.g. Yes, churned, 2): read as 1, the "
        "other value as 0. The spec's monitoring.labels.positive is used without it, and a flag must agree with it.",
    ),
]


class BackfillChoice(str, enum.Enum):
    all = "all"
    missing = "missing"
    failed = "failed"


def _print_summary(job: str, dates: list[dt.date]) -> None:
    settings = with_warehouse_url(current_settings())
    try:
        words = load_job_spec(job, settings).words
    except ScoringError:
        # The table is printed after a failed run too: a spec broken since keeps its error, the table its stored names.
        words = None
    console.print(partition_summary_table(job, partition_summaries(settings, job, dates), words))
    reports = [p for d in dates if (p := settings.data_dir / "output" / job / "reports" / "html" / f"date={d}.html").exists()]
    if reports:
        console.print(f"run report{'s' if len(reports) > 1 else ''}: " + (str(reports[0]) if len(reports) == 1 else str(reports[0].parent)))


def _print_realized_performance(job: str, dates: list[dt.date]) -> None:
    from tasks.monitoring.report import (
        challenger_lines, monitoring_history, realized_class_rows, realized_class_table, realized_error_rows, realized_error_table,
        realized_performance_rows, realized_performance_table, unmatched_label_counts, unmatched_labels_text,
    )

    settings = with_warehouse_url(current_settings())
    spec = load_job_spec(job, settings)
    monitoring = spec.monitoring
    level = monitoring.outcome_interval_level
    history = monitoring_history(
        configured_warehouse(settings), job, first_date=min(dates), last_date=max(dates), level=level, bins=monitoring.calibration_bins,
    )
    if spec.target.forecasts:
        console.print(realized_error_table(job, realized_error_rows(history)))
    elif spec.target.classifies:
        console.print(realized_class_table(job, realized_class_rows(history), interval_level=monitoring.health.interval_level))
    else:
        console.print(realized_performance_table(job, realized_performance_rows(history), interval_level=level))
    console.print(Text(unmatched_labels_text(unmatched_label_counts(history))), highlight=False, soft_wrap=True)
    for line in challenger_lines(history):
        console.print(Text(f"challenger: {line}"), highlight=False, soft_wrap=True)
    console.print(f"monitoring page: {settings.data_dir / 'output' / job / 'reports' / 'html' / 'monitoring.html'}")


@contextmanager
def _progress_bars(*, show: bool = True) -> Iterator[None]:
    """A rich progress bar per thing the flows report (partitions of a backfill, units of a partition); none
    when not `show` (a command printing JSON keeps stdout for it)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    # Off a terminal the bars would only repeat what the flow logs already say.
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, disable=not (show and console.is_terminal),
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


def _run(action):  # noqa: ANN001, ANN202
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
        _print_error(str(RunStopped(signum)))
        raise typer.Exit(128 + signum) from None
    except JobValidationError as error:
        for problem in error.problems:
            _print_error(str(problem))
        raise typer.Exit(ExitCode.USER) from None
    except Exception as error:
        error = _orchestration_lost(error) or error
        message, code = user_facing_error(error, path_hint=_data_dir_or_none())
        if code == ExitCode.BUG:
            raise
        _print_error(message)
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


def _user_facing(error: BaseException) -> tuple[str, int]:
    return user_facing_error(_orchestration_lost(error) or error)


def _estimate(values: list[float] | None, fmt: str) -> str:
    """`value (low–high)`, or n/a where there is no estimate."""
    if not values or any(v is None or v != v for v in values):
        return "n/a"
    value, low, high = values
    return f"{value:{fmt}} ({low:{fmt}}–{high:{fmt}})"


def _print_forecast(result: dict) -> None:
    """A forecast job's run in one line: what it forecast on average, how wide its intervals were, its decisions' shares."""
    forecast = result.get("forecast")
    if not forecast or forecast["mean"] is None:
        return
    unit = f" {forecast['unit']}" if forecast["unit"] else ""
    scored = max(result.get("rows_scored") or 0, 1)
    decisions = ", ".join(f"{d} {n / scored:.1%}" for d, n in sorted((result.get("decisions") or {}).items(), key=lambda kv: -kv[1]))
    console.print(Text(
        f"{forecast['kind']} forecast of {forecast['name']}: mean {forecast['mean']:.4g}{unit}, mean width of the "
        f"{forecast['interval_level']:.0%} interval {forecast['mean_interval_width']:.4g}{unit}" + (f"; decisions {decisions}" if decisions else "")
    ), highlight=False, soft_wrap=True)


def _print_classification(result: dict) -> None:
    """A multiclass job's run in one line: each class's share of the rows, the mean probability of the predicted
    class, the close calls and the decisions' shares."""
    classified = result.get("classification")
    if not classified or not classified["rows"]:
        return
    shares = ", ".join(f"{c} {share:.1%}" for c, share in classified["predicted_share"].items())
    scored = max(result.get("rows_scored") or 0, 1)
    decisions = ", ".join(f"{d} {n / scored:.1%}" for d, n in sorted((result.get("decisions") or {}).items(), key=lambda kv: -kv[1]))
    console.print(Text(
        f"classes of {classified['name']}: {shares}; mean probability of the predicted class {classified['mean_probability']:.3f}; "
        f"margin < {classified['low_margin_cut']:g} on {classified['low_margin_share']:.1%} of rows" + (f"; decisions {decisions}" if decisions else "")
    ), highlight=False, soft_wrap=True)


def _print_model_health(result: dict) -> None:
    """One line of the run's model health before labels, and its flags, when the job measures it: a binary job's
    expected event rate and AUC, a multiclass job's estimated accuracy and macro F1, a forecast job's estimated error
    where the run estimated it."""
    health = result.get("model_health") or {}
    shifted = (result.get("decision_monitoring") or {}).get("shifted_slices", [])
    if not health and not shifted:
        return
    if result.get("classification") is not None:
        line = (
            f"model health: estimated accuracy {_estimate(health.get('accuracy'), '.2%')}, "
            f"estimated macro F1 {_estimate(health.get('macro_f1'), '.3f')}; "
            f"flagged: {', '.join(health.get('flagged', [])) or 'nothing'}"
        )
    elif result.get("forecast") is not None:
        unit = f" {result['forecast']['unit']}" if result["forecast"]["unit"] else ""
        estimates = [
            f"estimated {label} {_estimate(health[measure], '.4g')}{unit}"
            + (f" (at registration {reference:.4g})" if (reference := health.get(f"{measure}_reference")) is not None else "")
            for measure, label in (("mae", "MAE"), ("rmse", "RMSE")) if health.get(measure)
        ]
        line = "model health: " + "; ".join([*estimates, f"flagged: {', '.join(health.get('flagged', [])) or 'nothing'}"])
    else:
        line = (
            f"model health: expected event rate {_estimate(health.get('event_rate'), '.2%')}, "
            f"expected AUC {_estimate(health.get('auc'), '.3f')}; "
            f"flagged: {', '.join(health.get('flagged', [])) or 'nothing'}"
        )
    if shifted:
        line += f"; slices shifted: {len(shifted)} (table slice_monitoring)"
    console.print(Text(line), highlight=False, soft_wrap=True)


def _print_challenger(result: dict) -> None:
    """One line on the challenger that shadowed the run, when the job names one."""
    shadow = result.get("challenger")
    if not shadow:
        return
    if shadow["challenger_version"] is None:
        # Nothing was compared: "0 of 0 decisions would flip" would read as agreement.
        console.print(Text(
            f"challenger not loaded: it could score none of {shadow['rows_failed']:,} rows, so nothing was compared "
            "(fallback report challenger_failed; score aliases shows where the challenger alias points)"
        ), highlight=False, soft_wrap=True)
        return
    share = "" if shadow["flipped_share"] is None else f" ({shadow['flipped_share']:.2%})"
    line = (
        f"challenger {shadow['challenger_version']}: {shadow['rows_flipped']} of {shadow['rows_compared']} "
        f"decisions would flip{share}" + (f": {', '.join(shadow['top_flips'])}" if shadow["top_flips"] else "")
        + (f"; it failed on {shadow['rows_failed']} rows" if shadow["rows_failed"] else "") + " (table decision_flips)"
    )
    console.print(Text(line), highlight=False, soft_wrap=True)


def _print_error(message: str) -> None:
    # Plain text on one line: messages carry paths and pydantic's [type=...] details, not markup.
    console.print(Text("error: ", style="red") + Text(" ".join(message.split())), highlight=False, soft_wrap=True)


def _data_dir_or_none() -> Path | None:
    """Where a full disk most likely is when the error names no file; None when the settings are the problem."""
    try:
        return current_settings().data_dir
    except Exception:  # noqa: BLE001  (a settings fault: the error being reported comes first)
        return None


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
        if error is not None and _user_facing(error)[1] != ExitCode.BUG:
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None, "stack_info": None})
        return self.inner.format(record)


def _no_state_lines(record: logging.LogRecord) -> bool:
    """False for Prefect's per-task "Finished in state Completed()" lines: a run has dozens, and the progress bars
    and `[INF]`/`[PRED]` lines say the same; `-v` shows them, deployments keep them in the Prefect log."""
    return not (record.levelno == logging.INFO and record.name.startswith("prefect.task_runs")
                and "Finished in state Completed()" in record.getMessage())


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
        return _user_facing(error)[1] == ExitCode.BUG
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
    return not (record.name == "prefect._internal.concurrency" and record.getMessage().startswith("Service 'EventsWorker' failed"))


class _RunLogFile(logging.FileHandler):
    def handleError(self, record: logging.LogRecord) -> None:  # noqa: ARG002
        # On a full or read-only disk the log file fails too; logging's own traceback would bury the error line.
        return


@contextmanager
def _run_log(data_dir: Path) -> Iterator[Path | None]:
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
    path = data_dir / "output" / "logs" / f"score-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}-{os.getpid()}.log"
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


@app.command()
def demo(
    days: Annotated[int, typer.Option(min=1, help="Demo dates to score, ending yesterday.")] = 7,
    rows_per_day: Annotated[int, typer.Option(min=100, help="Credit applications per day.")] = 20_000,
    windows_per_day: Annotated[int, typer.Option(min=10, help="Gearbox vibration windows per turbine and day.")] = 200,
    store_items: Annotated[int, typer.Option(min=1_000, help="Store-sales rows (a store's item) per day, over 20 stores.")] = 10_000,
    train_days: Annotated[
        int, typer.Option(min=3, help="Labelled days before the demo dates to train on (store_sales holds out the last week, or half the days when fewer than 14).")
    ] = 14,
    seed: Annotated[int, typer.Option(help="Seed of the data generators and the models.")] = 7,
) -> None:
    """Generate demo data for the three jobs, train their models, score every demo date, print summaries, then
    ingest the demo labels and print the realized performance per partition and model version."""

    def action() -> None:
        from flows.people import backfill
        from tasks.demo.setup import DEMO_JOB, GEARBOX_JOB, SALES_JOB, prepared_demo, prepared_gearbox_demo, prepared_sales_demo

        settings = with_warehouse_url(current_settings())
        end = yesterday(settings)
        plans = {
            DEMO_JOB: prepared_demo(settings, days=days, rows_per_day=rows_per_day, train_days=train_days, seed=seed, end=end),
            GEARBOX_JOB: prepared_gearbox_demo(
                settings, days=days, windows_per_day=windows_per_day, train_days=train_days, seed=seed, end=end
            ),
            SALES_JOB: prepared_sales_demo(settings, days=days, rows_per_day=store_items, train_days=train_days, seed=seed, end=end),
        }
        for job, plan in plans.items():
            console.print(
                f"demo {job}: {len(plan.training_dates)} training days, model version {plan.model_version}, "
                f"scoring {plan.scoring_dates[0]}..{plan.scoring_dates[-1]}"
            )
            if plan.registration is not None and plan.registration.calibration is None:
                _print_forecast_registration(plan.registration)
            try:
                with _run_log(settings.data_dir), _progress_bars():
                    backfill(job, plan.scoring_dates[0], plan.scoring_dates[-1])
            finally:
                _print_summary(job, plan.scoring_dates)
        from flows.outcomes import outcomes

        for job, plan in plans.items():
            # The demo's labels are known at once; in production they arrive later (deployment `outcomes`).
            outcomes(job, plan.scoring_dates[0], plan.scoring_dates[-1])
            _print_realized_performance(job, plan.scoring_dates)
        console.print(f"outputs: {settings.data_dir / 'output'} and the warehouse {configured_warehouse(settings).location}")

    _run(action)


@app.command()
def run(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    date: Annotated[str, typer.Option(help="Partition date, YYYY-MM-DD.")],
    chunk_rows: Annotated[int | None, typer.Option(min=1, help="Rows per chunk (default: the job's).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Score one partition of one job."""

    def action() -> None:
        day = parse_partition_date(date, what="--date")
        settings = current_settings()
        # The same checks the flow starts with, before Prefect is even imported: a user mistake is
        # an `error:` line per problem, not a run log.
        with preloaded_job(job, day, with_warehouse_url(settings), run_settings_json=settings.model_dump_json()):
            from flows.score_partition import score_partition

            with _run_log(settings.data_dir), _progress_bars(show=not as_json):
                result = score_partition(job, day, chunk_rows or 0).to_dict()
        if as_json:
            _print_json(result)
            return
        _print_summary(job, [day])
        _print_forecast(result)
        _print_classification(result)
        _print_model_health(result)
        _print_challenger(result)
        for warning in result.get("warnings", []):
            console.print(Text("warning: ", style="yellow") + Text(warning), highlight=False, soft_wrap=True)

    _run(action)


@app.command(name="backfill")
def backfill_command(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    start: Annotated[str, typer.Option(help="First partition date, YYYY-MM-DD.")],
    end: Annotated[str, typer.Option(help="Last partition date, YYYY-MM-DD (inclusive).")],
    mode: Annotated[BackfillChoice, typer.Option(help="all; missing: never scored or refused; failed: last run failed or refused.")] = BackfillChoice.all,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the partitions that would be scored; write nothing.")] = False,
    concurrency: Annotated[int, typer.Option(min=1, max=8, help="Partitions scored at once.")] = 1,
    as_json: JsonOption = False,
) -> None:
    """Score the partitions from START to END that MODE selects; failed partitions are listed, the rest still run."""

    def action() -> None:
        first, last = parse_partition_date(start, what="--start"), parse_partition_date(end, what="--end")
        settings = with_warehouse_url(current_settings())
        dates = backfill_dates(settings, first, last)
        # The checks every partition's run starts with, before any flow: the job once (a mistake there
        # stops every day), then every raw partition of the range against its suite. A day whose raw
        # data is wrong fails in its own run, recorded for `--mode failed`, while the others are scored;
        # when no day can be scored, nothing starts and every mistake is listed at once.
        validated = validated_job(job, settings, check_labels=False, check_raw=False)
        present = [d for d in dates if raw_partition(validated.spec.source, settings, validated.spec.name, d).exists()]
        problems = {day: raw_partition_problems(validated, settings, day) for day in present}
        if present and all(problems.values()):
            raise JobValidationError([p for day in present for p in problems[day]])
        from flows.people import backfill

        if dry_run:
            planned = backfill(job, first, last, mode=mode.value, dry_run=True)
            if as_json:
                _print_json(planned)
                return
            console.print(f"dry run, mode {mode.value}: would score {len(planned)} partition(s): " + (", ".join(p["date"] for p in planned) or "none"))
            return
        if as_json:
            with _run_log(settings.data_dir):
                state = backfill(job, first, last, mode=mode.value, concurrency=concurrency, return_state=True)
            outcomes = state.result(raise_on_failure=False)
            _print_json(outcomes if isinstance(outcomes, list) else partition_summaries(settings, job, dates))
            if state.is_failed():
                raise typer.Exit(ExitCode.USER)
            return
        try:
            with _run_log(settings.data_dir), _progress_bars():
                backfill(job, first, last, mode=mode.value, concurrency=concurrency)
        finally:
            _print_summary(job, dates)

    _run(action)


@app.command()
def register(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    model: Annotated[Path, typer.Option(help="The model file, trained anywhere: XGBoost .ubj/.json, LightGBM .txt, CatBoost .cbm, scikit-learn .skops or ONNX .onnx.")],
    holdout: Annotated[Path, typer.Option(help="Labelled rows the model never saw (a Parquet file or folder) with the raw columns and the job's outcome column.")],
    reference: Annotated[Path | None, typer.Option(help="Rows that stand for the training distribution, for drift (default: the hold-out).")] = None,
    version: Annotated[str | None, typer.Option(help="Version to register (default: the next number).")] = None,
    trained_from: Annotated[str | None, typer.Option(help="First day of the training window, YYYY-MM-DD (recorded).")] = None,
    trained_to: Annotated[str | None, typer.Option(help="Last day of the training window, YYYY-MM-DD (recorded).")] = None,
    trust: Annotated[
        list[str] | None,
        typer.Option(help="A type a scikit-learn .skops file may hold beyond skops' defaults, after you reviewed it (repeat for several)."),
    ] = None,
    positive: PositiveOption = None,
    promote: Annotated[
        bool, typer.Option("--promote", help="Point the champion alias at the new version (checked and recorded like `score promote`).")
    ] = False,
    alias: Annotated[
        str | None, typer.Option(help="Point this alias at the new version instead, e.g. challenger to shadow it from the next run.")
    ] = None,
    by: Annotated[str | None, typer.Option(help="Who moves the alias, for the model_aliases ledger (default: the login name).")] = None,
) -> None:
    """Register a model trained elsewhere: check it against the job, calibrate it (binary job) or fit its error model
    and prediction interval (forecast job) on the hold-out, compute the drift reference, and write a new registry
    version (never over an existing one). No alias moves unless --promote or --alias says so, except that a model's
    first version becomes its champion."""

    def action() -> None:
        import getpass

        from tasks.jobs.promotion import CHAMPION, alias_notes, registered_model, scoring_version_text

        if promote and alias not in (None, CHAMPION):
            raise ScoringError(f"--promote moves {CHAMPION} and --alias moves {alias}: give one of them")
        window = {}
        if trained_from:
            window["window_start"] = parse_partition_date(trained_from, what="--trained-from").isoformat()
        if trained_to:
            window["window_end"] = parse_partition_date(trained_to, what="--trained-to").isoformat()
        settings = with_warehouse_url(current_settings())
        done = registered_model(
            job, model, alias=CHAMPION if promote else alias, settings=settings, warehouse=configured_warehouse(settings),
            changed_by=by or getpass.getuser(), holdout=holdout, reference=reference, version=version, training=window,
            trusted_types=tuple(trust or ()), positive=positive,
        )
        _print_registration(done.report)
        for change in done.moved:
            console.print(Text(
                f"first version of {change.model_name}: {change.alias} → {change.to_version} (recorded in model_aliases)"
                if done.first and change.alias == CHAMPION else
                f"{change.model_name}: alias {change.alias} {change.from_version or '(new)'} → {change.to_version} "
                f"(by {change.changed_by}, recorded in model_aliases)"
            ), highlight=False, soft_wrap=True)
        if done.refused is not None:
            asked = CHAMPION if promote else alias
            if asked is not None:
                raise ScoringError(f"{done.report.model} version {done.report.version} is registered, but {asked} was not moved to it: {done.refused}")
            console.print(Text("warning: ", style="yellow") + Text(
                f"first version of {done.report.model} is registered but not the {CHAMPION}: {done.refused}; "
                f"once fixed: score promote {job} {done.report.version}"
            ), highlight=False, soft_wrap=True)
        elif not done.moved:
            console.print(Text(
                f"no alias moved: {scoring_version_text(job, settings=settings)}; next: score promote {job} {done.report.version} --alias challenger "
                f"to shadow it (the spec's model.challenger: challenger), or score promote {job} {done.report.version} to make it the {CHAMPION}"
            ), highlight=False, soft_wrap=True)
        for note in alias_notes(job, settings=settings):
            console.print(Text("warning: ", style="yellow") + Text(note), highlight=False, soft_wrap=True)

    _run(action)


@app.command()
def runs(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    last: Annotated[int, typer.Option(min=1, max=10_000, help="How many of the newest runs.")] = 20,
    as_json: JsonOption = False,
) -> None:
    """The job's newest runs from the ledger: date, status, model version, rows, when, and the error of a failed or refused run."""

    def action() -> None:
        settings = with_warehouse_url(current_settings())
        rows = configured_warehouse(settings).recent_runs(checked_job_name(job, settings), last=last)
        if as_json:
            _print_json(rows)
            return
        table = Table(title=f"{job}: the {len(rows)} newest runs")
        for column in ("started (UTC)", "date", "status", "model", "read", "scored", "quarantined", "failed", "run id", "error"):
            table.add_column(column, overflow="fold")
        for r in rows:
            style = {"failed": "red", "refused": "red", "succeeded": "green"}.get(r["status"], "yellow")
            table.add_row(
                f"{r['started_at']:%Y-%m-%d %H:%M:%S}", str(r["partition_date"]), Text(r["status"], style=style), r["model_version"] or "",
                *(f"{r[k]:,}" if r[k] is not None else "—" for k in ("rows_read", "rows_scored", "rows_quarantined", "rows_failed")),
                r["run_id"], r["error"] or "",
            )
        console.print(table)

    _run(action)


@app.command()
def promote(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    version: Annotated[str | None, typer.Argument(help="Registered version to promote, or an alias (e.g. challenger).")] = None,
    alias: Annotated[str, typer.Option(help="The alias to point at it.")] = "champion",
    rollback: Annotated[bool, typer.Option("--rollback", help="Point the alias back at the version it pointed at before its last move.")] = False,
    by: Annotated[str | None, typer.Option(help="Who promotes, for the model_aliases ledger (default: the login name).")] = None,
    note: Annotated[str, typer.Option(help="Why, for the ledger.")] = "",
) -> None:
    """Point an alias (champion by default) of the job's model at a version, after checking that it was registered
    and that the job validates with it; every move is recorded in the model_aliases ledger."""

    def action() -> None:
        import getpass

        from tasks.jobs.promotion import alias_notes, promoted_alias, reconciled_aliases, rolled_back_alias

        if rollback == (version is not None):
            raise ScoringError("give a VERSION to promote (e.g. `score promote credit_risk 2`), or --rollback without one")
        settings = with_warehouse_url(current_settings())
        warehouse, who = configured_warehouse(settings), by or getpass.getuser()
        _print_reconciled(reconciled_aliases(job, settings=settings, warehouse=warehouse))
        change = (
            rolled_back_alias(job, alias=alias, settings=settings, warehouse=warehouse, changed_by=who) if rollback else
            promoted_alias(job, version, alias=alias, settings=settings, warehouse=warehouse, changed_by=who, note=note)
        )
        console.print(Text(
            f"{change.model_name}: alias {change.alias} {change.from_version or '(new)'} → {change.to_version} "
            f"(by {change.changed_by}, recorded in model_aliases)"
        ), highlight=False)
        for warning in alias_notes(job, settings=settings):
            console.print(Text("warning: ", style="yellow") + Text(warning), highlight=False, soft_wrap=True)

    _run(action)


def _print_reconciled(moves: list) -> None:
    """A `warning:` line per alias move that was in force but missing from the ledger, now recorded
    (tasks.jobs.promotion.reconciled_aliases: its mover was stopped between the two)."""
    for m in moves:
        console.print(Text("warning: ", style="yellow") + Text(
            f"{m.model_name}: alias {m.alias} {m.from_version or '(new)'} → {m.to_version or '(removed)'} "
            f"(by {m.changed_by}, {m.changed_at:%Y-%m-%d %H:%M:%S} UTC) was in force but missing from model_aliases "
            "(the command that moved it was stopped before writing it); recorded now"
        ), highlight=False, soft_wrap=True)


@app.command()
def aliases(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    remove: Annotated[str | None, typer.Option(help="Remove this alias (recorded in the ledger like any move).")] = None,
    by: Annotated[str | None, typer.Option(help="Who removes it, for the ledger (default: the login name).")] = None,
) -> None:
    """The job model's versions, where each alias points, which the job scores with, and every move of the aliases."""

    def action() -> None:
        import getpass

        from tasks.jobs.promotion import alias_notes, job_aliases, reconciled_aliases, removed_alias

        settings = with_warehouse_url(current_settings())
        warehouse = configured_warehouse(settings)
        _print_reconciled(reconciled_aliases(job, settings=settings, warehouse=warehouse))
        if remove is not None:
            change = removed_alias(job, alias=remove, settings=settings, warehouse=warehouse, changed_by=by or getpass.getuser())
            console.print(Text(f"{change.model_name}: alias {change.alias} {change.from_version} → (removed)"), highlight=False)
        listing = job_aliases(job, settings=settings, warehouse=warehouse)
        scoring = listing["scoring"]

        def named(name: str) -> str:
            target = listing["aliases"].get(name)
            return f"{name} ({target})" if target else name

        console.print(Text(
            f"{listing['model']}: versions {', '.join(listing['versions']) or '(none)'}; the job scores with "
            f"{named(scoring['version'])}" + (f", shadowed by {named(scoring['challenger'])}" if scoring["challenger"] else "")
        ), highlight=False)
        for warning in alias_notes(job, settings=settings):
            console.print(Text("warning: ", style="yellow") + Text(warning), highlight=False, soft_wrap=True)
        table = Table(title="aliases")
        for column in ("alias", "version"):
            table.add_column(column)
        for name, target in listing["aliases"].items():
            table.add_row(name, target)
        console.print(table)
        history = Table(title="model_aliases ledger")
        for column in ("changed_at", "alias", "from", "to", "by", "job", "note"):
            history.add_column(column)
        for row in listing["history"]:
            history.add_row(
                str(row["changed_at"])[:19], row["alias"], row["from_version"] or "—", row["to_version"] or "—",
                row["changed_by"] or "", row["job"] or "", row["note"] or "",
            )
        console.print(history)

    _run(action)


@app.command()
def validate(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    date: Annotated[str | None, typer.Option(help="Raw partition to check the suite against, YYYY-MM-DD (default: the latest).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Cross-check a job's spec, suite, features, model metadata and data schemas; print every problem (exit 2) or a summary."""

    def action() -> None:
        day = parse_partition_date(date, what="--date") if date is not None else None
        settings = with_warehouse_url(current_settings())
        if as_json:
            from tasks.jobs.validation import job_problems

            problems = job_problems(job, settings, partition_date=day)
            _print_json({"job": job, "ok": not problems,
                         "problems": [{"file": str(p.file), "field": p.field, "message": p.message} for p in problems]})
            if problems:
                raise typer.Exit(ExitCode.USER)
            return
        for line in _validated_summary(validated_job(job, settings, partition_date=day)):
            console.print(Text(line), highlight=False, soft_wrap=True)

    _run(action)


@app.command(name="features")
def features_command(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    rows: Annotated[Path, typer.Option("--from", help="Raw rows: a Parquet file or a partition folder (with the outcome column, if any).")],
    out: Annotated[Path, typer.Option(help="Parquet file to write: the entity, one column per model input, and `outcome` when the rows have it.")],
    positive: PositiveOption = None,
) -> None:
    """Write the model inputs the job computes from raw rows (guards, features, feature models), so a training
    script fits on exactly what scoring will feed the model."""

    def action() -> None:
        from tasks.jobspec import load_job_spec as spec_of
        from tasks.jobs.registration import job_model_inputs

        settings = current_settings()
        spec = spec_of(job, settings)
        source = spec.label_source(positive)
        labelled = source.outcome_column in _parquet_columns(rows)
        inputs = job_model_inputs(job, rows, settings=settings, labelled=labelled, positive=positive)
        out.parent.mkdir(parents=True, exist_ok=True)
        inputs.frame().write_parquet(out)
        console.print(
            f"wrote {out}: {inputs.matrix.shape[0]:,} rows × {len(inputs.names)} model inputs"
            + ((" + outcome (the class's index into target.classes: "
                + ", ".join(f"{i} {c}" for i, c in enumerate(inputs.classes)) + ")") if labelled and inputs.classes
               else f" + outcome (1: {source.outcome_column} = {source.positive}, 0: {source.outcome_column} = "
                 f"{source.negative if source.negative is not None else 'the other value'})" if labelled and source.positive
               else " + outcome" if labelled else "")
            + f"; {inputs.rows_quarantined:,} rows quarantined by the guards",
            highlight=False,
        )

    _run(action)


def _parquet_columns(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    return pq.read_schema(files[0]).names if files and files[0].is_file() else []


def _calibration_table(bins: list[dict], *, title: str) -> Table:
    table = Table(title=title)
    for column in ("bin", "rows", "events", "observed", "margin", "probability", "interval"):
        table.add_column(column, justify="right")
    for b in bins:
        table.add_row(
            str(b["bin"]), f"{b['rows']:,.0f}", f"{b['events']:,.0f}", f"{b['observed_rate']:.3f}",
            f"{b['margin_low']:.2f} .. {b['margin_high']:.2f}", f"{b['probability_from']:.3f} .. {b['probability_to']:.3f}",
            f"{b['interval_low']:.3f} .. {b['interval_high']:.3f}",
        )
    return table


def _print_registration(report) -> None:  # noqa: ANN001  (tasks.jobs.registration.RegistrationReport, imported lazily)
    quality = report.calibration
    if report.class_calibration is not None:
        _print_class_registration(report)
        return
    if quality is None:
        _print_forecast_registration(report)
        return
    auc = "n/a" if report.auc is None else f"{report.auc:.3f}"
    console.print(
        f"registered {report.model} version {report.version} ({report.framework}, {len(report.features)} features) at {report.directory}\n"
        f"hold-out: {report.rows:,} rows, {report.events:,} events ({report.events / max(report.rows, 1):.2%}), "
        f"{report.rows_quarantined:,} quarantined by the guards; AUC {auc}, ECE {quality.ece:.4f}; "
        f"drift reference: {report.reference_rows:,} rows",
        highlight=False,
    )
    console.print(_calibration_table(quality.table, title=f"calibration on the hold-out ({quality.interval_level:.0%} interval)"))
    console.print(f"reachable probability: {quality.reachable_low:.3g} .. {quality.reachable_high:.3g}", highlight=False)
    for note in report.notes:
        console.print(Text("note: ") + Text(note), highlight=False, soft_wrap=True)
    for warning in report.warnings:
        console.print(Text("warning: ", style="yellow") + Text(warning), highlight=False, soft_wrap=True)


def _print_class_registration(report) -> None:  # noqa: ANN001  (a multiclass model's RegistrationReport)
    check = report.class_calibration
    how = "out of fold: each half calibrated by the other" if check.get("out_of_fold") else "in sample: a half lacked a class"
    console.print(
        f"registered {report.model} version {report.version} ({report.framework}, multiclass, {len(check['classes'])} classes, "
        f"{len(report.features)} features) at {report.directory}\n"
        f"hold-out: {report.rows:,} rows, {report.rows_quarantined:,} quarantined by the guards; accuracy {check['accuracy']:.3f}, "
        f"log loss {check['log_loss']:.4f} (uncalibrated {check['uncalibrated_log_loss']:.4f}), classwise ECE {check['classwise_ece']:.4f}; "
        f"drift reference: {report.reference_rows:,} rows",
        highlight=False,
    )
    table = Table(title=f"calibration per class on the hold-out ({how})")
    for column in ("class", "hold-out rows", "mean probability", "observed share", "ECE"):
        table.add_column(column)
    for row in check["classes"]:
        bins = row.get("bins") or []
        rows = sum(b["rows"] for b in bins) or 1
        mean_p = sum(b["mean_probability"] * b["rows"] for b in bins) / rows if bins else float("nan")
        observed = sum(b["observed_rate"] * b["rows"] for b in bins) / rows if bins else float("nan")
        table.add_row(row["class"], f"{row['rows']:,}", f"{mean_p:.4f}", f"{observed:.4f}", f"{row['ece']:.4f}")
    console.print(table)
    for note in report.notes:
        console.print(Text("note: ") + Text(note), highlight=False, soft_wrap=True)
    for warning in report.warnings:
        console.print(Text("warning: ", style="yellow") + Text(warning), highlight=False, soft_wrap=True)


def _print_forecast_registration(report) -> None:  # noqa: ANN001  (a forecast model's RegistrationReport)
    check = report.interval
    console.print(
        f"registered {report.model} version {report.version} ({report.framework}, {report.target} forecast, {len(report.features)} features) "
        f"at {report.directory}\n"
        f"hold-out: {report.rows:,} rows, {report.rows_quarantined:,} quarantined by the guards; drift reference: {report.reference_rows:,} rows",
        highlight=False,
    )
    table = Table(title=f"on {check.rows:,} held-back hold-out rows (they fitted neither the error model nor the interval)")
    for column in ("measure", "value"):
        table.add_column(column)
    for measure, value in (
        ("MAE", f"{check.mae:.4g}"), ("RMSE", f"{check.rmse:.4g}"), ("bias (actual − forecast)", f"{check.bias:+.4g}"),
        (f"interval coverage (level {check.level:.0%})", f"{check.coverage:.1%}"), ("mean interval width", f"{check.mean_width:.4g}"),
        ("mean width, easy half of rows", f"{check.easy_half_width:.4g}"), ("mean width, hard half of rows", f"{check.hard_half_width:.4g}"),
    ):
        table.add_row(measure, value)
    console.print(table)
    for note in report.notes:
        console.print(Text("note: ") + Text(note), highlight=False, soft_wrap=True)
    for warning in report.warnings:
        console.print(Text("warning: ", style="yellow") + Text(warning), highlight=False, soft_wrap=True)


@app.command(name="outcomes")
def outcomes_command(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    start: Annotated[str, typer.Option(help="First partition date whose labels to ingest, YYYY-MM-DD.")],
    end: Annotated[str, typer.Option(help="Last partition date, YYYY-MM-DD (inclusive).")],
    positive: Annotated[
        str | None,
        typer.Option(help="A binary job's event as the label's value; it must agree with the spec's monitoring.labels.positive, which the scheduled outcomes runs read."),
    ] = None,
) -> None:
    """Ingest the labels of the partitions START..END, join them to their predictions, and print the realized
    performance per partition and model version."""

    def action() -> None:
        first, last = parse_partition_date(start, what="--start"), parse_partition_date(end, what="--end")
        if last < first:
            raise ScoringError(f"--end {last} is before --start {first}")
        settings = current_settings()
        spec = load_job_spec(job, settings)
        if spec.label_source(positive).positive != spec.monitoring.labels.positive:
            # The scheduled outcomes run revisits these partitions reading the spec: a flag only this run knew would
            # make the two disagree, so the event is named where both read it.
            raise JobSpecError(
                f"--positive {positive}: job {job!r}'s spec names no event value; add positive: {json.dumps(positive)} under "
                f"monitoring.labels in {settings.jobs_dir / f'{job}.yaml'} (scheduled outcomes runs read the spec, not this flag)"
            )
        from flows.outcomes import outcomes

        with _run_log(settings.data_dir):
            outcomes(job, first, last)
        _print_realized_performance(job, partition_range(first, last))

    _run(action)


def _validated_summary(validated: ValidatedJob) -> list[str]:
    spec, meta = validated.spec, validated.model.metadata
    lines = [
        f"ok: job {spec.name} ({validated.spec_path})",
        f"  suite {validated.suite.path}: {len(validated.suite.order)} expectations",
        f"  features {getattr(spec, 'feature_module', None) or 'of the spec'}: version {validated.features.FEATURE_VERSION}, "
        f"{len(validated.features.FEATURES)} features",
        f"  model {meta.name} {meta.version}" + (f" (named {spec.model.version})" if spec.model.version not in (meta.version, "latest") else "")
        + f" ({meta.framework}, sha256 {meta.sha256[:12]}…), {len(meta.features)} features",
        *([f"  challenger {spec.model.challenger}: shadow-scored in the same pass (model.challenger_failure: {spec.model.challenger_failure})"]
          if spec.model.challenger else []),
        *(f"  feature model {ref.name} {a.metadata.version} → {ref.output_feature}" for ref, a in validated.feature_models),
        *_target_summary(validated),
        f"  reason codes: {len(spec.prediction.reasons.codes)}, one per model feature",
        (f"  raw partition {validated.raw}: {validated.raw_files} "
         + ("query checked" if isinstance(validated.raw, SqlPartition) else "file(s) checked")) if validated.raw
        else "  raw partition: none yet, the suite's columns were not checked against data",
        f"  labels partition {validated.labels_dir}: label columns checked" if validated.labels_dir else "  labels partition: none yet",
    ]
    return lines + [f"warning: {note}" for note in (*validated.notes, *latest_version_warnings(spec, validated.spec_path))]


def _target_summary(validated: ValidatedJob) -> list[str]:
    """What the job predicts, and for a forecast model the interval registration measured on held-back rows."""
    spec, meta = validated.spec, validated.model.metadata
    target = spec.target
    if target.classifies:
        calibration, training = meta.calibration or {}, meta.training or {}
        measured = (
            f"; at registration: accuracy {training['holdout_accuracy']:.3f}, log loss {training.get('holdout_log_loss', float('nan')):.4f}, "
            f"classwise ECE {training.get('holdout_classwise_ece', float('nan')):.4f} on the hold-out"
            if training.get("holdout_accuracy") is not None else ""
        )
        return [
            f"  target: multiclass, {target.name or spec.monitoring.labels.outcome_column}: {len(target.classes)} classes, "
            f"{', '.join(target.classes)}",
            f"  calibration: {calibration.get('method', 'none')} of the probability vector" + measured,
        ]
    if not target.forecasts:
        return [f"  target: binary, the probability of {spec.prediction.event}; {spec.words.score_meaning}"]
    unit = f" {target.unit}" if target.unit else ""
    lines = [f"  target: {target.kind} forecast of {target.name or spec.monitoring.labels.outcome_column}" + (f" ({target.unit})" if target.unit else "")]
    check = (meta.interval or {}).get("check") or {}
    if check:
        level, registered = spec.prediction.interval_level, check["level"]
        lines.append(
            f"  interval: {level:.0%} split conformal (model {meta.name} {meta.version}, link {meta.link}); at registration, on "
            f"{check['rows']:,} held-back hold-out rows, the {registered:.0%} interval covered {check['coverage']:.1%}, mean width "
            f"{check['mean_width']:.4g}{unit}; MAE {check['mae']:.4g}{unit}"
            + ("" if abs(registered - level) < 1e-9 else f" (at the spec's {level:.0%} the width differs and the coverage is unchecked)")
        )
    return lines


class TargetProvider(str, enum.Enum):
    cpu = "cpu"
    cuda = "cuda"


ONNX_PROVIDERS = {TargetProvider.cpu: "CPUExecutionProvider", TargetProvider.cuda: "CUDAExecutionProvider"}
_STATUS_STYLE = {"passed": "green", "failed": "bold red", "not_run": "yellow"}


@app.command(name="check-model")
def check_model(
    path: Annotated[Path, typer.Argument(help="A .onnx file, or a registry version folder holding model.onnx.")],
    provider: Annotated[TargetProvider, typer.Option(help="Execution provider the model must run on.")] = TargetProvider.cpu,
    atol: Annotated[float, typer.Option(min=0.0, help="Largest absolute difference from the reference output.")] = 1e-4,
) -> None:
    """ONNX triple check: shapes, numerics against reference_io.npz, operator placement. Exit 1 if one fails."""
    from tasks.inference.onnx_check import inference_check_onnx_path

    report = _run(lambda: inference_check_onnx_path(path, provider=ONNX_PROVIDERS[provider], atol=atol))
    table = Table(
        title=Text(f"ONNX check of {report.model_path}"),
        caption=Text(f"target {report.target_provider}; session runs on {', '.join(report.providers) or '-'}"),
    )
    for column in ("check", "status", "details"):
        table.add_column(column, overflow="fold")
    for check in report.checks:
        table.add_row(check.name, Text(check.status, style=_STATUS_STYLE[check.status]), Text(check.details))
    console.print(table)
    open_points = [f"{check.name} {check.status.replace('_', ' ')}" for check in report.checks if check.status != "passed"]
    console.print(("ok" if report.ok else "not ok") + (f" ({', '.join(open_points)})" if open_points else ""))
    if not report.ok:
        raise typer.Exit(1)


@app.command()
def card(
    job: Annotated[str, typer.Argument(help="A configured job, e.g. credit_risk.")],
    out: Annotated[Path | None, typer.Option(
        help="Where to write the Markdown (its page goes beside it, .html); default data/output/<job>/model_card.md.",
    )] = None,
) -> None:
    """Write the model card (Markdown and a page): Prediction Contract and Inference Specification, from spec, registry and latest run."""
    from tasks.reports.model_card import MODEL_CARD_FILE, job_model_card, written_model_card

    settings = _run(current_settings)
    markdown = _run(lambda: job_model_card(job, with_warehouse_url(settings)))
    target = out or settings.output_dir(job) / MODEL_CARD_FILE
    page = written_model_card(markdown, target)
    console.print(f"model card of {job}: {target} (page: {page})")


@app.command()
def recover(
    job: Annotated[str | None, typer.Argument(help="A configured job; every configured job when left out.")] = None,
) -> None:
    """Finish or undo what killed runs left: roll committed runs forward, close the others as failed."""
    from tasks.jobs.promotion import reconciled_aliases
    from tasks.jobspec import configured_jobs
    from tasks.sinks.recovery import recovered_job

    def action() -> None:
        settings = with_warehouse_url(current_settings())
        jobs = [checked_job_name(job, settings)] if job else configured_jobs(settings)
        warehouse = configured_warehouse(settings)
        table = Table(title="recovered runs")
        for column in ("job", "date", "run", "was", "now", "what was done"):
            table.add_column(column)
        recovered, moves = [], []
        for name in jobs:
            recovered += recovered_job(warehouse, settings, name, recovering_run_id=f"recover-{uuid.uuid4()}")
            moves += reconciled_aliases(name, settings=settings, warehouse=warehouse)
        for r in recovered:
            table.add_row(r.job, str(r.partition_date), r.run_id, r.was, r.now, r.action)
        console.print(table if recovered else f"nothing to recover in {', '.join(jobs) or 'no configured job'}")
        _print_reconciled(moves)

    _run(action)


class KindChoice(str, enum.Enum):
    binary = "binary"
    regression = "regression"
    count = "count"
    multiclass = "multiclass"


@app.command()
def init(
    job: Annotated[str, typer.Argument(help="Name of the new job: lower-case letters, digits and _.")],
    sample: Annotated[Path, typer.Option("--from", help="A sample partition: a folder of Parquet files, or one file.")],
    entity_column: Annotated[str, typer.Option(help="Column with the id of the scored entity.")],
    label_column: Annotated[
        str | None,
        typer.Option(help="Column with the outcome, if the sample has one: 1/0 (the event) for a binary job, the actual number for a forecast, the class for a multiclass job; its values propose the kind."),
    ] = None,
    kind: Annotated[
        KindChoice | None,
        typer.Option(help="The job's target kind instead of the one the label column suggests: binary (1/0), regression (any number), count (non-negative whole numbers), multiclass (3 or more classes, names or whole-number codes)."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the job's spec and suite if they exist.")] = False,
    positive: Annotated[
        str | None,
        typer.Option(help="The label's value that is the event of a binary job, when the label is not 1/0 or true/false (e.g. Yes, churned, 2); written to the spec's monitoring.labels.positive."),
    ] = None,
) -> None:
    """Scaffold jobs/JOB.yaml (declared features, the target's kind, starter rules, reason codes) and
    expectations/JOB.json (guards profiled from the sample), with `review:` notes on every proposal."""
    from tasks.jobs.scaffold import scaffolded_job

    def action() -> None:
        settings = current_settings()
        done = scaffolded_job(
            job, sample=sample, entity_column=entity_column, label_column=label_column, settings=settings, force=force,
            kind=kind.value if kind is not None else None, positive=positive,
        )
        kinds = ", ".join(f"{sum(k == kind for k in done.features.values())} {kind}" for kind in ("numeric", "boolean", "categorical"))
        target = done.target
        if target is None:
            proposed = f"target: {done.kind}" + (" (no --label-column: the default)" if kind is None else " (as --kind asked)")
        else:
            proposed = f"target: {done.kind}, " + (f"as --kind asked; {target.why}" if target.asked else f"proposed because {target.why}")
            proposed += {
                "binary": "" if target.positive is not None else "; --force --kind count or regression scaffolds a forecast job instead",
                "count": "; --force --kind regression scaffolds a forecast of any number instead",
                "regression": "",
                "multiclass": "; --force --kind count scaffolds a forecast of the number instead" if target.numeric else "",
            }[done.kind] if not target.asked else ""
            if target.classes:
                proposed += f"\nclasses, in this order (it must be the model's, e.g. scikit-learn's classes_): {', '.join(target.classes)}"
        forecasts = done.kind in ("regression", "count")
        train = (
            [
                "  2. train a multiclass classifier on them (the outcome is the class's index into target.classes; e.g. XGBoost "
                "multi:softprob with num_class",
                f"     {len(target.classes) if target else 'K'}, LightGBM multiclass, CatBoost MultiClass, a scikit-learn classifier) and save "
                "it: XGBoost .ubj/.json, LightGBM .txt, CatBoost .cbm,",
                "     scikit-learn .skops (skops.io.dump) or ONNX .onnx (README: Model formats), then",
                f"     score register {done.job} --model MODEL --holdout HOLDOUT.parquet   (rows it never saw, with the "
                f"{label_column or 'label'}: they calibrate the class probabilities)",
            ] if done.kind == "multiclass" else [
                "  2. train a regressor on them (count: e.g. XGBoost count:poisson or reg:tweedie; regression: e.g. XGBoost "
                "reg:squarederror) and save it:",
                "     XGBoost .ubj/.json, LightGBM .txt, CatBoost .cbm, scikit-learn .skops (skops.io.dump) or ONNX .onnx "
                "(README: Model formats), then",
                f"     score register {done.job} --model MODEL --holdout HOLDOUT.parquet   (rows it never saw, with the actual "
                f"{label_column or 'outcome'}: they fit the prediction interval)",
            ] if forecasts else [
                "  2. train a binary classifier on them and save it: XGBoost .ubj/.json, LightGBM .txt, CatBoost .cbm,",
                "     scikit-learn .skops (skops.io.dump) or ONNX .onnx (README: Model formats), then",
                f"     score register {done.job} --model MODEL --holdout HOLDOUT.parquet   (rows it never saw, with the outcome)",
            ]
        )
        lines = [
            f"profiled {done.rows} rows from {len(done.sample_files)} file(s) of {sample}",
            f"wrote {done.spec_path}: {len(done.features)} declared features ({kinds})",
            proposed,
            f"wrote {done.suite_path}: {done.expectations} expectations",
            *(f"guessed {column}: {guess}" for column, guess in done.guesses.items()),
            *(f"left out {column}: {why}" for column, why in done.left_out.items()),
            "a number outside its profiled range is clipped to it and scored (counted as guard_repair); "
            "the suite's review notes say how to quarantine such rows instead",
            *(
                f"warning: {column} looks like an outcome and is now a model feature (a model would learn the answer from it): if it "
                f"is the label, scaffold again with --force --label-column {column}" for column in done.label_like
            ),
            "next: review every `review:` note in both files, then",
            f"  1. score features {done.job} --from TRAIN.parquet --out INPUTS.parquet   (the model inputs to train on, in order)",
            *train,
            f"  3. score validate {done.job}",
            f"  4. put a partition in {settings.raw_partition_dir(done.job, 'YYYY-MM-DD')} and score run {done.job} --date YYYY-MM-DD",
        ]
        for line in lines:
            # Text, not markup: a path or a column name may hold brackets.
            console.print(Text(line), highlight=False, soft_wrap=True)

    _run(action)


def main() -> None:
    app()
