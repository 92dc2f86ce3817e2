"""The job spec's `features:` section: tabular features declared column by column instead of in a
Python feature module. tasks/features/declared.py computes them; tasks/jobspec.py composes this
section into the job spec.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tasks.contracts import FeatureKind

FEATURE_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$"
"""Model feature names: XGBoost and ONNX refuse `[`, `]`, `<`, commas and spaces in them; a raw column
with such a name keeps it as the feature's `source`."""
TRUE_VALUES = ("true", "yes", "y", "1")
FALSE_VALUES = ("false", "no", "n", "0")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeclaredColumn(_Strict):
    """One model feature computed from one raw column, in a job spec's `features.columns`."""

    name: str = Field(
        pattern=FEATURE_NAME_PATTERN, description="Feature name: the model's input column and the reason-code key."
    )
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
            return tuple(
                str(v).lower() if isinstance(v, bool) else str(v) if isinstance(v, int | float) else v for v in value
            )
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
        allowed = {"numeric": {"clip"}, "boolean": {"true_values", "false_values"}, "categorical": {"categories"}}[
            self.kind
        ]
        if given - allowed:
            raise ValueError(
                f"feature {self.name!r} (kind {self.kind}) cannot take {sorted(given - allowed)}; "
                f"a {self.kind} feature takes {sorted(allowed)}"
            )
        if self.kind == "categorical":
            if not self.categories:
                raise ValueError(
                    f"feature {self.name!r} is categorical and needs `categories`: the values that codes 0, 1, … stand for"
                )
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
    columns: tuple[DeclaredColumn, ...] = Field(
        min_length=1, description="The model's features, in the model's input order."
    )

    @field_validator("columns")
    @classmethod
    def _unique_names(cls, value: tuple[DeclaredColumn, ...]) -> tuple[DeclaredColumn, ...]:
        names = [c.name for c in value]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"feature names must be unique; repeated: {repeated}")
        return value
