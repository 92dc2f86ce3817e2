"""Typed job specs: `jobs/<job>.yaml` loaded into pydantic models, validated at load time.

Each layer owns the models of its section and the spec composes them: `features:` is
tasks/features/config.py, `model:` and `inference:` are tasks/inference/config.py, `prediction:` is
tasks/prediction/config.py, `source:` and `sinks:` are the config modules of tasks/sources and
tasks/sinks. Limits, drift and monitoring stay here, beside the loader.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import Literal

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tasks.errors import JobSpecError
from tasks.features.config import DeclaredFeatures
from tasks.inference.config import NAME_PATTERN, InferenceConfig, ModelRef
from tasks.prediction.config import DecisionWords, PredictionConfig, TargetConfig
from tasks.prediction.decisions import CLASS_FIELDS, predict_class_rule_table_problems, predict_rule_fields
from tasks.prediction.words import JobWords
from tasks.redaction import redacted_text
from tasks.settings import Settings
from tasks.sinks.config import SinksConfig
from tasks.sources.config import SourceConfig

FallbackKind = Literal[
    "guard_repair",
    "quarantine",
    "fallback_model",
    "failed_chunk",
    "no_reason",
    "reasons_by_framework",
    "reasons_unavailable",
    "no_drift_reference",
    "no_health_reference",
    "challenger_failed",
    # Old names still read: `no_adverse_reason` (now `no_reason`), `reasons_by_xgboost` (now `reasons_by_framework`).
    "no_adverse_reason",
    "reasons_by_xgboost",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
    max_run_seconds: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description=(
            "Longest a partition run may take from its start under the lease to its publish; beyond it the run fails "
            '("timed out after N s") with nothing published. None: SCORING_MAX_RUN_SECONDS.'
        ),
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
    forecast_mean: float = Field(
        default=0.10,
        gt=0,
        description="Forecast jobs: mean forecast, relative to the window's mean (0.10: flagged beyond ±10 % of it, in the forecast's unit).",
    )


class LabelSource(_Strict):
    """Where realized outcomes come from: `data/labels/<job>/date=D/*.parquet`, and a warehouse table if named.

    A labels partition `date=D` (or the table's `partition_date`) holds the outcomes of the
    entities scored in partition D.
    """

    entity_column: str = Field(default="entity_id", description="Column with the scored entity's id.")
    outcome_column: str = Field(
        default="outcome",
        description=(
            "Column with the outcome: binary jobs 1 the event happened, 0 it did not; forecast jobs the actual number; "
            "multiclass jobs the class name (one of target.classes)."
        ),
    )
    observed_date_column: str = Field(
        default="observed_date", description="Column with the date the outcome was observed."
    )
    positive: str | None = Field(
        default=None,
        description=(
            'Binary jobs whose labels are not 1/0: the label value that is the event (read as 1), e.g. "Yes", "churned", 2; '
            "compared with the label as text (booleans as true/false, whole numbers without .0). Quote it: YAML reads an "
            "unquoted Yes as true. Without it the outcome must be 1/0 or true/false."
        ),
    )
    negative: str | None = Field(
        default=None,
        description=(
            "With `positive`: the label value that is not the event (read as 0). Any other value is then refused; without it, "
            "one value besides `positive` is read as 0 and a third refused."
        ),
    )
    table: str | None = Field(
        default=None,
        pattern=r"^[a-z_][a-z0-9_]*$",
        description="Warehouse table with the same columns plus `partition_date` (and `job`, if several jobs share it).",
    )

    @field_validator("positive", "negative", mode="before")
    @classmethod
    def _label_text(cls, value: object) -> object:
        # Labels are compared as text: an unquoted YAML `positive: 2` or `positive: true` names the same value as "2" or "true".
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float) and float(value).is_integer():
            return str(int(value))
        return value if not isinstance(value, float) else str(value)

    @model_validator(mode="after")
    def _negative_beside_positive(self) -> LabelSource:
        if self.negative is not None and self.positive is None:
            raise ValueError(
                "monitoring.labels.negative needs monitoring.labels.positive: say which value is the event"
            )
        if self.negative is not None and self.negative == self.positive:
            raise ValueError(
                f"monitoring.labels.positive and negative are both {self.positive!r}: the event and the other value must differ"
            )
        return self


class HealthConfig(_Strict):
    """Model health before labels (tasks/monitoring/health.py), measured inside the scoring pass."""

    enabled: bool = Field(
        default=True, description="false: no model-health rows (estimated performance, attribution, multivariate)."
    )
    interval_level: float = Field(
        default=0.99,
        gt=0,
        lt=1,
        description=(
            "Level of the estimated performance's intervals; a partition is flagged when its realized event rate or AUC "
            "falls outside, so 0.99 keeps a healthy partition's false flags near 2 %."
        ),
    )
    attribution_share: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="Share of scored rows whose TreeSHAP contributions feed attribution drift (1: every row; 0: none).",
    )
    attribution_min_rows: int = Field(
        default=10_000,
        ge=0,
        description="Fewest rows the attribution sample takes, where the partition has them (a larger share on small partitions).",
    )
    attribution_warn: float = Field(
        default=0.05,
        gt=0,
        description="Change of a feature's mean |contribution|, as a share of the reference's total, that warns.",
    )
    attribution_alert: float = Field(default=0.10, gt=0, description="The same change that alerts.")
    multivariate_tolerance: float = Field(
        default=0.10,
        gt=0,
        description="Relative rise of the mean PCA reconstruction error that alerts (when also significant).",
    )
    estimated_error_tolerance: float = Field(
        default=0.10,
        ge=0,
        description=(
            "Forecast jobs: relative rise of the estimated MAE (RMSE) over the hold-out's that alerts when the estimate's interval "
            "lies wholly above it (and above the hold-out's own noise); above that noise but within the tolerance: warn."
        ),
    )


class MonitoringConfig(_Strict):
    """Decision monitoring per partition (tasks/monitoring/decisions.py) and realized outcomes (tasks/monitoring/outcomes.py)."""

    window_days: int = Field(
        default=28, ge=1, le=366, description="Trailing window of previous partitions a partition is compared with."
    )
    tolerance: DecisionTolerance = DecisionTolerance()
    action_decisions: list[str] | None = Field(
        default=None,
        validation_alias=AliasChoices("action_decisions", "adverse_decisions"),
        description=(
            "Decisions whose precision and recall are measured on outcomes; default: the decisions `prediction.decisions` marks "
            "`action: true`, else prediction.reasons.for_decisions. `adverse_decisions` is read as this."
        ),
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
    health: HealthConfig = HealthConfig()
    slices: list[str] = Field(
        default_factory=list,
        description="Raw columns whose values are monitored apart: decision mix, expected event rate and score PSI per value.",
    )
    slice_fdr: float = Field(
        default=0.05, gt=0, lt=1, description="False discovery rate across slice values × measures."
    )
    slice_max_values: int = Field(
        default=50, ge=1, le=1000, description="Values kept per slice column; the rarer ones are pooled as `(other)`."
    )

    @field_validator("slices")
    @classmethod
    def _distinct_slices(cls, value: list[str]) -> list[str]:
        repeated = sorted({c for c in value if value.count(c) > 1})
        if repeated:
            raise ValueError(f"names {repeated} more than once")
        return value


class JobSpec(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    entity_column: str
    feature_module: str | None = Field(
        default=None,
        description="Python module with FEATURE_VERSION, FEATURES and feature_matrix(); or give `features`.",
    )
    features: DeclaredFeatures | None = Field(
        default=None, description="Tabular features declared here, computed without Python; or give `feature_module`."
    )
    expectation_suite: str = Field(description="File name under `expectations/`.")
    source: SourceConfig | None = Field(
        default=None, description="Where raw partitions live; none reads Parquet under `data/raw/<job>/date=<date>/`."
    )
    sinks: SinksConfig = Field(
        default_factory=SinksConfig, description="Outputs besides the Parquet store and the warehouse."
    )
    target: TargetConfig = Field(default_factory=TargetConfig, description="What the job predicts (binary by default).")
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
    def _prediction_speaks_the_kind(self) -> JobSpec:
        p, kind = self.prediction, self.target.kind
        if self.target.classifies:
            return self._speaks_classes()
        class_rules = any(r.classes for r in p.rules) or "margin" in predict_rule_fields(p.rules)
        if p.classifies and (class_rules or self.target.forecasts):
            raise ValueError(
                f"target.kind is {kind}, but the rules test a class, a margin or probabilities without a score scale, a multiclass "
                "job's rules: set target.kind: multiclass with its classes, or give the kind's own fields"
            )
        if self.target.forecasts:
            binary_only = (
                ("prediction.score", p.score),
                ("prediction.event", p.event),
                ("prediction.reasons.no_reason_code", p.reasons.no_reason_code),
            )
            given = [name for name, value in binary_only if value is not None]
            if given:
                raise ValueError(
                    f"target.kind is {kind}, but prediction gives {', '.join(given)}, which only a binary job has: remove them "
                    "(a forecast job's rules test forecast, forecast_low, forecast_high; its reasons say what raised or lowered the forecast)"
                )
            return self
        missing = [
            name
            for name, value in (
                ("prediction.event", p.event),
                ("prediction.score", p.score),
                ("prediction.reasons.no_reason_code", p.reasons.no_reason_code),
                ("prediction.reasons.no_reason_text", p.reasons.no_reason_text),
            )
            if value is None
        ]
        if missing:
            raise ValueError(
                f"target.kind is binary, so {', '.join(missing)} must be given"
                + (" (or set target.kind: regression or count for a forecast job)" if p.score is None else "")
            )
        return self

    def _speaks_classes(self) -> JobSpec:
        p = self.prediction
        other = [
            name for name, value in (("prediction.score", p.score), ("prediction.event", p.event)) if value is not None
        ]
        if other:
            raise ValueError(
                f"target.kind is multiclass, but prediction gives {', '.join(other)}, which only a binary job has: remove them "
                "(a multiclass job's rules test class, probability, probability_low, probability_high and margin)"
            )
        tested = predict_rule_fields(p.rules)
        if tested - set(CLASS_FIELDS):
            raise ValueError(
                f"target.kind is multiclass, but the rules test {sorted(tested - set(CLASS_FIELDS))}; a multiclass job's rules test "
                "class, probability, probability_low, probability_high and margin (of the predicted class)"
            )
        problems = predict_class_rule_table_problems(p.rules, self.target.classes)
        if problems and problems[0].startswith("prediction.rules["):
            raise ValueError("; ".join(problems))
        if problems:
            raise ValueError("every row must match exactly one rule: " + "; ".join(problems))
        return self

    @model_validator(mode="after")
    def _positive_is_binary(self) -> JobSpec:
        if self.monitoring.labels.positive is not None and self.target.kind != "binary":
            raise ValueError(
                f"monitoring.labels.positive names a binary job's event; target.kind is {self.target.kind}, whose outcome is "
                + ("the class name" if self.target.classifies else "the actual number")
                + ": remove it"
            )
        return self

    def label_source(self, positive: str | None) -> LabelSource:
        """The labels section as a command given `--positive` reads it: the spec's `positive` (and `negative`), or the flag's
        value where the spec names none. A flag that disagrees with the spec, or one given to a job that is not binary, is a
        JobSpecError: a model calibrated on one event and monitored on another would invert without a sign."""
        labels = self.monitoring.labels
        if positive is None:
            return labels
        if self.target.kind != "binary":
            raise JobSpecError(
                f"--positive names a binary job's event; job {self.name!r} is {self.target.kind} (target.kind), whose outcome is "
                + ("the class name" if self.target.classifies else "the actual number")
                + ": drop the flag"
            )
        if labels.positive is not None and labels.positive != positive:
            raise JobSpecError(
                f"--positive {positive!r} disagrees with monitoring.labels.positive {labels.positive!r} in job {self.name!r}'s spec: "
                "drop the flag, or change the spec (and register the model again) if the event is another value"
            )
        return labels.model_copy(update={"positive": positive})

    @model_validator(mode="after")
    def _action_decisions_exist(self) -> JobSpec:
        decisions = {r.decision for r in self.prediction.rules}
        unknown = sorted(set(self.monitoring.action_decisions or ()) - decisions)
        if unknown:
            raise ValueError(f"monitoring.action_decisions names decisions no rule makes: {unknown}")
        marked = any(w.action for w in self.prediction.decisions.values())
        if marked and self.monitoring.action_decisions is not None:
            raise ValueError(
                "give the action decisions once: prediction.decisions.<d>.action or monitoring.action_decisions, not both"
            )
        return self

    @property
    def action_decisions(self) -> list[str]:
        """Decisions that act on the entity: their precision and recall are measured against outcomes."""
        if self.monitoring.action_decisions is not None:
            return list(self.monitoring.action_decisions)
        marked = [d for d in self.decisions if self.prediction.decisions.get(d, DecisionWords()).action]
        if marked:
            return marked
        return list(self.prediction.reasons.for_decisions)

    @property
    def decisions(self) -> list[str]:
        """Every decision the rules make, in rule-table order."""
        return list(dict.fromkeys(r.decision for r in self.prediction.rules))

    @property
    def words(self) -> JobWords:
        """What this job calls its event or target, score, decisions and features (tasks/prediction/words.py)."""
        p = self.prediction
        subject = (
            (p.event or "")
            if not (self.target.forecasts or self.target.classifies)
            else (self.target.name or self.target.kind)
        )
        score_name = p.score.name if p.score is not None else ("forecast" if self.target.forecasts else "probability")
        if p.score is not None:
            higher = p.score.higher or (f"more likely: {subject}" if subject else "the event is more likely")
        else:
            higher = f"more {subject}" if self.target.forecasts else "the predicted class is more likely"
        return JobWords(
            subject=subject,
            score_name=score_name,
            score_higher=higher,
            decisions=tuple(self.decisions),
            actions=tuple(self.action_decisions),
            decision_labels={d: w.label for d, w in p.decisions.items() if w.label},
            feature_labels={f: c.label for f, c in p.reasons.codes.items() if c.label},
        )

    @field_validator("expectation_suite")
    @classmethod
    def _plain_file_name(cls, value: str) -> str:
        if Path(value).name != value or not value.endswith(".json"):
            raise ValueError(f"expectation_suite must be a .json file name under expectations/, got {value!r}")
        return value


class _UniqueKeys:
    """Refuses a mapping that repeats a key: plain `safe_load` keeps the last value silently, so a
    spec edited twice in one place would score with whichever came last."""

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


class UniqueKeyLoader(_UniqueKeys, yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key."""


class _LibyamlUniqueKeyLoader(_UniqueKeys, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The same on libyaml's parser, ~10× faster: a run reads its spec more than once."""


def loaded_yaml(path: Path) -> object:
    """The YAML document in `path`, refusing repeated keys; the product reads every user YAML this way."""
    with path.open(encoding="utf-8") as fh:
        text = fh.read()
    try:
        return yaml.load(text, Loader=_LibyamlUniqueKeyLoader)  # noqa: S506  (a SafeLoader subclass)
    except yaml.YAMLError:
        # libyaml's errors do not quote the offending line; PyYAML's do, so a broken file is read again by it.
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506


def configured_jobs(settings: Settings) -> list[str]:
    """Names of the jobs that have a spec in the jobs folder, sorted."""
    return sorted(p.stem for p in settings.jobs_dir.glob("*.yaml"))


def checked_job_name(job: object, settings: Settings) -> str:
    """`job` if it names a configured job; anything else (a path, a NUL byte, an unknown name) is
    refused before it is used in a path, a query or a log line."""
    if not isinstance(job, str) or not re.fullmatch(NAME_PATTERN, job):
        raise JobSpecError(
            f"job name {str(job)[:80]!r} is not allowed: use lower-case letters, digits and _ (at most 64)"
        )
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
            problems.append(
                (
                    field,
                    (
                        f"unknown key {loc[-1]!r}"
                        + (f" (did you mean {close[0]!r}?)" if close else "")
                        + (f"; allowed here: {', '.join(allowed)}" if allowed else "")
                    ),
                )
            )
            continue
        # Values reach the terminal and the ledger: a URL in them (a spec URL, a DSN inside a query) is
        # shown redacted, and not twice when the message already names it.
        message = redacted_text(err["msg"].removeprefix("Value error, "))
        value = err["input"]
        got = repr(redacted_text(value) if isinstance(value, str) else value)
        named = isinstance(value, str) and got in message
        shown = "" if isinstance(value, dict | list) or named else f" (got {got})"
        problems.append((field, message + shown))
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
