"""The floor any scorer of this job pays: read, features, plain predict, write. JSON lines.

    .venv/bin/python bench/limit.py --rows 1000000 --repeat 3

A bare script on the same raw credit partition as e2e.py: read the Parquet partition in batches
of `--batch-rows` (pyarrow `iter_batches`), build the model input with the job's own
`tasks.features.credit_risk.feature_matrix` (C-contiguous float32), call the booster's plain
`inplace_predict` (probabilities), write entity id + probability to one Parquet file. No guards,
calibration, decisions, reasons, warehouse or orchestrator. Memory stays flat: one batch at a time.

Each run is a child process (`--once`), timed from spawn to exit like e2e.py's `score run`, so the
ratio of the two compares whole processes, interpreter and imports included; `work_s` is the
read-to-write loop alone. Peak RSS is the child's own ru_maxrss (wait4).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from _data import BenchData, add_data_arguments, data_from_args
from _harness import (
    PYTHON,
    add_repeat_argument,
    checked,
    child_env,
    emit,
    last_json_line,
    measured_child,
    median,
    print_table,
)

JOB_CHUNK_ROWS = 50_000


def limit_once(raw_dir: Path, model_path: Path, out_path: Path, *, batch_rows: int, nthread: int) -> dict:
    """One pass over the partition in this process; returns its counts and timings."""
    t0 = time.perf_counter()
    import numpy as np
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq
    import xgboost as xgb

    from tasks.features.credit_risk import feature_matrix

    booster = xgb.Booster()
    booster.load_model(str(model_path))
    if nthread:
        booster.set_param({"nthread": nthread})
    t_ready = time.perf_counter()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("entity_id", pa.large_string()), ("probability", pa.float32())])
    rows = batches = 0
    read_s = feature_s = predict_s = write_s = 0.0
    # Unique ids gain nothing from dictionary encoding, which costs ~3x the write time here.
    with pq.ParquetWriter(out_path, schema, use_dictionary=False) as writer:
        for path in sorted(raw_dir.glob("*.parquet")):
            stream = pq.ParquetFile(path).iter_batches(batch_size=batch_rows)
            while True:
                t = time.perf_counter()
                batch = next(stream, None)
                if batch is None:
                    break
                frame = pl.from_arrow(batch)
                t1 = time.perf_counter()
                x = feature_matrix(frame)
                t2 = time.perf_counter()
                probability = booster.inplace_predict(x, validate_features=False)
                t3 = time.perf_counter()
                # Zero-copy from the numpy buffer: pa.array(ndarray) and pa.table({...}) import pandas
                # on first use (~0.8 s here), which is no part of the floor.
                values = np.ascontiguousarray(probability, dtype=np.float32)
                writer.write_batch(
                    pa.RecordBatch.from_arrays(
                        [
                            batch.column("entity_id").cast(pa.large_string()),
                            pa.Array.from_buffers(pa.float32(), len(values), [None, pa.py_buffer(values)]),
                        ],
                        schema=schema,
                    )
                )
                t4 = time.perf_counter()
                read_s, feature_s, predict_s, write_s = (
                    read_s + t1 - t,
                    feature_s + t2 - t1,
                    predict_s + t3 - t2,
                    write_s + t4 - t3,
                )
                rows += batch.num_rows
                batches += 1
    t_end = time.perf_counter()
    return {
        "rows": rows,
        "batches": batches,
        "setup_s": round(t_ready - t0, 3),
        "work_s": round(t_end - t_ready, 3),
        "read_s": round(read_s, 3),
        "features_s": round(feature_s, 3),
        "predict_s": round(predict_s, 3),
        "write_s": round(write_s, 3),
    }


def measured_limit(data: BenchData, *, batch_rows: int, nthread: int, run_index: int) -> dict:
    """One limit run as a child process: its process wall time and memory, with its own inner figures."""
    out = data.data_dir / "bench-limit" / "probabilities.parquet"
    cmd = [
        PYTHON,
        str(Path(__file__).resolve()),
        "--once",
        "--raw-dir",
        str(data.raw_dir),
        "--model-path",
        str(data.model_path),
        "--out",
        str(out),
        "--batch-rows",
        str(batch_rows),
        "--nthread",
        str(nthread),
    ]
    run = checked(
        measured_child(cmd, env=child_env(data), log_path=data.data_dir / "bench-logs" / f"limit-{run_index}.log"),
        "limit",
    )
    inner = last_json_line(run.stdout)
    return {
        "wall_s": round(run.wall_s, 3),
        "cpu_s": round(run.cpu_s, 3),
        "maxrss_mb": round(run.maxrss_mb, 1),
        "tree_peak_rss_mb": round(run.tree_peak_rss_mb, 1),
        **inner,
    }


def limit_figure(data: BenchData, runs: list[dict], *, batch_rows: int) -> dict:
    wall = median([r["wall_s"] for r in runs])
    return {
        "bench": "limit",
        "rows": data.rows,
        "batch_rows": batch_rows,
        "repeat": len(runs),
        "wall_s": round(wall, 3),
        "cpu_s": round(median([r["cpu_s"] for r in runs]), 3),
        "rows_per_s": round(data.rows / wall),
        "work_s": round(median([r["work_s"] for r in runs]), 3),
        "work_rows_per_s": round(data.rows / median([r["work_s"] for r in runs])),
        "maxrss_mb": round(median([r["maxrss_mb"] for r in runs]), 1),
        "runs": runs,
    }


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--nthread", type=int, default=0, help="XGBoost threads (default 0: XGBoost's default, all cores)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    add_data_arguments(parser, rows=1_000_000)
    add_repeat_argument(parser)
    add_limit_arguments(parser)
    parser.add_argument(
        "--batch-rows",
        type=int,
        default=JOB_CHUNK_ROWS,
        help=f"rows per batch (default {JOB_CHUNK_ROWS:,}, the job's chunk)",
    )
    parser.add_argument("--once", action="store_true", help="internal: one pass in this process, one JSON line")
    parser.add_argument("--raw-dir", type=Path, help="internal, with --once")
    parser.add_argument("--model-path", type=Path, help="internal, with --once")
    parser.add_argument("--out", type=Path, help="internal, with --once")
    args = parser.parse_args()
    if args.once:
        print(
            json.dumps(
                limit_once(args.raw_dir, args.model_path, args.out, batch_rows=args.batch_rows, nthread=args.nthread)
            )
        )
        return
    data = data_from_args(args)
    runs = []
    for i in range(args.repeat):
        runs.append(measured_limit(data, batch_rows=args.batch_rows, nthread=args.nthread, run_index=i))
        print(f"limit run {i + 1}/{args.repeat}: {runs[-1]['wall_s']:.2f} s", file=sys.stderr, flush=True)
    figure = limit_figure(data, runs, batch_rows=args.batch_rows)
    emit(figure)
    print_table(
        f"limit: {data.rows:,} rows, batches of {args.batch_rows:,} (median of {args.repeat})",
        ["figure", "wall s", "rows/s", "work s", "read s", "features s", "predict s", "write s", "peak RSS MB"],
        [
            [
                "limit",
                figure["wall_s"],
                f"{figure['rows_per_s']:,}",
                figure["work_s"],
                *[median([r[k] for r in runs]) for k in ("read_s", "features_s", "predict_s", "write_s")],
                figure["maxrss_mb"],
            ]
        ],
    )


if __name__ == "__main__":
    main()
