"""XGBoost's CPU predictor against the tree-margin kernel on the same rows, per tree depth, as JSON lines.

    .venv/bin/python bench/tree_margins.py --rows 200000 --depths 4,6,8 --threads 1,2 --repeat 5

Per depth one binary model (200 trees, 14 features, 5 % NaN) trained here on 50 k rows; then, per thread count, the
best of `--repeat` passes of `booster.inplace_predict(rows, predict_type="margin")` and of the kernel's `margins`
(tasks/inference/tree_margins.py) over the same `--rows` fresh rows, and whether every margin is the same float32.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import xgboost as xgb
from _harness import emit, print_table

from tasks.inference.tree_margins import inference_checked_tree_margins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--depths", default="4,6,8")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--trees", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.rows + 50_000, 14)).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan
    y = (np.nan_to_num(x[:, 0]) + np.nan_to_num(x[:, 1] * x[:, 2]) + rng.normal(size=len(x)) > 0).astype(np.float32)
    train, rows = x[:50_000], np.ascontiguousarray(x[50_000:])
    table = []
    for depth in (int(d) for d in args.depths.split(",")):
        booster = xgb.train(
            {"objective": "binary:logistic", "max_depth": depth, "nthread": 2},
            xgb.DMatrix(train, label=y[:50_000]),
            args.trees,
        )
        for threads in (int(t) for t in args.threads.split(",")):
            booster.set_param({"nthread": threads})
            choice = inference_checked_tree_margins(
                booster.save_raw("json"),
                lambda r, b=booster: b.inplace_predict(r, predict_type="margin"),
                model_label=f"depth {depth}",
                nthread=threads,
            )
            if choice.kernel is None:
                raise SystemExit(f"the kernel was refused for depth {depth}: {choice.reason}")
            xgboost_s, kernel_s = [], []
            for _ in range(args.repeat):
                start = time.perf_counter()
                theirs = booster.inplace_predict(rows, predict_type="margin")
                xgboost_s.append(time.perf_counter() - start)
                start = time.perf_counter()
                ours = choice.kernel.margins(rows, nthread=threads)
                kernel_s.append(time.perf_counter() - start)
            figure = {
                "bench": "tree_margins",
                "depth": depth,
                "trees": args.trees,
                "rows": args.rows,
                "threads": threads,
                "xgboost_s": round(min(xgboost_s), 4),
                "kernel_s": round(min(kernel_s), 4),
                "speedup": round(min(xgboost_s) / min(kernel_s), 2),
                "identical": bool(np.array_equal(ours.view(np.uint32), np.asarray(theirs, np.float32).view(np.uint32))),
            }
            emit(figure)
            table.append(
                [depth, threads, figure["xgboost_s"], figure["kernel_s"], figure["speedup"], figure["identical"]]
            )
    print_table(
        f"margins of {args.rows:,} rows, {args.trees} trees (best of {args.repeat})",
        ["depth", "threads", "XGBoost s", "kernel s", "×", "same floats"],
        table,
    )


if __name__ == "__main__":
    main()
