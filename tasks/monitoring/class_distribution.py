"""What a multiclass job's run classified, summed chunk by chunk: the rows predicted per class with the sum of
their probability, the margin over the runner-up on fixed bins, the rows per decision and class, and the reason
codes given, for the run page, the key numbers and the ledger's summary.

Margins lie in [0, 1], so their bins are fixed (MARGIN_BINS equal-width bins) and units scored in parallel add
up exactly by adding counts; classes and decisions are counted by name, so a chunk needs no class table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from tasks.monitoring.forecast_distribution import reason_code_counts, rule_condition_text

MARGIN_BINS = 10
MARGIN_EDGES = tuple(i / MARGIN_BINS for i in range(1, MARGIN_BINS))
"""The inner edges of the margin's bins: the first bin holds margins below 0.1, the last those from 0.9 on."""
LOW_MARGIN = 0.1
"""A margin below this is a close call between the two likeliest classes: the headline counts those rows."""


@dataclass
class ClassDistribution:
    """A multiclass job's classifications summed over chunks."""

    rows: int = 0
    predicted: Counter[str] = field(default_factory=Counter)
    """Rows per predicted class."""
    probability_sums: Counter[str] = field(default_factory=Counter)
    """Per predicted class, the sum of its calibrated probability over the rows predicted as it."""
    margin_counts: list[int] = field(default_factory=lambda: [0] * MARGIN_BINS)
    margin_sum: float = 0.0
    low_margin_rows: int = 0
    decided: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Rows per (decision, predicted class)."""
    reason_codes: Counter[str] = field(default_factory=Counter)

    def add(self, table: pa.Table) -> None:
        """Count one chunk of the classification contract (tasks/catalog.py CLASSIFICATIONS)."""
        frame = pl.from_arrow(table.select(["predicted_class", "probability", "margin", "decision"]))
        self.rows += frame.height
        by_class = frame.group_by("predicted_class").agg(pl.len().alias("n"), pl.col("probability").sum().alias("p"))
        for name, n, p in by_class.iter_rows():
            self.predicted[name] += int(n)
            self.probability_sums[name] += float(p)
        margin = frame["margin"].to_numpy()
        bins = np.searchsorted(np.asarray(MARGIN_EDGES), margin, side="right")
        for i, n in enumerate(np.bincount(bins, minlength=MARGIN_BINS)):
            self.margin_counts[i] += int(n)
        self.margin_sum += float(margin.sum())
        self.low_margin_rows += int((margin < LOW_MARGIN).sum())
        for decision, name, n in frame.group_by(["decision", "predicted_class"]).len().iter_rows():
            self.decided[(decision, name)] += int(n)
        self.reason_codes.update(reason_code_counts(table.column("reason_codes")))

    def merge(self, other: ClassDistribution) -> None:
        self.rows += other.rows
        self.predicted.update(other.predicted)
        self.probability_sums.update(other.probability_sums)
        self.margin_counts = [a + b for a, b in zip(self.margin_counts, other.margin_counts, strict=True)]
        self.margin_sum += other.margin_sum
        self.low_margin_rows += other.low_margin_rows
        self.decided.update(other.decided)
        self.reason_codes.update(other.reason_codes)


def _share(n: int, total: int) -> float | None:
    return n / total if total else None


def classification_headline(
    distribution: ClassDistribution, *, name: str, classes: Sequence[str], decisions: Mapping[str, int]
) -> dict[str, Any]:
    """A multiclass job's run in a few numbers (the ledger's summary, the run's result): rows, each class's
    predicted share, the mean probability of the predicted class, the share of close calls, the decisions."""
    rows = distribution.rows
    return {
        "kind": "multiclass",
        "name": name,
        "rows": rows,
        "predicted_share": {c: _share(distribution.predicted.get(c, 0), rows) for c in classes},
        "mean_probability": distribution.probability_sums.total() / rows if rows else None,
        "low_margin_cut": LOW_MARGIN,
        "low_margin_share": _share(distribution.low_margin_rows, rows),
        "decisions": dict(decisions),
    }


def class_run_summary(
    distribution: ClassDistribution,
    *,
    name: str,
    classes: Sequence[str],
    level: float,
    rules: Sequence[Mapping[str, Any]],
    rule_rows: Mapping[str, int],
    reason_texts: Mapping[str, str],
) -> dict[str, Any]:
    """What the run page and the key numbers show of a multiclass job's run: per class the rows predicted, their share
    and mean probability; the margin's bins, mean and close calls; the rows per decision and class; the rows per rule
    (`rules` the spec's rules as dicts with `classes`) and the reason codes given (`reason_texts` code → text)."""
    rows = distribution.rows
    decisions = list(dict.fromkeys(r["decision"] for r in rules))
    codes = sorted(distribution.reason_codes.items(), key=lambda item: (-item[1], item[0]))
    return {
        "name": name,
        "level": level,
        "rows": rows,
        "classes": list(classes),
        "class_mix": [
            {
                "class": c,
                "rows": distribution.predicted.get(c, 0),
                "share": _share(distribution.predicted.get(c, 0), rows),
                "mean_probability": (distribution.probability_sums[c] / distribution.predicted[c])
                if distribution.predicted.get(c)
                else None,
            }
            for c in classes
        ],
        "mean_probability": distribution.probability_sums.total() / rows if rows else None,
        "margin": {
            "edges": list(MARGIN_EDGES),
            "counts": list(distribution.margin_counts),
            "mean": distribution.margin_sum / rows if rows else None,
            "low_margin_cut": LOW_MARGIN,
            "low_margin_rows": distribution.low_margin_rows,
            "low_margin_share": _share(distribution.low_margin_rows, rows),
        },
        "decision_by_class": {
            "decisions": decisions,
            "rows": [[distribution.decided.get((d, c), 0) for c in classes] for d in decisions],
        },
        "rules": [
            {
                "rule_id": r["id"],
                "decision": r["decision"],
                "condition": rule_condition_text(r.get("when") or {}, r.get("classes") or ()),
                "rows": int(rule_rows.get(r["id"], 0)),
            }
            for r in rules
        ],
        "reason_codes": [{"code": code, "text": reason_texts.get(code, code), "rows": int(n)} for code, n in codes],
    }
