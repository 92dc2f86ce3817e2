"""Job feature modules. Each declares FEATURE_VERSION, FEATURES and feature_matrix(); training and
scoring both go through the same module, so the two cannot drift apart."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Protocol, cast

import numpy as np
import polars as pl


class FeatureModule(Protocol):
    FEATURE_VERSION: str
    FEATURES: tuple[str, ...]

    def feature_matrix(self, frame: pl.DataFrame) -> np.ndarray: ...


def load_feature_module(dotted: str) -> FeatureModule:
    module: ModuleType = importlib.import_module(dotted)
    for attr in ("FEATURE_VERSION", "FEATURES", "feature_matrix"):
        if not hasattr(module, attr):
            raise AttributeError(f"feature module {dotted} lacks {attr}")
    return cast(FeatureModule, module)
