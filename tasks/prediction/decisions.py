"""Threshold rules from the job spec: a rule table where every row matches exactly one rule.

Rules with conditions must not overlap, and together they must cover every possible row — unless
the last rule has no conditions: it is then `otherwise` and takes exactly the rows no other rule
takes. `predict_rule_table_problems` proves both at load time by testing every cell of the arrangement the
thresholds cut the space of (low ≤ estimate ≤ high) into: (probability_low ≤ probability ≤
probability_high) for a binary job, whose score thresholds are mapped to the probabilities where the
rounded score changes, and (forecast_low ≤ forecast ≤ forecast_high) over the whole real line for a
forecast job (so a table proven for a regression holds for counts too).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import numpy as np

from tasks.prediction.scores import ScoreScale, predict_score

RuleField = Literal[
    "probability", "probability_low", "probability_high", "score", "forecast", "forecast_low", "forecast_high", "margin"
]
"""What a rule may test: a binary job's probability fields and score, a forecast job's forecast fields, a
multiclass job's probability fields (of the predicted class) and its margin over the runner-up."""
Comparison = Literal["lt", "le", "gt", "ge"]


class Rule(Protocol):
    """What the rule table reads of a rule: a tasks.prediction.config.ThresholdRule. That module
    proves its tables with this one, so this one names only the fields it reads."""

    @property
    def id(self) -> str: ...

    @property
    def when(self) -> Mapping[RuleField, Mapping[Comparison, float]]: ...

    @property
    def decision(self) -> str: ...


def _classes(rule: Rule) -> tuple[str, ...]:
    """The predicted classes a multiclass job's rule takes (empty: any class, and every rule of other kinds)."""
    return tuple(getattr(rule, "classes", ()))


def _conditional(rule: Rule) -> bool:
    return bool(rule.when or _classes(rule))


class _Term(Protocol):
    """What the straddling rule asks of its terms (numpy arrays, polars expressions, SQL terms): comparisons
    and `&`, `|`, each giving a term of the same kind, whatever that kind's own types say."""

    def __lt__(self, other: Any, /) -> Any: ...

    def __ge__(self, other: Any, /) -> Any: ...

    def __and__(self, other: Any, /) -> Any: ...

    def __or__(self, other: Any, /) -> Any: ...


_T = TypeVar("_T", bound=_Term)
_OPS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}
_PROBABILITY_FIELDS = ("probability", "probability_low", "probability_high")
FORECAST_FIELDS = ("forecast", "forecast_low", "forecast_high")
"""The fields a forecast job's rules test; the others (PROBABILITY_FIELDS and score) are a binary job's."""
PROBABILITY_FIELDS = (*_PROBABILITY_FIELDS, "score")
CLASS_FIELDS = (*_PROBABILITY_FIELDS, "margin")
"""The fields a multiclass job's rules test besides `class`: the predicted class's probability fields and its margin."""


@dataclass(frozen=True)
class RuleDecisions:
    decision: np.ndarray
    rule_id: np.ndarray
    straddling: np.ndarray
    rule_index: np.ndarray | None = None
    """Position of each row's rule in the rule table (int16): what per-rule sums count with, without
    comparing strings; None where the decisions were read back rather than made (the hand-off files)."""
    table_decisions: tuple[str, ...] = ()
    table_rule_ids: tuple[str, ...] = ()
    """The decision and id of each rule of the table `rule_index` points into (empty without `rule_index`)."""

    def rows_deciding(self, decisions: Sequence[str]) -> np.ndarray:
        """Positions of the rows whose decision is one of `decisions`, ascending."""
        if self.rule_index is None:
            return np.flatnonzero(np.isin(self.decision, list(decisions)))
        # One membership test per rule rather than per row: a string comparison for each row costs ~10x.
        wanted = np.array([decision in decisions for decision in self.table_decisions], dtype=bool)
        return np.flatnonzero(wanted[self.rule_index])


def predict_probability_cutoffs(rules: Sequence[Rule]) -> list[float]:
    """Every probability (or forecast) value a rule compares against: the cut-offs an interval can straddle."""
    return sorted(
        {
            v
            for r in rules
            for f, cmp in r.when.items()
            if f in (*_PROBABILITY_FIELDS, *FORECAST_FIELDS)
            for v in cmp.values()
        }
    )


def predict_rule_fields(rules: Sequence[Rule]) -> set[str]:
    """The fields the rules test."""
    return {f for r in rules for f in r.when}


def predict_straddling(low: _T, high: _T, cutoffs: Iterable[float | _T], *, none: _T) -> _T:
    """Whether an interval straddles a probability cut-off: `low < cut <= high` for one of `cutoffs`
    (the rule table could decide it either way, so a rule may send it to a person).

    The one statement of the rule. It is written with `<`, `>=`, `&` and `|` only, so `low` and
    `high` may be numpy arrays, polars expressions or SQL terms (tasks/sinks/warehouse/reads.py); `none`
    is "no interval straddles" in the same kind (with no cut-off that is the answer)."""
    straddling = none
    for cut in cutoffs:
        straddling = straddling | ((low < cut) & (high >= cut))
    return straddling


def _rows(values: dict[str, np.ndarray]) -> int:
    return len(values["forecast"] if "forecast" in values else values["probability"])


def _matches(rule: Rule, values: dict[str, np.ndarray]) -> np.ndarray:
    hit = np.ones(_rows(values), dtype=bool)
    if classes := _classes(rule):
        hit &= np.isin(values["class"], classes)
    for field_name, comparisons in rule.when.items():
        for op, threshold in comparisons.items():
            hit &= _OPS[op](values[field_name], threshold)
    return hit


def predict_rule_decisions(values: dict[str, np.ndarray], rules: Sequence[Rule]) -> RuleDecisions:
    """The decision and deciding rule id of every row; `values` holds the fields rules may test
    (a binary job's probability fields and score, a forecast job's forecast fields, or a multiclass job's
    `class` names, probability fields and margin)."""
    n = _rows(values)
    rule_index = np.zeros(n, dtype=np.int16)
    matched = np.zeros(n, dtype=np.int8)
    for position, rule in enumerate(rules):
        if not _conditional(rule):
            continue
        hit = _matches(rule, values)
        rule_index[hit] = position
        matched += hit
    otherwise = rules[-1] if not _conditional(rules[-1]) else None
    if otherwise is not None:
        rule_index[matched == 0] = len(rules) - 1
        matched[matched == 0] = 1
    if (matched != 1).any():
        raise AssertionError(
            f"{int((matched != 1).sum())} rows matched no rule or several, although the rule table was proven exact"
        )
    table_decisions = tuple(rule.decision for rule in rules)
    table_rule_ids = tuple(rule.id for rule in rules)
    # Taken from the table by position once every row has its rule (~4x faster than a masked write per rule).
    decision = np.array(table_decisions, dtype=object)[rule_index]
    rule_id = np.array(table_rule_ids, dtype=object)[rule_index]
    low, high = ("forecast_low", "forecast_high") if "forecast" in values else ("probability_low", "probability_high")
    straddling = predict_straddling(
        values[low], values[high], predict_probability_cutoffs(rules), none=np.zeros(n, dtype=bool)
    )
    return RuleDecisions(
        decision=decision,
        rule_id=rule_id,
        straddling=straddling,
        rule_index=rule_index,
        table_decisions=table_decisions,
        table_rule_ids=table_rule_ids,
    )


def _probability_at_raw_score(raw: float, score: ScoreScale) -> float:
    base_odds = score.base_probability / (1 - score.base_probability)
    odds = base_odds * 2 ** ((raw - 50.0) / score.points_to_double_odds)
    return odds / (1 + odds) if math.isfinite(odds) else 1.0


def _grid(rules: Sequence[Rule], score: ScoreScale) -> list[float]:
    """Each probability cut, and one point strictly between each pair of neighbouring cuts."""
    cuts = {0.0, 1.0, *predict_probability_cutoffs(rules)}
    for rule in rules:
        for value in rule.when.get("score", {}).values():
            # The rounded score steps from s-1 to s where the raw score crosses s-0.5.
            cuts |= {_probability_at_raw_score(value - 0.5, score), _probability_at_raw_score(value + 0.5, score)}
    ordered = sorted(c for c in cuts if 0.0 <= c <= 1.0)
    return sorted({*ordered, *((a + b) / 2 for a, b in itertools.pairwise(ordered))})


def _forecast_grid(rules: Sequence[Rule]) -> list[float]:
    """Each forecast cut, one point between each pair of neighbours, and one beyond each end."""
    ordered = sorted(predict_probability_cutoffs(rules)) or [0.0]
    inner = [(a + b) / 2 for a, b in itertools.pairwise(ordered)]
    return sorted({ordered[0] - 1.0, *ordered, *inner, ordered[-1] + 1.0})


def _point(values: dict[str, np.ndarray], i: int) -> str:
    if "class" in values:
        return f"class={values['class'][i]}, " + ", ".join(
            f"{k}={values[k][i]:.4g}" for k in ("probability_low", "probability", "probability_high", "margin")
        )
    names = FORECAST_FIELDS if "forecast" in values else ("probability_low", "probability", "probability_high", "score")
    return ", ".join(f"{k}={values[k][i]:.4g}" for k in names)


def predict_rule_table_problems(rules: Sequence[Rule], score: ScoreScale | None) -> list[str]:
    """Overlaps between conditional rules, and gaps no rule covers, each with an example row.

    `score` None: a forecast job's table, over its forecast fields."""
    grid = _forecast_grid(rules) if score is None else _grid(rules, score)
    triples = np.array([t for t in itertools.combinations_with_replacement(grid, 3)])
    if score is None:
        values = dict(
            zip(
                ("forecast_low", "forecast", "forecast_high"),
                (triples[:, 0], triples[:, 1], triples[:, 2]),
                strict=True,
            )
        )
    else:
        values = {
            "probability_low": triples[:, 0],
            "probability": triples[:, 1],
            "probability_high": triples[:, 2],
            "score": predict_score(triples[:, 1], score),
        }
    return _table_problems(rules, values)


def _class_grid(rules: Sequence[Rule], classes: Sequence[str]) -> dict[str, np.ndarray]:
    """Every cell of a multiclass table's arrangement: each class × (probability_low ≤ probability ≤
    probability_high) × margin, at each cut and between neighbours, where such a row can exist: the predicted
    class's probability p is at least 1/K, and the runner-up's lies between the largest share of the other
    K − 1 classes, (1 − p)/(K − 1), and min(p, 1 − p), so the margin lies in [max(0, 2p − 1), p − (1 − p)/(K − 1)]."""
    k = len(classes)
    cuts = {
        0.0,
        1.0,
        1.0 / k,
        *(v for r in rules for f, cmp in r.when.items() if f in _PROBABILITY_FIELDS for v in cmp.values()),
    }
    ordered = sorted(c for c in cuts if 0.0 <= c <= 1.0)
    grid = sorted({*ordered, *((a + b) / 2 for a, b in itertools.pairwise(ordered))})
    margin_cuts = sorted({0.0, 1.0, *(v for r in rules for v in r.when.get("margin", {}).values())})
    margins = sorted({*margin_cuts, *((a + b) / 2 for a, b in itertools.pairwise(margin_cuts))})
    triples = np.array([t for t in itertools.combinations_with_replacement(grid, 3)])
    low, p, high = (np.repeat(triples[:, i], len(margins)) for i in range(3))
    margin = np.tile(np.array(margins), len(triples))
    # A small tolerance keeps the corner points (p = 1/K with margin 0) that float rounding would drop.
    possible = (p >= 1.0 / k - 1e-12) & (margin <= p - (1 - p) / (k - 1) + 1e-12) & (margin >= 2 * p - 1 - 1e-12)
    low, p, high, margin = low[possible], p[possible], high[possible], margin[possible]
    n = p.size
    return {
        "class": np.repeat(np.array(classes, dtype=object), n),
        "probability_low": np.tile(low, k),
        "probability": np.tile(p, k),
        "probability_high": np.tile(high, k),
        "margin": np.tile(margin, k),
    }


def predict_class_rule_table_problems(rules: Sequence[Rule], classes: Sequence[str]) -> list[str]:
    """A multiclass job's rule table (rules on the predicted `class`, its probability fields and margin):
    overlaps and gaps over every class and every possible probability and margin, each with an example row;
    and classes the rules name that the job does not have."""
    unknown = [
        f"prediction.rules[{i}] ({r.id}) when.class names {c!r}, which is not one of target.classes {list(classes)}"
        for i, r in enumerate(rules)
        for c in _classes(r)
        if c not in classes
    ]
    if unknown:
        return unknown
    return _table_problems(rules, _class_grid(rules, classes))


def _table_problems(rules: Sequence[Rule], values: dict[str, np.ndarray]) -> list[str]:
    conditional = [r for r in rules if _conditional(r)]
    hits = {r.id: _matches(r, values) for r in conditional}
    problems = []
    for a, b in itertools.combinations(conditional, 2):
        both = np.flatnonzero(hits[a.id] & hits[b.id])
        if both.size:
            problems.append(f"rules {a.id} and {b.id} overlap, e.g. at {_point(values, both[0])}")
    if _conditional(rules[-1]):
        uncovered = np.flatnonzero(~np.any(list(hits.values()), axis=0)) if hits else np.arange(_rows(values))
        if uncovered.size:
            problems.append(
                f"no rule covers e.g. {_point(values, uncovered[0])}; add a rule, or end with a rule without `when`"
            )
    return problems
