"""The model card of a job: the Prediction Contract and the Inference Specification, as Markdown.

Generated from the job spec, the registry metadata and the latest succeeded run in the ledger —
never written by hand — so it cannot drift from what the nightly run really does.
"""

from __future__ import annotations

import json
from typing import Any

from tasks.contracts import PREDICTION_FIELD_MEANINGS, PREDICTION_SCHEMA
from tasks.inference.registry import ModelMetadata, inference_model_artifact
from tasks.jobspec import JobSpec, load_job_spec
from tasks.settings import Settings
from tasks.warehouse import warehouse_for


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def cell(value: str) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _ranges_and_actions(spec: JobSpec) -> dict[str, tuple[str, str]]:
    p = spec.prediction
    decisions = sorted({r.decision for r in p.rules})
    rule_actions = "; ".join(f"{r.id} → {r.decision}" + (f" ({r.description})" if r.description else "") for r in p.rules)
    reasons_for = ", ".join(p.reasons.for_decisions) or "no decision"
    return {
        "probability": ("0–1", f"Drives the rules below; expected number of events = sum of probabilities ({p.event})."),
        "probability_low": ("0–1, ≤ probability", f"{p.interval_level:.0%} credible interval; rules may act on it."),
        "probability_high": ("0–1, ≥ probability", "An interval straddling a cut-off is sent to a person where a rule says so."),
        "score": (
            "0–100 integer",
            f"50 at p = {p.score.base_probability:g}; +{p.score.points_to_double_odds:g} points per doubling of the odds.",
        ),
        "decision": (" / ".join(decisions), rule_actions),
        "rule_id": (" / ".join(r.id for r in p.rules), "Audit: which rule decided; every row has exactly one."),
        "reason_codes": (
            f"0–{p.reasons.top_k} codes",
            f"Given for: {reasons_for}; {p.reasons.no_adverse_code} when no feature pushes toward the event.",
        ),
    }


def model_card_markdown(spec: JobSpec, metadata: ModelMetadata, latest_run: dict[str, Any] | None) -> str:
    """The card as Markdown; `latest_run` is the job's newest succeeded `runs` row, if any."""
    extra = _ranges_and_actions(spec)
    contract = [
        [f.name, str(f.type), PREDICTION_FIELD_MEANINGS[f.name], *extra.get(f.name, ("", "")), spec.service_level]
        for f in PREDICTION_SCHEMA
    ]
    inference = json.loads(latest_run["inference"]) if latest_run and latest_run.get("inference") else {}

    def measured(key: str, fmt: str = "{:,.0f}") -> str:
        value = inference.get(key)
        return fmt.format(value) if value is not None else "no run yet"

    feature_models = ", ".join(f"{m.name} {m.version} → `{m.output_feature}`" for m in spec.model.feature_models) or "none"
    run_ref = (
        f"run `{latest_run['run_id']}` of {latest_run['partition_date']} ({latest_run['rows_read']:,} rows)"
        if latest_run else "no succeeded run yet"
    )
    spec_rows = [
        ["Model", f"{metadata.name} version {metadata.version} ({metadata.framework}, `{metadata.model_file}`, sha256 {metadata.sha256[:12]}…)"],
        ["Fallback version", spec.model.fallback_version or "none"],
        ["Feature models", feature_models],
        ["Feature version", metadata.feature_version],
        ["Input", f"float32 matrix, C-contiguous, shape (chunk rows, {len(metadata.features)}): {', '.join(metadata.features)}"],
        ["Output", "one raw log-odds margin per row (float64)"],
        ["Device asked", spec.inference.device],
        ["Device and providers used", f"{inference.get('device_type', 'no run yet')}: {', '.join(inference.get('providers', [])) or 'no run yet'}"],
        ["Chunk size", f"{spec.chunk_rows:,} rows"],
        ["Retries, error budget", f"{spec.inference.retries} retries per chunk; at most {spec.inference.max_failed_share:.1%} of rows in failed chunks"],
        ["Throughput (inference)", f"{measured('inference_rows_per_s')} rows/s"],
        ["Throughput (end to end)", f"{measured('end_to_end_rows_per_s')} rows/s"],
        ["Latency per chunk", f"p50 {measured('latency_ms_p50', '{:.1f}')} ms, p99 {measured('latency_ms_p99', '{:.1f}')} ms, max {measured('latency_ms_max', '{:.1f}')} ms"],
        ["Memory", f"peak RSS {measured('peak_rss_mb', '{:,.0f}')} MB"],
        ["Measured on", run_ref],
        ["Training", ", ".join(f"{k}: {v}" for k, v in metadata.training.items())],
    ]
    return "\n\n".join([
        f"# Model card: {spec.name}",
        spec.description,
        "## Prediction Contract",
        f"Event: **{spec.prediction.event}**. Service level: {spec.service_level}",
        _md_table(["field", "type", "meaning", "range", "business action", "service level"], contract),
        "## Inference Specification",
        _md_table(["", ""], spec_rows),
    ]) + "\n"


def job_model_card(job: str, settings: Settings) -> str:
    """The card of `job` for the model version its latest run used (or the spec's version before any run)."""
    spec = load_job_spec(job, settings)
    latest = warehouse_for(settings).latest_succeeded_run(job)
    version = latest["model_version"] if latest else spec.model.version
    metadata = inference_model_artifact(settings.model_registry_dir(spec.model.name), version).metadata
    return model_card_markdown(spec, metadata, latest)
