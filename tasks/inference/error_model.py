"""A forecast job's error model: the expected absolute error |actual − forecast| of each row, from its inputs.

Registration fits it on part of the hold-out (tasks/jobs/conformal.py) and saves it beside the final
model; each scoring pass runs it after the final model, on the same inputs plus the final model's
margin. What it returns is an inference product (a raw float per row, like the margin): the
prediction layer turns it into the width of the row's conformal interval, and monitoring averages it
into the partition's estimated error before actuals land (direct loss estimation, as NannyML's DLE).

It is always an XGBoost regression (`reg:squarederror` on |error|, so it estimates E|error| given the
inputs), small enough (ERROR_MODEL_PARAMS) to cost a fraction of the final model's inference.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from tasks.errors import ModelArtifactError
from tasks.inference.frameworks import inference_xgboost_module

ERROR_MODEL_FILE = "error_model.ubj"
ERROR_MODEL_ROUNDS = 60
ERROR_MODEL_PARAMS = {
    "objective": "reg:squarederror",
    "max_depth": 3,
    "eta": 0.1,
    "min_child_weight": 20.0,
    "lambda": 5.0,
    "tree_method": "hist",
    "seed": 0,
    "nthread": 2,
}


def _with_margin(features: np.ndarray, margins: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.column_stack([features, np.asarray(margins, dtype=np.float32)]), dtype=np.float32)


def inference_fitted_error_model(features: np.ndarray, margins: np.ndarray, abs_errors: np.ndarray, path: Path) -> None:
    """Fit the error model on rows the final model never saw and save it at `path` (UBJSON)."""
    xgb = inference_xgboost_module()
    data = xgb.DMatrix(_with_margin(features, margins), label=np.asarray(abs_errors, dtype=np.float64), missing=np.nan)
    booster = xgb.train(ERROR_MODEL_PARAMS, data, num_boost_round=ERROR_MODEL_ROUNDS)
    booster.save_model(str(path))


class ErrorModel:
    """The registered error model, loaded once per worker; a pure function of its chunk afterwards."""

    def __init__(self, path: Path, *, nthread: int = 0) -> None:
        xgb = inference_xgboost_module()
        self.path = path
        self.booster = xgb.Booster()
        try:
            self.booster.load_model(str(path))
        except (xgb.core.XGBoostError, UnicodeDecodeError, ValueError) as exc:
            raise ModelArtifactError(
                f"error model {path} could not be loaded by XGBoost: {str(exc).splitlines()[0]}"
            ) from exc
        self.booster.set_param({"nthread": nthread, "device": "cpu"})
        self.latency_ms = 0.0

    def inference_expected_error(self, features: np.ndarray, margins: np.ndarray) -> np.ndarray:
        """Each row's expected |actual − forecast|, never below 0 (the squared-error fit can dip under it)."""
        start = time.perf_counter()
        expected = self.booster.inplace_predict(
            _with_margin(features, margins), predict_type="value", validate_features=False
        )
        self.latency_ms = (time.perf_counter() - start) * 1000.0
        return np.maximum(np.asarray(expected, dtype=np.float64), 0.0)
