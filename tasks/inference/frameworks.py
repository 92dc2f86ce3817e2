"""What registration asks of each framework: whether the file can score the job's features, and the
metadata fields that say how it scores and explains (its output, its reasons method).

Each framework other than XGBoost and ONNX lives in its own `tasks/inference/engine_<framework>.py`
(imported only when a model of it is registered or scored, so a missing optional extra stops only
those models) with three names: the engine class, `inference_input_problem(path, features)` and
`inference_registration_fields(path, features, holdout, reference)`.
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tasks.inference.registry import inference_framework_module

ENGINE_MODULES = {
    "lightgbm": "tasks.inference.engine_lightgbm",
    "catboost": "tasks.inference.engine_catboost",
    "sklearn": "tasks.inference.engine_sklearn",
}

XGBOOST_FORECAST_OBJECTIVES = {
    "reg:squarederror": "identity",
    "reg:absoluteerror": "identity",
    "reg:pseudohubererror": "identity",
    "count:poisson": "log",
    "reg:tweedie": "log",
    "reg:gamma": "log",
}
"""XGBoost objectives a forecast job takes, with the link between the margin and the forecast."""

_XGBOOST_IMPORT = threading.Lock()


def inference_xgboost_module():  # noqa: ANN201  (the xgboost module)
    """xgboost, imported without its scikit-learn wrappers when nothing has imported scikit-learn yet.

    `import xgboost` imports scikit-learn whenever it is installed (for XGBClassifier, which the product
    never uses): ~1 s and ~140 MB more in every `score` process. Hiding scikit-learn for that one import
    leaves the Booster API whole; scikit-learn itself imports normally afterwards (a scikit-learn model
    scored in the same process). One thread imports at a time: a backfill's partitions load their models at
    once, and a second thread finding xgboost in `sys.modules` before the first finished got a half-made module."""
    with _XGBOOST_IMPORT:
        if "xgboost" in sys.modules:
            return sys.modules["xgboost"]
        hidden = "sklearn" not in sys.modules
        if hidden:
            sys.modules["sklearn"] = None  # type: ignore[assignment]
        try:
            import xgboost
        finally:
            if hidden and sys.modules.get("sklearn", False) is None:
                del sys.modules["sklearn"]
        return xgboost


@dataclass(frozen=True)
class RegistrationFields:
    """Metadata fields a framework settles at registration, and what the registration report says of them."""

    fields: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def inference_engine_module(framework: str, model_path: Path | None = None):  # noqa: ANN201  (the module)
    """The engine module of a framework beyond XGBoost and ONNX, after checking its extra is installed (exit 3 if not)."""
    inference_framework_module(framework, model_path)
    return importlib.import_module(ENGINE_MODULES[framework])


def _trust(framework: str, trusted_types: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The types the user trusted (`score register --trust`), for the one framework whose loader takes them: skops."""
    return {"trusted_types": trusted_types} if framework == "sklearn" else {}


def inference_framework_input_problem(
    model_path: Path,
    framework: str,
    features: tuple[str, ...],
    *,
    trusted_types: tuple[str, ...] = (),
    kind: str = "binary",
    classes: tuple[str, ...] = (),
) -> str | None:
    """Why the model file cannot score the job's features as a model of the job's kind (a binary
    classifier, a regressor for `kind` regression or count, a classifier of `classes` in their order for
    a multiclass job), or None."""
    return inference_engine_module(framework, model_path).inference_input_problem(
        model_path, features, kind=kind, classes=classes, **_trust(framework, trusted_types)
    )


def inference_framework_registration_fields(
    model_path: Path,
    framework: str,
    features: tuple[str, ...],
    holdout: np.ndarray,
    reference: np.ndarray,
    *,
    trusted_types: tuple[str, ...] = (),
    kind: str = "binary",
) -> RegistrationFields:
    """The framework's metadata fields for this model (its output, its explanation and, for a forecast
    job's regressor, the `link` from its margin to the forecast); refuses what cannot score honestly."""
    if framework == "xgboost":
        from tasks.inference.registry import ModelExplanation

        fields: dict[str, Any] = {"explanation": ModelExplanation(method="treeshap")}
        if kind not in ("binary", "multiclass"):
            xgb = inference_xgboost_module()
            booster = xgb.Booster()
            booster.load_model(str(model_path))
            objective = json.loads(booster.save_config())["learner"]["objective"]["name"]
            fields["link"] = XGBOOST_FORECAST_OBJECTIVES[objective]
        return RegistrationFields(fields)
    if framework == "onnx":
        from tasks.inference.onnx_explained import inference_onnx_registration_explanation
        from tasks.inference.onnx_outputs import inference_registered_onnx_output
        from tasks.inference.registry import ModelExplanation

        choice = inference_registered_onnx_output(model_path, holdout, kind=kind)
        if kind == "multiclass":
            # The graph's explaining node is read for one output; a class vector's per-class reading is not built.
            explanation = ModelExplanation(
                method="none", detail="a multiclass ONNX graph (per-class reasons are not read from ONNX graphs)"
            )
            notes = [
                "reasons: none for a multiclass ONNX graph; its rows are scored with reasons off (counted as unavailable)"
            ]
        else:
            explanation, notes = inference_onnx_registration_explanation(model_path, choice.output, holdout, reference)
        fields = {"onnx_output": choice.output, "explanation": explanation}
        if kind not in ("binary", "multiclass"):
            fields["link"] = "log" if choice.output.kind == "exp" else "identity"
        return RegistrationFields(fields, [choice.description, *notes])
    return inference_engine_module(framework, model_path).inference_registration_fields(
        model_path, features, holdout, reference, kind=kind, **_trust(framework, trusted_types)
    )
