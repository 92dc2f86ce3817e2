"""Per-partition overhead: a 30-day backfill of 20 k-row partitions against one 600 k-row partition
holding the same rows, both as `score` child processes. JSON lines.

    .venv/bin/python bench/backfill.py --repeat 1

The single partition is the bench data's (bench/_data.py, `--rows`, default 600 000 on
BENCH_DATE); the backfill's days are its rows cut into `--days` slices, each re-dated to one of
the days after BENCH_DATE (entity ids `APP-<day>-…` and `application_date`), so both runs score
the same rows with the same model. Each round runs `score run` of the single partition, then
`score backfill --start <first day> --end <last day>` (concurrency 1, as a nightly catch-up does).
`ratio` = backfill wall / single wall (target ≤ 2.5); `overhead_s_per_partition` = (backfill −
single) / days: what one more partition costs beyond its rows. `cpu_s` is the `score` child's user + system CPU,
`server_cpu_s` the `prefect server`'s during the same command (the two share the machine's cores): their sum over
the cores is the least wall a run of that work could take.
Both run against a `prefect server` the bench starts (`--api server`, the default, as deployments
run) or each with Prefect's temporary API (`--api ephemeral`, a terminal run without a server).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys

from _data import BENCH_DATE, DEMO_JOB, BenchData, add_data_arguments, data_from_args
from _harness import (
    SCORE,
    add_api_argument,
    add_repeat_argument,
    api_server_cpu_s,
    checked,
    child_env,
    emit,
    measured_child,
    median,
    prefect_api,
    print_table,
)

TARGET_RATIO = 2.5


def backfill_days(data: BenchData, days: int) -> list[dt.date]:
    """The bench partition's rows cut into `days` partitions after BENCH_DATE (rewritten when the count changes)."""
    import polars as pl

    from tasks.settings import Settings

    settings = Settings(data_dir=data.data_dir)
    dates = [BENCH_DATE + dt.timedelta(days=i + 1) for i in range(days)]
    marker = data.data_dir / "bench_backfill.json"
    wanted = {"days": days, "rows": data.rows, "seed": data.seed}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return dates
    rows = pl.read_parquet(data.raw_dir / "part-0.parquet")
    size = -(-rows.height // days)
    for i, day in enumerate(dates):
        part = rows.slice(i * size, size).with_columns(
            pl.col("entity_id").str.replace(r"^APP-\d{8}-", f"APP-{day:%Y%m%d}-"),
            pl.lit(day).alias("application_date"),
        )
        target = settings.raw_partition_dir(DEMO_JOB, day.isoformat())
        target.mkdir(parents=True, exist_ok=True)
        for old in target.glob("*.parquet"):
            old.unlink()
        part.write_parquet(target / "part-0.parquet", row_group_size=data.row_group_rows)
    marker.write_text(json.dumps(wanted) + "\n")
    return dates


def measured(data: BenchData, cmd: list[str], what: str, run_index: int) -> dict:
    log = data.data_dir / "bench-logs" / f"backfill-{what}-{run_index}.log"
    server_before = api_server_cpu_s()
    run = checked(measured_child(cmd, env=child_env(data), log_path=log), what)
    server_after = api_server_cpu_s()
    server_cpu_s = None if server_before is None or server_after is None else round(server_after - server_before, 2)
    return {
        "wall_s": round(run.wall_s, 3),
        "cpu_s": round(run.cpu_s, 2),
        "server_cpu_s": server_cpu_s,
        "maxrss_mb": round(run.maxrss_mb, 1),
        "log": str(log),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    add_data_arguments(parser, rows=600_000)
    add_repeat_argument(parser, default=1)
    parser.add_argument("--days", type=int, default=30, help="partitions of the backfill (default 30)")
    add_api_argument(parser)
    args = parser.parse_args()
    data = data_from_args(args)
    dates = backfill_days(data, args.days)
    single_cmd = [SCORE, "run", DEMO_JOB, "--date", data.date]
    backfill_cmd = [SCORE, "backfill", DEMO_JOB, "--start", dates[0].isoformat(), "--end", dates[-1].isoformat()]
    singles, backfills = [], []
    with prefect_api(data, args.api):
        for i in range(args.repeat):
            singles.append(measured(data, single_cmd, "single", i))
            backfills.append(measured(data, backfill_cmd, "backfill", i))
            print(
                f"round {i + 1}/{args.repeat}: single {singles[-1]['wall_s']:.2f} s, backfill {backfills[-1]['wall_s']:.2f} s",
                file=sys.stderr,
                flush=True,
            )
    single_s, backfill_s = median([r["wall_s"] for r in singles]), median([r["wall_s"] for r in backfills])
    single_cpu, backfill_cpu = (
        median([r["cpu_s"] + (r["server_cpu_s"] or 0.0) for r in runs]) for runs in (singles, backfills)
    )
    figure = {
        "bench": "backfill",
        "api": args.api,
        "rows": data.rows,
        "days": args.days,
        "rows_per_day": -(-data.rows // args.days),
        "repeat": args.repeat,
        "single_wall_s": single_s,
        "backfill_wall_s": backfill_s,
        "ratio": round(backfill_s / single_s, 2),
        "target_ratio": TARGET_RATIO,
        "overhead_s_per_partition": round((backfill_s - single_s) / args.days, 3),
        "cpu_s_single": round(single_cpu, 2),
        "cpu_s_backfill": round(backfill_cpu, 2),
        "cpu_ratio": round(backfill_cpu / single_cpu, 2),
        "overhead_cpu_s_per_partition": round((backfill_cpu - single_cpu) / args.days, 3),
        "single_runs": singles,
        "backfill_runs": backfills,
    }
    emit(figure)
    print_table(
        f"backfill: {args.days} × {figure['rows_per_day']:,} rows vs 1 × {data.rows:,} (median of {args.repeat})",
        ["figure", "wall s", "× single", "CPU s (score + server)", "CPU × single", "target"],
        [
            ["1 partition", single_s, "1.00", round(single_cpu, 2), "1.00", "-"],
            [
                f"{args.days} partitions",
                backfill_s,
                figure["ratio"],
                round(backfill_cpu, 2),
                figure["cpu_ratio"],
                f"≤ {TARGET_RATIO}",
            ],
        ],
    )


if __name__ == "__main__":
    main()
