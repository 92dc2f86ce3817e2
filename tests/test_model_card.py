"""`score card`: the two tables are filled from the job spec, the registry and the latest run."""

from __future__ import annotations

import json

import duckdb
import pytest
from conftest import DEMO_JOB, DemoEnv
from offline_browser import offline_page
from test_run_artifacts import latest_artifact

from tasks.contracts import PREDICTION_SCHEMA
from tasks.inference.registry import inference_model_artifact
from tasks.jobspec import load_job_spec
from tasks.prediction.calibration_check import predict_calibration_table
from tasks.reports.model_card import job_model_card
from tasks.settings import Settings
from tasks.sinks.duckdb_warehouse import DuckDBWarehouse

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _section(card: str, title: str) -> str:
    return card.split(f"## {title}")[1].split("\n## ")[0]


def _table_rows(section: str) -> list[list[str]]:
    """The cells of a section's Markdown table rows, header and rule left out."""
    lines = [line for line in section.splitlines() if line.startswith("| ")][1:]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_card_before_any_run_says_so(fresh_data: Settings) -> None:
    card = job_model_card(DEMO_JOB, fresh_data)
    assert "no succeeded run yet" in card and "no run yet rows/s" in card
    assert _section(card, "Guards in the latest run").strip() == "No succeeded run yet."


def test_card_holds_the_contract_and_the_measured_inference_of_the_latest_run(
    demo_env: DemoEnv, fresh_data: Settings
) -> None:
    from flows.score_partition import score_partition

    day = demo_env.plan.scoring_dates[0]
    result = score_partition(DEMO_JOB, day)
    card = job_model_card(DEMO_JOB, fresh_data)
    spec = load_job_spec(DEMO_JOB, fresh_data)
    run = DuckDBWarehouse(fresh_data.duckdb_path).latest_succeeded_run(DEMO_JOB)
    assert run["run_id"] == result.run_id
    inference = json.loads(run["inference"])

    contract = _section(card, "Prediction Contract")
    rows = [line for line in contract.splitlines() if line.startswith("| ") and not line.startswith("| field")]
    assert [r.split(" | ")[0].removeprefix("| ") for r in rows] == PREDICTION_SCHEMA.names
    decision_row = next(r for r in rows if r.startswith("| decision "))
    for rule in spec.prediction.rules:
        # The business action names the decision as the spec's `decisions:` does (manual_review: "manual review").
        assert f"{rule.id} → {spec.prediction.decisions[rule.decision].label}" in decision_row
    assert spec.service_level.split(";")[0] in contract

    inference_spec = _section(card, "Inference Specification")
    meta = inference_model_artifact(fresh_data.model_registry_dir(DEMO_JOB), run["model_version"]).metadata
    assert f"{meta.name} version {meta.version} (xgboost" in inference_spec
    assert meta.sha256[:12] in inference_spec
    assert f"shape (chunk rows, {len(meta.features)})" in inference_spec
    assert f"{inference['inference_rows_per_s']:,.0f} rows/s" in inference_spec
    assert f"p99 {inference['latency_ms_p99']:.1f} ms" in inference_spec
    assert f"peak RSS {inference['peak_rss_mb']:,.0f} MB" in inference_spec and inference["peak_rss_mb"] > 0
    assert "cpu: xgboost:cpu" in inference_spec
    assert result.run_id in inference_spec

    # The run rewrote the card beside its outputs, as Markdown and as a page; without SCORING_REPORT_BASE_URL its artifact
    # (and the run page's) gives the file's path as text, not a file:// link that a browser opens nothing from.
    written = fresh_data.output_dir(DEMO_JOB) / "model_card.md"
    page = written.with_suffix(".html")
    assert written.read_text() == card and page.is_file()
    shown = {key: str(latest_artifact(f"{key}-credit-risk").data) for key in ("model-card", "run-report")}
    assert f"`{page}`" in shown["model-card"]
    assert f"`{fresh_data.output_dir(DEMO_JOB) / 'reports' / 'html' / f'date={day}.html'}`" in shown["run-report"]
    assert not [key for key, text in shown.items() if "](" in text or "file://" in text]
    with offline_page(page) as opened:
        assert (
            opened.page.title() == f"Model card: {DEMO_JOB}" and opened.errors == [] and opened.fetched_elsewhere == []
        )
        text = opened.page.inner_text("body")
    assert f"sha256 {meta.sha256[:12]}…" in text and "â€" not in text


def test_card_holds_service_level_reasons_calibration_training_and_guards(
    demo_env: DemoEnv, fresh_data: Settings
) -> None:
    from flows.score_partition import score_partition

    result = score_partition(DEMO_JOB, demo_env.plan.scoring_dates[0])
    card = job_model_card(DEMO_JOB, fresh_data)
    spec = load_job_spec(DEMO_JOB, fresh_data)
    meta = inference_model_artifact(fresh_data.model_registry_dir(DEMO_JOB), demo_env.plan.model_version).metadata

    assert card.count(spec.service_level) == 1
    (header,) = [line for line in _section(card, "Prediction Contract").splitlines() if line.startswith("| field")]
    assert header == "| field | type | meaning | range | business action |"

    reasons = spec.prediction.reasons
    rows = _table_rows(_section(card, "Reason codes"))
    # Each feature by its plain name (the spec gives none: the column's words, capitalised), the column beside it.
    assert [row[:2] for row in rows] == [
        *([f"{feature.replace('_', ' ').capitalize()} (`{feature}`)", r.code] for feature, r in reasons.codes.items()),
        [f"no feature pushes toward the event ({spec.prediction.event})", reasons.no_reason_code],
    ]
    assert rows[-1][2] == reasons.no_reason_text
    for (_, _, shown), r in zip(rows, reasons.codes.values(), strict=False):
        # Every text a row can get is on the card: the default and each value-dependent variant.
        variants = (
            [r.by_band.low, r.by_band.high]
            if r.by_band
            else r.by_cut.texts
            if r.by_cut
            else list(r.by_value.values())
            if r.by_value
            else []
        )
        assert all(text in shown for text in [r.text, *variants]), shown
    home = rows[list(reasons.codes).index("home_ownership")][2]
    assert "RENT: " + reasons.codes["home_ownership"].by_value["RENT"] in home

    calibration = _section(card, "Calibration")
    table = predict_calibration_table(meta.calibration, level=spec.prediction.interval_level)
    assert f"Method `{table.method}`" in calibration and table.method == meta.calibration["method"]
    assert f"**{table.reachable_low:.4f} to {table.reachable_high:.4f}**" in calibration
    bins = _table_rows(calibration)
    assert [(int(b[0]), b[1], b[2]) for b in bins] == [
        (t["bin"], f"{t['rows']:,}", f"{t['events']:,}") for t in table.bins
    ]
    assert sum(t["rows"] for t in table.bins) == meta.training["rows_holdout"]
    assert [
        line.removeprefix("- **Warning:** ") for line in calibration.splitlines() if "Warning" in line
    ] == table.warnings

    training = dict(_table_rows(_section(card, "Training")))
    assert training["Window"] == f"{meta.training['window_start']} – {meta.training['window_end']}"
    assert training["Event rate"] == f"{meta.training['event_rate']:.2%}"
    assert training["Hold-out AUC"] == f"{meta.training['holdout_auc']:.4g}"
    assert training["Rows train"] == f"{meta.training['rows_train']:,}"
    assert str(meta.training["event_rate"]) not in card and "{" not in _section(card, "Training")

    guards = _section(card, "Guards in the latest run")
    with duckdb.connect(str(fresh_data.duckdb_path), read_only=True) as con:
        stored = con.sql(
            "SELECT expectation, action, rows FROM guard_summary WHERE run_id = ?", params=[result.run_id]
        ).fetchall()
    assert stored and result.run_id in guards
    shown = {(row[0], row[3], int(row[5].replace(",", ""))) for row in _table_rows(guards)}
    assert shown == set(stored) and len(_table_rows(guards)) == len(stored)
    assert f"{sum(1 for _, _, n in stored if n)} of {len(stored)} expectations acted on rows" in guards


def test_score_card_writes_the_card_and_names_the_file(fresh_data: Settings, tmp_path, prefect_logging) -> None:
    from typer.testing import CliRunner

    from cli.score import app

    target = tmp_path / "card.md"
    result = CliRunner().invoke(app, ["card", DEMO_JOB, "--out", str(target)])
    assert result.exit_code == 0, result.output
    assert str(target) in result.output.replace("\n", "") and str(target.with_suffix(".html")) in result.output.replace(
        "\n", ""
    )
    assert target.read_text() == job_model_card(DEMO_JOB, fresh_data)
    assert f"<title>Model card: {DEMO_JOB}</title>" in target.with_suffix(".html").read_text(encoding="utf-8")
    unknown = CliRunner().invoke(app, ["card", "no_such_job"])
    assert unknown.exit_code == 2 and "unknown job 'no_such_job'" in unknown.output
