"""What registration asks of each framework: whether the file can score the job's features, and the
metadata fields that say how it scores and explains (its output, its reasons method).

Each framework other than XGBoost and ONNX lives in its own `tasks/inference/engine_<framework>.py`
(imported only when a model of it is registered or scored, so a missing optional extra stops only
those models) with three names: the engine class, `inference_input_problem(path, features)` and
`inference_registration_fields(path, features, holdout, reference)`.
"""

from __future__ import annotations

import importlib
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


@dataclass(frozen=True)
class RegistrationFields:
    """Metadata fields a framework settles at registration, and what the registration report says of them."""

    fields: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def inference_engine_module(framework: str, model_path: Path | None = None):  # noqa: ANN201  (the module)
    """The engine module of a framework beyond XGBoost and ONNX, after checking its extra is installed (exit 3 if not)."""
    inference_framework_module(framework, model_path)
    return importlib.import_module(ENGINE_MODULES[framework])


def inference_framework_input_problem(model_path: Path, framework: str, features: tuple[str, ...]) -> str | None:
    """Why the model file cannot score the job's features as a binary classifier, or None."""
    return inference_engine_module(framework, model_path).inference_input_problem(model_path, features)


def inference_framework_registration_fields(
    model_path: Path, framework: str, features: tuple[str, ...], holdout: np.ndarray, reference: np.ndarray,
) -> RegistrationFields:
    """The framework's metadata fields for this model (its output, its explanation); refuses what cannot score honestly."""
    if framework == "xgboost":
        from tasks.inference.registry import ModelExplanation

        return RegistrationFields({"explanation": ModelExplanation(method="treeshap")})
    if framework == "onnx":
        from tasks.inference.onnx_explained import inference_onnx_registration_explanation
        from tasks.inference.onnx_outputs import inference_registered_onnx_output

        choice = inference_registered_onnx_output(model_path, holdout)
        explanation, notes = inference_onnx_registration_explanation(model_path, choice.output, holdout, reference)
        return RegistrationFields({"onnx_output": choice.output, "explanation": explanation}, [choice.description, *notes])
    return inference_engine_module(framework, model_path).inference_registration_fields(model_path, features, holdout, reference)
