"""One partition of one job, summed up: the units' counts merged into a `ScoringSummary`, the run's
reports (guard summary, drift, fallback) staged and the job's limits enforced; `score_partition_chunks`
scores the whole partition in this process, unit after unit, as the flow's tasks do in sequence.

Nothing here knows Prefect; `flows.steps.units` wraps the passes in tasks. Chunks stream from the raw
Parquet and their outputs go straight to staging files, so memory stays flat whatever the partition size.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from tasks.catalog import (
    DRIFT_HISTOGRAMS,
    DRIFT_REPORT,
    FALLBACK_REPORT,
    GUARD_SUMMARY,
    MODEL_HEALTH,
    SHADOW_COMPARISON,
    Dataset,
)
from tasks.errors import FallbackLimitExceeded, GuardFailure, InferenceFailure, PartitionError
from tasks.features import feature_categories
from tasks.guards import GuardCounts, guard_limit_breaches, guard_summary_rows
from tasks.inference.contributions import EXPLAINED_BY_PRODUCT
from tasks.inference.registry import inference_reasons_unavailable
from tasks.monitoring.class_distribution import ClassDistribution, class_run_summary, classification_headline
from tasks.monitoring.decisions import merged_prediction_groups
from tasks.monitoring.forecast_distribution import ForecastDistribution, forecast_run_summary, reason_code_text
from tasks.monitoring.health import HEALTH_COLUMNS, model_health_rows
from tasks.monitoring.shadow import ShadowAccumulator, shadow_comparison_rows
from tasks.monitoring.slices import merged_slice_counts
from tasks.quality.drift import drift_bin_labels, drift_report_rows
from tasks.quality.fallback_report import fallback_limit_breaches, fallback_report_rows
from tasks.scoring.prepared import PreparedJob
from tasks.scoring.unit_pass import ChunkRef, UnitInference, UnitPrediction, scored_unit
from tasks.scoring.units import planned_work_units
from tasks.sinks.parquet_store import OutputDirs, write_staged_chunk

log = logging.getLogger("scoring.run")


def _staged_columns(dataset: Dataset, *, first: tuple[str, ...] = ()) -> dict[str, pl.DataType]:
    """A report's columns in polars types before the run key is stamped on: the catalog's, those in
    `first` leading (the drift files have `kind` beside `feature`; the table got it later, at its end)."""
    types = pl.from_arrow(dataset.schema.empty_table()).schema
    rest = [n for n in dataset.schema.names if n not in first and n not in ("run_id", "job", "partition_date")]
    return {name: types[name] for name in (*first, *rest)}


DRIFT_REPORT_COLUMNS = _staged_columns(DRIFT_REPORT, first=("feature", "kind"))
"""`ks_upper` is null where the bound is too loose to inform, `ks` and `wasserstein` for categorical
features; `outside_p1_p99_share` (below the training p1 or above its p99) is for numeric features,
`unseen_share` (a value the training reference never had) for boolean and categorical ones."""
DRIFT_HISTOGRAM_COLUMNS = _staged_columns(DRIFT_HISTOGRAMS, first=("feature", "kind"))
"""`edges` of a boolean or categorical feature are its category values (one bin each, then unseen)."""
FALLBACK_REPORT_COLUMNS = _staged_columns(FALLBACK_REPORT)
GUARD_SUMMARY_COLUMNS = _staged_columns(GUARD_SUMMARY)
MODEL_HEALTH_COLUMNS = _staged_columns(MODEL_HEALTH, first=HEALTH_COLUMNS)
SHADOW_COMPARISON_COLUMNS = _staged_columns(SHADOW_COMPARISON)


@dataclass
class ScoringSummary:
    """Counts and timings of one scored partition; small enough to pass between tasks."""

    rows_read: int = 0
    rows_scored: int = 0
    rows_with_reasons: int = 0
    rows_without_adverse_reason: int = 0
    rows_straddling: int = 0
    chunks: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    rules: dict[str, int] = field(default_factory=dict)
    reason_codes: list[dict[str, Any]] = field(default_factory=list)
    """Each reason code given, most given first: its `code`, the spec's `text` and the `rows` given it."""
    guard: GuardCounts = field(default_factory=GuardCounts)
    guard_summary: list[dict[str, Any]] = field(default_factory=list)
    fallback_report: list[dict[str, Any]] = field(default_factory=list)
    drift_report: list[dict[str, Any]] = field(default_factory=list)
    drift_histograms: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per feature: its `kind`, bin `edges`, `current` counts, `reference` counts (empty without a
    reference) and, for boolean and categorical features, the bins' `labels` (categories, then unseen)."""
    chunk_latency_ms: list[float] = field(default_factory=list)
    device_type: str = "cpu"
    providers: list[str] = field(default_factory=list)
    model_version: str = ""
    fallback_reason: str | None = None
    rows_failed: int = 0
    failed_chunks: list[dict[str, Any]] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    wall_s: float = 0.0
    workers: list[str] = field(default_factory=list)
    """host:pid of each process that ran inference for the run."""
    explained_rows: dict[str, int] = field(default_factory=dict)
    rows_reasons_unavailable: int = 0
    """Rows whose decision needed reasons the final model's engine cannot give (an ONNX graph)."""
    tie_recomputed_rows: int = 0
    contributions_kernel_reason: str | None = None
    decision_groups: list[dict[str, Any]] = field(default_factory=list)
    """The predictions counted per decision-monitoring group (`merged_prediction_groups`), a few hundred rows."""
    model_health: list[dict[str, Any]] = field(default_factory=list)
    """The `model_health` rows: estimated performance, attribution and multivariate drift (tasks/monitoring/health.py)."""
    slice_counts: list[dict[str, Any]] = field(default_factory=list)
    """The predictions counted per slice value, decision and score band (`merged_slice_counts`)."""
    shadow_comparison: list[dict[str, Any]] = field(default_factory=list)
    """The `shadow_comparison` rows (tasks/monitoring/shadow.py); empty when the job names no challenger."""
    flip_examples: list[dict[str, Any]] = field(default_factory=list)
    """The first flipped rows with both models' decisions, scores and reason codes (all of them: table `decision_flips`)."""
    forecast: dict[str, Any] | None = None
    """A forecast job's run in numbers (`forecast_headline`); None for a binary job."""
    forecast_report: dict[str, Any] | None = None
    """A forecast job's run in its target's words for its page and key numbers (`forecast_run_summary`): the target,
    mean forecast, interval and expected error, their distributions, the rows per rule and the reason codes given;
    None for a binary job."""
    classification: dict[str, Any] | None = None
    """A multiclass job's run in numbers (`classification_headline`); None for the other kinds."""
    classification_report: dict[str, Any] | None = None
    """A multiclass job's run in its classes for its page and key numbers (`class_run_summary`): the class mix, the
    margins, the decisions per class, the rows per rule and the reason codes given; None for the other kinds."""

    def inference_stats(self) -> dict[str, Any]:
        lat = np.asarray(self.chunk_latency_ms or [0.0])
        infer_s = lat.sum() / 1000.0
        return {
            "device_type": self.device_type,
            "providers": self.providers,
            "model_version": self.model_version,
            "fallback_reason": self.fallback_reason,
            "failed_chunks": self.failed_chunks,
            "chunks": self.chunks,
            "latency_ms_p50": float(np.percentile(lat, 50)),
            "latency_ms_p99": float(np.percentile(lat, 99)),
            "latency_ms_max": float(lat.max()),
            "inference_rows_per_s": float(self.rows_scored / infer_s) if infer_s > 0 else None,
            "end_to_end_rows_per_s": float(self.rows_read / self.wall_s) if self.wall_s > 0 else None,
            "peak_rss_mb": self.peak_rss_mb,
            "workers": self.workers,
            "reasons_explained_by": self.explained_rows,
            "reasons_tie_recomputed_rows": self.tie_recomputed_rows,
            "reasons_kernel_reason": self.contributions_kernel_reason,
            # Only a forecast job's ledger row has it: a binary job's stays as it was.
            **({"forecast": self.forecast} if self.forecast is not None else {}),
            **({"classification": self.classification} if self.classification is not None else {}),
        }

    def ledger_counts(self) -> dict[str, Any]:
        return {
            "rows_read": self.rows_read,
            "rows_scored": self.rows_scored,
            "rows_repaired": self.guard.rows_repaired,
            "rows_quarantined": self.guard.rows_quarantined,
            "rows_failed": self.rows_failed,
            "rows_fallback": self.rows_scored if self.fallback_reason else 0,
            "rows_with_reasons": self.rows_with_reasons,
            "rows_without_adverse_reason": self.rows_without_adverse_reason,
            "rows_straddling": self.rows_straddling,
            "decisions": self.decisions,
            "guard_counts": self.guard.by_expectation,
            "inference": self.inference_stats(),
        }


def forecast_headline(
    distribution: ForecastDistribution, *, kind: str, name: str, unit: str, level: float
) -> dict[str, Any]:
    """A forecast job's run in a few numbers: its kind and target, the mean forecast and the mean width of
    the prediction interval at `level` over the scored rows (None without any)."""
    rows = distribution.rows
    return {
        "kind": kind,
        "name": name,
        "unit": unit,
        "interval_level": level,
        "rows": rows,
        "mean": distribution.sums["forecast"] / rows if rows else None,
        "mean_interval_width": distribution.sums["width"] / rows if rows else None,
    }


def _health_gaps(prepared: PreparedJob) -> list[str]:
    """What model health cannot measure for this model, and why (empty: everything)."""
    meta, gaps = prepared.model.engine.metadata, []
    if "pca" not in meta.health:
        gaps.append("multivariate drift (the model was registered before model health: register it again)")
    if "attribution" not in meta.health:
        gaps.append(
            f"attribution drift ({why.split(': ')[0]})"
            if (why := inference_reasons_unavailable(meta)) is not None
            else "attribution drift (the model was registered before model health: register it again)"
        )
    if prepared.spec.target.forecasts and not meta.interval.get("estimated_error"):
        gaps.append("interval of the estimated error (the model was registered before it: register it again)")
    return gaps


def _merged_shadow(
    prepared: PreparedJob, inferences: list[UnitInference], predictions: list[UnitPrediction], *, rows_scored: int
) -> ShadowAccumulator | None:
    """The units' champion × challenger sums and the challenger's failures; None when the job names no challenger."""
    if prepared.spec.model.challenger is None:
        return None
    plan = prepared.prediction_plan
    shadow = ShadowAccumulator(plan.decisions, forecasts=prepared.spec.target.forecasts, classes=plan.classes)
    for prediction in sorted(predictions, key=lambda u: u.unit_id):
        if prediction.shadow is not None:
            shadow.merge(prediction.shadow)
    for inference in sorted(inferences, key=lambda u: u.unit_id):
        shadow.rows_failed += inference.challenger_rows_failed
        shadow.failures += inference.challenger_failures
    if prepared.challenger_error:
        shadow.add_failed(rows_scored, prepared.challenger_error)
    return shadow


def scoring_summary(
    prepared: PreparedJob,
    inferences: list[UnitInference],
    predictions: list[UnitPrediction],
    *,
    run_id: str,
    partition_date: dt.date,
    dirs: OutputDirs,
    wall_s: float,
) -> ScoringSummary:
    """Merge the units' counts into the run's summary, stage its reports, and enforce the job's limits."""
    spec, engine = prepared.spec, prepared.model.engine
    summary = ScoringSummary(
        device_type=engine.device_type,
        providers=list(engine.providers),
        model_version=engine.metadata.version,
        fallback_reason=prepared.model.fallback_reason,
        wall_s=wall_s,
    )
    drift = prepared.drift_accumulator(with_estimate=True)
    distribution = ForecastDistribution() if spec.target.forecasts else None
    classified = ClassDistribution() if spec.target.classifies else None
    decisions: Counter[str] = Counter()
    rules: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    explained: Counter[str] = Counter()
    for inference in sorted(inferences, key=lambda u: u.unit_id):
        summary.rows_read += inference.rows_read
        summary.chunks += inference.chunks
        summary.rows_failed += inference.rows_failed
        summary.failed_chunks += inference.failed_chunks
        summary.guard.merge(inference.guard)
        summary.chunk_latency_ms += inference.latency_ms
        drift.merge(inference.drift)
        summary.peak_rss_mb = max(summary.peak_rss_mb, inference.peak_rss_mb)
        explained.update(inference.explained_rows)
        summary.rows_reasons_unavailable += inference.rows_reasons_unavailable
        summary.tie_recomputed_rows += inference.tie_recomputed_rows
    summary.explained_rows = dict(sorted(explained.items()))
    summary.contributions_kernel_reason = getattr(engine, "contributions_kernel_reason", None)
    summary.workers = sorted({inference.worker for inference in inferences})
    for prediction in sorted(predictions, key=lambda u: u.unit_id):
        summary.rows_scored += prediction.rows_scored
        summary.rows_with_reasons += prediction.rows_with_reasons
        summary.rows_without_adverse_reason += prediction.rows_without_adverse_reason
        summary.rows_straddling += prediction.rows_straddling
        drift.merge(prediction.drift)
        decisions.update(prediction.decisions)
        rules.update(prediction.rules)
        codes.update(prediction.reason_codes)
        summary.peak_rss_mb = max(summary.peak_rss_mb, prediction.peak_rss_mb)
        if distribution is not None and prediction.forecasts is not None:
            distribution.merge(prediction.forecasts)
        if classified is not None and prediction.classifications is not None:
            classified.merge(prediction.classifications)
    summary.decision_groups = merged_prediction_groups(
        [g for p in sorted(predictions, key=lambda u: u.unit_id) for g in p.decision_groups]
    ).to_dicts()
    summary.decisions = dict(sorted(decisions.items()))
    summary.rules = dict(sorted(rules.items()))
    texts = {reason.code: reason.text for reason in spec.prediction.reasons.codes.values()}
    summary.reason_codes = [
        {"code": code, "text": texts.get(code) or reason_code_text(code, texts), "rows": int(n)}
        for code, n in sorted(codes.items(), key=lambda item: (-item[1], item[0]))
    ]
    if distribution is not None:
        summary.forecast = forecast_headline(
            distribution,
            kind=spec.target.kind,
            name=spec.target.name or spec.monitoring.labels.outcome_column,
            unit=spec.target.unit,
            level=spec.prediction.interval_level,
        )
        summary.forecast_report = forecast_run_summary(
            distribution,
            target=spec.target.model_dump(),
            level=spec.prediction.interval_level,
            rules=[r.model_dump() for r in spec.prediction.rules],
            rule_rows=summary.rules,
            reason_texts=texts,
        )
    if classified is not None:
        name = spec.target.name or spec.monitoring.labels.outcome_column
        summary.classification = classification_headline(
            classified, name=name, classes=spec.target.classes, decisions=summary.decisions
        )
        summary.classification_report = class_run_summary(
            classified,
            name=name,
            classes=spec.target.classes,
            level=spec.prediction.interval_level,
            rules=[r.model_dump() for r in spec.prediction.rules],
            rule_rows=summary.rules,
            reason_texts=texts,
        )
    health = prepared.health_accumulator()
    for inference in sorted(inferences, key=lambda u: u.unit_id):
        health.merge(inference.health)
    monitoring = spec.monitoring
    summary.model_health = (
        []
        if not monitoring.health.enabled
        else model_health_rows(
            health,
            prepared.health_reference,
            model_version=engine.metadata.version,
            decisions=list(dict.fromkeys(r.decision for r in spec.prediction.rules)),
            rule_ids=[r.id for r in spec.prediction.rules],
            actions=spec.action_decisions,
            level=monitoring.health.interval_level,
            attribution_warn=monitoring.health.attribution_warn,
            attribution_alert=monitoring.health.attribution_alert,
            multivariate_tolerance=monitoring.health.multivariate_tolerance,
            interval=engine.metadata.interval if spec.target.forecasts else None,
            estimated_error_tolerance=monitoring.health.estimated_error_tolerance,
            classes=spec.target.classes if spec.target.classifies else (),
            class_reference=engine.metadata.class_reference,
            calibration_rows=engine.metadata.training.get("rows_holdout") if spec.target.classifies else None,
            psi_warn=spec.drift.psi_warn,
            psi_alert=spec.drift.psi_alert,
        )
    )
    summary.slice_counts = merged_slice_counts(
        [part for inference in sorted(inferences, key=lambda u: u.unit_id) for part in inference.slice_counts],
        max_values=monitoring.slice_max_values,
    ).to_dicts()
    if summary.rows_failed > spec.inference.max_failed_share * max(summary.rows_read, 1):
        last = summary.failed_chunks[-1]["error"]
        raise InferenceFailure(
            f"job {spec.name} on {partition_date}: {summary.rows_failed} of {summary.rows_read} rows are in chunks whose "
            f"inference failed after {1 + spec.inference.retries} attempt(s), beyond the error budget "
            f"inference.max_failed_share={spec.inference.max_failed_share:.2%}; last error: {last}"
        )
    summary.guard_summary = guard_summary_rows(prepared.suite, summary.guard)
    write_staged_chunk(
        dirs.guard_summary,
        run_id,
        0,
        ChunkRef(run_id, spec.name, partition_date, 0, spec.entity_column).stamped(
            pl.DataFrame(summary.guard_summary, schema=GUARD_SUMMARY_COLUMNS)
        ),
    )
    baselines = prepared.report_baselines
    summary.drift_report = drift_report_rows(drift, baselines, spec.drift.model_dump(exclude={"require_reference"}))
    reference = prepared.drift_baselines.get("reference", {})
    binned_reference = baselines.get("reference", {})
    categories = feature_categories(prepared.features)
    summary.drift_histograms = {
        name: {
            "kind": h.kind,
            "edges": h.edges.tolist(),
            "current": h.counts.tolist(),
            "reference": binned_reference[name].counts.tolist() if name in binned_reference else [],
            "labels": drift_bin_labels(h, categories.get(name, ())),
        }
        for name, h in drift.histograms.items()
    }
    stamp = ChunkRef(run_id, spec.name, partition_date, 0, spec.entity_column)
    write_staged_chunk(
        dirs.drift_report, run_id, 0, stamp.stamped(pl.DataFrame(summary.drift_report, schema=DRIFT_REPORT_COLUMNS))
    )
    write_staged_chunk(
        dirs.drift_histograms,
        run_id,
        0,
        stamp.stamped(
            pl.DataFrame(
                [
                    {
                        "feature": k,
                        "kind": h.kind,
                        "edges": h.edges.tolist(),
                        "counts": h.counts.tolist(),
                        "nulls": h.nulls,
                    }
                    for k, h in drift.histograms.items()
                ],
                schema=DRIFT_HISTOGRAM_COLUMNS,
            )
        ),
    )
    write_staged_chunk(
        dirs.model_health, run_id, 0, stamp.stamped(pl.DataFrame(summary.model_health, schema=MODEL_HEALTH_COLUMNS))
    )
    shadow = _merged_shadow(prepared, inferences, predictions, rows_scored=summary.rows_scored)
    if shadow is not None:
        summary.shadow_comparison = shadow_comparison_rows(
            shadow,
            champion_version=engine.metadata.version,
            rows_scored=summary.rows_scored,
            challenger_version=prepared.challenger_plan.version if prepared.challenger_plan else None,
        )
        summary.flip_examples = shadow.examples
    write_staged_chunk(
        dirs.shadow_comparison,
        run_id,
        0,
        stamp.stamped(pl.DataFrame(summary.shadow_comparison, schema=SHADOW_COMPARISON_COLUMNS)),
    )
    health_gaps = _health_gaps(prepared) if monitoring.health.enabled else []
    summary.fallback_report = fallback_report_rows(
        rows_read=summary.rows_read,
        guard_by_expectation=summary.guard.by_expectation,
        guard_columns={e.key: e.column for e in prepared.suite.expectations},
        rows_repaired=summary.guard.rows_repaired,
        rows_quarantined=summary.guard.rows_quarantined,
        rows_fallback=summary.rows_scored if summary.fallback_reason else 0,
        fallback_reason=summary.fallback_reason,
        rows_failed=summary.rows_failed,
        rows_without_adverse_reason=summary.rows_without_adverse_reason,
        rows_reasons_by_framework=sum(n for by, n in summary.explained_rows.items() if by not in EXPLAINED_BY_PRODUCT),
        reasons_kernel_reason=summary.contributions_kernel_reason,
        rows_reasons_unavailable=summary.rows_reasons_unavailable,
        reasons_unavailable_detail=getattr(engine, "reasons_unavailable", None),
        rows_without_drift_reference=0 if reference else summary.rows_read,
        drift_reference_detail=None
        if reference
        else (
            f"model {engine.metadata.name} {engine.metadata.version} has no training reference (drift.require_reference: false)"
        ),
        rows_without_health_reference=summary.rows_read if health_gaps else 0,
        health_reference_detail=(
            f"model {engine.metadata.name} {engine.metadata.version}: no {' and no '.join(health_gaps)}"
            if health_gaps
            else None
        ),
        limits=spec.limits.max_fallback_share,
        rows_challenger_failed=None if shadow is None else shadow.rows_failed,
        challenger_detail=None
        if shadow is None or not shadow.failures
        else (
            f"{shadow.failures[0]}"
            + (f" (and {len(shadow.failures) - 1} more chunks)" if len(shadow.failures) > 1 else "")
        ),
    )
    write_staged_chunk(
        dirs.fallback_report,
        run_id,
        0,
        ChunkRef(run_id, spec.name, partition_date, 0, spec.entity_column).stamped(
            pl.DataFrame(summary.fallback_report, schema=FALLBACK_REPORT_COLUMNS)
        ),
    )
    if summary.rows_read < spec.limits.min_rows:
        if summary.rows_read == 0:
            raise PartitionError(
                f"no raw partition for job {spec.name!r} on {partition_date}: {prepared.raw} holds 0 raw rows "
                f"(limits.min_rows: {spec.limits.min_rows}; 0 accepts an empty partition)"
            )
        raise PartitionError(
            f"partition {partition_date} of job {spec.name} has {summary.rows_read} raw rows in {prepared.raw}; "
            f"the job needs at least {spec.limits.min_rows} (limits.min_rows)"
        )
    breaches = guard_limit_breaches(
        summary.guard,
        max_repaired_share=spec.limits.max_repaired_share,
        max_quarantined_share=spec.limits.max_quarantined_share,
    )
    if breaches:
        raise GuardFailure(f"job {spec.name} on {partition_date}: " + "; ".join(breaches))
    fallback_breaches = fallback_limit_breaches(summary.fallback_report)
    if fallback_breaches:
        raise FallbackLimitExceeded(f"job {spec.name} on {partition_date}: " + "; ".join(fallback_breaches))
    log.info(
        "scored %s %s: %d read, %d scored, %d repaired, %d quarantined in %.2fs",
        spec.name,
        partition_date,
        summary.rows_read,
        summary.rows_scored,
        summary.guard.rows_repaired,
        summary.guard.rows_quarantined,
        summary.wall_s,
    )
    return summary


def score_partition_chunks(
    prepared: PreparedJob,
    *,
    run_id: str,
    partition_date: dt.date,
    chunk_rows: int,
    dirs: OutputDirs,
) -> ScoringSummary:
    """Score every chunk of the partition in this process, unit after unit, as the flow's unit tasks do. The run's staging files are written; the partition stays untouched."""
    started = time.perf_counter()
    units = [
        scored_unit(prepared, unit, run_id=run_id, partition_date=partition_date, chunk_rows=chunk_rows, dirs=dirs)
        for unit in planned_work_units(prepared, run_id=run_id, chunk_rows=chunk_rows, dirs=dirs)
    ]
    inferences, predictions = [u.inference for u in units], [u.prediction for u in units]
    return scoring_summary(
        prepared,
        inferences,
        predictions,
        run_id=run_id,
        partition_date=partition_date,
        dirs=dirs,
        wall_s=time.perf_counter() - started,
    )
