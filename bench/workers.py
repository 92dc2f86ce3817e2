"""Does the chunk pass scale with the thread runner's workers? `score run` of one partition with 1 worker,
then with N (default: the machine's cores, what the product now picks by itself). JSON lines.

    .venv/bin/python bench/workers.py --rows 10000000 --repeat 1

Each round runs `score run credit_risk --date D` of the bench partition (bench/_data.py) as a child,
once per worker count (`SCORING_TASK_WORKERS`), the engine threads left to the product (each unit's
XGBoost and ONNX calls get the cores shared out among the workers). The chunk pass's rows/s is the
run's own figure (the ledger's `inference.end_to_end_rows_per_s`: read, guards, features, inference,
prediction, reasons and staged writes, from the first chunk to the last); `wall_s` is the whole
child's. `scaling` = N workers' pass rows/s over one worker's (goal ≥ 1.7 with 2 workers). `cores_busy` = the child's
user + system CPU seconds over its wall; `ceiling` = min(N, cores) / one worker's `cores_busy`: the most N workers
can give when one worker's engine calls already keep that many cores busy.
"""

from __future__ import annotations

import argparse
import os

from _data import DEMO_JOB, BenchData, add_data_arguments, data_from_args
from _harness import (
    SCORE,
    add_api_argument,
    add_repeat_argument,
    checked,
    child_env,
    emit,
    measured_child,
    median,
    prefect_api,
    print_table,
)
from e2e import ledger_row

SCALING_GOAL = 1.7
"""Goal of 2 workers' pass rows/s over one worker's."""


def measured_workers(data: BenchData, workers: int, run_index: int) -> dict:
    log = data.data_dir / "bench-logs" / f"workers-{workers}-{run_index}.log"
    env = {**child_env(data), "SCORING_TASK_WORKERS": str(workers)}
    run = checked(measured_child([SCORE, "run", DEMO_JOB, "--date", data.date], env=env, log_path=log), "score run")
    ledger = ledger_row(data)
    inference = ledger.get("inference") if isinstance(ledger.get("inference"), dict) else {}
    if ledger.get("status") != "succeeded" or not inference.get("end_to_end_rows_per_s"):
        raise SystemExit(f"error: the run with {workers} worker(s) did not succeed; see {log}")
    return {
        "wall_s": round(run.wall_s, 3),
        "cpu_s": round(run.cpu_s, 3),
        "cores_busy": round(run.cpu_s / run.wall_s, 2),
        "pass_rows_per_s": inference["end_to_end_rows_per_s"],
        "inference_rows_per_s": inference.get("inference_rows_per_s"),
        "maxrss_mb": round(run.maxrss_mb, 1),
        "log": str(log),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    add_data_arguments(parser, rows=1_000_000)
    add_repeat_argument(parser, default=1)
    parser.add_argument(
        "--workers",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="the worker count compared with one (default: this machine's cores)",
    )
    add_api_argument(parser)
    args = parser.parse_args()
    data = data_from_args(args)
    counts = (1, args.workers)
    runs: dict[int, list[dict]] = {count: [] for count in counts}
    with prefect_api(data, args.api):
        for index in range(args.repeat):
            for count in counts:
                runs[count].append(measured_workers(data, count, index))
    figures = {
        count: {
            "workers": count,
            "wall_s": round(median([r["wall_s"] for r in rounds]), 3),
            "cores_busy": round(median([r["cores_busy"] for r in rounds]), 2),
            "pass_rows_per_s": round(median([r["pass_rows_per_s"] for r in rounds])),
            "runs": rounds,
        }
        for count, rounds in runs.items()
    }
    scaling = round(figures[args.workers]["pass_rows_per_s"] / figures[1]["pass_rows_per_s"], 2)
    # What more workers can add at most: the cores one worker's run leaves idle (its engines' calls already take
    # several threads), over the whole run (start-up and publish included, a few seconds of a 10 M-row run).
    cores = len(os.sched_getaffinity(0))
    ceiling = round(min(args.workers, cores) / figures[1]["cores_busy"], 2)
    for figure in figures.values():
        emit({"bench": "workers", "rows": data.rows, "api": args.api, **figure})
    emit(
        {
            "bench": "workers",
            "rows": data.rows,
            "scaling": scaling,
            "goal": SCALING_GOAL,
            "workers": args.workers,
            "cores": cores,
            "ceiling": ceiling,
        }
    )
    print_table(
        f"the chunk pass of {data.rows:,} rows by worker count (median of {args.repeat})",
        ["workers", "wall s", "cores busy", "pass rows/s", "scaling", "ceiling", "goal"],
        [
            [1, figures[1]["wall_s"], figures[1]["cores_busy"], figures[1]["pass_rows_per_s"], 1.0, "-", "-"],
            [
                args.workers,
                figures[args.workers]["wall_s"],
                figures[args.workers]["cores_busy"],
                figures[args.workers]["pass_rows_per_s"],
                scaling,
                ceiling,
                f"≥ {SCALING_GOAL}",
            ],
        ],
    )


if __name__ == "__main__":
    main()
