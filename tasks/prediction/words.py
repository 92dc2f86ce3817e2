"""The job's own words: what its pages, artifacts, alerts, logs and model card call the event or target,
the score and which way is "more", the decisions (and which of them are actions) and the features.

A spec says them (`prediction.event`, `prediction.score.name` / `.higher`, `prediction.decisions`,
`prediction.reasons.codes.<feature>.label`, `target.name`); what it leaves out is made from the
names it does give, never from another job's vocabulary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

_ACRONYMS = {
    "id",
    "ids",
    "km",
    "kw",
    "kwh",
    "usd",
    "eur",
    "gbp",
    "pct",
    "ltv",
    "dti",
    "sku",
    "url",
    "ip",
    "api",
    "rpm",
    "hz",
    "khz",
}


def predict_feature_label(name: str) -> str:
    """A column name as a reader would say it: `annual_km` → "Annual km", `numPolicies` → "Num policies",
    `MOSTYPE` (a code with nothing better known) stays `MOSTYPE`."""
    if name.isupper() and "_" not in name:
        return name
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    words = [w for w in re.split(r"[_\-\s.]+", spaced) if w]
    if not words:
        return name
    words = [w.upper() if w.lower() in _ACRONYMS and w.lower() not in ("km",) else w.lower() for w in words]
    first = words[0]
    words[0] = first if first.isupper() else first[:1].upper() + first[1:]
    return " ".join(words)


def predict_decision_label(name: str) -> str:
    """A decision as pages print it when the spec gives no label: `manual_review` → "manual review"."""
    return name.replace("_", " ")


@dataclass(frozen=True)
class JobWords:
    """What one job calls things; every page, artifact, alert, log line and card reads them here."""

    subject: str
    """The event (binary), or what is forecast or classified (target.name)."""
    score_name: str
    score_higher: str
    decisions: tuple[str, ...]
    """Every decision, in rule-table order."""
    actions: tuple[str, ...]
    """The decisions that act on the entity."""
    decision_labels: Mapping[str, str] = field(default_factory=dict)
    feature_labels: Mapping[str, str] = field(default_factory=dict)

    def decision(self, name: str) -> str:
        """The decision's plain name."""
        return self.decision_labels.get(name) or predict_decision_label(name)

    def feature(self, name: str) -> str:
        """The feature's plain name."""
        return self.feature_labels.get(name) or predict_feature_label(name)

    def feature_and_column(self, name: str) -> str:
        """The feature's plain name with its column after it where the two differ (`Annual km (annual_km)`): how pages
        and alerts name a feature, so a reader can find the column too."""
        label = self.feature(name)
        return name if label == name else f"{label} ({name})"

    @property
    def score_meaning(self) -> str:
        """One phrase: what the score is and which way is more (`risk score, higher: riskier`)."""
        return f"{self.score_name}, higher: {self.score_higher}"

    def actions_text(self, *, conjunction: str = "or") -> str:
        """The action decisions in plain names, joined for a sentence."""
        return predict_joined_words([self.decision(d) for d in self.actions], conjunction=conjunction)


def predict_joined_words(items: Sequence[str], *, conjunction: str = "and") -> str:
    """`a`, `a and b`, `a, b and c`."""
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {conjunction} {items[-1]}"
