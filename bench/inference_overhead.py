"""Overhead of the inference stage over the bare runtime call on the same arrays, as JSON lines.

    .venv/bin/python bench/inference_overhead.py --rows 1000000 --chunk-rows 50000

Builds two models in a temporary registry — an XGBoost booster (200 trees, depth 4, 14 features,
like the credit model) and an ONNX MLP (14 → 64 → 64 → 1) — then scores the same C-contiguous
float32 chunks with:

- bare: `booster.inplace_predict(x, predict_type="margin")` / `session.run(None, {name: x})`;
- stage: the engine's `inference_outputs(InferenceInput(...))`, which adds the input contract
  checks, the `[INF]` log line, latency timing and the output DTO.

Each pass runs `--repeat` times; the median is reported. Overhead = stage / bare − 1. The XGBoost engine's
margins on the CPU come from the tree-margin kernel (tasks/inference/tree_margins.py), XGBoost's margins to the
bit, so its overhead is negative: the kernel's gain over `inplace_predict`, net of the stage's own costs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import tasks  # noqa: F401
from tasks.contracts import InferenceInput
from tasks.inference.engine import ONNXEngine, XGBoostEngine
from tasks.inference.registry import ModelMetadata, inference_model_artifact

FEATURES = [f"f{i:02d}" for i in range(14)]


def _register(registry: Path, name: str, framework: str, model_file: Path) -> None:
    version = registry / name / "1"
    version.mkdir(parents=True)
    target = version / model_file.name
    model_file.rename(target)
    meta = ModelMetadata(
        name=name,
        version="1",
        framework=framework,
        model_file=target.name,
        sha256=hashlib.sha256(target.read_bytes()).hexdigest(),
        feature_version="bench",
        features=FEATURES,
        feature_dtypes=dict.fromkeys(FEATURES, "float32"),
    )
    (version / "metadata.json").write_text(meta.model_dump_json())


def _xgboost_model(tmp: Path, rng: np.random.Generator) -> Path:
    import xgboost as xgb

    x = rng.normal(size=(20_000, len(FEATURES))).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] * x[:, 2] + rng.normal(size=len(x)) > 0).astype(int)
    booster = xgb.train({"max_depth": 4, "eta": 0.1, "objective": "binary:logistic"}, xgb.DMatrix(x, label=y), 200)
    path = tmp / "model.ubj"
    booster.save_model(str(path))
    return path


def _onnx_model(tmp: Path) -> Path:
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(len(FEATURES), 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 1),
    ).eval()
    path = tmp / "model.onnx"
    torch.onnx.export(
        net,
        (torch.zeros(2, len(FEATURES)),),
        str(path),
        input_names=["x"],
        output_names=["y"],
        dynamo=True,
        external_data=False,
        dynamic_shapes=({0: torch.export.Dim("batch")},),
        verbose=False,
    )
    return path


def _median_s(fns: list, chunks: list[np.ndarray], repeat: int) -> list[float]:
    """Median seconds per pass of each function; passes alternate so that load changes hit both alike."""
    times: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn(chunks[0])
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for chunk in chunks:
                fn(chunk)
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    # The [INF] line is part of the stage's cost, but printing a line per chunk would time the terminal.
    logging.getLogger("scoring").handlers.clear()
    logging.getLogger("scoring").addHandler(logging.NullHandler())
    logging.getLogger("scoring").propagate = False
    rng = np.random.default_rng(7)
    x = np.ascontiguousarray(rng.normal(size=(args.rows, len(FEATURES))).astype(np.float32))
    chunks = [x[i : i + args.chunk_rows] for i in range(0, args.rows, args.chunk_rows)]
    ids = [pa.array(np.arange(len(c)).astype(str)) for c in chunks]
    id_of = {id(c): i for i, c in enumerate(chunks)}

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        registry = tmp / "models"
        _register(registry, "bench_xgb", "xgboost", _xgboost_model(tmp, rng))
        _register(registry, "bench_onnx", "onnx", _onnx_model(tmp))
        engines = {
            "xgboost": XGBoostEngine(inference_model_artifact(registry / "bench_xgb"), device="cpu"),
            "onnx": ONNXEngine(inference_model_artifact(registry / "bench_onnx"), device="cpu"),
        }
        bare = {
            "xgboost": lambda c: engines["xgboost"].booster.inplace_predict(
                c, predict_type="margin", validate_features=False
            ),
            "onnx": lambda c: engines["onnx"].session.run(None, {engines["onnx"].input_name: c}),
        }
        for runtime, engine in engines.items():

            def stage(c: np.ndarray, engine=engine) -> None:
                i = id_of[id(c)]
                engine.inference_outputs(
                    InferenceInput(chunk_id=i, entity_ids=ids[i], features=c, feature_names=tuple(FEATURES))
                )

            bare_s, stage_s = _median_s([bare[runtime], stage], chunks, args.repeat)
            print(
                json.dumps(
                    {
                        "bench": "inference_overhead",
                        "runtime": runtime,
                        "rows": args.rows,
                        "chunk_rows": args.chunk_rows,
                        "bare_rows_per_s": round(args.rows / bare_s),
                        "stage_rows_per_s": round(args.rows / stage_s),
                        "overhead_pct": round(100 * (stage_s / bare_s - 1), 2),
                        "providers": list(engine.providers),
                    }
                )
            )


if __name__ == "__main__":
    main()
