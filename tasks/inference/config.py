"""The job spec's model references (`model:`) and engine settings (`inference:`): which registry
versions score, with which fallback and feature models, on which device, with how many threads and
retries. The inference layer owns these models; tasks/jobspec.py composes them into the job spec.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
"""Model names (and job names, which the job spec checks with the same rule): they become folder
names and table keys, so nothing else is allowed."""
VERSION_PATTERN = r"^(latest|[A-Za-z0-9][A-Za-z0-9._-]{0,63})$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FeatureModelRef(_Strict):
    name: str = Field(
        pattern=NAME_PATTERN, description="Model in the registry whose one output per row becomes a feature."
    )
    version: str = Field(default="latest")
    output_feature: str = Field(description="Name of that feature in the final model's input.")


class ModelRef(_Strict):
    name: str = Field(pattern=NAME_PATTERN, description="Model name in the registry, `data/models/<name>/`.")
    version: str = Field(default="latest", pattern=VERSION_PATTERN, description="A registry version, or `latest`.")
    fallback_version: str | None = Field(
        default=None,
        pattern=VERSION_PATTERN,
        description="Version that scores when `version` cannot be loaded; its rows are counted as fallbacks.",
    )
    feature_models: list[FeatureModelRef] = Field(
        default_factory=list, description="Models run first on the feature matrix (e.g. an autoencoder's error)."
    )
    challenger: str | None = Field(
        default=None,
        pattern=VERSION_PATTERN,
        description=(
            "A version or alias (e.g. `challenger`) scored in the same pass as a shadow: its predictions go to "
            "`shadow_predictions` and the decisions it would flip to `decision_flips`; none of them drives a decision."
        ),
    )
    challenger_failure: Literal["count", "fail"] = Field(
        default="count",
        description=(
            "What a challenger that cannot load or score does to the run: `count` scores the champion anyway and counts "
            "the challenger's rows in the fallback report (`challenger_failed`); `fail` fails the run."
        ),
    )


class InferenceConfig(_Strict):
    device: Literal["auto", "cpu", "cuda"] = Field(default="cpu", description="Where the engines run.")
    nthread: int = Field(default=0, ge=0, description="Engine threads; 0 lets the engine use every core.")
    retries: int = Field(default=1, ge=0, le=10, description="Further attempts of a chunk whose inference failed.")
    max_failed_share: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Largest share of rows in chunks that failed every attempt before the run fails.",
    )
