"""The reasons stage: table TreeSHAP kernel vs XGBoost `pred_contribs`, on the same rows, as JSON lines.

    .venv/bin/python bench/reasons.py --rows 50000 --repeat 3

XGBoost's own TreeSHAP is the slow side (~100–200 rows/s on 2 cores for the synthetic model), so
its pass runs `--xgboost-repeat` times (default once: it is long, and it is the reference the
top-k check needs anyway); the default run takes several minutes, `--rows 10000` about two.

Two models, each loaded through the registry into an `XGBoostEngine` on CPU:

- credit: the demo credit model (200 trees, depth 4), trained by `prepared_demo` into a temp
  data dir (or `--data-dir`, which reuses a model trained on the same window); rows are the demo
  partitions' feature matrix, resampled with replacement up to `--rows`;
- synthetic: 300 trees of depth 6 on 30 features, trained on rows with 10% NaNs.

Figures per model:

- model_load: JIT load, table build, the load-time guard, and the engine's whole kernel choice;
- reasons: the engine's `inference_contributions(..., top_k=k)` (kernel plus the near-tie
  recompute by XGBoost) against DMatrix + `booster.predict(pred_contribs=True)` on the same rows;
  median of `--repeat` kernel passes and `--xgboost-repeat` XGBoost passes, interleaved, so load
  changes hit both alike. Checks the top-k
  reasons (ranked as tasks/prediction/reasons.py ranks them: signed value, largest first, only
  values above 0) on every row and the largest absolute difference.

k is the credit job's configured reasons count for both models.

- layouts: the kernel's rows per second with its subtree tables (shipped) and with every leaf its own table
  (`group_bits=0`, what the kernel read before subtree tables), interleaved on the same rows; goal ≥ 2×, and
  the largest difference between the two (float64 rounding: the same entries summed in another order).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import tasks  # noqa: F401  (telemetry off before anything loads Prefect)
from tasks.contracts import InferenceInput
from tasks.inference.engine import XGBoostEngine
from tasks.inference.registry import ModelMetadata, inference_model_artifact, inference_model_checksum
from tasks.inference.treeshap import inference_guard_rows, inference_treeshap_kernel, inference_treeshap_max_diff

CREDIT_JOB = "credit_risk"
CREDIT_PLAN = {"days": 3, "rows_per_day": 3000, "train_days": 5, "seed": 7, "end": dt.date(2026, 3, 10)}
SYNTHETIC_FEATURES = [f"s{i:02d}" for i in range(30)]


def _credit(data_dir: Path, rows: int, rng: np.random.Generator) -> tuple[XGBoostEngine, np.ndarray, float, int]:
    """Engine, feature rows, engine init seconds and the job's reasons count of the demo credit model."""
    import polars as pl

    from tasks.demo.setup import prepared_demo
    from tasks.features import job_features
    from tasks.guards import guarded_chunk, load_guard_suite
    from tasks.jobspec import load_job_spec
    from tasks.settings import current_settings

    os.environ["SCORING_DATA_DIR"] = str(data_dir)
    settings = current_settings()
    plan = prepared_demo(settings, **CREDIT_PLAN)
    spec = load_job_spec(CREDIT_JOB, settings)
    features = job_features(spec)
    suite = load_guard_suite(settings.expectations_dir / spec.expectation_suite)
    raw = pl.read_parquet(settings.data_dir / "raw" / CREDIT_JOB / "*" / "*.parquet", hive_partitioning=False)
    scorable = guarded_chunk(raw, suite, entity_column=spec.entity_column).scorable
    matrix = features.feature_matrix(scorable)
    picked = rng.choice(matrix.shape[0], size=rows, replace=rows > matrix.shape[0])
    start = time.perf_counter()
    engine = XGBoostEngine(inference_model_artifact(settings.model_registry_dir(spec.model.name), plan.model_version))
    init_s = time.perf_counter() - start
    return engine, np.ascontiguousarray(matrix[picked]), init_s, spec.prediction.reasons.top_k


def _synthetic_rows(rng: np.random.Generator, rows: int) -> np.ndarray:
    x = rng.normal(size=(rows, len(SYNTHETIC_FEATURES))).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan
    return x


def _synthetic(registry: Path, rows: int, rng: np.random.Generator) -> tuple[XGBoostEngine, np.ndarray, float]:
    import xgboost as xgb

    x = _synthetic_rows(rng, 20_000)
    z = np.nan_to_num(x)
    signal = z[:, :10].sum(axis=1) + z[:, 10] * z[:, 11] - np.abs(z[:, 12]) + np.sin(2 * z[:, 13])
    y = (signal + rng.normal(size=len(x)) > 0).astype(np.float64)
    booster = xgb.train(
        {
            "objective": "binary:logistic",
            "max_depth": 6,
            "eta": 0.05,
            "subsample": 0.8,
            "colsample_bytree": 0.8,
            "seed": 3,
        },
        xgb.DMatrix(x, label=y, missing=np.nan, feature_names=SYNTHETIC_FEATURES),
        num_boost_round=300,
    )
    version = registry / "synthetic" / "1"
    version.mkdir(parents=True)
    booster.save_model(str(version / "model.ubj"))
    meta = ModelMetadata(
        name="synthetic",
        version="1",
        framework="xgboost",
        model_file="model.ubj",
        sha256=inference_model_checksum(version / "model.ubj"),
        feature_version="bench",
        features=SYNTHETIC_FEATURES,
        feature_dtypes=dict.fromkeys(SYNTHETIC_FEATURES, "float32"),
    )
    (version / "metadata.json").write_text(meta.model_dump_json())
    start = time.perf_counter()
    engine = XGBoostEngine(inference_model_artifact(registry / "synthetic", "1"))
    return engine, _synthetic_rows(rng, rows), time.perf_counter() - start


def _reasons(values: np.ndarray, k: int) -> np.ndarray:
    """rows × k chosen feature positions, -1 where the rank's value is not above 0 (as reasons.py)."""
    order = np.argsort(-values, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(values, order, axis=1)
    return np.where(top > 0, order, -1)


def _load_figure(name: str, engine: XGBoostEngine, init_s: float) -> dict:
    booster_json = engine.booster.save_raw("json")
    start = time.perf_counter()
    kernel = inference_treeshap_kernel(booster_json)
    build_s = time.perf_counter() - start
    rows = inference_guard_rows(kernel)
    start = time.perf_counter()
    diff = inference_treeshap_max_diff(kernel, engine._xgboost_contributions, rows)
    guard_s = time.perf_counter() - start
    return {
        "scenario": "model_load",
        "model": name,
        "trees": kernel.n_trees,
        "widest_path": kernel.widest_path,
        "table_mib": round(kernel.table_bytes / 2**20, 2),
        "table_build_s": round(build_s, 4),
        "guard_s": round(guard_s, 4),
        "guard_rows": rows.shape[0],
        "guard_max_abs_diff": diff,
        "kernel_choice_s": round(engine.contributions_kernel_load_s, 4),
        "engine_init_s": round(init_s, 4),
        "kernel": engine.contributions_kernel,
    }


def _reasons_figure(
    name: str, engine: XGBoostEngine, rows: np.ndarray, k: int, repeat: int, xgboost_repeat: int
) -> dict:
    import xgboost as xgb

    if engine.contributions_kernel != "table_treeshap":
        raise SystemExit(f"{name}: the engine fell back to XGBoost ({engine.contributions_kernel_reason})")
    batch = InferenceInput(
        chunk_id=0,
        entity_ids=pa.array(np.arange(rows.shape[0])),
        features=rows,
        feature_names=engine.feature_names,
    )
    index = np.arange(rows.shape[0])
    names = list(engine.feature_names)

    def kernel_stage() -> np.ndarray:
        return engine.inference_contributions(batch, index, top_k=k).values

    def xgboost_stage() -> np.ndarray:
        matrix = xgb.DMatrix(rows, missing=np.nan, feature_names=names)
        return np.asarray(engine.booster.predict(matrix, pred_contribs=True), dtype=np.float64)[:, :-1]

    times: dict[str, list[float]] = {"kernel": [], "xgboost": []}
    results: dict[str, np.ndarray] = {}
    recomputed_before = engine.contributions_counts.tie_recomputed_rows
    for i in range(max(repeat, xgboost_repeat)):
        for label, stage, passes in (("kernel", kernel_stage, repeat), ("xgboost", xgboost_stage, xgboost_repeat)):
            if i < passes:
                start = time.perf_counter()
                results[label] = stage()
                times[label].append(time.perf_counter() - start)
    ours, theirs = results["kernel"], results["xgboost"]
    identical = (_reasons(ours, k) == _reasons(theirs, k)).all(axis=1)
    kernel_only = engine.contributions_source.kernel.contributions(rows)[:, :-1]
    kernel_s, xgboost_s = statistics.median(times["kernel"]), statistics.median(times["xgboost"])
    # The same kernel with every leaf its own table (group_bits=0: the reads of the kernel before subtree
    # tables), against the shipped one, kernel calls only, interleaved.
    by_leaf = inference_treeshap_kernel(engine.booster.save_raw("json"), group_bits=0)
    layouts: dict[str, list[float]] = {"subtree": [], "by_leaf": []}
    for _ in range(repeat):
        for label, kernel in (("subtree", engine.contributions_source.kernel), ("by_leaf", by_leaf)):
            start = time.perf_counter()
            values = kernel.contributions(rows)
            layouts[label].append(time.perf_counter() - start)
            results[label] = values
    subtree_s, by_leaf_s = statistics.median(layouts["subtree"]), statistics.median(layouts["by_leaf"])
    return {
        "scenario": "reasons",
        "model": name,
        "rows": rows.shape[0],
        "top_k": k,
        "repeat": repeat,
        "xgboost_repeat": xgboost_repeat,
        "kernel_s": round(kernel_s, 4),
        "xgboost_s": round(xgboost_s, 4),
        "speedup": round(xgboost_s / kernel_s, 1),
        "max_abs_diff": float(np.abs(ours - theirs).max()),
        "topk_identical_rows": int(identical.sum()),
        "tie_recomputed_rows": (engine.contributions_counts.tie_recomputed_rows - recomputed_before) // repeat,
        "topk_identical_rows_without_recompute": int(
            (_reasons(kernel_only, k) == _reasons(theirs, k)).all(axis=1).sum()
        ),
        "kernel_only_max_abs_diff": float(np.abs(kernel_only - theirs).max()),
        "subtree_rows_per_s": round(rows.shape[0] / subtree_s),
        "by_leaf_rows_per_s": round(rows.shape[0] / by_leaf_s),
        "subtree_over_by_leaf": round(by_leaf_s / subtree_s, 2),
        "subtree_over_by_leaf_goal": 2.0,
        "subtree_vs_by_leaf_max_abs_diff": float(np.abs(results["subtree"] - results["by_leaf"]).max()),
        "subtree_table_mib": round(engine.contributions_source.kernel.table_bytes / 2**20, 1),
        "by_leaf_table_mib": round(by_leaf.table_bytes / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3, help="kernel passes (median)")
    parser.add_argument("--xgboost-repeat", type=int, default=1, help="XGBoost pred_contribs passes (median)")
    parser.add_argument("--models", default="credit,synthetic", help="comma-separated: credit, synthetic")
    parser.add_argument(
        "--data-dir", type=Path, help="demo data dir to (re)use for the credit model; default a temp dir"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.getLogger("scoring").setLevel(logging.WARNING)
    rng = np.random.default_rng(args.seed)
    figures: list[dict] = []

    # The numba kernels load from their cache (or compile, the first time) once per process.
    from tasks.inference import treeshap_kernels  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="bench-reasons-") as tmp:
        start = time.perf_counter()
        tiny = {
            "learner": {
                "learner_model_param": {"base_score": "5E-1", "num_feature": "1"},
                "objective": {"name": "reg:squarederror"},
                "gradient_booster": {
                    "name": "gbtree",
                    "model": {
                        "trees": [
                            {
                                "id": 0,
                                "tree_param": {"size_leaf_vector": "1"},
                                "split_type": [0, 0, 0],
                                "left_children": [1, -1, -1],
                                "right_children": [2, -1, -1],
                                "split_indices": [0, 0, 0],
                                "split_conditions": [0.0, -1.0, 1.0],
                                "default_left": [1, 0, 0],
                                "sum_hessian": [2.0, 1.0, 1.0],
                            }
                        ]
                    },
                },
            }
        }
        inference_treeshap_kernel(tiny).contributions(np.zeros((1, 1), dtype=np.float32))
        jit_s = time.perf_counter() - start
        for name in args.models.split(","):
            if name == "credit":
                engine, rows, init_s, k = _credit(args.data_dir or Path(tmp) / "data", args.rows, rng)
            elif name == "synthetic":
                engine, rows, init_s = _synthetic(Path(tmp) / "models", args.rows, rng)
                k = 3
            else:
                raise SystemExit(f"unknown model {name!r}")
            load = _load_figure(name, engine, init_s) | {"jit_load_s": round(jit_s, 3)}
            print(json.dumps(load), flush=True)
            reasons = _reasons_figure(name, engine, rows, k, args.repeat, args.xgboost_repeat)
            print(json.dumps(reasons), flush=True)
            figures += [load, reasons]

    print(
        f"\n{'model':<10} {'rows':>7} {'k':>2} {'kernel s':>9} {'xgboost s':>10} {'speedup':>8} {'max |diff|':>11} "
        f"{'top-k same':>11} {'ties':>5} {'build s':>8} {'guard s':>8} {'rows/s':>9} {'by leaf':>9} {'ratio':>6}"
    )
    loads = {f["model"]: f for f in figures if f["scenario"] == "model_load"}
    for f in figures:
        if f["scenario"] != "reasons":
            continue
        load = loads[f["model"]]
        print(
            f"{f['model']:<10} {f['rows']:>7} {f['top_k']:>2} {f['kernel_s']:>9.3f} {f['xgboost_s']:>10.3f} "
            f"{f['speedup']:>7.1f}x {f['max_abs_diff']:>11.2e} {f['topk_identical_rows']:>11} {f['tie_recomputed_rows']:>5} "
            f"{load['table_build_s']:>8.3f} {load['guard_s']:>8.3f} {f['subtree_rows_per_s']:>9} "
            f"{f['by_leaf_rows_per_s']:>9} {f['subtree_over_by_leaf']:>5.2f}x"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
