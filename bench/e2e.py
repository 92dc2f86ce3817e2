"""End to end: `score run credit_risk --date D` as a child process, against the limit script. JSON lines.

    .venv/bin/python bench/e2e.py --rows 100000 --repeat 3

Everything the product does for a partition counts: Python and Prefect start-up, guards, inference, calibration + interval, score, decisions, reasons,
staged Parquet, the DuckDB transaction, the Parquet swap, reports and artifacts. Variants of the
job's reason codes, each from a copy of the jobs folder (SCORING_JOBS_DIR) whose credit_risk.yaml
sets `prediction.reasons.for_decisions`:

    off           for_decisions: []                           no TreeSHAP at all
    non_approved  every decision but `approve`                 the shipped spec's setting
    every_row     every decision the rules make               TreeSHAP on every scored row

The children talk to a `prefect server` the bench starts first (`--api server`, the default: as
deployments run); `--api ephemeral` lets each start Prefect's temporary API, as a terminal run
without a server does. Each round runs the limit script (bench/limit.py, same partition, batches of the chunk size)
first, then each variant; `--repeat` rounds, the median is reported with every run listed.
`ratio_to_limit` = e2e wall / limit wall of whole processes, `cpu_ratio_to_limit` the same of their user + system
CPU seconds (what a run costs, which a shared machine's neighbours move far less than its wall); `maxrss_mb` is the child's own
ru_maxrss (wait4), `tree_peak_rss_mb` the sampled sum over the child and its descendants
(Prefect's ephemeral API server runs as a subprocess).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

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
from limit import JOB_CHUNK_ROWS, add_limit_arguments, limit_figure, measured_limit

VARIANTS = ("off", "non_approved", "every_row")
TARGETS = {"off": 2.0, "non_approved": 2.3}
"""Goals of `score run`'s wall over the limit script's, per variant."""
EVERY_ROW_OVER_OFF = 1.25
"""Goal of reasons on every row over reasons off."""
APPROVE = "approve"


def _spec_jobs_dir() -> Path:
    import tasks  # noqa: F401
    from tasks.settings import current_settings

    return current_settings().jobs_dir


def variant_jobs_dir(base: Path, variant: str) -> tuple[Path, list[str]]:
    """A copy of the jobs folder whose credit_risk.yaml gives reasons to the variant's decisions."""
    import yaml

    from tasks.jobspec import loaded_yaml

    source = _spec_jobs_dir()
    target = base / "jobs-variants" / variant
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    spec_path = target / f"{DEMO_JOB}.yaml"
    spec = loaded_yaml(spec_path)
    decisions = list(dict.fromkeys(rule["decision"] for rule in spec["prediction"]["rules"]))
    wanted = {"off": [], "non_approved": [d for d in decisions if d != APPROVE], "every_row": decisions}[variant]
    # Outcome monitoring's action decisions are the spec's `decisions.<d>.action`, not the reasons': they stay as shipped.
    spec["prediction"]["reasons"]["for_decisions"] = wanted
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return target, wanted


def ledger_row(data: BenchData) -> dict:
    """The newest `runs` row of the bench partition (the child has exited: no writer is open)."""
    import duckdb

    con = duckdb.connect(str(data.data_dir / "warehouse.duckdb"), read_only=True)
    try:
        cursor = con.execute(
            "SELECT * FROM runs WHERE job = ? AND partition_date = ? ORDER BY started_at DESC LIMIT 1",
            [DEMO_JOB, data.date],
        )
        names = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
    finally:
        con.close()
    if not rows:
        return {}
    row = dict(zip(names, rows[0], strict=True))
    keep = ("status", "rows_read", "rows_scored", "rows_quarantined", "rows_with_reasons", "decisions", "inference")
    out = {k: row[k] for k in keep if k in row}
    for key in ("decisions", "inference"):
        if isinstance(out.get(key), str):
            try:
                out[key] = json.loads(out[key])
            except ValueError:
                pass
    return out


def measured_e2e(data: BenchData, *, variant: str, jobs_dir: Path, chunk_rows: int | None, run_index: int) -> dict:
    cmd = [SCORE, "run", DEMO_JOB, "--date", data.date]
    if chunk_rows:
        cmd += ["--chunk-rows", str(chunk_rows)]
    log = data.data_dir / "bench-logs" / f"e2e-{variant}-{run_index}.log"
    run = checked(measured_child(cmd, env=child_env(data, jobs_dir=jobs_dir), log_path=log), f"score run ({variant})")
    ledger = ledger_row(data)
    if ledger.get("status") != "succeeded":
        print(
            json.dumps(
                {"bench": "error", "what": f"score run ({variant})", "ledger": ledger, "log": str(log)}, default=str
            )
        )
        raise SystemExit(1)
    inference = ledger.get("inference") if isinstance(ledger.get("inference"), dict) else {}
    return {
        "wall_s": round(run.wall_s, 3),
        "cpu_s": round(run.cpu_s, 3),
        "maxrss_mb": round(run.maxrss_mb, 1),
        "tree_peak_rss_mb": round(run.tree_peak_rss_mb, 1),
        "rows_read": ledger.get("rows_read"),
        "rows_scored": ledger.get("rows_scored"),
        "rows_with_reasons": ledger.get("rows_with_reasons"),
        "decisions": ledger.get("decisions"),
        "scorer_peak_rss_mb": inference.get("peak_rss_mb"),
        "scorer_rows_per_s": inference.get("end_to_end_rows_per_s"),
        "inference_rows_per_s": inference.get("inference_rows_per_s"),
        "chunks": inference.get("chunks"),
        "log": str(log),
    }


def e2e_figure(
    data: BenchData,
    api: str,
    variant: str,
    for_decisions: list[str],
    runs: list[dict],
    *,
    chunk_rows: int | None,
    limit_wall_s: float | None,
    limit_cpu_s: float | None = None,
) -> dict:
    wall = median([r["wall_s"] for r in runs])
    cpu = median([r["cpu_s"] for r in runs])
    figure = {
        "bench": "e2e",
        "api": api,
        "variant": variant,
        "for_decisions": for_decisions,
        "rows": data.rows,
        "chunk_rows": chunk_rows or JOB_CHUNK_ROWS,
        "repeat": len(runs),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "rows_per_s": round(data.rows / wall),
        "maxrss_mb": round(median([r["maxrss_mb"] for r in runs]), 1),
        "tree_peak_rss_mb": round(median([r["tree_peak_rss_mb"] for r in runs]), 1),
        "rows_with_reasons": runs[-1]["rows_with_reasons"],
    }
    if limit_wall_s:
        figure["limit_wall_s"] = limit_wall_s
        figure["ratio_to_limit"] = round(wall / limit_wall_s, 2)
    if limit_cpu_s:
        figure["cpu_ratio_to_limit"] = round(cpu / limit_cpu_s, 2)
    figure["runs"] = runs
    return figure


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    add_data_arguments(parser, rows=100_000)
    add_repeat_argument(parser)
    add_limit_arguments(parser)
    parser.add_argument(
        "--chunk-rows",
        type=int,
        default=None,
        help="passed to `score run --chunk-rows` and used as the "
        f"limit's batch size (default: the job's, {JOB_CHUNK_ROWS:,})",
    )
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {','.join(VARIANTS)} (default all)"
    )
    parser.add_argument("--no-limit", action="store_true", help="skip the limit script (no ratio_to_limit)")
    add_api_argument(parser)
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not variants:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    data = data_from_args(args)
    jobs = {v: variant_jobs_dir(args.data_dir.resolve(), v) for v in variants}
    batch_rows = args.chunk_rows or JOB_CHUNK_ROWS
    limit_runs: list[dict] = []
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    with prefect_api(data, args.api):
        for i in range(args.repeat):
            if not args.no_limit:
                limit_runs.append(measured_limit(data, batch_rows=batch_rows, nthread=args.nthread, run_index=i))
                print(
                    f"round {i + 1}/{args.repeat}: limit {limit_runs[-1]['wall_s']:.2f} s", file=sys.stderr, flush=True
                )
            for v in variants:
                runs[v].append(
                    measured_e2e(data, variant=v, jobs_dir=jobs[v][0], chunk_rows=args.chunk_rows, run_index=i)
                )
                print(f"round {i + 1}/{args.repeat}: {v} {runs[v][-1]['wall_s']:.2f} s", file=sys.stderr, flush=True)
    table_rows = []
    limit_wall = limit_cpu = None
    if limit_runs:
        limit = limit_figure(data, limit_runs, batch_rows=batch_rows)
        limit_wall, limit_cpu = limit["wall_s"], limit["cpu_s"]
        emit(limit)
        table_rows.append(
            [
                "limit",
                limit["wall_s"],
                f"{limit['rows_per_s']:,}",
                "1.00",
                limit["cpu_s"],
                "1.00",
                limit["maxrss_mb"],
                "-",
                "-",
            ]
        )
    for v in variants:
        figure = e2e_figure(
            data,
            args.api,
            v,
            jobs[v][1],
            runs[v],
            chunk_rows=args.chunk_rows,
            limit_wall_s=limit_wall,
            limit_cpu_s=limit_cpu,
        )
        emit(figure)
        table_rows.append(
            [
                f"e2e {v}",
                figure["wall_s"],
                f"{figure['rows_per_s']:,}",
                figure.get("ratio_to_limit", "-"),
                figure["cpu_s"],
                figure.get("cpu_ratio_to_limit", "-"),
                figure["maxrss_mb"],
                figure["tree_peak_rss_mb"],
                f"{figure['rows_with_reasons']:,}",
            ]
        )
    walls = {v: median([r["wall_s"] for r in runs[v]]) for v in variants}
    targets = {
        f"{v}_over_limit": {"ratio": round(walls[v] / limit_wall, 2), "target": t, "ok": walls[v] / limit_wall <= t}
        for v, t in TARGETS.items()
        if v in walls and limit_wall
    }
    if "off" in walls and "every_row" in walls:
        ratio = walls["every_row"] / walls["off"]
        targets["every_row_over_off"] = {
            "ratio": round(ratio, 2),
            "target": EVERY_ROW_OVER_OFF,
            "ok": ratio <= EVERY_ROW_OVER_OFF,
        }
    if targets:
        emit({"bench": "e2e_targets", "api": args.api, "rows": data.rows, **targets})
    print_table(
        f"e2e: {data.rows:,} rows, chunks of {batch_rows:,}, {args.api} API (median of {args.repeat})",
        [
            "figure",
            "wall s",
            "rows/s",
            "× limit",
            "cpu s",
            "cpu × limit",
            "peak RSS MB",
            "tree peak MB",
            "rows with reasons",
        ],
        table_rows,
    )
    for name, t in targets.items():
        print(f"{name}: {t['ratio']} × (target ≤ {t['target']} ×){'' if t['ok'] else ' not reached'}")


if __name__ == "__main__":
    main()
