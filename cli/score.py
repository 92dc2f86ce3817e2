"""The `score` command: a thin entry point over the flows, its commands assembled from the cli/ modules by theme."""

from __future__ import annotations

import gc
from typing import Annotated

import typer

import tasks  # noqa: F401  (telemetry off before Prefect loads)
from cli.job_commands import features_command, init, validate
from cli.ledger_commands import recover, runs
from cli.model_commands import aliases, card, check_model, promote, register
from cli.run_commands import backfill_command, demo, outcomes_command, run
from cli.run_log import show_state_lines

app = typer.Typer(no_args_is_help=True, help="Batch scoring: demo, single partitions, backfills.")


@app.callback()
def _global_options(
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Show Prefect's per-task state lines too (the run log file always has them)."
        ),
    ] = False,
) -> None:
    """Batch scoring: demo, single partitions, backfills."""
    show_state_lines(verbose)


# In the order `score --help` lists them.
app.command()(demo)
app.command()(run)
app.command(name="backfill")(backfill_command)
app.command()(register)
app.command()(runs)
app.command()(promote)
app.command()(aliases)
app.command()(validate)
app.command(name="features")(features_command)
app.command(name="outcomes")(outcomes_command)
app.command(name="check-model")(check_model)
app.command()(card)
app.command()(recover)
app.command()(init)


def main() -> None:
    try:
        app()
    finally:
        # The process is ending: the interpreter's teardown would run the cycle collector over every object of
        # ~2,700 modules (0.5-0.8 s a command on two cores). Frozen, they are freed by reference counting alone;
        # exit handlers (Prefect's log and event drains, the temporary server's stop) run as before.
        gc.freeze()


if __name__ == "__main__":
    main()
