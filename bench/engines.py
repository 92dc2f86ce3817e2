"""Every framework's engine against the framework itself, on the same matrix, as JSON lines.

    .venv/bin/python bench/engines.py                 # all frameworks installed, ~3-5 min on 2 cores
    .venv/bin/python bench/engines.py --rows 50000 --only lightgbm catboost

Per framework one binary model is trained here on the same synthetic rows (20 features, 10% NaN
where the framework takes NaN), saved in its own format, registered through `score register`'s own
code path (`registered_model_version`: output choice, calibration, reasons check) and loaded as a
scoring run loads it. Then, interleaved and repeated (median):

- inference: the engine's `inference_outputs` (margins, the `[INF]` line, the DTO) over the
  framework's own predict on the same float32 matrix (XGBoost `inplace_predict` margin, LightGBM
  `predict(raw_score=True)`, CatBoost `RawFormulaVal`, scikit-learn `decision_function` /
  `predict_proba`, ONNX Runtime `session.run`). Goal: at most 1.2×.
- reasons: the framework's own contributions (XGBoost `pred_contribs`, LightGBM `pred_contrib`,
  CatBoost `ShapValues`; for the ONNX export of a LightGBM model, LightGBM's own, the cover being
  counted from the training rows as registration counts it) over the engine's
  `inference_contributions(top_k=3)` (the table TreeSHAP, near ties recomputed by the framework).
  Goal: at least 10× faster, and the same top-3 reasons on every row. scikit-learn has no
  contributions of its own: only the kernel's time is printed (registration checked its local
  accuracy).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tasks  # noqa: E402,F401  (telemetry off before anything loads Prefect)
from tasks.contracts import InferenceInput  # noqa: E402
from tasks.inference.engine import inference_engine  # noqa: E402
from tasks.inference.registry import inference_model_artifact  # noqa: E402
from tasks.jobs.registration import registered_model_version  # noqa: E402

FEATURES = tuple(f"x{i:02d}" for i in range(20))
TRAIN_ROWS = 20_000
TREES, DEPTH = 200, 6
TOP_K = 3


def _rows(rng: np.random.Generator, n: int, *, nan: bool) -> np.ndarray:
    x = rng.normal(size=(n, len(FEATURES))).astype(np.float32)
    if nan:
        x[rng.random(x.shape) < 0.1] = np.nan
    return x


def _labels(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    z = np.nan_to_num(x)
    signal = z[:, :8].sum(axis=1) + z[:, 8] * z[:, 9] - np.abs(z[:, 10]) + np.sin(2 * z[:, 11])
    return (signal + rng.normal(size=len(x)) > 0).astype(np.int32)


def _xgboost(folder: Path, x: np.ndarray, y: np.ndarray):  # noqa: ANN202
    import xgboost as xgb

    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": DEPTH, "eta": 0.05, "seed": 3, "nthread": 0},
        xgb.DMatrix(x, label=y, missing=np.nan),
        num_boost_round=TREES,
    )
    path = folder / "model.ubj"
    booster.save_model(str(path))
    predict = lambda rows: booster.inplace_predict(rows, predict_type="margin")  # noqa: E731
    contributions = lambda rows: booster.predict(xgb.DMatrix(rows, missing=np.nan), pred_contribs=True)  # noqa: E731
    return path, predict, contributions


def _lightgbm(folder: Path, x: np.ndarray, y: np.ndarray):  # noqa: ANN202
    import lightgbm as lgb

    booster = lgb.train(
        {
            "objective": "binary",
            "num_leaves": 2**DEPTH,
            "max_depth": DEPTH,
            "learning_rate": 0.05,
            "verbose": -1,
            "seed": 3,
        },
        lgb.Dataset(x, label=y),
        num_boost_round=TREES,
    )
    path = folder / "model.txt"
    booster.save_model(str(path))
    predict = lambda rows: booster.predict(rows, raw_score=True)  # noqa: E731
    contributions = lambda rows: booster.predict(rows, pred_contrib=True)  # noqa: E731
    return path, predict, contributions


def _catboost(folder: Path, x: np.ndarray, y: np.ndarray):  # noqa: ANN202
    from catboost import CatBoostClassifier, Pool

    model = CatBoostClassifier(
        iterations=TREES, depth=DEPTH, learning_rate=0.05, random_seed=3, verbose=False, allow_writing_files=False
    )
    model.fit(x, y)
    path = folder / "model.cbm"
    model.save_model(str(path), format="cbm")
    predict = lambda rows: model.predict(rows, prediction_type="RawFormulaVal")  # noqa: E731
    contributions = lambda rows: model.get_feature_importance(Pool(rows), type="ShapValues")  # noqa: E731
    return path, predict, contributions


def _skops(model, folder: Path) -> Path:  # noqa: ANN001
    from skops.io import dump

    path = folder / "model.skops"
    dump(model, path)
    return path


def _sklearn_gb(folder: Path, x: np.ndarray, y: np.ndarray):  # noqa: ANN202
    from sklearn.ensemble import HistGradientBoostingClassifier

    model = HistGradientBoostingClassifier(max_iter=TREES, max_depth=DEPTH, learning_rate=0.05, random_state=3).fit(
        x, y
    )
    return _skops(model, folder), model.decision_function, None


def _sklearn_rf(folder: Path, x: np.ndarray, y: np.ndarray):  # noqa: ANN202
    from sklearn.ensemble import RandomForestClassifier

    model = RandomForestClassifier(n_estimators=100, max_depth=DEPTH + 2, random_state=3, n_jobs=-1).fit(x, y)
    return _skops(model, folder), lambda rows: model.predict_proba(rows)[:, 1], None


def _onnx_lightgbm(folder: Path, x: np.ndarray, y: np.ndarray):  # noqa: ANN202
    import lightgbm as lgb
    import onnxruntime as ort
    from onnxmltools import convert_lightgbm
    from onnxmltools.convert.common.data_types import FloatTensorType

    booster = lgb.train(
        {
            "objective": "binary",
            "num_leaves": 2**DEPTH,
            "max_depth": DEPTH,
            "learning_rate": 0.05,
            "verbose": -1,
            "seed": 3,
        },
        lgb.Dataset(x, label=y),
        num_boost_round=TREES,
    )
    onnx_model = convert_lightgbm(
        booster, initial_types=[("input", FloatTensorType([None, len(FEATURES)]))], zipmap=False
    )
    path = folder / "model.onnx"
    path.write_bytes(onnx_model.SerializeToString())
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    probabilities = session.get_outputs()[-1].name
    predict = lambda rows: session.run([probabilities], {"input": rows})[0][:, 1]  # noqa: E731
    # Registered with the training rows as reference, the cover counted from them is LightGBM's own: its
    # pred_contrib is then the reference the export's reasons must meet.
    return path, predict, lambda rows: booster.predict(rows, pred_contrib=True)


TRAINERS: dict[str, tuple[Callable, bool]] = {
    "xgboost": (_xgboost, True),
    "lightgbm": (_lightgbm, True),
    "catboost": (_catboost, True),
    "sklearn-histgb": (_sklearn_gb, True),
    "sklearn-forest": (_sklearn_rf, False),
    "onnx-lightgbm": (_onnx_lightgbm, False),
}
"""Name → (trainer, whether its rows keep NaNs): scikit-learn's forests take NaN only in some estimators."""


def _median_s(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _top(values: np.ndarray, k: int) -> np.ndarray:
    order = np.argsort(-values, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(values, order, axis=1)
    return np.where(top > 0, order, -1)


def _bench(name: str, trainer: Callable, nan: bool, rows: int, reason_rows: int, repeat: int, root: Path) -> dict:
    rng = np.random.default_rng(11)
    x = _rows(rng, TRAIN_ROWS, nan=nan)
    y = _labels(rng, x)
    folder = root / f"train-{name}"
    folder.mkdir()
    try:
        model_file, predict, contributions = trainer(folder, x, y)
    except ImportError as exc:
        return {"framework": name, "skipped": f"not installed: {exc}"}
    holdout = _rows(rng, 5000, nan=nan)
    registry = root / "registry" / name.replace("-", "_")
    trusted: tuple[str, ...] = ()
    if model_file.suffix == ".skops":
        from skops.io import get_untrusted_types

        # The bench trained the model itself: what skops does not trust by default is known to be what it wrote.
        trusted = tuple(get_untrusted_types(file=str(model_file)))
    registered_model_version(
        model_file,
        registry_dir=registry,
        feature_version="bench",
        features=FEATURES,
        holdout_features=holdout,
        holdout_outcomes=_labels(rng, holdout),
        reference_features=x,
        trusted_types=trusted,
    )
    start = time.perf_counter()
    engine = inference_engine(inference_model_artifact(registry, "latest"))
    load_s = time.perf_counter() - start
    matrix = _rows(rng, rows, nan=nan)
    batch = InferenceInput(
        chunk_id=0, entity_ids=pa.array(np.arange(rows).astype(str)), features=matrix, feature_names=FEATURES
    )
    ours = engine.inference_outputs(batch).margins
    theirs = np.asarray(predict(matrix), dtype=np.float64).reshape(-1)
    if (
        engine.metadata.sklearn_output is not None
        and engine.metadata.sklearn_output.method == "predict_proba"
        or (engine.metadata.onnx_output is not None and engine.metadata.onnx_output.kind != "margin")
    ):
        clip = 1e-7
        p = np.clip(theirs, clip, 1 - clip)
        theirs = np.log(p / (1 - p))
    framework_s, product_s = [], []
    for _ in range(repeat):
        framework_s.append(_median_s(lambda: predict(matrix), 1))
        product_s.append(_median_s(lambda: engine.inference_outputs(batch), 1))
    result = {
        "framework": name,
        "rows": rows,
        "engine_load_s": round(load_s, 3),
        "inference_product_s": round(statistics.median(product_s), 4),
        "inference_framework_s": round(statistics.median(framework_s), 4),
        "inference_ratio": round(statistics.median(product_s) / statistics.median(framework_s), 3),
        "margin_max_abs_diff": float(np.abs(ours - theirs).max()),
        "reasons_method": engine.metadata.explanation.method if engine.metadata.explanation else None,
        "reasons_kernel": engine.contributions_kernel,
    }
    if engine.contributions_source is None:
        return result
    idx = np.arange(min(reason_rows, rows))
    explained = engine.inference_contributions(batch, idx, top_k=TOP_K).values
    kernel_s = statistics.median(
        _median_s(lambda: engine.inference_contributions(batch, idx, top_k=TOP_K), 1) for _ in range(repeat)
    )
    result.update({"reason_rows": idx.size, "reasons_product_s": round(kernel_s, 4)})
    if contributions is None:
        return result
    sub = matrix[idx]
    own_s = _median_s(lambda: contributions(sub), 1)
    own = np.asarray(contributions(sub), dtype=np.float64)[:, :-1]
    result.update(
        {
            "reasons_framework_s": round(own_s, 4),
            "reasons_speedup": round(own_s / kernel_s, 1),
            "reasons_max_abs_diff": float(np.abs(explained - own).max()),
            "top3_identical_share": float((_top(explained, TOP_K) == _top(own, TOP_K)).all(axis=1).mean()),
        }
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows of the inference matrix")
    parser.add_argument(
        "--reason-rows", type=int, default=2000, help="rows explained (the frameworks' own TreeSHAP is slow)"
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", nargs="*", choices=sorted(TRAINERS), default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # Each chunk's `[INF]` line would drown the figures.
    logging.getLogger("scoring").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or TRAINERS:
            trainer, nan = TRAINERS[name]
            print(
                json.dumps(_bench(name, trainer, nan, args.rows, args.reason_rows, args.repeat, Path(tmp))), flush=True
            )


if __name__ == "__main__":
    main()
