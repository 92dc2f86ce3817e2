"""Commands over the runs ledger: runs, recover."""

from __future__ import annotations

import uuid
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from cli.console import console, print_json, run_action
from cli.model_commands import print_reconciled
from cli.options import JsonOption
from flows.steps.blocks import configured_warehouse, with_warehouse_url
from tasks.jobspec import checked_job_name
from tasks.settings import current_settings


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
            print_json(rows)
            return
        table = Table(title=f"{job}: the {len(rows)} newest runs")
        for column in (
            "started (UTC)",
            "date",
            "status",
            "model",
            "read",
            "scored",
            "quarantined",
            "failed",
            "run id",
            "error",
        ):
            table.add_column(column, overflow="fold")
        for r in rows:
            style = {"failed": "red", "refused": "red", "succeeded": "green"}.get(r["status"], "yellow")
            table.add_row(
                f"{r['started_at']:%Y-%m-%d %H:%M:%S}",
                str(r["partition_date"]),
                Text(r["status"], style=style),
                r["model_version"] or "",
                *(
                    f"{r[k]:,}" if r[k] is not None else "—"
                    for k in ("rows_read", "rows_scored", "rows_quarantined", "rows_failed")
                ),
                r["run_id"],
                r["error"] or "",
            )
        console.print(table)

    run_action(action)


def recover(
    job: Annotated[str | None, typer.Argument(help="A configured job; every configured job when left out.")] = None,
) -> None:
    """Finish or undo what killed runs left: roll committed runs forward, close the others as failed."""
    from tasks.jobs.promotion import reconciled_aliases
    from tasks.jobspec import configured_jobs
    from tasks.runs.recovery import recovered_job

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
        print_reconciled(moves)

    run_action(action)
