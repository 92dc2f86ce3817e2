"""The added cost of shadow scoring: `score run credit_risk` with its champion alone against the same run
shadowed by a challenger (a second credit model) in the same pass. JSON lines, then a table.

    .venv/bin/python bench/shadow_scoring.py --rows 1000000 --repeat 3

Both variants run as child processes against one `prefect server` (as deployments run), alternating
in each round, on the same partition and champion. The challenger is registered for the bench (a
model trained on the champion's window with another seed) and removed afterwards, so the other
benches keep scoring the `latest` version they prepared. The figures are `added = (wall shadowed −
wall champion) / wall champion` of the medians and `added_paired`, the median of each round's own
ratio; the goal is ≤ 0.6 for both: a challenger costs less than a second run, because it shares the
read, the guards, the features, the staging and the publish.
"""

from __future__ import annotations

import argparse
import shutil
import sys

from _data import DEMO_JOB, add_data_arguments, data_from_args
from _harness import (
    SCORE,
    add_api_argument,
    add_repeat_argument,
    added_shares,
    checked,
    child_env,
    emit,
    measured_child,
    median,
    prefect_api,
    print_table,
)

GOAL = 0.6
"""Largest added share of the champion-only `score run`'s wall."""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    add_data_arguments(parser, rows=1_000_000)
    add_repeat_argument(parser)
    add_api_argument(parser)
    args = parser.parse_args()
    data = data_from_args(args)

    import tasks  # noqa: F401
    from tasks.demo.challenger import challenger_jobs_dir, registered_demo_challenger
    from tasks.settings import Settings, current_settings

    settings = Settings(data_dir=data.data_dir, jobs_dir=current_settings().jobs_dir)
    registry = settings.model_registry_dir(DEMO_JOB)
    challenger = registered_demo_challenger(settings, champion=data.model_version)
    base = args.data_dir.resolve() / "jobs-shadow"
    try:
        jobs = {
            "champion": challenger_jobs_dir(settings, base / "champion", champion=data.model_version, challenger=None),
            "shadowed": challenger_jobs_dir(
                settings, base / "shadowed", champion=data.model_version, challenger=challenger
            ),
        }
        runs: dict[str, list[float]] = {v: [] for v in jobs}
        with prefect_api(data, args.api):
            for i in range(args.repeat):
                for variant, folder in jobs.items():
                    log = data.data_dir / "bench-logs" / f"shadow-{variant}-{i}.log"
                    run = checked(
                        measured_child(
                            [SCORE, "run", DEMO_JOB, "--date", data.date],
                            env=child_env(data, jobs_dir=folder),
                            log_path=log,
                        ),
                        f"score run ({variant})",
                    )
                    runs[variant].append(round(run.wall_s, 3))
                    print(f"round {i + 1}/{args.repeat}: {variant} {run.wall_s:.2f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(registry / challenger, ignore_errors=True)
    walls = {v: median(r) for v, r in runs.items()}
    added, paired = added_shares(runs, "shadowed", "champion")
    emit(
        {
            "bench": "shadow_scoring",
            "rows": data.rows,
            "repeat": args.repeat,
            "challenger": challenger,
            "wall_champion_s": walls["champion"],
            "wall_shadowed_s": walls["shadowed"],
            "added": round(added, 3),
            "added_paired": round(paired, 3),
            "goal": GOAL,
            "ok": max(added, paired) <= GOAL,
            "runs": runs,
        }
    )
    print_table(
        f"shadow scoring: {data.rows:,} rows (median of {args.repeat})",
        ["variant", "wall s", "added over champion"],
        [[v, walls[v], f"{(walls[v] - walls['champion']) / walls['champion']:+.1%}"] for v in jobs],
    )
    worst = max(added, paired)
    print(
        f"added: {added:.2f} × the champion-only run's wall by the medians, {paired:.2f} × by the rounds' own ratios "
        f"(goal ≤ {GOAL}){'' if worst <= GOAL else ' not reached'}"
    )


if __name__ == "__main__":
    main()
