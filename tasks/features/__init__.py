"""Job feature modules. Each declares FEATURE_VERSION, FEATURES and feature_matrix(); training and
scoring both go through the same module, so the two cannot drift apart. A job spec either names a
Python module (`feature_module`) or declares tabular features itself (`features`, the models of
tasks/features/config.py, computed by tasks/features/declared.py); `job_features` gives either as a FeatureModule.

A module may also declare FEATURE_KINDS (feature → "numeric" | "boolean" | "categorical"; unnamed
features are numeric) and CATEGORIES (categorical feature → the category each code 0, 1, … stands
for), which drift, reason texts and registration read through `feature_kinds` / `feature_categories`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Protocol, cast

import numpy as np
import polars as pl

from tasks.contracts import FeatureKind
from tasks.features.config import DeclaredFeatures as DeclaredFeaturesSpec


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


class FeatureSource(Protocol):
    """What `job_features` reads of a job spec: its declared features or the name of its feature module (a
    JobSpec is one; features sit below the spec in the house and do not import it)."""

    @property
    def features(self) -> DeclaredFeaturesSpec | None: ...

    @property
    def feature_module(self) -> str | None: ...


def job_features(spec: FeatureSource) -> FeatureModule:
    """The features of a job: the ones its spec declares, or its Python feature module."""
    if spec.features is not None:
        from tasks.features.declared import DeclaredFeatures

        return DeclaredFeatures(spec.features)
    assert spec.feature_module is not None, "JobSpec validation gives a job exactly one source of features"
    return load_feature_module(spec.feature_module)


def feature_kinds(features: FeatureModule) -> dict[str, FeatureKind]:
    """Every model feature of the module with its kind; numeric unless the module says otherwise."""
    declared = getattr(features, "FEATURE_KINDS", {})
    return {name: declared.get(name, "numeric") for name in features.FEATURES}


def feature_categories(features: FeatureModule) -> dict[str, tuple[str, ...]]:
    """Categorical feature → the category that code 0, 1, … stands for (only those the module declares)."""
    return {name: tuple(values) for name, values in getattr(features, "CATEGORIES", {}).items()}
