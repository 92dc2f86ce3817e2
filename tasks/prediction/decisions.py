"""Threshold rules from the job spec: ordered, first match wins, the last rule catches the rest."""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from tasks.jobspec import ThresholdRule

_OPS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}
_PROBABILITY_FIELDS = ("probability", "probability_low", "probability_high")


@dataclass(frozen=True)
class RuleDecisions:
    decision: np.ndarray
    rule_id: np.ndarray
    straddling: np.ndarray


def predict_probability_cutoffs(rules: list[ThresholdRule]) -> list[float]:
    """Every probability value a rule compares against: the cut-offs an interval can straddle."""
    return sorted({v for r in rules for f, cmp in r.when.items() if f in _PROBABILITY_FIELDS for v in cmp.values()})


def predict_rule_decisions(values: dict[str, np.ndarray], rules: list[ThresholdRule]) -> RuleDecisions:
    """The decision and deciding rule id of every row; `values` holds the fields rules may test."""
    n = len(values["probability"])
    decision = np.empty(n, dtype=object)
    rule_id = np.empty(n, dtype=object)
    open_rows = np.ones(n, dtype=bool)
    for rule in rules:
        hit = open_rows.copy()
        for field_name, comparisons in rule.when.items():
            for op, threshold in comparisons.items():
                hit &= _OPS[op](values[field_name], threshold)
        decision[hit] = rule.decision
        rule_id[hit] = rule.id
        open_rows &= ~hit
    if open_rows.any():
        raise AssertionError(f"{int(open_rows.sum())} rows matched no rule although the last rule catches all")
    low, high = values["probability_low"], values["probability_high"]
    straddling = np.zeros(n, dtype=bool)
    for cut in predict_probability_cutoffs(rules):
        straddling |= (low < cut) & (high >= cut)
    return RuleDecisions(decision=decision, rule_id=rule_id, straddling=straddling)
