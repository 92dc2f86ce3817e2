"""What one Prefect object costs: CPU of this process (the client) and of the `prefect server`, per task run, log line
sent to the API, artifact and subflow run, against a server the bench starts on 127.0.0.1. JSON lines.

    .venv/bin/python bench/prefect_costs.py --count 60

A partition's run is made of these (one subflow, about ten task runs, a dozen artifacts and a few re-made to keep the
key numbers first, ~30 log lines), so their sum is what a backfill pays per partition before any row is read
(bench/backfill.py prints the score and server CPU of a whole backfill beside it). Each figure runs `--count` objects
inside one flow run, then waits for the server to take in their events before reading its CPU; the subflows are run as
a backfill runs its partitions (without a heartbeat of their own). Server and client share this machine's cores.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from _data import add_data_arguments, data_from_args
from _harness import api_server_cpu_s, emit, prefect_api, print_table

SETTLE_S = 2.0
"""Seconds for the server to take in the events, logs and states the figure's objects sent."""


def per_object(label: str, count: int, make: Callable[[], None]) -> dict:
    """`make` run once (it makes `count` objects): wall, client CPU and server CPU per object, in milliseconds."""
    time.sleep(SETTLE_S)
    server_before, client_before, started = api_server_cpu_s(), time.process_time(), time.perf_counter()
    make()
    wall_s, client_s = time.perf_counter() - started, time.process_time() - client_before
    time.sleep(SETTLE_S)
    server_after = api_server_cpu_s()
    server_s = (server_after or 0.0) - (server_before or 0.0)
    return {
        "bench": "prefect_costs",
        "object": label,
        "count": count,
        "wall_ms": round(1000 * wall_s / count, 1),
        "client_cpu_ms": round(1000 * client_s / count, 1),
        "server_cpu_ms": round(1000 * server_s / count, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    add_data_arguments(parser, rows=20_000)
    parser.add_argument("--count", type=int, default=60, help="objects per figure (default 60)")
    args = parser.parse_args()
    data = data_from_args(args)
    count = args.count
    with prefect_api(data, "server") as url:
        assert url is not None
        os.environ["PREFECT_API_URL"] = url
        from prefect import flow, get_run_logger, task
        from prefect.artifacts import create_markdown_artifact
        from prefect.logging.handlers import APILogWorker

        from flows.steps.partitions import subflow_without_heartbeat

        @task
        def step(i: int) -> int:
            return i

        @flow
        def partition(i: int) -> int:
            return i

        def task_runs() -> None:
            for i in range(count):
                step(i)

        def log_lines() -> None:
            log = get_run_logger()
            for i in range(count):
                log.info("a scoring line of some length %d", i)

        def artifacts() -> None:
            for i in range(count):
                create_markdown_artifact(key=f"bench-{i}", markdown="x" * 800)

        def subflows() -> None:
            with subflow_without_heartbeat():
                for i in range(count):
                    partition(i)

        @flow
        def costs() -> list[dict]:
            return [
                per_object("task run", count, task_runs),
                per_object("log line", count, log_lines),
                per_object("artifact", count, artifacts),
                per_object("subflow run", count, subflows),
            ]

        figures = costs()
        # The flow's last log lines go out before the server stops, not into a refused connection at exit.
        APILogWorker.drain_all(timeout=5)
    for figure in figures:
        emit(figure)
    print_table(
        f"one Prefect object, {count} of each (this process and the server it talks to)",
        ["object", "wall ms", "client CPU ms", "server CPU ms"],
        [[f["object"], f["wall_ms"], f["client_cpu_ms"], f["server_cpu_ms"]] for f in figures],
    )


if __name__ == "__main__":
    main()
