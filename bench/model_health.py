"""The added cost of model health before labels: `score run credit_risk` with the shipped monitoring
(estimated performance, attribution on the sampled rows, PCA, slices) against the same job with
`monitoring.health.enabled: false` and no slices. JSON lines, then a table.

    .venv/bin/python bench/model_health.py --rows 1000000 --repeat 3

Both variants run as child processes against one `prefect server` (as deployments run), alternating
in each round, on the same partition and model (registered with its health reference). The figures
are `added = (wall on − wall off) / wall off` of the medians and `added_paired`, the median of each
round's own ratio; the goal is ≤ 10 % for both. `--every-row` adds a
third variant that explains every scored row for attribution (`attribution_share: 1`), to show what
the sample saves.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

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

GOAL = 0.10
"""Largest added share of `score run`'s wall."""


def variant_jobs_dir(base: Path, variant: str) -> Path:
    import yaml

    import tasks  # noqa: F401
    from tasks.jobspec import loaded_yaml
    from tasks.settings import current_settings

    target = base / "jobs-health" / variant
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(current_settings().jobs_dir, target)
    path = target / f"{DEMO_JOB}.yaml"
    spec = loaded_yaml(path)
    monitoring = spec.setdefault("monitoring", {})
    health = monitoring.setdefault("health", {})
    if variant == "off":
        health["enabled"] = False
        monitoring["slices"] = []
    elif variant == "every_row":
        health["attribution_share"] = 1.0
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return target


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    add_data_arguments(parser, rows=1_000_000)
    add_repeat_argument(parser)
    add_api_argument(parser)
    parser.add_argument("--every-row", action="store_true", help="also time attribution on every scored row")
    args = parser.parse_args()
    data = data_from_args(args)
    variants = ["off", "on", *(["every_row"] if args.every_row else [])]
    jobs = {v: variant_jobs_dir(args.data_dir.resolve(), v) for v in variants}
    runs: dict[str, list[float]] = {v: [] for v in variants}
    with prefect_api(data, args.api):
        for i in range(args.repeat):
            for v in variants:
                log = data.data_dir / "bench-logs" / f"health-{v}-{i}.log"
                run = checked(
                    measured_child(
                        [SCORE, "run", DEMO_JOB, "--date", data.date],
                        env=child_env(data, jobs_dir=jobs[v]),
                        log_path=log,
                    ),
                    f"score run ({v})",
                )
                runs[v].append(round(run.wall_s, 3))
                print(f"round {i + 1}/{args.repeat}: {v} {run.wall_s:.2f} s", file=sys.stderr, flush=True)
    walls = {v: median(r) for v, r in runs.items()}
    added, paired = added_shares(runs, "on", "off")
    figure = {
        "bench": "model_health",
        "rows": data.rows,
        "repeat": args.repeat,
        "wall_off_s": walls["off"],
        "wall_on_s": walls["on"],
        "added": round(added, 3),
        "added_paired": round(paired, 3),
        "goal": GOAL,
        "ok": max(added, paired) <= GOAL,
        "runs": runs,
    }
    if "every_row" in walls:
        figure["wall_every_row_s"] = walls["every_row"]
        figure["added_every_row"] = round((walls["every_row"] - walls["off"]) / walls["off"], 3)
    emit(figure)
    print_table(
        f"model health: {data.rows:,} rows (median of {args.repeat})",
        ["variant", "wall s", "added over off"],
        [[v, walls[v], f"{(walls[v] - walls['off']) / walls['off']:+.1%}"] for v in variants],
    )
    worst = max(added, paired)
    print(
        f"added: {added:.1%} of score run's wall by the medians, {paired:.1%} by the rounds' own ratios "
        f"(goal ≤ {GOAL:.0%}){'' if worst <= GOAL else ' not reached'}"
    )


if __name__ == "__main__":
    main()
