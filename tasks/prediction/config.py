"""The job spec's `target:` and `prediction:` sections: what is predicted, score scale, threshold rules,
reason codes, interval level.

The prediction layer owns these models; tasks/jobspec.py composes them into the job spec. A rule
table is proven exact here, at load time, by tasks/prediction/decisions.py, which reads rules and
the score scale through protocols of its own and so never imports this module.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from tasks.prediction.decisions import (
    CLASS_FIELDS,
    FORECAST_FIELDS,
    PROBABILITY_FIELDS,
    Comparison,
    RuleField,
    predict_rule_fields,
    predict_rule_table_problems,
)

TargetKind = Literal["binary", "regression", "count", "multiclass"]
"""binary: the probability of an event; regression: a quantity; count: a non-negative whole number of things;
multiclass: which of several classes a row belongs to."""
FORECAST_KINDS = ("regression", "count")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TargetConfig(_Strict):
    """What the job predicts: an event's probability (binary), or a quantity (regression, count) it forecasts."""

    kind: TargetKind = Field(
        default="binary",
        description=(
            "binary: outcomes are 1 (the event) or 0, predictions are calibrated probabilities; regression: outcomes are "
            "numbers, predictions are forecasts with a conformal interval; count: the same for non-negative whole numbers "
            "(a forecast and its interval are never negative)."
        ),
    )
    name: str = Field(
        default="",
        description="What is forecast or classified, in the job's words (e.g. `units sold`, `fault type`); forecast and multiclass jobs.",
    )
    unit: str = Field(
        default="", description="The forecast's unit as pages print it (e.g. `units`, `EUR`); forecast jobs only."
    )
    classes: list[str] = Field(
        default_factory=list,
        description=(
            "Multiclass jobs: the class names, in the model's class order (the model's output i is classes[i]); the outcome "
            "column holds these names. At least 3; other kinds give none."
        ),
    )

    @field_validator("classes", mode="before")
    @classmethod
    def _class_names_as_text(cls, value: object) -> object:
        # YAML reads `1` as an int and `yes` as a bool; labels arrive as text, so a class is its text.
        if isinstance(value, list):
            return [("true" if v else "false") if isinstance(v, bool) else str(v) for v in value]
        return value

    @model_validator(mode="after")
    def _classes_of_the_kind(self) -> TargetConfig:
        if self.kind != "multiclass":
            if self.classes:
                raise ValueError(
                    f"classes are given, but target.kind is {self.kind}: only a multiclass job names classes"
                )
            return self
        if len(self.classes) < 3:
            raise ValueError(
                f"a multiclass job names at least 3 classes, got {self.classes}"
                + (
                    "; two classes are a binary job (target.kind: binary, outcome 1 for the event)"
                    if len(self.classes) == 2
                    else ""
                )
            )
        repeated = sorted({c for c in self.classes if self.classes.count(c) > 1})
        if repeated:
            raise ValueError(f"classes repeat {repeated}")
        empty = [i for i, c in enumerate(self.classes) if not c.strip()]
        if empty:
            raise ValueError(f"classes {empty} are empty names")
        return self

    @property
    def forecasts(self) -> bool:
        """Whether the job forecasts a quantity rather than an event's probability."""
        return self.kind in FORECAST_KINDS

    @property
    def classifies(self) -> bool:
        """Whether the job chooses one of several classes (target.kind multiclass)."""
        return self.kind == "multiclass"


class ScoreConfig(_Strict):
    base_probability: float = Field(gt=0, lt=1, description="Probability that maps to score 50.")
    points_to_double_odds: float = Field(gt=0, description="Score points per doubling of the odds.")
    name: str = Field(
        default="score",
        min_length=1,
        description="What pages, artifacts and the model card call the score, in the job's words (`risk score`, `propensity score`).",
    )
    higher: str = Field(
        default="",
        description=(
            "What a higher score means, in the job's words (`riskier`, `more likely to buy`); pages print "
            '"higher: <this>". Empty: "more likely: <prediction.event>".'
        ),
    )


class DecisionWords(_Strict):
    """How the job speaks of one decision: its plain name, and whether it is an action taken on the entity."""

    label: str = Field(
        default="",
        description="The decision's plain name on pages and in the card (`Contact the customer`); empty: the decision itself.",
    )
    action: bool = Field(
        default=False,
        description=(
            "The decision acts on the entity (decline, contact, inspect): its precision and recall are measured on outcomes and "
            "pages colour it apart. Default when no decision says: the decisions that get reasons."
        ),
    )


class ThresholdRule(_Strict):
    id: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$", description="Stable id stored with every decision.")
    description: str = ""
    when: dict[RuleField, dict[Comparison, float]] = Field(
        default_factory=dict, description="All conditions must hold; empty means always."
    )
    classes: tuple[str, ...] = Field(
        default=(),
        description="Multiclass jobs: the predicted classes the rule takes, written `when: {class: [a, b], ...}`; empty: any class.",
    )
    decision: str = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _class_condition(cls, data: object) -> object:
        # `class` reads as one more condition of `when`; it compares names, not numbers, so it is kept apart.
        if isinstance(data, dict) and isinstance(data.get("when"), dict) and "class" in data["when"]:
            when = dict(data["when"])
            named = when.pop("class")
            names = named if isinstance(named, list) else [named]
            if not names or not all(isinstance(n, str | int) and not isinstance(n, bool) for n in names):
                raise ValueError(f"when.class must be a class name or a list of them, got {named!r}")
            return {**data, "when": when, "classes": tuple(str(n) for n in names)}
        return data

    @property
    def conditional(self) -> bool:
        """Whether the rule tests anything (a rule that does not is the table's catch-all)."""
        return bool(self.when or self.classes)

    @field_validator("when")
    @classmethod
    def _reachable_thresholds(cls, value: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        # A threshold outside the field's range makes the condition always or never true: a typo, not a rule.
        bad = {
            f"{name}.{op}": threshold
            for name, comparisons in value.items()
            for op, threshold in comparisons.items()
            if name not in FORECAST_FIELDS and not (0 <= threshold <= (100 if name == "score" else 1))
        }
        if bad:
            raise ValueError(f"thresholds outside 0..1 (probabilities) or 0..100 (score): {bad}")
        infinite = {
            f"{name}.{op}": t
            for name, comparisons in value.items()
            for op, t in comparisons.items()
            if t != t or abs(t) == float("inf")
        }
        if infinite:
            raise ValueError(f"thresholds must be finite numbers: {infinite}")
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
    label: str = Field(
        default="",
        description="The feature's plain name on pages and in the card (`Annual km`); empty: one made from the column name.",
    )
    text: str = Field(description="Default text: missing value, or a value no variant below covers.")
    by_band: ReasonBands | None = None
    by_cut: ReasonCuts | None = None
    by_value: dict[str, str] | None = Field(default=None, description="Value (category name, 0/1, number) → text.")

    @field_validator("text", mode="before")
    @classmethod
    def _text_not_a_yaml_boolean(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError(
                f"is {value!r}: YAML reads an unquoted yes/no/on/off/true/false as a boolean; put the text in quotes"
            )
        return value

    @field_validator("by_value", mode="before")
    @classmethod
    def _keys_as_text(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        for key, text in value.items():
            if isinstance(text, bool):
                raise ValueError(
                    f"text of {key!r} is {text!r}: YAML reads an unquoted yes/no/on/off as a boolean; put the text in quotes"
                )
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
    no_reason_code: str | None = Field(
        default=None,
        validation_alias=AliasChoices("no_reason_code", "no_adverse_code"),
        description=(
            "Code given when no feature pushes toward the event or the class (binary and multiclass jobs; forecast jobs name "
            "features up and down). `no_reason_code` is read as this."
        ),
    )
    no_reason_text: str | None = Field(
        default=None,
        validation_alias=AliasChoices("no_reason_text", "no_adverse_text"),
        description="Its text; `no_adverse_text` is read as this.",
    )
    codes: dict[str, ReasonCode] = Field(description="Model feature → business reason.")


class PredictionConfig(_Strict):
    event: str | None = Field(
        default=None,
        description="Binary jobs: the event the probability is about, in the job's words (`buys within 30 days`).",
    )
    interval_level: float = Field(
        default=0.90,
        gt=0,
        lt=1,
        description="Binary jobs: credibility of the event rate's interval; forecast jobs: coverage of the conformal prediction interval.",
    )
    score: ScoreConfig | None = Field(
        default=None, description="Binary jobs: the score scale; forecast jobs have none."
    )
    rules: list[ThresholdRule] = Field(min_length=1)
    decisions: dict[str, DecisionWords] = Field(
        default_factory=dict,
        description="Decision (as the rules make it) → its plain name and whether it is an action; optional.",
    )
    reasons: ReasonConfig

    @property
    def forecasts(self) -> bool:
        """Whether the rules speak of forecasts (a forecast job's prediction section) rather than probabilities."""
        return self.score is None and not self.classifies

    @model_validator(mode="after")
    def _rules_decide_every_row(self) -> PredictionConfig:
        ids = [r.id for r in self.rules]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"rule ids must be unique; repeated: {dupes}")
        catch_all = [r.id for r in self.rules if not r.conditional]
        if catch_all and catch_all != [self.rules[-1].id]:
            raise ValueError(
                "only the last rule may go without `when` (it then takes every row no other rule takes); "
                f"rules without `when`: {catch_all}, last rule: {self.rules[-1].id}"
            )
        tested = predict_rule_fields(self.rules)
        if self.classifies:
            # Which classes exist is the target's to say: tasks/jobspec.py proves a class table with them.
            return self._reasons_name_decisions()
        if self.score is None and tested & set(PROBABILITY_FIELDS):
            raise ValueError(
                f"rules test {sorted(tested & set(PROBABILITY_FIELDS))}, a binary job's fields, but there is no `score` scale; "
                "a forecast job's rules test forecast, forecast_low, forecast_high"
            )
        if self.score is not None and tested & set(FORECAST_FIELDS):
            raise ValueError(
                f"rules test {sorted(tested & set(FORECAST_FIELDS))}, a forecast job's fields, but `score` is given; "
                "a forecast job has no score scale (remove prediction.score)"
            )
        problems = predict_rule_table_problems(self.rules, self.score)
        if problems:
            raise ValueError("every row must match exactly one rule: " + "; ".join(problems))
        return self._reasons_name_decisions()

    @property
    def classifies(self) -> bool:
        """Whether the rules speak of classes (a multiclass job's prediction section): a rule names a class or
        tests the margin, or the rules test probabilities without a score scale."""
        tested = predict_rule_fields(self.rules)
        return (
            any(r.classes for r in self.rules)
            or "margin" in tested
            or (self.score is None and bool(tested) and tested <= set(CLASS_FIELDS))
        )

    def _reasons_name_decisions(self) -> PredictionConfig:
        decisions = {r.decision for r in self.rules}
        unknown = sorted(set(self.reasons.for_decisions) - decisions)
        if unknown:
            raise ValueError(f"reasons.for_decisions names decisions no rule makes: {unknown}")
        unknown = sorted(set(self.decisions) - decisions)
        if unknown:
            raise ValueError(f"decisions names decisions no rule makes: {unknown}")
        return self
