"""The `score` command: a thin entry point over the flows."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

import tasks  # noqa: F401  (telemetry off before Prefect loads)
from tasks.calendar import partition_range, yesterday
from tasks.errors import ScoringError
from tasks.jobspec import load_job_spec
from tasks.reporting import partition_summaries, partition_summary_table
from tasks.scoring import parse_partition_date, prepared_job
from tasks.settings import current_settings

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Batch scoring: demo, single partitions, backfills.")
# Off a terminal (CI logs, pipes) rich would wrap the summary table at 80 columns.
console = Console() if sys.stdout.isatty() else Console(width=160)


def _print_summary(job: str, dates: list[dt.date]) -> None:
    console.print(partition_summary_table(job, partition_summaries(current_settings(), job, dates)))


def _run(action) -> None:  # noqa: ANN001
    try:
        action()
    except ScoringError as error:
        # Plain text on one line: messages carry paths and pydantic's [type=...] details, not markup.
        console.print(Text("error: ", style="red") + Text(str(error)), highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


@app.command()
def demo(
    days: Annotated[int, typer.Option(min=1, help="Demo dates to score, ending yesterday.")] = 7,
    rows_per_day: Annotated[int, typer.Option(min=100, help="Applications per day.")] = 20_000,
    train_days: Annotated[int, typer.Option(min=1, help="Labelled days before the demo dates to train on.")] = 14,
    seed: Annotated[int, typer.Option(help="Seed of the data generator and the model.")] = 7,
) -> None:
    """Generate demo data, train the demo model, score every demo date, print a summary."""

    def action() -> None:
        from flows.people import backfill
        from tasks.demo.setup import DEMO_JOB, prepared_demo

        settings = current_settings()
        plan = prepared_demo(
            settings, days=days, rows_per_day=rows_per_day, train_days=train_days, seed=seed, end=yesterday(settings)
        )
        console.print(
            f"demo: {len(plan.training_dates)} training days, model version {plan.model_version}, "
            f"scoring {plan.scoring_dates[0]}..{plan.scoring_dates[-1]}"
        )
        try:
            backfill(DEMO_JOB, plan.scoring_dates[0], plan.scoring_dates[-1])
        finally:
            _print_summary(DEMO_JOB, plan.scoring_dates)
        console.print(f"outputs: {settings.data_dir / 'output' / DEMO_JOB} and {settings.duckdb_path}")

    _run(action)


@app.command()
def run(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    date: Annotated[str, typer.Option(help="Partition date, YYYY-MM-DD.")],
    chunk_rows: Annotated[int | None, typer.Option(min=1, help="Rows per chunk (default: the job's).")] = None,
) -> None:
    """Score one partition of one job."""

    def action() -> None:
        from flows.score_partition import score_partition

        day = parse_partition_date(date, what="--date")
        # The same checks the flow starts with, so that a user mistake is one line, not a run log.
        prepared_job(job, day, current_settings())
        score_partition(job, day, chunk_rows)
        _print_summary(job, [day])

    _run(action)


@app.command(name="backfill")
def backfill_command(
    job: Annotated[str, typer.Argument(help="Job name, a file in jobs/.")],
    start: Annotated[str, typer.Option(help="First partition date, YYYY-MM-DD.")],
    end: Annotated[str, typer.Option(help="Last partition date, YYYY-MM-DD (inclusive).")],
) -> None:
    """Score every partition from START to END; failed partitions are listed, the rest still run."""

    def action() -> None:
        from flows.people import backfill

        first, last = parse_partition_date(start, what="--start"), parse_partition_date(end, what="--end")
        dates = partition_range(first, last)
        load_job_spec(job, current_settings())
        try:
            backfill(job, first, last)
        except RuntimeError as error:
            raise ScoringError(str(error)) from None
        finally:
            _print_summary(job, dates)

    _run(action)


def main() -> None:
    app()
