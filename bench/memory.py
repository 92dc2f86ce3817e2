"""Peak RSS of `score run credit_risk` at two (or more) partition sizes: memory must not grow with rows.

    .venv/bin/python bench/memory.py --sizes 1000000,10000000

For each size a bench partition is prepared (or reused, see bench/_data.py) and scored end to end
as in e2e.py, with reasons for the variant's decisions (default: every decision but `approve`,
the shipped spec). Figures per size: the child's own ru_maxrss (wait4), the sampled peak of the
whole process tree (with `--api ephemeral`, Prefect's temporary API server is a subprocess; by
default the children talk to a `prefect server` the bench starts) and the scorer's own high-water
mark from the runs ledger. Then one `memory_ratio` line: each size's median peak against the
smallest size's (target: largest ≤ `--target` × smallest, default 1.25) and whether every size
stays within `--limit-mb` (default 700).
"""

from __future__ import annotations

import argparse
import sys

from _data import add_data_arguments, prepared_bench_data
from _harness import add_api_argument, add_repeat_argument, emit, median, prefect_api, print_table
from e2e import VARIANTS, measured_e2e, variant_jobs_dir


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(float(s)) for s in text.split(",") if s.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes must be comma-separated row counts, got {text!r}") from None
    if len(sizes) < 2:
        raise argparse.ArgumentTypeError("--sizes needs at least two different sizes")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    add_data_arguments(parser, rows=None)
    parser.add_argument(
        "--sizes",
        type=_sizes,
        default=[1_000_000, 10_000_000],
        help="comma-separated partition sizes in rows (default 1000000,10000000)",
    )
    parser.add_argument(
        "--variant", default="non_approved", choices=VARIANTS, help="reason codes, as in e2e.py (default non_approved)"
    )
    parser.add_argument(
        "--chunk-rows", type=int, default=None, help="passed to `score run --chunk-rows` (default: the job's)"
    )
    parser.add_argument("--target", type=float, default=1.25, help="allowed peak ratio largest/smallest (default 1.25)")
    parser.add_argument("--limit-mb", type=float, default=700.0, help="allowed peak RSS at every size (default 700)")
    add_repeat_argument(parser, default=1)
    add_api_argument(parser)
    args = parser.parse_args()
    jobs_dir, for_decisions = variant_jobs_dir(args.data_dir.resolve(), args.variant)
    datas = [
        prepared_bench_data(
            rows=size,
            seed=args.seed,
            base=args.data_dir,
            row_group_rows=args.row_group_rows,
            gen_batch_rows=args.gen_batch_rows,
            log=lambda m: print(m, file=sys.stderr, flush=True),
        )
        for size in args.sizes
    ]
    measured: list[tuple[int, list[dict]]] = []
    with prefect_api(datas[0], args.api):
        for size, data in zip(args.sizes, datas, strict=True):
            runs = []
            for i in range(args.repeat):
                runs.append(
                    measured_e2e(data, variant=args.variant, jobs_dir=jobs_dir, chunk_rows=args.chunk_rows, run_index=i)
                )
                print(
                    f"{size:,} rows, run {i + 1}/{args.repeat}: {runs[-1]['wall_s']:.1f} s, "
                    f"{runs[-1]['maxrss_mb']:.0f} MB",
                    file=sys.stderr,
                    flush=True,
                )
            measured.append((size, runs))
    figures = []
    for size, runs in measured:
        figure = {
            "bench": "memory",
            "api": args.api,
            "variant": args.variant,
            "for_decisions": for_decisions,
            "rows": size,
            "chunk_rows": args.chunk_rows,
            "repeat": args.repeat,
            "maxrss_mb": round(median([r["maxrss_mb"] for r in runs]), 1),
            "tree_peak_rss_mb": round(median([r["tree_peak_rss_mb"] for r in runs]), 1),
            "scorer_peak_rss_mb": round(median([r["scorer_peak_rss_mb"] or 0.0 for r in runs]), 1),
            "wall_s": round(median([r["wall_s"] for r in runs]), 2),
            "runs": runs,
        }
        figures.append(figure)
        emit(figure)
    base = figures[0]
    ratios = {str(f["rows"]): round(f["maxrss_mb"] / base["maxrss_mb"], 3) for f in figures[1:]}
    tree_ratios = {str(f["rows"]): round(f["tree_peak_rss_mb"] / base["tree_peak_rss_mb"], 3) for f in figures[1:]}
    largest = ratios[str(figures[-1]["rows"])]
    within = all(f["maxrss_mb"] <= args.limit_mb for f in figures)
    emit(
        {
            "bench": "memory_ratio",
            "api": args.api,
            "variant": args.variant,
            "base_rows": base["rows"],
            "ratio_maxrss": ratios,
            "ratio_tree_peak": tree_ratios,
            "target": args.target,
            "ok": largest <= args.target,
            "limit_mb": args.limit_mb,
            "within_limit": within,
        }
    )
    print_table(
        f"peak RSS, reasons {args.variant}, {args.api} API (median of {args.repeat}); targets: each ≤ {args.limit_mb:g} MB, "
        f"largest ≤ {args.target} × smallest",
        ["rows", "wall s", "child maxrss MB", "tree peak MB", "scorer peak MB", "× smallest"],
        [
            [
                f"{f['rows']:,}",
                f["wall_s"],
                f["maxrss_mb"],
                f["tree_peak_rss_mb"],
                f["scorer_peak_rss_mb"],
                "1.00" if f is base else f"{ratios[str(f['rows'])]:.2f}",
            ]
            for f in figures
        ],
    )


if __name__ == "__main__":
    main()
