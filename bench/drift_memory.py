"""Peak memory of the drift stage at two partition sizes: it must not grow with the rows.

    .venv/bin/python bench/drift_memory.py --sizes 1000000 5000000 --chunk-rows 50000

Each size runs in its own process: chunks of 14 float32 features plus an integer score are made
one at a time (as the scoring loop hands them over) and added to a `DriftAccumulator` with 99
quantile edges per feature; the metrics against a reference are computed at the end. Prints the
process's peak RSS before the stage and after it, per size, as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import time

import numpy as np

FEATURES = 14


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _run(rows: int, chunk_rows: int, queue: multiprocessing.Queue) -> None:
    from tasks.quality.drift import SCORE_EDGES, DriftAccumulator, drift_report_rows

    rng = np.random.default_rng(0)
    edges = {f"f{j}": np.quantile(rng.normal(size=20_000), np.arange(1, 100) / 100) for j in range(FEATURES)}
    reference = DriftAccumulator(edges=dict(edges))
    reference.add_matrix(tuple(edges), rng.normal(size=(20_000, FEATURES)))
    before = _peak_mb()
    start = time.perf_counter()
    acc = DriftAccumulator(edges={**edges, "score": SCORE_EDGES})
    names = tuple(edges)
    for done in range(0, rows, chunk_rows):
        n = min(chunk_rows, rows - done)
        acc.add_matrix(names, rng.normal(0.05, 1.0, size=(n, FEATURES)).astype(np.float32))
        acc.add("score", rng.integers(0, 101, n))
    report = drift_report_rows(
        acc, {"reference": reference.histograms}, {"psi_warn": 0.1, "psi_alert": 0.25, "ks_warn": 0.1, "ks_alert": 0.2}
    )
    queue.put(
        {
            "rows": rows,
            "peak_rss_mb_before": round(before, 1),
            "peak_rss_mb_after": round(_peak_mb(), 1),
            "seconds": round(time.perf_counter() - start, 2),
            "report_rows": len(report),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    for rows in args.sizes:
        queue = ctx.Queue()
        proc = ctx.Process(target=_run, args=(rows, args.chunk_rows, queue))
        proc.start()
        result = queue.get()
        proc.join()
        print(json.dumps({"bench": "drift_memory", "chunk_rows": args.chunk_rows, **result}))


if __name__ == "__main__":
    main()
