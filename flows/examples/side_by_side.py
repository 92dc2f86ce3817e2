"""An example of composing the public flows: score several jobs' partitions of one day side by side, then act
on their typed results.

Each job's `score_partition` runs as a subflow inside a task, and the flow's thread-pool task runner runs
those tasks at once (a Prefect 3 subflow called directly runs in its caller's thread, one after the other).
Runs of different jobs, or of different days, never wait for each other; two runs of the same job and day
do: the partition's lease makes them exclusive, so the second waits for the first or fails naming it.

    from flows.examples.side_by_side import score_side_by_side
    score_side_by_side(["credit_risk", "store_sales"], date(2026, 3, 10), max_quarantined_share=0.02)
"""

from __future__ import annotations

import datetime as dt
import logging

from prefect import flow, task
from prefect.futures import wait
from prefect.task_runners import ThreadPoolTaskRunner

from flows.score_partition import score_partition
from tasks.errors import ScoringError, user_facing_error
from tasks.results import PartitionResult

log = logging.getLogger("scoring.examples")


class SideBySideFailed(ScoringError):
    """A job of the day failed, or its results broke a limit of the composed flow."""


@task(name="score-job", task_run_name="score {job} {date}")
def scored_job(job: str, date: dt.date) -> PartitionResult:
    """One job's partition, scored in its own score_partition subflow."""
    return score_partition(job, date)


@flow(name="score-side-by-side", task_runner=ThreadPoolTaskRunner(max_workers=4))
def score_side_by_side(
    jobs: list[str], date: dt.date, max_quarantined_share: float = 0.05, fail_on_shift: bool = False
) -> dict[str, PartitionResult]:
    """Score `jobs` for the partition `date` at once; fail in one sentence naming every job that failed, quarantined
    more than `max_quarantined_share` of its rows, or (with `fail_on_shift`) whose decision mix moved against its
    trailing window. Returns each job's result."""
    futures = {job: scored_job.submit(job, date) for job in dict.fromkeys(jobs)}
    wait(list(futures.values()))
    outcomes = {job: f.result(raise_on_failure=False) for job, f in futures.items()}
    results: dict[str, PartitionResult] = {job: o for job, o in outcomes.items() if isinstance(o, PartitionResult)}
    problems = [
        f"{job} failed ({user_facing_error(o)[0] if isinstance(o, BaseException) else o})"
        for job, o in outcomes.items()
        if job not in results
    ]
    for job, result in results.items():
        moved = result.decision_monitoring.shifted if result.decision_monitoring else ()
        shares = ", ".join(f"{d} {share:.1%}" for d, share in sorted(result.decision_shares.items()))
        log.info(
            "%s %s: %d rows scored (%s), %.1f%% quarantined",
            job,
            date,
            result.rows_scored,
            shares,
            100 * result.quarantined_share,
        )
        if result.quarantined_share > max_quarantined_share:
            problems.append(
                f"{job} quarantined {result.quarantined_share:.1%} of its rows (limit {max_quarantined_share:.1%})"
            )
        if moved:
            log.warning("%s %s: the decision mix moved against the trailing window: %s", job, date, ", ".join(moved))
            if fail_on_shift:
                problems.append(f"{job}'s decision mix moved ({', '.join(moved)})")
    if problems:
        raise SideBySideFailed(f"{date}: " + "; ".join(problems))
    return results
