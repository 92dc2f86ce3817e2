"""Model registry on disk: `<registry>/<name>/<version>/` holds the model file and `metadata.json`.

Only formats that cannot execute code on load are accepted (XGBoost `.ubj` / `.json`, LightGBM's model
text `.txt`, CatBoost `.cbm`, scikit-learn through skops `.skops` with its trusted-types check, ONNX),
the file must look like its format, and its sha256 must match its metadata, so a pickle, a
truncated or a swapped file never scores a row.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from tasks.errors import FeatureVersionMismatch, JobProblem, ModelArtifactError
from tasks.inference.aliases import ALIASES_FILE, inference_model_aliases

Framework = Literal["xgboost", "lightgbm", "catboost", "sklearn", "onnx"]
FRAMEWORK_OF_SUFFIX: dict[str, Framework] = {
    ".ubj": "xgboost",
    ".json": "xgboost",
    ".txt": "lightgbm",
    ".cbm": "catboost",
    ".skops": "sklearn",
    ".onnx": "onnx",
}
ACCEPTED_MODEL_SUFFIXES = tuple(FRAMEWORK_OF_SUFFIX)
EXTRA_OF_FRAMEWORK: dict[str, tuple[str, str]] = {
    "lightgbm": ("lightgbm", "lightgbm"),
    "catboost": ("catboost", "catboost"),
    "sklearn": ("skops", "sklearn"),
}
"""Framework → (the module its engine imports, the optional extra that installs it)."""
ReferenceKind = Literal["numeric", "boolean", "categorical"]
"""tasks.features.FeatureKind, spelled out: the registry may not import tasks.features, whose type
hints reach the job spec and through it the prediction layer (an import-linter contract)."""
_PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib", ".sav", ".pt", ".pth", ".bin", ".model")


def inference_model_file_problem(path: Path, framework: str) -> str | None:
    """Why the file's first bytes do not belong to its format, or None when they do."""
    with path.open("rb") as fh:
        head = fh.read(2)
    if head[:1] == b"\x80" and head[1:2] and head[1] <= 5:
        return "is a pickle, which executes code when loaded"
    if not head:
        return "is empty"
    if framework == "xgboost" and head[:1] != b"{":
        return "does not start like an XGBoost JSON/UBJSON model"
    if framework == "onnx" and head[:1] != b"\x08":
        return "does not start like an ONNX protobuf (ir_version field)"
    if framework in ("lightgbm", "catboost", "sklearn"):
        with path.open("rb") as fh:
            head = fh.read(4)
        if framework == "lightgbm" and head != b"tree":
            return "does not start like a LightGBM model text file (Booster.save_model writes `tree` first)"
        if framework == "catboost" and head != b"CBM1":
            return "does not start like a CatBoost model (save_model(..., format='cbm') writes `CBM1` first)"
        if framework == "sklearn" and head != b"PK\x03\x04":
            return "does not start like a skops file (skops.io.dump writes a zip archive)"
    return None


def inference_framework_module(framework: str, model_path: Path | None = None):  # noqa: ANN201  (the imported module)
    """The module a framework's engine needs, imported; a missing optional extra is a broken environment (exit 3)."""
    import importlib

    from tasks.errors import MissingExtra

    module, extra = EXTRA_OF_FRAMEWORK.get(framework, (framework, framework))
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        what = f"model file {model_path}" if model_path is not None else "a model"
        raise MissingExtra(
            f"{what} is a {framework} model, but {module} is not installed here ({exc}); install the extra: pip install '.[{extra}]'"
        ) from None


class ReferenceStats(BaseModel):
    """Training distribution of one feature, kept for drift checks.

    Numeric features are binned on `drift_edges`; boolean and categorical ones on `categories`
    (one bin each, then one for values the reference never had). Metadata written before kinds
    existed has neither `kind` nor `categories` and reads as numeric.
    """

    count: int
    null_count: int
    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    kind: ReferenceKind = Field(
        default="numeric", description="How drift bins the feature: on percentiles, or one bin per value."
    )
    quantiles: dict[str, float] = Field(default_factory=dict)
    bin_edges: list[float] = Field(default_factory=list)
    bin_counts: list[int] = Field(default_factory=list)
    drift_edges: list[float] = Field(
        default_factory=list, description="Numeric: ~100 quantile edges that drift reports bin on."
    )
    drift_counts: list[int] = Field(
        default_factory=list,
        description="Training counts on the drift bins: numeric (underflow, bins, overflow); otherwise one per category, then unseen (0).",
    )
    psi_edges: list[float] = Field(
        default_factory=list, description="Numeric: the deciles among drift_edges that PSI is computed on."
    )
    categories: list[float] = Field(
        default_factory=list,
        description="Boolean / categorical: the values (codes) the feature took in the reference, ascending.",
    )

    @model_validator(mode="after")
    def _drift_bins_fit(self) -> ReferenceStats:
        has_values = self.count > self.null_count
        if self.kind != "numeric":
            if self.drift_edges or self.psi_edges:
                raise ValueError(
                    f"a {self.kind} feature is binned on categories; drift_edges and psi_edges must be empty"
                )
            if not self.categories and has_values:
                raise ValueError(f"categories is missing or empty, but the {self.kind} feature has training values")
            if any(b <= a for a, b in zip(self.categories, self.categories[1:], strict=False)):
                raise ValueError("categories must increase strictly")
            if self.categories and len(self.drift_counts) != len(self.categories) + 1:
                raise ValueError(
                    f"drift_counts has {len(self.drift_counts)} counts for {len(self.categories)} categories "
                    f"(want {len(self.categories) + 1}: one per category, then unseen)"
                )
            return self
        if self.categories:
            raise ValueError("categories is for boolean and categorical features; this one is numeric")
        # A feature that was null in every training row has no distribution to bin; any other needs its edges.
        if not self.drift_edges and has_values:
            raise ValueError("drift_edges is missing or empty, but the feature has training values")
        if self.drift_edges and len(self.drift_counts) != len(self.drift_edges) + 1:
            raise ValueError(
                f"drift_counts has {len(self.drift_counts)} counts for {len(self.drift_edges)} drift_edges "
                f"(want {len(self.drift_edges) + 1}: underflow, bins, overflow)"
            )
        if any(b <= a for a, b in zip(self.drift_edges, self.drift_edges[1:], strict=False)):
            raise ValueError("drift_edges must increase strictly")
        if not set(self.psi_edges) <= set(self.drift_edges):
            raise ValueError("psi_edges must be among drift_edges")
        return self


PROBABILITY_CLIP = 1e-7
"""A probability output becomes the margin logit(p) with p clipped to [PROBABILITY_CLIP, 1 − PROBABILITY_CLIP]
(margins within ±16.1): ONNX Runtime computes in float32, where a confident model's probability rounds to
exactly 0 or 1, whose logit is infinite; 1e-7 is about the float32 spacing just below 1."""


class OnnxOutput(BaseModel):
    """Which output of an ONNX graph scores a row, and how its value becomes the margin; chosen at
    registration (`tasks/inference/onnx_outputs.py`) so that scoring takes exactly what was calibrated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: Literal["probability", "zipmap", "margin", "exp", "class_probabilities", "class_zipmap"] = Field(
        description=(
            "`probability`: a float tensor of probabilities, N×K or one per row; `zipmap`: a sequence of {class: probability} "
            "maps (skl2onnx's default); `margin`: one raw score per row (for a forecast job, the forecast itself), taken as it is; "
            "`exp`: a forecast job's one value per row that an Exp node computes (a Poisson, gamma or Tweedie regressor), whose "
            "log is the margin. A multiclass job's: `class_probabilities`, an N×K tensor of every class's probability, and "
            "`class_zipmap`, the same as {class: probability} maps read in `classes` order; the margins are their logs."
        )
    )
    event_index: int | None = Field(
        default=None, ge=0, description="The column holding the event's probability; None: one value per row."
    )
    event_label: int | str | None = Field(
        default=None, description="The class label whose probability is the event's (a ZipMap key)."
    )
    classes: list[int | str] = Field(
        default_factory=list, description="The class labels the graph declares, in its order."
    )
    clip: float | None = Field(
        default=None, gt=0, lt=0.5, description="Probability kinds: p is clipped to [clip, 1 − clip] before its logit."
    )

    @model_validator(mode="after")
    def _complete(self) -> OnnxOutput:
        if self.kind == "zipmap" and self.event_label is None:
            raise ValueError("a zipmap output needs the event_label whose probability is taken")
        if self.kind == "class_zipmap" and not self.classes:
            raise ValueError("a class_zipmap output needs the classes whose probabilities are read, in order")
        if self.kind in ("probability", "zipmap", "class_probabilities", "class_zipmap") and self.clip is None:
            raise ValueError(f"a {self.kind} output needs the clip its probabilities' logits are taken with")
        return self


class SklearnOutput(BaseModel):
    """How a scikit-learn estimator's output becomes the margin; chosen at registration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["decision_function", "predict_proba", "predict", "raw_predict"] = Field(
        description=(
            "Classifiers: `decision_function`, the log-odds the model itself computes (boosting, linear models); `predict_proba`, the "
            "event's probability (forests), whose clipped logit is the margin. Regressors: `predict`, the forecast itself; "
            "`raw_predict`, the log of the forecast a log-link regressor computes it from (a Poisson, gamma or Tweedie GLM's linear "
            "predictor, a HistGradientBoostingRegressor's raw prediction)."
        )
    )
    event_index: int | None = Field(
        default=None,
        ge=0,
        description="Classifiers: the column of predict_proba (and the class of classes_) that is the event.",
    )
    classes: list[int | str | bool] = Field(default_factory=list, description="The estimator's classes_, in its order.")
    clip: float | None = Field(
        default=None, gt=0, lt=0.5, description="predict_proba: p is clipped to [clip, 1 − clip] before its logit."
    )


class ModelExplanation(BaseModel):
    """How the model's rows get reasons, settled and checked at registration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["treeshap", "linear", "none"] = Field(
        description="`treeshap`: exact path-dependent TreeSHAP of the trees; `linear`: coefficient × (value − reference mean); `none`: no reasons."
    )
    scale: Literal["margin", "probability"] = Field(
        default="margin",
        description="What the contributions add up to: the margin, or the event's probability (forests average probabilities).",
    )
    checked_against: str = Field(
        default="", description="What the contributions were checked against at registration, in words."
    )
    max_abs_diff: float | None = Field(default=None, description="The largest difference found in that check.")
    reference_mean: list[float] = Field(
        default_factory=list, description="`linear`: the mean of each input column on the reference rows."
    )
    node_cover: list[float] = Field(
        default_factory=list,
        description="ONNX trees: each node's count of reference rows, the cover TreeSHAP weighs with (the graph keeps none).",
    )
    cover_rows: int | None = Field(
        default=None, description="ONNX trees: how many reference rows `node_cover` counted."
    )
    detail: str = Field(default="", description="`none`: why the model has no reasons.")


class ModelMetadata(BaseModel):
    """What the registry knows about one model version; written at training time."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    name: str
    version: str
    framework: Framework
    model_file: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    feature_version: str
    features: list[str]
    feature_dtypes: dict[str, str]
    calibration: dict[str, Any] = Field(
        default_factory=dict,
        description="Fitted on held-out data; read by the prediction layer. Empty for feature models.",
    )
    reference: dict[str, ReferenceStats] = Field(default_factory=dict)
    health: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "What model health is measured against, from the reference rows at registration: `pca` (standardization, "
            "components, the reconstruction error's mean and spread) and `attribution` (mean |contribution| per feature). "
            "Empty for models registered before it: their partitions get no attribution or multivariate drift rows."
        ),
    )
    training: dict[str, Any] = Field(default_factory=dict, description="Window, rows, seed, holdout metrics.")
    onnx_output: OnnxOutput | None = Field(
        default=None,
        description="ONNX only: the output that scores and how. None (feature models, versions registered before it): output 0, one raw value per row.",
    )
    sklearn_output: SklearnOutput | None = Field(
        default=None, description="scikit-learn only: the method that scores and how."
    )
    skops_trusted: list[str] = Field(
        default_factory=list,
        description="scikit-learn only: the types beyond skops' defaults that the registering user trusted (`score register --trust`).",
    )
    explanation: ModelExplanation | None = Field(
        default=None,
        description="How rows get reasons. None (versions registered before it): XGBoost TreeSHAP, none for ONNX.",
    )
    target: Literal["binary", "regression", "count", "multiclass"] = Field(
        default="binary",
        description="The job kind the model was registered for: a binary classifier, a regressor of a quantity or count, or a multiclass classifier.",
    )
    classes: list[str] = Field(
        default_factory=list,
        description="Multiclass models: the class names in the model's output order (the job's target.classes when it was registered).",
    )
    class_reference: dict[str, Any] = Field(
        default_factory=dict,
        description="Multiclass models: the reference rows' predicted-class shares and mean calibrated probabilities, what class-mix drift is measured against.",
    )
    link: Literal["logit", "identity", "log"] = Field(
        default="logit",
        description="The scale of the model's margin: log-odds (binary), the forecast itself (identity), or its log (Poisson, Tweedie, gamma).",
    )
    interval: dict[str, Any] = Field(
        default_factory=dict,
        description="Forecast models: the split-conformal interval fitted on the hold-out (tasks/prediction/forecasts.py); read by the prediction layer.",
    )
    forecast_reference: ReferenceStats | None = Field(
        default=None,
        description=(
            "Forecast models: the forecasts' distribution on the reference rows, binned as a numeric feature's, which the "
            "partitions' forecast drift is measured against. None (versions registered before it): drift against the previous partition only."
        ),
    )
    error_model_file: str | None = Field(
        default=None,
        description="Forecast models: the error model beside the model file (tasks/inference/error_model.py).",
    )
    error_model_sha256: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$", description="Its checksum, verified at load."
    )

    @field_validator("features")
    @classmethod
    def _unique_features(cls, value: list[str]) -> list[str]:
        repeated = sorted({f for f in value if value.count(f) > 1})
        if repeated:
            raise ValueError(f"repeats {repeated}")
        return value

    @field_validator("feature_dtypes")
    @classmethod
    def _dtypes_of_the_features(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        features = info.data.get("features")
        if features is not None and set(features) != set(value):
            raise ValueError(
                f"must name the same features as `features` ({len(value)} vs {len(features)}); only in features: "
                f"{sorted(set(features) - set(value))}, only in feature_dtypes: {sorted(set(value) - set(features))}"
            )
        return value

    @field_validator("reference")
    @classmethod
    def _reference_of_every_feature(
        cls, value: dict[str, ReferenceStats], info: ValidationInfo
    ) -> dict[str, ReferenceStats]:
        # No reference at all is allowed here (the job spec decides whether it may score without
        # drift); a partial one would silently leave features unmonitored.
        missing = [f for f in info.data.get("features") or () if f not in value]
        if value and missing:
            raise ValueError(f"has no statistics for features {missing}")
        return value


def inference_reasons_unavailable(meta: ModelMetadata) -> str | None:
    """Why the model's rows get no reason codes, or None when its engine computes exact contributions."""
    if meta.explanation is not None:
        if meta.explanation.method != "none":
            return None
        return f"model {meta.name} {meta.version} is {meta.explanation.detail}, which has no exact feature contributions: its rows are scored with reasons off"
    if meta.framework == "onnx":
        return (
            f"model {meta.name} {meta.version} is an ONNX graph, which has no exact feature contributions here: "
            "its rows are scored with reasons off"
        )
    return None


class ModelArtifact(BaseModel):
    model_config = ConfigDict(frozen=True, protected_namespaces=())

    metadata: ModelMetadata
    directory: Path

    @property
    def model_path(self) -> Path:
        return self.directory / self.metadata.model_file


def inference_metadata_field_problems(meta_path: Path, error: ValidationError) -> list[JobProblem]:
    """One problem per field pydantic found wrong in `meta_path`."""
    return [
        JobProblem(
            meta_path,
            ".".join(str(part) for part in item["loc"]) or "(top level)",
            item["msg"].removeprefix("Value error, "),
        )
        for item in error.errors(include_url=False)
    ]


def inference_metadata_problems(meta_path: Path, error: ValidationError) -> str:
    """`<path>: field <loc>: <msg>` for each problem pydantic found, joined on one line."""
    return "; ".join(
        f"{p.file}: field {p.field}: {p.message}" for p in inference_metadata_field_problems(meta_path, error)
    )


def inference_model_checksum(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _version_key(version: str) -> tuple:
    # Numbers sort numerically and before words, so "10" > "9" and "2" < "2.rc1" never compare int to str.
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in version.replace("-", ".").split("."))


def inference_model_versions(registry_dir: Path) -> list[str]:
    """Versions of a model in the registry, oldest first."""
    if not registry_dir.is_dir():
        return []
    return sorted((p.name for p in registry_dir.iterdir() if (p / "metadata.json").is_file()), key=_version_key)


def inference_resolved_version(registry_dir: Path, version: str, versions: list[str] | None = None) -> str:
    """The registered version `version` names: itself, the highest for `latest`, or an alias's target."""
    versions = inference_model_versions(registry_dir) if versions is None else versions
    if version == "latest":
        return versions[-1] if versions else version
    if version in versions:
        return version
    return inference_model_aliases(registry_dir).get(version, version)


def inference_model_artifact(registry_dir: Path, version: str = "latest") -> ModelArtifact:
    """The verified artifact of a model version (`latest` = the highest version)."""
    artifact, problems, message = _checked_artifact(registry_dir, version)
    if artifact is None:
        raise ModelArtifactError(message)
    return artifact


def inference_artifact_problems(
    registry_dir: Path, version: str = "latest"
) -> tuple[ModelArtifact | None, list[JobProblem]]:
    """The verified artifact of a model version, or None and every reason it cannot be trusted:
    each field of its metadata.json that is wrong, else the one check of the model file that failed."""
    artifact, problems, _ = _checked_artifact(registry_dir, version)
    return artifact, problems


def _checked_artifact(registry_dir: Path, version: str) -> tuple[ModelArtifact | None, list[JobProblem], str]:
    """(artifact, problems, the one-line message of ModelArtifactError) of a model version."""

    def refused(file: Path, field: str, message: str) -> tuple[None, list[JobProblem], str]:
        return None, [JobProblem(file, field, message)], message

    versions = inference_model_versions(registry_dir)
    if not versions:
        return refused(
            registry_dir, "version", f"no model versions under {registry_dir}; run `score demo` or train one first"
        )
    try:
        chosen = inference_resolved_version(registry_dir, version, versions)
    except ModelArtifactError as exc:
        return refused(registry_dir / ALIASES_FILE, "(file)", str(exc))
    directory = registry_dir / chosen
    meta_path = directory / "metadata.json"
    if not meta_path.is_file():
        aliases = inference_model_aliases(registry_dir)
        return refused(
            registry_dir,
            "version",
            (
                f"model version {chosen!r} not found under {registry_dir}; versions: {versions}"
                + (f", aliases: {aliases}" if aliases else "")
            ),
        )
    try:
        metadata = ModelMetadata.model_validate(json.loads(meta_path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return refused(meta_path, "(file)", f"model metadata {meta_path} is not JSON: {exc}")
    except ValidationError as exc:
        return (
            None,
            inference_metadata_field_problems(meta_path, exc),
            f"invalid model metadata: {inference_metadata_problems(meta_path, exc)}",
        )
    artifact = ModelArtifact(metadata=metadata, directory=directory)
    path = artifact.model_path
    if path.suffix in _PICKLE_SUFFIXES:
        return refused(
            meta_path,
            "model_file",
            (
                f"model file {path} is a pickle-style format ({path.suffix}), which executes code when loaded; "
                f"export the model as one of {ACCEPTED_MODEL_SUFFIXES}"
            ),
        )
    if path.suffix not in ACCEPTED_MODEL_SUFFIXES:
        return refused(
            meta_path,
            "model_file",
            f"model file {path} has unknown format {path.suffix!r}; accepted: {ACCEPTED_MODEL_SUFFIXES}",
        )
    if FRAMEWORK_OF_SUFFIX[path.suffix] != metadata.framework:
        return refused(
            meta_path,
            "framework",
            f"model file {path} is a {path.suffix} file, but {meta_path} says framework {metadata.framework!r}",
        )
    if not path.is_file():
        return refused(meta_path, "model_file", f"model file {path} named in {meta_path} does not exist")
    problem = inference_model_file_problem(path, metadata.framework)
    if problem:
        return refused(meta_path, "model_file", f"model file {path} {problem}; refusing to load it")
    actual = inference_model_checksum(path)
    if actual != metadata.sha256:
        return refused(
            meta_path,
            "sha256",
            (
                f"model file {path} ({path.stat().st_size} bytes) has sha256 {actual}, but {meta_path} says "
                f"{metadata.sha256}: the file is truncated or was replaced"
            ),
        )
    return artifact, [], ""


def inference_check_feature_version(
    artifact: ModelArtifact, feature_version: str, feature_names: tuple[str, ...]
) -> None:
    """Stop before scoring when the model was trained on other features than the job computes."""
    meta = artifact.metadata
    if meta.feature_version != feature_version:
        raise FeatureVersionMismatch(
            f"model {meta.name} {meta.version} was trained on feature_version {meta.feature_version}, "
            f"but the feature module computes feature_version {feature_version}; retrain or pin a matching model"
        )
    if tuple(meta.features) != feature_names:
        raise FeatureVersionMismatch(
            f"model {meta.name} {meta.version} expects features {meta.features}, the feature module "
            f"({feature_version}) produces {list(feature_names)}"
        )
