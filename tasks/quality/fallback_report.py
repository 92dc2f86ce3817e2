"""The fallback report of a run: every substitution, exclusion and degraded path, counted.

Nothing degrades silently: each kind of fallback is one or more rows with its count and its share
of the rows read, and a job may cap any kind (`limits.max_fallback_share`), failing the run with
a message naming the kind before anything is published.

Kinds:
- `guard_repair` — a value replaced by a default or clipped (per column and expectation);
- `quarantine` — a row not scored because it broke an expectation (per expectation);
- `fallback_model` — a row scored by the job's fallback model version;
- `failed_chunk` — a row of a chunk whose inference failed every attempt;
- `no_reason` — a row that needed reasons but had no feature pushing toward the event (job specs
  written before may still limit it under its old name, `no_adverse_reason`);
- `reasons_by_framework` — a row whose reasons the framework's own TreeSHAP explained (XGBoost
  `pred_contribs`, LightGBM `pred_contrib`, CatBoost `ShapValues`) because the table kernel cannot
  represent the model (the detail says why); exact all the same, only slower. Job specs written
  before other frameworks may still limit it under its old name, `reasons_by_xgboost`;
- `reasons_unavailable` — a row whose decision needs reasons, scored by a model whose engine has no
  exact contributions (an ONNX neural network, a scikit-learn SVC): it gets no reason codes, the run
  goes on (the detail says why);
- `no_drift_reference` — a row scored by a model without training reference statistics (allowed
  only by `drift: {require_reference: false}`): its features' drift against training is not known;
- `no_health_reference` — a row whose model health is measured without attribution or multivariate
  drift: the model was registered before model health, or (attribution) has no contributions (ONNX);
- `challenger_failed` — only for a job that names a challenger: a row the challenger could not shadow
  (it did not load, or its chunk failed). The champion's rows are untouched; the count stands apart.
"""

from __future__ import annotations

import math
from typing import Any

FALLBACK_KINDS = (
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
)


def _row(kind: str, detail: str, rows: int, rows_read: int, limit: float | None) -> dict[str, Any]:
    share = rows / rows_read if rows_read else 0.0
    return {
        "kind": kind,
        "detail": detail,
        "rows": int(rows),
        "share": share,
        "limit": limit,
        "breached": limit is not None and share > limit and not math.isclose(share, limit),
    }


def fallback_report_rows(
    *,
    rows_read: int,
    guard_by_expectation: dict[str, dict[str, int]],
    guard_columns: dict[str, str],
    rows_repaired: int,
    rows_quarantined: int,
    rows_fallback: int,
    fallback_reason: str | None,
    rows_failed: int,
    rows_without_adverse_reason: int,
    rows_reasons_by_framework: int,
    reasons_kernel_reason: str | None,
    limits: dict[str, float],
    rows_without_drift_reference: int = 0,
    drift_reference_detail: str | None = None,
    rows_without_health_reference: int = 0,
    health_reference_detail: str | None = None,
    rows_challenger_failed: int | None = None,
    challenger_detail: str | None = None,
    rows_reasons_unavailable: int = 0,
    reasons_unavailable_detail: str | None = None,
) -> list[dict[str, Any]]:
    """One total row per kind (always present, zero or not), then its breakdown rows."""
    rows: list[dict[str, Any]] = []
    repairs = {k: v["repair"] for k, v in guard_by_expectation.items() if v.get("repair")}
    quarantines = {k: v["quarantine"] for k, v in guard_by_expectation.items() if v.get("quarantine")}
    rows.append(_row("guard_repair", "all", rows_repaired, rows_read, limits.get("guard_repair")))
    rows += [
        _row("guard_repair", f"{guard_columns.get(k, '?')}: {k}", n, rows_read, None)
        for k, n in sorted(repairs.items())
    ]
    rows.append(_row("quarantine", "all", rows_quarantined, rows_read, limits.get("quarantine")))
    rows += [_row("quarantine", k, n, rows_read, None) for k, n in sorted(quarantines.items())]
    rows.append(
        _row(
            "fallback_model",
            fallback_reason or "primary model loaded",
            rows_fallback,
            rows_read,
            limits.get("fallback_model"),
        )
    )
    rows.append(_row("failed_chunk", "all", rows_failed, rows_read, limits.get("failed_chunk")))
    # `no_adverse_reason`: the kind's old name; job specs may still limit it so.
    rows.append(
        _row(
            "no_reason",
            "all",
            rows_without_adverse_reason,
            rows_read,
            limits.get("no_reason", limits.get("no_adverse_reason")),
        )
    )
    rows.append(
        _row(
            "reasons_by_framework",
            reasons_kernel_reason or "table kernel in use",
            rows_reasons_by_framework,
            rows_read,
            # `reasons_by_xgboost`: the kind's name while XGBoost was the only framework; job specs may still limit it so.
            limits.get("reasons_by_framework", limits.get("reasons_by_xgboost")),
        )
    )
    rows.append(
        _row(
            "reasons_unavailable",
            reasons_unavailable_detail or "every row that needed reasons got them",
            rows_reasons_unavailable,
            rows_read,
            limits.get("reasons_unavailable"),
        )
    )
    rows.append(
        _row(
            "no_drift_reference",
            drift_reference_detail or "training reference in use",
            rows_without_drift_reference,
            rows_read,
            limits.get("no_drift_reference"),
        )
    )
    rows.append(
        _row(
            "no_health_reference",
            health_reference_detail or "model-health reference in use",
            rows_without_health_reference,
            rows_read,
            limits.get("no_health_reference"),
        )
    )
    if rows_challenger_failed is not None:
        rows.append(
            _row(
                "challenger_failed",
                challenger_detail or "challenger scored every row",
                rows_challenger_failed,
                rows_read,
                limits.get("challenger_failed"),
            )
        )
    return rows


def fallback_kind_totals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each kind's total row: `fallback_report_rows` writes it first, before the kind's breakdown rows."""
    totals: dict[str, dict[str, Any]] = {}
    for row in rows:
        totals.setdefault(row["kind"], row)
    return list(totals.values())


def fallback_limit_breaches(rows: list[dict[str, Any]]) -> list[str]:
    return [
        f"fallback kind {r['kind']}: {r['rows']} rows ({r['share']:.2%} of rows read) exceeds "
        f"limits.max_fallback_share.{r['kind']} = {r['limit']:.2%}"
        for r in rows
        if r["breached"]
    ]
