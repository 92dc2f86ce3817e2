"""Reports where analysts look: the run's key numbers as a Markdown table artifact, and links to its page, the model card and
the monitoring page served from SCORING_REPORT_BASE_URL (a static server on 127.0.0.1 started by the test serves the
output folder)."""

from __future__ import annotations

import functools
import http.server
import threading
import urllib.request

import polars as pl
import pytest
import yaml

from tasks.quality.drift import SCORE_DRIFT_NAME
from tasks.settings import Settings, current_settings
from tests.conftest import DEMO_JOB, DemoEnv, key_numbers_table


def _served(url: str) -> str:
    """The page at `url` as a browser decodes it: by the `<meta charset>` in its first 1024 bytes, since the static server
    names no charset."""
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 (127.0.0.1, started by the test)
        assert response.status == 200 and "charset" not in response.headers["Content-Type"], response.headers[
            "Content-Type"
        ]
        body = response.read()
    assert b'<meta charset="utf-8">' in body[:1024]
    return body.decode("utf-8")


def latest_artifact(key: str):  # noqa: ANN202
    """The newest artifact under `key` in the Prefect API."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        (latest,) = client.read_latest_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    return latest


@pytest.mark.usefixtures("prefect_harness")
def test_the_ui_gets_the_key_numbers_and_a_link_to_the_served_page(
    demo_env: DemoEnv, fresh_data: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.score_partition import score_partition

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(fresh_data.data_dir / "output"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("SCORING_REPORT_BASE_URL", f"http://127.0.0.1:{server.server_port}/")
        day = demo_env.plan.scoring_dates[-1]
        result = score_partition(DEMO_JOB, day)
        link = latest_artifact("run-page-credit-risk")
        assert link.type == "markdown" and str(link.data).startswith(
            "["
        )  # Prefect stores a link artifact as a Markdown link
        base = f"http://127.0.0.1:{server.server_port}"
        url = f"{base}/{DEMO_JOB}/reports/html/date={day}.html"
        assert url in str(link.data) and f"]({url})" in str(latest_artifact("run-report-credit-risk").data)
        page = _served(url)
        assert f"Scoring run {DEMO_JOB} {day}" in page and result.run_id in page

        # The model card the run rewrote: its page, in the run page's style, opens from its link artifact.
        card_url = f"{base}/{DEMO_JOB}/model_card.html"
        assert f"]({card_url})" in str(latest_artifact("model-card-credit-risk").data)
        card = _served(card_url)
        assert (
            f"<title>Model card: {DEMO_JOB}</title>" in card
            and "border-collapse:collapse" in card
            and result.run_id in card
        )
        # sha256 …, 0–1, rule → decision: written in UTF-8 and read back as such, not as "â€¦".
        assert "sha256 " in card and "…" in card and "→" in card and "â€" not in card

        # The monitoring page (written here as the outcomes flow's report step writes it) opens from its links too.
        from tasks.runs.monitoring import written_monitoring_page
        from tasks.sinks.warehouse_choice import warehouse_for

        monitoring_url = f"{base}/{DEMO_JOB}/reports/html/monitoring.html"
        _, artifacts = written_monitoring_page(
            warehouse_for(current_settings()), current_settings(), DEMO_JOB, day, day
        )
        by_key = {a.key: a for a in artifacts}
        assert by_key["monitoring-page-credit-risk"].link == monitoring_url
        assert f"]({monitoring_url})" in by_key["monitoring-report-credit-risk"].markdown
        assert f"<title>Prediction monitoring {DEMO_JOB} {day}..{day}</title>" in _served(monitoring_url)
        assert not [a.key for a in artifacts if "file://" in f"{a.markdown}{a.link}"]
        # The page opens on its glance, whose flagged count is the run's own drift report's (the score is no feature).
        drift = pl.read_parquet(
            fresh_data.data_dir / "output" / DEMO_JOB / "reports" / "drift" / f"date={day}" / "*.parquet"
        )
        features = drift.filter(pl.col("feature") != SCORE_DRIFT_NAME)
        flagged = features.filter(pl.col("flag").is_in(["warn", "alert"]))["feature"].n_unique()
        counted = (
            f"<b>{flagged} of {features['feature'].n_unique()} features flagged</b>"
            if flagged
            else "<b>No feature flagged</b>"
        )
        glance = page.split('<section class="glance', 1)[1].split("</section>", 1)[0]
        assert counted in glance and page.index("At a glance") < page.index("Run summary")
    finally:
        server.shutdown()
        server.server_close()

    numbers = latest_artifact("key-numbers-credit-risk")
    table = key_numbers_table(numbers.data)
    assert table["rows read"] == f"{result.rows_read:,}" and table["rows scored"] == f"{result.rows_scored:,}"
    # Decisions by their plain names in the spec (manual_review: "manual review").
    labels = {
        d: w["label"]
        for d, w in yaml.safe_load((demo_env.settings.jobs_dir / f"{DEMO_JOB}.yaml").read_text())["prediction"][
            "decisions"
        ].items()
    }
    for decision, n in result.decisions.items():
        assert table[f"decision {labels[decision]}"].startswith(f"{n:,} (")
    assert table["fallback quarantine"].startswith(f"{result.rows_quarantined:,} (")
    assert "expected auc" in table
    # One row per drifted feature (no cell holding the whole list), as many as the published drift report flags.
    moved = [k for k in table if k.startswith("moved: ")]
    assert len(moved) == flagged and all(len(table[k]) < 200 for k in moved)
    assert table["drift flags"] == (
        f"{flagged} feature{'s' * (flagged != 1)} moved beyond the warning threshold" if flagged else "none"
    )
    # The reason codes given most, counted again from the published predictions.
    codes = pl.read_parquet(fresh_data.data_dir / "output" / DEMO_JOB / "predictions" / f"date={day}" / "*.parquet")[
        "reason_codes"
    ]
    counted = dict(codes.explode().drop_nulls().value_counts().iter_rows())
    top_rows = max(counted.values())
    assert table["reason given #1"].startswith(f"{top_rows:,} rows (")
    assert any(f"({code})" in table["reason given #1"] for code, n in counted.items() if n == top_rows)
    # Monitoring ran before the artifacts: the first day scored has no trailing days, so nothing moved against them.
    window = yaml.safe_load((demo_env.settings.jobs_dir / f"{DEMO_JOB}.yaml").read_text())["monitoring"]["window_days"]
    assert table[f"decision mix vs the trailing {window} days"] == "no measure moved beyond its tolerance"

    # The subflow is named after what it scores; in the UI's order (by id, descending) its key numbers come first.
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterType
    from prefect.client.schemas.sorting import ArtifactSort

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(numbers.flow_run_id)
        shown = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]), type=ArtifactFilterType(not_any_=["result"])
            ),
            sort=ArtifactSort.ID_DESC,
        )
    assert run.name == f"{DEMO_JOB} {day}"
    keys = [a.key for a in shown]
    assert keys[0] == "key-numbers-credit-risk" and {"run-page-credit-risk", "decision-monitoring-credit-risk"} <= set(
        keys
    )
    assert table["run page"] == url
    assert len(keys) == len(set(keys)), "an artifact made again was not deleted"


@pytest.mark.usefixtures("prefect_harness")
def test_without_a_base_url_there_is_no_link_artifact_and_a_bad_one_is_refused(
    demo_env: DemoEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks.runs.page import report_url

    assert report_url(None, DEMO_JOB, demo_env.plan.scoring_dates[-1]) is None
    # Without a base URL the monitoring page's artifacts give its path as text and no link artifact; a file outside the
    # served folder has no address under one.
    from tasks.reports.artifacts import monitoring_page_artifacts
    from tasks.reports.links import served_url

    output = demo_env.settings.data_dir / "output"
    page = output / DEMO_JOB / "reports" / "html" / "monitoring.html"
    day = demo_env.plan.scoring_dates[-1]
    artifacts = monitoring_page_artifacts(
        [],
        job=DEMO_JOB,
        first_date=day,
        last_date=day,
        page=page,
        page_url=None,
        unmatched={"not scored": 0, "quarantined": 0, "unknown entity": 0},
        interval_level=0.9,
    )
    assert [a.key for a in artifacts] == ["realized-performance-credit-risk", "monitoring-report-credit-risk"]
    assert f": `{page}` — " in artifacts[1].markdown and "](" not in artifacts[1].markdown
    assert (
        served_url(None, output, page) is None
        and served_url("http://r:8080/", output, demo_env.settings.data_dir / "raw") is None
    )
    assert served_url("http://r:8080/", output, page) == f"http://r:8080/{DEMO_JOB}/reports/html/monitoring.html"
    monkeypatch.setenv("SCORING_REPORT_BASE_URL", "reports.internal:8080")
    with pytest.raises(Exception, match="SCORING_REPORT_BASE_URL=.reports.internal:8080"):
        current_settings()


def test_the_key_numbers_name_every_fallback_that_happened_whatever_its_detail() -> None:
    from tasks.quality.fallback_report import fallback_report_rows
    from tasks.runs.key_numbers import key_numbers
    from tasks.scoring.summary import ScoringSummary

    summary = ScoringSummary(rows_read=1000, rows_scored=990, decisions={"approve": 900, "decline": 90})
    summary.fallback_report = fallback_report_rows(
        rows_read=1000,
        guard_by_expectation={"e1": {"quarantine": 10}},
        guard_columns={"e1": "amount"},
        rows_repaired=0,
        rows_quarantined=10,
        rows_fallback=990,
        fallback_reason="credit_risk 3 failed to load: sha256 mismatch",
        rows_failed=0,
        rows_without_adverse_reason=0,
        rows_reasons_by_framework=0,
        reasons_kernel_reason=None,
        limits={},
        rows_challenger_failed=990,
        challenger_detail="challenger 4: version '4' not found",
    )
    table = {r["measure"]: r["value"] for r in key_numbers(summary)}
    # The totals whose detail is a reason (not "all") are there, the breakdown rows and the zero kinds are not.
    assert table["fallback fallback_model"] == "990 (99.00%)" and table["fallback challenger_failed"] == "990 (99.00%)"
    assert table["fallback quarantine"] == "10 (1.00%)"
    assert not [
        k for k in table if k.startswith("fallback ") and k.split()[1] in ("guard_repair", "failed_chunk", "no_reason")
    ]
    assert table["decision approve"] == "900 (90.9%)" and table["drift flags"] == "none"


def test_the_key_numbers_give_the_decision_shift_the_reasons_and_one_row_per_drifted_feature() -> None:
    """Flags as rows (a feature flagged against both baselines is one row, the score's drift none), the shift decision
    monitoring flagged as its relative change, and the reasons given most with their share of the rows given reasons."""
    from tasks.runs.key_numbers import key_numbers
    from tasks.scoring.summary import ScoringSummary

    def drift(feature: str, baseline: str, psi: float, flag: str) -> dict:
        return {"feature": feature, "baseline": baseline, "psi": psi, "flag": flag}

    edges = [0.0, 1.0, 2.0]
    summary = ScoringSummary(
        rows_read=1000,
        rows_scored=1000,
        rows_with_reasons=400,
        decisions={"approve": 700, "manual_review": 300},
        drift_report=[
            drift("utilisation", "reference", 0.4, "alert"),
            drift("utilisation", "previous", 0.12, "warn"),
            drift("age", "reference", 0.15, "warn"),
            drift("income", "reference", 0.01, "ok"),
            drift(SCORE_DRIFT_NAME, "reference", 0.3, "alert"),
        ],
        # utilisation's rows moved to the upper bins: its mean went up.
        drift_histograms={
            "utilisation": {"kind": "numeric", "edges": edges, "current": [0, 10, 20, 70], "reference": [0, 60, 30, 10]}
        },
        reason_codes=[
            {"code": "R07", "text": "High utilisation", "rows": 250},
            {"code": "R01", "text": "Short history", "rows": 90},
            {"code": "R03", "text": "Late payments", "rows": 40},
            {"code": "R09", "text": "Few accounts", "rows": 5},
        ],
    )
    value, baseline = 0.3, 0.25
    monitoring = {
        "window_days": 28,
        "shifts": [
            {
                "measure": "decision_share",
                "item": "manual_review",
                "value": value,
                "baseline": baseline,
                "delta": value - baseline,
            }
        ],
    }
    rows = key_numbers(summary, monitoring=monitoring)
    table = {r["measure"]: r["value"] for r in rows}
    assert len(table) == len(rows), "a measure is given twice"
    assert table["drift flags"] == "2 features moved beyond the warning threshold"
    assert table["moved: utilisation"] == (
        "moved a lot (up) against the training data (PSI 0.400); moved against the previous partition (PSI 0.120)"
    )
    assert table["moved: age"] == "moved against the training data (PSI 0.150)" and "moved: income" not in table
    assert (
        table["shift: manual_review"]
        == f"{(value - baseline) / baseline:.0%} more than the trailing 28 days (30.0% of rows, was 25.0%)"
    )
    assert table["reason given #1"] == "250 rows (62.5% of the rows given reasons): High utilisation (R07)"
    assert "reason given #3" in table and "reason given #4" not in table
    assert max(len(v) for v in table.values()) < 120
    quiet = {r["measure"]: r["value"] for r in key_numbers(summary, monitoring={"window_days": 28, "shifts": []})}
    assert quiet["decision mix vs the trailing 28 days"] == "no measure moved beyond its tolerance"
    # A first day has no earlier partition in its window: nothing was compared, and the row says so.
    first = {
        r["measure"]: r["value"]
        for r in key_numbers(
            summary, monitoring={"window_days": 28, "shifts": [], "measures": 9, "without_baseline": 9}
        )
    }
    assert first["decision mix vs the trailing 28 days"].startswith("no baseline yet")


def test_the_key_numbers_read_whole_as_markdown() -> None:
    """Prefect's table artifact cuts a long cell and pages after ten rows; the Markdown table keeps every row and cell
    whole, a pipe in a value escaped, an address a link and a path code."""
    import markdown_it

    from tasks.runs.key_numbers import key_numbers_markdown

    rows = [
        {"measure": f"reason given #{i}", "value": f"{i} rows: a | very long text " + "x" * 120} for i in range(1, 15)
    ]
    rows += [
        {"measure": "run page", "value": "https://reports.example/credit-risk/date=2026-03-10.html"},
        {"measure": "log", "value": "/data/output/logs/run.log"},
    ]
    markdown = key_numbers_markdown(rows)
    assert key_numbers_table(markdown) == {r["measure"]: r["value"] for r in rows}
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(markdown)
    assert html.count("<tr>") == len(rows) + 1 and "a | very long" in html
    assert (
        '<a href="https://reports.example/credit-risk/date=2026-03-10.html">' in html
        and "<code>/data/output/logs/run.log</code>" in html
    )
