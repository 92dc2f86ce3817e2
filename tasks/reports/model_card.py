"""The model card of a job, as Markdown and as a page in the run page's style: the Prediction Contract, its reason codes, the calibration
map, the Inference Specification, the training record and what the guards did in the latest run.
A forecast job's card (target.kind regression or count) gives the forecast contract, the target in
words, the rule table, the reasons up and down and the prediction interval in place of the calibration.

Generated from the job spec, the registry metadata and the latest succeeded run in the ledger —
never written by hand — so it cannot drift from what the nightly run really does.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from tasks.contracts import (
    CLASSIFICATION_FIELD_MEANINGS,
    CLASSIFICATION_SCHEMA,
    FORECAST_FIELD_MEANINGS,
    FORECAST_SCHEMA,
    PREDICTION_FIELD_MEANINGS,
    PREDICTION_SCHEMA,
)
from tasks.inference.aliases import inference_model_aliases
from tasks.inference.registry import ModelMetadata, inference_model_artifact
from tasks.jobspec import JobSpec, load_job_spec
from tasks.monitoring.forecast_distribution import rule_condition_text
from tasks.prediction.calibration import METHOD as LOGISTIC_TAILS_METHOD
from tasks.prediction.calibration_check import predict_calibration_table
from tasks.prediction.config import ReasonCode
from tasks.prediction.reasons import FORECAST_DIRECTIONS
from tasks.reports.artifacts import Artifact, artifact_key
from tasks.reports.html_parts import page_html, write_run_report
from tasks.reports.links import file_reference_markdown
from tasks.settings import Settings
from tasks.sinks.warehouse import Warehouse
from tasks.sinks.warehouse_choice import warehouse_for

MODEL_CARD_FILE = "model_card.md"
"""The card's Markdown in the job's output folder; its page is beside it, `model_card.html`."""
_CARD_CSS = "code{background:#f4f4f4;padding:0 3px;border-radius:3px}thead:not(:has(th:not(:empty))){display:none}"
"""Code spans shaded; the header row of a two-column table whose headers are empty (the Inference Specification) hidden."""


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def cell(value: str) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _decisions_text(spec: JobSpec, decisions: list[str] | tuple[str, ...]) -> str:
    """Decisions by their plain names, `none` without any."""
    return ", ".join(spec.words.decision(d) for d in decisions) or "none"


def _rule_actions(spec: JobSpec) -> str:
    words = spec.words
    return "; ".join(
        f"{r.id} → {words.decision(r.decision)}" + (f" ({r.description})" if r.description else "")
        for r in spec.prediction.rules
    )


def _feature_cell(spec: JobSpec, feature: str) -> str:
    """The feature's plain name, its column beside it where the two differ."""
    label = spec.words.feature(feature)
    return f"`{feature}`" if label == feature else f"{label} (`{feature}`)"


def _ranges_and_actions(spec: JobSpec) -> dict[str, tuple[str, str]]:
    p = spec.prediction
    decisions = sorted({r.decision for r in p.rules})
    rule_actions = _rule_actions(spec)
    reasons_for = _decisions_text(spec, p.reasons.for_decisions)
    return {
        "probability": (
            "0–1",
            f"Drives the rules below; expected number of events = sum of probabilities ({p.event}).",
        ),
        "probability_low": ("0–1, ≤ probability", f"{p.interval_level:.0%} credible interval; rules may act on it."),
        "probability_high": (
            "0–1, ≥ probability",
            "An interval straddling a cut-off is sent to a person where a rule says so.",
        ),
        "score": (
            "0–100 integer",
            f"50 at p = {p.score.base_probability:g}; +{p.score.points_to_double_odds:g} points per doubling of the odds.",
        ),
        "decision": (" / ".join(decisions), rule_actions),
        "rule_id": (" / ".join(r.id for r in p.rules), "Audit: which rule decided; every row has exactly one."),
        "reason_codes": (
            f"0–{p.reasons.top_k} codes",
            f"Given for: {reasons_for}; {p.reasons.no_reason_code} when no feature pushes toward the event.",
        ),
    }


def _forecast_ranges_and_actions(spec: JobSpec) -> dict[str, tuple[str, str]]:
    p, target = spec.prediction, spec.target
    unit = f" {target.unit}" if target.unit else ""
    scale = f"≥ 0{unit} (a count is never negative)" if target.kind == "count" else f"any number{unit}"
    decisions = sorted({r.decision for r in p.rules})
    rule_actions = _rule_actions(spec)
    reasons_for = _decisions_text(spec, p.reasons.for_decisions)
    return {
        "forecast": (scale, f"The expected {target.name or 'target'}; the rules below may test it."),
        "forecast_low": (f"{scale}, ≤ forecast", f"{p.interval_level:.0%} prediction interval; rules may act on it."),
        "forecast_high": ("≥ forecast", "A rule on the interval acts on the plausible range, not the point forecast."),
        "expected_error": (f"≥ 0{unit}", "Averaged over a partition: the estimated MAE before the actuals land."),
        "decision": (" / ".join(decisions), rule_actions),
        "rule_id": (" / ".join(r.id for r in p.rules), "Audit: which rule decided; every row has exactly one."),
        "reason_codes": (
            f"0–{p.reasons.top_k} codes",
            f"Given for: {reasons_for}; <CODE>_UP raised the forecast, <CODE>_DOWN lowered it.",
        ),
    }


def _class_ranges_and_actions(spec: JobSpec) -> dict[str, tuple[str, str]]:
    p, target = spec.prediction, spec.target
    decisions = sorted({r.decision for r in p.rules})
    rule_actions = _rule_actions(spec)
    classes = " / ".join(target.classes)
    return {
        "predicted_class": (classes, "The rules below may test it (`class in {…}`)."),
        "probability": (
            "0–1",
            "The rules may test it; summed over rows it is the expected number of rows of each predicted class that are right.",
        ),
        "probability_low": ("0–1, ≤ probability", f"{p.interval_level:.0%} credible interval; rules may act on it."),
        "probability_high": ("0–1, ≥ probability", "Rules may act on the plausible range rather than the point value."),
        "class_probabilities": (
            f"{len(target.classes)} values in 0–1, adding up to 1",
            f"In class order: {', '.join(target.classes)}.",
        ),
        "runner_up_class": (classes, "The alternative a person weighs on a close call."),
        "margin": ("0–1", "A small margin is a close call between two classes; rules may send it to a person."),
        "decision": (" / ".join(decisions), rule_actions),
        "rule_id": (" / ".join(r.id for r in p.rules), "Audit: which rule decided; every row has exactly one."),
        "reason_codes": (f"0–{p.reasons.top_k} codes", f"Given for: {_decisions_text(spec, p.reasons.for_decisions)}."),
    }


def _class_reason_section(spec: JobSpec) -> str:
    reasons = spec.prediction.reasons
    rows = [
        [_feature_cell(spec, feature), reason.code, reason_text(reason)] for feature, reason in reasons.codes.items()
    ]
    if reasons.no_reason_code:
        rows.append(
            ["no feature pushes toward the predicted class", reasons.no_reason_code, reasons.no_reason_text or ""]
        )
    return (
        f"Up to {reasons.top_k} codes per row, for decisions {_decisions_text(spec, reasons.for_decisions)}: the features that pushed "
        "the row most toward its predicted class (exact contributions to that class's margin).\n\n"
        + _md_table(["feature", "code", "text"], rows)
    )


def _class_calibration_section(spec: JobSpec, metadata: ModelMetadata) -> str:
    """How the probability vector is calibrated, and its classwise reliability on the hold-out as registration measured it."""
    calibration = metadata.calibration or {}
    reliability = calibration.get("reliability") or {}
    method = calibration.get("method", "none")
    how = {
        "temperature_scaling": f"temperature scaling (one temperature, {_number(calibration.get('temperature'))}, divides every class's margin)",
        "vector_scaling": "vector scaling (a scale and a bias per class)",
    }.get(method, f"`{method}`")
    lines = [
        f"Method: **{how}**, chosen by {_number(calibration.get('folds'))}-fold cross-validated log loss on the hold-out"
        + (
            f" ({_number({k: v for k, v in (calibration.get('cv_log_loss') or {}).items() if v is not None})})"
            if calibration.get("cv_log_loss")
            else ""
        )
        + f". Interval of the predicted class's probability at {spec.prediction.interval_level:.0%} credibility, from the hold-out's rows "
        "predicted as that class with a like probability.",
    ]
    if not reliability:
        lines.append("The registered metadata holds no classwise reliability: register the model again.")
        return "\n\n".join(lines)
    measured = (
        "out of fold (each half of the hold-out calibrated by the other)"
        if reliability.get("out_of_fold")
        else "in sample (a half of the hold-out lacked a class)"
    )
    lines.append(
        f"Reliability measured {measured}: classwise ECE **{reliability['classwise_ece']:.4f}**, top-label ECE "
        f"{reliability.get('top_label_ece', math.nan):.4f}."
    )
    lines.append(
        _md_table(
            ["class", "hold-out rows", "ECE", "mean probability", "observed share"],
            [
                [c["class"], f"{c['rows']:,}", f"{c['ece']:.4f}", *_bin_means(c.get("bins") or [])]
                for c in reliability.get("classes", [])
            ],
        )
    )
    for c in reliability.get("classes", []):
        lines.append(
            f"**{c['class']}**: probability of the class against how often the rows were that class, per probability bin."
        )
        lines.append(
            _md_table(
                ["probability bin", "rows", "mean probability", "observed share"],
                [
                    [
                        f"{b['low']:.1f}–{b['high']:.1f}",
                        f"{b['rows']:,}",
                        f"{b['mean_probability']:.4f}",
                        f"{b['observed_rate']:.4f}",
                    ]
                    for b in c.get("bins") or []
                ],
            )
        )
    return "\n\n".join(lines)


def _bin_means(bins: list[dict[str, Any]]) -> list[str]:
    rows = sum(b["rows"] for b in bins)
    if not rows:
        return ["—", "—"]
    return [
        f"{sum(b['mean_probability'] * b['rows'] for b in bins) / rows:.4f}",
        f"{sum(b['observed_rate'] * b['rows'] for b in bins) / rows:.4f}",
    ]


def target_text(spec: JobSpec) -> str:
    """The target in words: `units sold, in units: a count (never negative)`."""
    target = spec.target
    kind = "a count (a whole number, never negative)" if target.kind == "count" else "a number (regression)"
    return f"**{target.name or 'the target'}**" + (f", in {target.unit}" if target.unit else "") + f": {kind}"


def reason_text(reason: ReasonCode) -> str:
    """How the card shows a reason code's text: the default, then each value-dependent variant."""
    if reason.by_band is not None:
        variants = [f"at or below the training median: {reason.by_band.low}", f"above it: {reason.by_band.high}"]
    elif reason.by_cut is not None:
        edges = ["", *(f"{c:g}" for c in reason.by_cut.cuts), ""]
        variants = [
            (f"< {hi}" if not lo else f"≥ {lo}" if not hi else f"{lo} – {hi}") + f": {text}"
            for lo, hi, text in zip(edges[:-1], edges[1:], reason.by_cut.texts, strict=True)
        ]
    elif reason.by_value is not None:
        variants = [f"{value}: {text}" for value, text in reason.by_value.items()]
    else:
        return reason.text
    return "; ".join(variants) + f" (otherwise: {reason.text})"


def _reason_section(spec: JobSpec) -> str:
    reasons = spec.prediction.reasons
    rows = [
        [_feature_cell(spec, feature), reason.code, reason_text(reason)] for feature, reason in reasons.codes.items()
    ]
    rows.append(
        [f"no feature pushes toward the event ({spec.words.subject})", reasons.no_reason_code, reasons.no_reason_text]
    )
    return (
        f"Up to {reasons.top_k} codes per row, for decisions {_decisions_text(spec, reasons.for_decisions)}: the features "
        "that pushed the row's margin most toward the event.\n\n" + _md_table(["feature", "code", "text"], rows)
    )


def _forecast_reason_section(spec: JobSpec) -> str:
    reasons = spec.prediction.reasons
    up, down = (suffix for suffix, _ in FORECAST_DIRECTIONS)
    rows = [
        [_feature_cell(spec, feature), f"{reason.code}{up} / {reason.code}{down}", reason_text(reason)]
        for feature, reason in reasons.codes.items()
    ]
    return (
        f"Up to {reasons.top_k} codes per row, for decisions {_decisions_text(spec, reasons.for_decisions)}: the features "
        "that moved the row's forecast most, whichever way, on the model's margin scale (exact contributions). "
        f'`<CODE>{up}` reads "<text> {FORECAST_DIRECTIONS[0][1]}", `<CODE>{down}` "<text> {FORECAST_DIRECTIONS[1][1]}".\n\n'
        + _md_table(["feature", "codes", "text"], rows)
    )


def _rule_section(spec: JobSpec) -> str:
    return "Rules are tried in order; the first whose conditions all hold decides the row.\n\n" + _md_table(
        ["rule", "when", "decision", "description"],
        [[r.id, rule_condition_text(r.when, r.classes), r.decision, r.description] for r in spec.prediction.rules],
    )


def _interval_section(spec: JobSpec, metadata: ModelMetadata) -> str:
    interval = metadata.interval or {}
    check = interval.get("check") or {}
    if not check:
        return "The registered model has no prediction interval in its metadata: register it again."
    unit = f" {spec.target.unit}" if spec.target.unit else ""
    link = {"log": "log link: forecast = exp(margin)", "identity": "identity link: forecast = margin"}.get(
        metadata.link or "", metadata.link or ""
    )
    method = (
        "split conformal, normalized by the error model"
        if interval.get("method") == "split_conformal_normalized"
        else str(interval.get("method"))
    )
    lines = [
        f"Method: **{method}** (crepes): forecast ± q·max(σ, {_number(float(interval.get('sigma_floor', math.nan)))}), σ the error "
        "model's expected |actual − forecast| of the row and q the conformal quantile of the normalized hold-out errors at the "
        f"level, so an easy row gets a narrow interval and a hard one a wide one; {link}"
        + ("; a count's interval is cut at 0" if spec.target.kind == "count" else "")
        + ".",
        f"Level: **{spec.prediction.interval_level:.0%}** (the spec's `interval_level`; registered at {check.get('level', math.nan):.0%}). "
        f"Hold-out split: {_number(interval.get('rows_fit'))} rows fitted the error model, {_number(interval.get('rows_calibration'))} "
        f"set the interval's quantile, {_number(interval.get('rows_check'))} were held back to check them.",
        _md_table(
            ["on the held-back hold-out rows", "value"],
            [
                ["rows", _number(check.get("rows"))],
                [f"coverage (level {check.get('level', math.nan):.0%})", f"{check.get('coverage', math.nan):.1%}"],
                ["mean interval width", f"{_number(check.get('mean_width'))}{unit}"],
                ["mean width, easy half of rows", f"{_number(check.get('easy_half_width'))}{unit}"],
                ["mean width, hard half of rows", f"{_number(check.get('hard_half_width'))}{unit}"],
                ["MAE", f"{_number(check.get('mae'))}{unit}"],
                ["RMSE", f"{_number(check.get('rmse'))}{unit}"],
                ["bias (actual − forecast)", f"{_number(check.get('bias'))}{unit}"],
            ],
        ),
    ]
    if metadata.error_model_file:
        lines.append(f"Error model: `{metadata.error_model_file}`, sha256 {(metadata.error_model_sha256 or '')[:12]}….")
    return "\n\n".join(lines)


def _number(value: Any) -> str:
    """A readable number: thousands separators for integers, four significant digits otherwise."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isinf(value):
            return "-∞" if value < 0 else "∞"
        return f"{value:,.0f}" if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_number(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_number(v) for v in value)
    return str(value)


def _training_rows(training: dict[str, Any]) -> list[list[str]]:
    """One row per training fact; rates and shares as percentages, the window in one row."""
    rows, rest = [], dict(training)
    if "window_start" in rest and "window_end" in rest:
        rows.append(["Window", f"{rest.pop('window_start')} – {rest.pop('window_end')}"])
    for key, value in rest.items():
        label = key.replace("_", " ").replace("holdout", "hold-out").replace("auc", "AUC")
        label = re.sub(r"\b(mae|rmse|ece)\b", lambda m: m.group(1).upper(), label)
        label = label[:1].upper() + label[1:]
        is_share = key.endswith(("_rate", "_share")) and isinstance(value, float)
        rows.append([label, f"{value:.2%}" if is_share else _number(value)])
    return rows


def _probability(value: float) -> str:
    return f"{value:.4f}" if value >= 1e-4 else f"{value:.1e}"


def _calibration_section(spec: JobSpec, metadata: ModelMetadata) -> str:
    level = spec.prediction.interval_level
    try:
        table = predict_calibration_table(metadata.calibration, level=level)
    except ValueError as exc:
        return f"The registered calibration map is unusable: field calibration: {exc}."
    beyond = (
        "beyond them the map continues as a logistic in the margin toward 0 and 1"
        if table.method == LOGISTIC_TAILS_METHOD
        else "beyond them it stays flat"
    )
    rows = sum(b["rows"] for b in table.bins)
    events = sum(b["events"] for b in table.bins)
    lines = [
        f"Method `{table.method}`, fitted on {rows:,} held-out rows with {events:,} events; intervals at {level:.0%} "
        f"credibility. Reachable probability over the held-out margins: **{_probability(table.reachable_low)} to "
        f"{_probability(table.reachable_high)}**; {beyond}.",
        _md_table(
            ["bin", "rows", "events", "observed rate", "margins", "probability", "interval"],
            [
                [
                    str(b["bin"]),
                    f"{b['rows']:,}",
                    f"{b['events']:,}",
                    f"{b['observed_rate']:.2%}",
                    f"{_number(b['margin_low'])} to {_number(b['margin_high'])}",
                    f"{_probability(b['probability_from'])} – {_probability(b['probability_to'])}",
                    f"{_probability(b['interval_low'])} – {_probability(b['interval_high'])}",
                ]
                for b in table.bins
            ],
        ),
    ]
    if table.warnings:
        lines.append("\n".join(f"- **Warning:** {w}" for w in table.warnings))
    return "\n\n".join(lines)


def _guard_section(latest_run: dict[str, Any] | None, guard_summary: list[dict[str, Any]]) -> str:
    if not latest_run:
        return "No succeeded run yet."
    run = f"Run `{latest_run['run_id']}` of {latest_run['partition_date']}, {latest_run['rows_read']:,} rows read"
    if not guard_summary:
        return f"{run}: no guard summary was recorded."
    acted = [g for g in guard_summary if g["rows"]]
    return f"{run}: {len(acted)} of {len(guard_summary)} expectations acted on rows.\n\n" + _md_table(
        ["expectation", "column", "type", "action", "evaluated by", "rows", "share"],
        [
            [
                g["expectation"],
                g["column_name"] or "",
                g["expectation_type"],
                g["action"],
                g["evaluated_by"],
                f"{g['rows']:,}",
                f"{g['share']:.2%}",
            ]
            for g in guard_summary
        ],
    )


def model_card_markdown(
    spec: JobSpec,
    metadata: ModelMetadata,
    latest_run: dict[str, Any] | None,
    *,
    guard_summary: list[dict[str, Any]] | None = None,
    aliases: dict[str, str] | None = None,
) -> str:
    """The card as Markdown; `latest_run` is the job's newest succeeded `runs` row, if any, `guard_summary`
    that run's `guard_summary` rows, and `aliases` where the model's aliases point."""
    forecasts, classifies = spec.target.forecasts, spec.target.classifies
    extra = (
        _forecast_ranges_and_actions(spec)
        if forecasts
        else _class_ranges_and_actions(spec)
        if classifies
        else _ranges_and_actions(spec)
    )
    schema, meanings = (
        (FORECAST_SCHEMA, FORECAST_FIELD_MEANINGS)
        if forecasts
        else (CLASSIFICATION_SCHEMA, CLASSIFICATION_FIELD_MEANINGS)
        if classifies
        else (PREDICTION_SCHEMA, PREDICTION_FIELD_MEANINGS)
    )
    words = spec.words
    if not (forecasts or classifies):
        meanings = {
            **meanings,
            "score": f"{words.score_name[:1].upper()}{words.score_name[1:]} from the probability; higher: {words.score_higher}.",
        }
    contract = [[f.name, str(f.type), meanings[f.name], *extra.get(f.name, ("", ""))] for f in schema]
    inference = json.loads(latest_run["inference"]) if latest_run and latest_run.get("inference") else {}

    def measured(key: str, fmt: str = "{:,.0f}") -> str:
        value = inference.get(key)
        return fmt.format(value) if value is not None else "no run yet"

    feature_models = (
        ", ".join(f"{m.name} {m.version} → `{m.output_feature}`" for m in spec.model.feature_models) or "none"
    )
    run_ref = (
        f"run `{latest_run['run_id']}` of {latest_run['partition_date']} ({latest_run['rows_read']:,} rows)"
        if latest_run
        else "no succeeded run yet"
    )
    spec_rows = [
        [
            "Model",
            f"{metadata.name} version {metadata.version} ({metadata.framework}, `{metadata.model_file}`, sha256 {metadata.sha256[:12]}…)",
        ],
        [
            "Named in the spec",
            spec.model.version + (f"; shadowed by challenger {spec.model.challenger}" if spec.model.challenger else ""),
        ],
        ["Aliases", ", ".join(f"{a} → {v}" for a, v in (aliases or {}).items()) or "none"],
        ["Fallback version", spec.model.fallback_version or "none"],
        ["Feature models", feature_models],
        ["Feature version", metadata.feature_version],
        [
            "Input",
            f"float32 matrix, C-contiguous, shape (chunk rows, {len(metadata.features)}): {', '.join(metadata.features)}",
        ],
        [
            "Output",
            (
                f"one raw margin per row on the model's {metadata.link or 'identity'} link scale (float64), and the error model's "
                "expected |actual − forecast| per row"
            )
            if forecasts
            else (
                f"one raw margin per class per row (float64, rows × {len(spec.target.classes)}, in class order); their softmax is the "
                "model's own probabilities"
            )
            if classifies
            else "one raw log-odds margin per row (float64)",
        ],
        ["Device asked", spec.inference.device],
        [
            "Device and providers used",
            f"{inference.get('device_type', 'no run yet')}: {', '.join(inference.get('providers', [])) or 'no run yet'}",
        ],
        ["Chunk size", f"{spec.chunk_rows:,} rows"],
        [
            "Retries, error budget",
            f"{spec.inference.retries} retries per chunk; at most {spec.inference.max_failed_share:.1%} of rows in failed chunks",
        ],
        ["Throughput (inference)", f"{measured('inference_rows_per_s')} rows/s"],
        ["Throughput (end to end)", f"{measured('end_to_end_rows_per_s')} rows/s"],
        [
            "Latency per chunk",
            f"p50 {measured('latency_ms_p50', '{:.1f}')} ms, p99 {measured('latency_ms_p99', '{:.1f}')} ms, max {measured('latency_ms_max', '{:.1f}')} ms",
        ],
        ["Memory", f"peak RSS {measured('peak_rss_mb', '{:,.0f}')} MB"],
        ["Measured on", run_ref],
    ]
    if forecasts:
        kind_sections = [
            "## Prediction Contract",
            f"Target: {target_text(spec)}. Per row a forecast, its {spec.prediction.interval_level:.0%} prediction interval, "
            f"the expected error, a decision and reasons (table `forecasts`).\n\nService level: {spec.service_level}",
            _md_table(["field", "type", "meaning", "range", "business action"], contract),
            "## Decision rules",
            _rule_section(spec),
            "## Reason codes",
            _forecast_reason_section(spec),
            "## Prediction interval",
            _interval_section(spec, metadata),
        ]
    elif classifies:
        kind_sections = [
            "## Prediction Contract",
            f"Classes of **{spec.target.name or spec.monitoring.labels.outcome_column}**, in the model's order: "
            + ", ".join(f"{i} `{c}`" for i, c in enumerate(spec.target.classes))
            + f". Per row the predicted class, its calibrated probability with its {spec.prediction.interval_level:.0%} interval, every "
            f"class's probability, the runner-up and the margin, a decision and reasons (table `classifications`).\n\nService level: {spec.service_level}",
            _md_table(["field", "type", "meaning", "range", "business action"], contract),
            "## Decision rules",
            _rule_section(spec),
            "## Reason codes",
            _class_reason_section(spec),
            "## Calibration of the class probabilities",
            _class_calibration_section(spec, metadata),
        ]
    else:
        kind_sections = [
            "## Prediction Contract",
            f"Event: **{spec.prediction.event}**. Score: **{words.score_name}**, higher: {words.score_higher}. Decisions: "
            f"{_decisions_text(spec, words.decisions)}"
            + (
                f"; those that act on the entity (their precision and recall are measured on outcomes): {words.actions_text(conjunction='and')}"
                if words.actions
                else ""
            )
            + f".\n\nService level: {spec.service_level}",
            _md_table(["field", "type", "meaning", "range", "business action"], contract),
            "## Reason codes",
            _reason_section(spec),
            "## Calibration",
            _calibration_section(spec, metadata),
        ]
    return (
        "\n\n".join(
            [
                f"# Model card: {spec.name}",
                spec.description,
                *kind_sections,
                "## Inference Specification",
                _md_table(["", ""], spec_rows),
                "## Training",
                _md_table(["", ""], _training_rows(metadata.training))
                if metadata.training
                else "No training record in the metadata.",
                "## Guards in the latest run",
                _guard_section(latest_run, guard_summary or []),
            ]
        )
        + "\n"
    )


def job_model_card(job: str, settings: Settings, warehouse: Warehouse | None = None) -> str:
    """The card of `job` for the model version its latest run used (or the spec's version before any run), read from
    `warehouse` (default: the one the settings name)."""
    spec = load_job_spec(job, settings)
    warehouse = warehouse or warehouse_for(settings)
    with warehouse.kept_open():
        latest = warehouse.latest_succeeded_run(job)
        guard_summary = warehouse.run_guard_summary(latest["run_id"]) if latest else []
    version = latest["model_version"] if latest else spec.model.version
    registry = settings.model_registry_dir(spec.model.name)
    metadata = inference_model_artifact(registry, version).metadata
    return model_card_markdown(
        spec, metadata, latest, guard_summary=guard_summary, aliases=inference_model_aliases(registry)
    )


def model_card_page_html(markdown: str) -> str:
    """The card as one self-contained page with the run page's style and charset: its Markdown rendered by
    markdown-it (CommonMark and tables; HTML in the spec's texts shown as text, never as markup)."""
    from markdown_it import MarkdownIt

    heading, _, body = markdown.partition("\n")
    rendered = MarkdownIt("commonmark", {"html": False}).enable("table").render(body)
    meta = "Generated from the job spec, the model registry and the latest succeeded run; the same card as Markdown is beside this page."
    return page_html(heading.removeprefix("# "), meta, rendered, css=_CARD_CSS)


def written_model_card(markdown: str, target: Path) -> Path:
    """The card written as Markdown to `target` and as a page beside it (same name, `.html`), each atomically (runs of
    several days rewrite it at once); returns the page's path."""
    write_run_report(target, markdown)
    return write_run_report(target.with_suffix(".html"), model_card_page_html(markdown))


def model_card_artifact(job: str, page: Path, page_url: str | None) -> Artifact:
    """A link to the card's page under SCORING_REPORT_BASE_URL (`page_url`), else its path as plain text."""
    description = f"The model card of {job} (contract, model, training, guards of the latest run)"
    if page_url:
        return Artifact(artifact_key("model-card", job), description, link=page_url)
    return Artifact(
        artifact_key("model-card", job),
        description,
        markdown=(
            f"**Model card** of `{job}`: {file_reference_markdown(page, None)} (Markdown: `{page.with_suffix('.md').name}` beside it)."
        ),
    )
