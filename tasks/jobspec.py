"""Typed job specs: `jobs/<job>.yaml` loaded into pydantic models, validated at load time."""

from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tasks.errors import JobSpecError
from tasks.features import FeatureKind
from tasks.prediction.decisions import predict_rule_table_problems
from tasks.settings import Settings
from tasks.sinks.config import SinksConfig
from tasks.sources.config import SourceConfig

RuleField = Literal["probability", "probability_low", "probability_high", "score"]
FallbackKind = Literal[
    "guard_repair", "quarantine", "fallback_model", "failed_chunk", "no_adverse_reason", "reasons_by_xgboost", "no_drift_reference"
]
Comparison = Literal["lt", "le", "gt", "ge"]


NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
"""Job and model names: they become folder names and table keys, so nothing else is allowed."""
VERSION_PATTERN = r"^(latest|[A-Za-z0-9][A-Za-z0-9._-]{0,63})$"
FEATURE_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$"
"""Model feature names: XGBoost and ONNX refuse `[`, `]`, `<`, commas and spaces in them; a raw column
with such a name keeps it as the feature's `source`."""
TRUE_VALUES = ("true", "yes", "y", "1")
FALSE_VALUES = ("false", "no", "n", "0")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeclaredColumn(_Strict):
    """One model feature computed from one raw column, in a job spec's `features.columns`."""

    name: str = Field(pattern=FEATURE_NAME_PATTERN, description="Feature name: the model's input column and the reason-code key.")
    source: str | None = Field(
        default=None, min_length=1, description="Raw column the feature is computed from; default: the feature's name."
    )
    kind: FeatureKind = Field(
        default="numeric",
        description="numeric: the number as it is; boolean: true/false values → 1/0; categorical: the position in `categories`.",
    )
    clip: tuple[float | None, float | None] | None = Field(
        default=None, description="numeric only: [low, high] a value is clipped to; null leaves that side open."
    )
    true_values: tuple[str, ...] | None = Field(
        default=None,
        description=f"boolean only: raw values that mean 1, compared case-insensitively; default {list(TRUE_VALUES)}.",
    )
    false_values: tuple[str, ...] | None = Field(
        default=None,
        description=f"boolean only: raw values that mean 0, compared case-insensitively; default {list(FALSE_VALUES)}.",
    )
    categories: tuple[str, ...] | None = Field(
        default=None,
        description="categorical only (and required there): the category that code 0, 1, … stands for; any other value is missing.",
    )

    @field_validator("true_values", "false_values", "categories", mode="before")
    @classmethod
    def _numbers_as_text(cls, value: object) -> object:
        # `categories: [36, 60]` or `true_values: [1]` in YAML are numbers; they match the raw values' text.
        if isinstance(value, list | tuple):
            return tuple(str(v).lower() if isinstance(v, bool) else str(v) if isinstance(v, int | float) else v for v in value)
        return value

    @property
    def raw_column(self) -> str:
        return self.source or self.name

    @property
    def truthy(self) -> tuple[str, ...]:
        return tuple(v.strip().lower() for v in (self.true_values or TRUE_VALUES))

    @property
    def falsy(self) -> tuple[str, ...]:
        return tuple(v.strip().lower() for v in (self.false_values or FALSE_VALUES))

    @model_validator(mode="after")
    def _options_fit_the_kind(self) -> DeclaredColumn:
        given = {
            option
            for option in ("clip", "true_values", "false_values", "categories")
            if getattr(self, option) is not None
        }
        allowed = {"numeric": {"clip"}, "boolean": {"true_values", "false_values"}, "categorical": {"categories"}}[self.kind]
        if given - allowed:
            raise ValueError(
                f"feature {self.name!r} (kind {self.kind}) cannot take {sorted(given - allowed)}; "
                f"a {self.kind} feature takes {sorted(allowed)}"
            )
        if self.kind == "categorical":
            if not self.categories:
                raise ValueError(f"feature {self.name!r} is categorical and needs `categories`: the values that codes 0, 1, … stand for")
            repeated = sorted({c for c in self.categories if self.categories.count(c) > 1})
            if repeated:
                raise ValueError(f"feature {self.name!r} lists categories more than once: {repeated}")
        if self.kind == "boolean":
            if any(values is not None and not values for values in (self.true_values, self.false_values)):
                raise ValueError(f"feature {self.name!r}: true_values and false_values must not be empty")
            both = sorted(set(self.truthy) & set(self.falsy))
            if both:
                raise ValueError(f"feature {self.name!r}: values {both} are in both true_values and false_values")
        if self.clip is not None:
            low, high = self.clip
            if low is not None and high is not None and low > high:
                raise ValueError(f"feature {self.name!r}: clip low {low} is above high {high}")
        return self


class DeclaredFeatures(_Strict):
    """Tabular features declared in the job spec instead of a Python feature module (tasks/features/declared.py)."""

    version: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="FEATURE_VERSION: a registered model must have been trained on this version; bump it when a column changes.",
    )
    columns: tuple[DeclaredColumn, ...] = Field(min_length=1, description="The model's features, in the model's input order.")

    @field_validator("columns")
    @classmethod
    def _unique_names(cls, value: tuple[DeclaredColumn, ...]) -> tuple[DeclaredColumn, ...]:
        names = [c.name for c in value]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"feature names must be unique; repeated: {repeated}")
        return value


class FeatureModelRef(_Strict):
    name: str = Field(pattern=NAME_PATTERN, description="Model in the registry whose one output per row becomes a feature.")
    version: str = Field(default="latest")
    output_feature: str = Field(description="Name of that feature in the final model's input.")


class ModelRef(_Strict):
    name: str = Field(pattern=NAME_PATTERN, description="Model name in the registry, `data/models/<name>/`.")
    version: str = Field(default="latest", pattern=VERSION_PATTERN, description="A registry version, or `latest`.")
    fallback_version: str | None = Field(
        default=None, pattern=VERSION_PATTERN, description="Version that scores when `version` cannot be loaded; its rows are counted as fallbacks."
    )
    feature_models: list[FeatureModelRef] = Field(
        default_factory=list, description="Models run first on the feature matrix (e.g. an autoencoder's error)."
    )


class InferenceConfig(_Strict):
    device: Literal["auto", "cpu", "cuda"] = Field(default="cpu", description="Where the engines run.")
    nthread: int = Field(default=0, ge=0, description="Engine threads; 0 lets the engine use every core.")
    retries: int = Field(default=1, ge=0, le=10, description="Further attempts of a chunk whose inference failed.")
    max_failed_share: float = Field(
        default=0.0, ge=0, le=1, description="Largest share of rows in chunks that failed every attempt before the run fails."
    )


class ScoreConfig(_Strict):
    base_probability: float = Field(gt=0, lt=1, description="Probability that maps to score 50.")
    points_to_double_odds: float = Field(gt=0, description="Score points per doubling of the odds.")


class ThresholdRule(_Strict):
    id: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$", description="Stable id stored with every decision.")
    description: str = ""
    when: dict[RuleField, dict[Comparison, float]] = Field(
        default_factory=dict, description="All conditions must hold; empty means always."
    )
    decision: str = Field(min_length=1)

    @field_validator("when")
    @classmethod
    def _reachable_thresholds(cls, value: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        # A threshold outside the field's range makes the condition always or never true: a typo, not a rule.
        bad = {
            f"{name}.{op}": threshold
            for name, comparisons in value.items()
            for op, threshold in comparisons.items()
            if not (0 <= threshold <= (100 if name == "score" else 1))
        }
        if bad:
            raise ValueError(f"thresholds outside 0..1 (probabilities) or 0..100 (score): {bad}")
        return value


class ReasonBands(_Strict):
    """Two texts split at the training median of the feature (the model metadata's reference p50)."""

    low: str = Field(description="Text for a value at or below the training median.")
    high: str = Field(description="Text for a value above the training median.")


class ReasonCuts(_Strict):
    """Texts for the ranges between fixed cut points: texts[0] below cuts[0], texts[i] from cuts[i-1]
    up to (not including) cuts[i], the last from the last cut on."""

    cuts: list[float] = Field(min_length=1, description="Increasing cut points, in the feature's units.")
    texts: list[str] = Field(description="One text per range: len(cuts) + 1.")

    @model_validator(mode="after")
    def _one_text_per_range(self) -> ReasonCuts:
        if any(b <= a for a, b in zip(self.cuts, self.cuts[1:], strict=False)):
            raise ValueError(f"cuts must increase strictly, got {self.cuts}")
        if len(self.texts) != len(self.cuts) + 1:
            raise ValueError(
                f"{len(self.cuts)} cuts make {len(self.cuts) + 1} ranges, so texts needs {len(self.cuts) + 1} entries, got {len(self.texts)}"
            )
        return self


def _value_key(key: object) -> str:
    # YAML reads `1:` as an int and `yes:`/`true:` as a bool; the spec means the value either way.
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


class ReasonCode(_Strict):
    """The business reason for one model feature; its text may depend on the row's value of it.

    `text` is the default: for a missing value, and for a value no variant covers. At most one of
    `by_band` (numeric: low / high around the training median), `by_cut` (numeric: ranges between
    fixed cuts) or `by_value` (one text per value: a category name of a categorical feature, 0/1 or
    true/false of a boolean, a number of a numeric one).
    """

    code: str
    text: str = Field(description="Default text: missing value, or a value no variant below covers.")
    by_band: ReasonBands | None = None
    by_cut: ReasonCuts | None = None
    by_value: dict[str, str] | None = Field(default=None, description="Value (category name, 0/1, number) → text.")

    @field_validator("text", mode="before")
    @classmethod
    def _text_not_a_yaml_boolean(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError(f"is {value!r}: YAML reads an unquoted yes/no/on/off/true/false as a boolean; put the text in quotes")
        return value

    @field_validator("by_value", mode="before")
    @classmethod
    def _keys_as_text(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        for key, text in value.items():
            if isinstance(text, bool):
                raise ValueError(f"text of {key!r} is {text!r}: YAML reads an unquoted yes/no/on/off as a boolean; put the text in quotes")
        keys = [_value_key(k) for k in value]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise ValueError(f"names the same value more than once: {repeated}")
        return {_value_key(k): v for k, v in value.items()}

    @model_validator(mode="after")
    def _one_variant(self) -> ReasonCode:
        given = [name for name in ("by_band", "by_cut", "by_value") if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of by_band, by_cut, by_value; got {', '.join(given)}")
        return self

    @property
    def varies(self) -> bool:
        """Whether the text depends on the row's value."""
        return self.by_band is not None or self.by_cut is not None or self.by_value is not None


class ReasonConfig(_Strict):
    top_k: int = Field(default=3, ge=1, le=10)
    for_decisions: list[str] = Field(description="Decisions whose rows get reason codes.")
    no_adverse_code: str = Field(description="Code given when no feature pushes toward the event.")
    no_adverse_text: str
    codes: dict[str, ReasonCode] = Field(description="Model feature → business reason.")


class PredictionConfig(_Strict):
    event: str = Field(description="The adverse outcome the probability is about, in words.")
    interval_level: float = Field(default=0.90, gt=0, lt=1)
    score: ScoreConfig
    rules: list[ThresholdRule] = Field(min_length=1)
    reasons: ReasonConfig

    @model_validator(mode="after")
    def _rules_decide_every_row(self) -> PredictionConfig:
        ids = [r.id for r in self.rules]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"rule ids must be unique; repeated: {dupes}")
        catch_all = [r.id for r in self.rules if not r.when]
        if catch_all and catch_all != [self.rules[-1].id]:
            raise ValueError(
                "only the last rule may go without `when` (it then takes every row no other rule takes); "
                f"rules without `when`: {catch_all}, last rule: {self.rules[-1].id}"
            )
        problems = predict_rule_table_problems(self.rules, self.score)
        if problems:
            raise ValueError("every row must match exactly one rule: " + "; ".join(problems))
        decisions = {r.decision for r in self.rules}
        unknown = sorted(set(self.reasons.for_decisions) - decisions)
        if unknown:
            raise ValueError(f"reasons.for_decisions names decisions no rule makes: {unknown}")
        return self


class DriftConfig(_Strict):
    psi_warn: float = Field(default=0.1, gt=0)
    psi_alert: float = Field(default=0.25, gt=0)
    ks_warn: float = Field(default=0.1, gt=0, le=1)
    ks_alert: float = Field(default=0.2, gt=0, le=1)
    require_reference: bool = Field(
        default=True,
        description=(
            "Refuse a model whose metadata has no training reference statistics. false scores it anyway: drift "
            "against training is skipped and the fallback report gets a `no_drift_reference` row."
        ),
    )


class Limits(_Strict):
    max_repaired_share: float = Field(default=0.2, ge=0, le=1, description="Largest share of rows repaired.")
    max_quarantined_share: float = Field(default=0.05, ge=0, le=1, description="Largest share quarantined.")
    min_rows: int = Field(
        default=1, ge=0, description="Fewest raw rows a partition may have; 0 accepts an empty partition."
    )
    max_fallback_share: dict[FallbackKind, float] = Field(
        default_factory=dict,
        description="Largest share of rows read per fallback kind (see tasks/quality/fallback_report.py) before the run fails.",
    )

    @field_validator("max_fallback_share")
    @classmethod
    def _shares(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {k: v for k, v in value.items() if not 0 <= v <= 1}
        if bad:
            raise ValueError(f"shares must lie in 0..1, got {bad}")
        return value


class DecisionTolerance(_Strict):
    """How far a partition's measure may move from its trailing-window mean before it is flagged."""

    decision_share: float = Field(default=0.05, gt=0, le=1, description="Share of rows per decision.")
    rule_share: float = Field(default=0.05, gt=0, le=1, description="Share of rows per threshold rule.")
    straddling_share: float = Field(default=0.05, gt=0, le=1, description="Share of intervals straddling a cut-off.")
    expected_event_rate: float = Field(default=0.02, gt=0, le=1, description="Mean calibrated probability.")
    score_mean: float = Field(default=5.0, gt=0, description="Mean score, in score points.")


class LabelSource(_Strict):
    """Where realized outcomes come from: `data/labels/<job>/date=D/*.parquet`, and a warehouse table if named.

    A labels partition `date=D` (or the table's `partition_date`) holds the outcomes of the
    entities scored in partition D.
    """

    entity_column: str = Field(default="entity_id", description="Column with the scored entity's id.")
    outcome_column: str = Field(default="outcome", description="Column with the outcome: 1 the event happened, 0 it did not.")
    observed_date_column: str = Field(default="observed_date", description="Column with the date the outcome was observed.")
    table: str | None = Field(
        default=None,
        pattern=r"^[a-z_][a-z0-9_]*$",
        description="Warehouse table with the same columns plus `partition_date` (and `job`, if several jobs share it).",
    )


class MonitoringConfig(_Strict):
    """Decision monitoring per partition (tasks/monitoring/decisions.py) and realized outcomes (tasks/monitoring/outcomes.py)."""

    window_days: int = Field(
        default=28, ge=1, le=366, description="Trailing window of previous partitions a partition is compared with."
    )
    tolerance: DecisionTolerance = DecisionTolerance()
    adverse_decisions: list[str] | None = Field(
        default=None,
        description="Decisions whose precision and recall are measured on outcomes; default: prediction.reasons.for_decisions.",
    )
    labels: LabelSource = LabelSource()
    outcome_interval_level: float = Field(
        default=0.95, gt=0, lt=1, description="Level of the Clopper-Pearson interval of the observed event rate."
    )
    calibration_bins: int = Field(
        default=10, ge=2, le=100, description="Equal-width probability bins of the calibration curve and the ECE."
    )
    lookback_days: int = Field(
        default=35, ge=1, le=3660, description="Partitions a scheduled outcomes run revisits, ending yesterday."
    )


class JobSpec(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    entity_column: str
    feature_module: str | None = Field(
        default=None, description="Python module with FEATURE_VERSION, FEATURES and feature_matrix(); or give `features`."
    )
    features: DeclaredFeatures | None = Field(
        default=None, description="Tabular features declared here, computed without Python; or give `feature_module`."
    )
    expectation_suite: str = Field(description="File name under `expectations/`.")
    source: SourceConfig | None = Field(
        default=None, description="Where raw partitions live; none reads Parquet under `data/raw/<job>/date=<date>/`."
    )
    sinks: SinksConfig = Field(default_factory=SinksConfig, description="Outputs besides the Parquet store and the warehouse.")
    model: ModelRef
    chunk_rows: int = Field(default=50_000, ge=1, description="Rows per Arrow chunk.")
    inference: InferenceConfig = InferenceConfig()
    prediction: PredictionConfig
    limits: Limits = Limits()
    drift: DriftConfig = DriftConfig()
    monitoring: MonitoringConfig = MonitoringConfig()
    service_level: str = Field(
        default="Scored nightly at 02:00 (deployment `nightly`); a failed night is re-run from the UI the same day.",
        description="When consumers can rely on the outputs; printed in the model card.",
    )

    @model_validator(mode="after")
    def _one_source_of_features(self) -> JobSpec:
        if (self.feature_module is None) == (self.features is None):
            given = "both" if self.features is not None else "neither"
            raise ValueError(
                f"give exactly one of `feature_module` (a Python module) and `features` (columns declared in the spec); got {given}"
            )
        return self

    @model_validator(mode="after")
    def _adverse_decisions_exist(self) -> JobSpec:
        decisions = {r.decision for r in self.prediction.rules}
        unknown = sorted(set(self.monitoring.adverse_decisions or ()) - decisions)
        if unknown:
            raise ValueError(f"monitoring.adverse_decisions names decisions no rule makes: {unknown}")
        return self

    @property
    def adverse_decisions(self) -> list[str]:
        """Decisions whose precision and recall are measured against outcomes."""
        if self.monitoring.adverse_decisions is not None:
            return list(self.monitoring.adverse_decisions)
        return list(self.prediction.reasons.for_decisions)

    @field_validator("expectation_suite")
    @classmethod
    def _plain_file_name(cls, value: str) -> str:
        if Path(value).name != value or not value.endswith(".json"):
            raise ValueError(f"expectation_suite must be a .json file name under expectations/, got {value!r}")
        return value


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key: plain `safe_load` keeps the last
    value silently, so a spec edited twice in one place would score with whichever came last."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} on line {line} (first on line {seen[key]})", key_node.start_mark
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def loaded_yaml(path: Path) -> object:
    """The YAML document in `path`, read with UniqueKeyLoader; the product reads every user YAML this way."""
    with path.open(encoding="utf-8") as fh:
        return yaml.load(fh, Loader=UniqueKeyLoader)  # noqa: S506  (a SafeLoader subclass)


def configured_jobs(settings: Settings) -> list[str]:
    """Names of the jobs that have a spec in the jobs folder, sorted."""
    return sorted(p.stem for p in settings.jobs_dir.glob("*.yaml"))


def checked_job_name(job: object, settings: Settings) -> str:
    """`job` if it names a configured job; anything else (a path, a NUL byte, an unknown name) is
    refused before it is used in a path, a query or a log line."""
    if not isinstance(job, str) or not re.fullmatch(NAME_PATTERN, job):
        raise JobSpecError(f"job name {str(job)[:80]!r} is not allowed: use lower-case letters, digits and _ (at most 64)")
    if job not in configured_jobs(settings):
        raise JobSpecError(f"unknown job {job!r}; configured jobs: {', '.join(configured_jobs(settings)) or 'none'}")
    return job


def job_spec_path(job: str, settings: Settings) -> Path:
    return settings.jobs_dir / f"{job}.yaml"


def job_spec_document(job: str, settings: Settings) -> object:
    """The parsed YAML of `job`'s spec, not yet validated; JobSpecError when the name, the file or
    its YAML is unusable."""
    checked_job_name(job, settings)
    path = job_spec_path(job, settings)
    if not path.is_file():
        raise JobSpecError(
            f"unknown job {job!r}: no {path}; configured jobs: {', '.join(configured_jobs(settings)) or 'none'}"
        )
    try:
        return loaded_yaml(path)
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())
        raise JobSpecError(f"job spec {path} is not valid YAML: {problem}") from None
    except UnicodeDecodeError as exc:
        raise JobSpecError(f"job spec {path} is not UTF-8 text: {exc}") from None


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The spec model that holds the last key of `loc`, following fields, list items and dict values."""
    current: object = JobSpec
    for part in loc:
        while typing.get_origin(current) in (typing.Union, types.UnionType):
            current = next(a for a in typing.get_args(current) if a is not type(None))
        if isinstance(current, type) and issubclass(current, BaseModel) and part in current.model_fields:
            current = current.model_fields[part].annotation
        elif typing.get_origin(current) is list and isinstance(part, int):
            current = typing.get_args(current)[0]
        elif typing.get_origin(current) is dict:
            current = typing.get_args(current)[1]
        else:
            return None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def spec_field_problems(error: ValidationError) -> list[tuple[str, str]]:
    """(field, problem naming the value) for each error pydantic found in a job spec; an unknown key
    is named with the keys allowed there and the closest of them."""
    problems = []
    for err in error.errors(include_url=False):
        loc = tuple(err["loc"])
        field = ".".join(str(p) for p in loc) or "spec"
        if err["type"] == "extra_forbidden":
            holder = _model_at(loc[:-1])
            allowed = sorted(holder.model_fields) if holder else []
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            problems.append((field, (
                f"unknown key {loc[-1]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                + (f"; allowed here: {', '.join(allowed)}" if allowed else "")
            )))
            continue
        # A value refused for carrying credentials is not echoed: the secret would reach the terminal and the ledger.
        secret = "carries credentials" in err["msg"]
        shown = "" if secret or isinstance(err["input"], dict | list) else f" (got {err['input']!r})"
        problems.append((field, err["msg"].removeprefix("Value error, ") + shown))
    return problems


def load_job_spec(job: str, settings: Settings) -> JobSpec:
    """The validated spec of `job`; a clear error names the file and the problem."""
    raw = job_spec_document(job, settings)
    path = job_spec_path(job, settings)
    try:
        spec = JobSpec.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{field}: {problem}" for field, problem in spec_field_problems(exc))
        raise JobSpecError(f"job spec {path} is invalid: {problems}") from None
    if spec.name != job:
        raise JobSpecError(f"job spec {path} declares name {spec.name!r}; it must match the file name {job!r}")
    return spec
