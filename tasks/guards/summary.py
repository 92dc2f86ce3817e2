"""What the guards did in a run: the readable per-expectation summary and the run-level limits."""

from __future__ import annotations

import math
from typing import Any

from tasks.guards.apply import GuardCounts
from tasks.guards.suite import UNIQUE_TYPE, GuardSuite


def guard_summary_rows(suite: GuardSuite, counts: GuardCounts) -> list[dict[str, Any]]:
    """Every expectation of the suite with what it did in the run, in suite order: the readable summary."""
    by_key: dict[str, dict[str, Any]] = {
        c.key: {
            "expectation": c.key,
            "column_name": c.column,
            "expectation_type": c.type,
            "action": "fail",
            "evaluated_by": "compiled",
            "rows": 0,
            "share": 0.0,
        }
        for c in suite.column_checks
    }
    for exp in suite.row_rules:
        n = counts.by_expectation.get(exp.key, {}).get(exp.action, 0)
        action = exp.action if exp.action != "repair" else f"repair:{exp.repair}"
        by_key[exp.key] = {
            "expectation": exp.key,
            "column_name": exp.column,
            "expectation_type": exp.type,
            "action": suite.entity_key.on_duplicate if exp.type == UNIQUE_TYPE else action,
            "evaluated_by": exp.evaluated_by,
            "rows": n,
            "share": n / counts.rows_in if counts.rows_in else 0.0,
        }
    implicit = (suite.entity_key.key,) if suite.entity_key is not None and not suite.entity_key.declared else ()
    return [by_key[k] for k in (*suite.order, *implicit)]


def guard_limit_breaches(counts: GuardCounts, *, max_repaired_share: float, max_quarantined_share: float) -> list[str]:
    """Run-level limits that the counts break, as messages; empty when the run may go on."""
    if counts.rows_in == 0:
        return []
    breaches = []
    for what, n, limit in (
        ("repaired", counts.rows_repaired, max_repaired_share),
        ("quarantined", counts.rows_quarantined, max_quarantined_share),
    ):
        share = n / counts.rows_in
        if share > limit and not math.isclose(share, limit):
            breaches.append(
                f"{n} of {counts.rows_in} rows {what} ({share:.2%}) exceeds the job limit {limit:.2%}{_most_hit(counts, what)}"
            )
    return breaches


def _most_hit(counts: GuardCounts, what: str) -> str:
    """`; most by <expectation> (n rows), …`: the expectations an operator should look at first."""
    actions = {"repaired": ("repair",), "quarantined": ("quarantine",)}[what]
    hit = sorted(
        ((sum(n for action, n in by.items() if action in actions), key) for key, by in counts.by_expectation.items()),
        key=lambda pair: (-pair[0], pair[1]),
    )
    top = [f"{key} ({n} rows)" for n, key in hit[:3] if n]
    return f"; most by {', '.join(top)}" if top else ""
