"""A wide job's run page reads well: a glance at the top names the features flagged (counted here from the drift rows
themselves), the flagged features' histograms come first and the others are folded in a closed <details>, the page
for 100 features stays under 1 MB, and in a real chromium (offline) the drift table sorts by a click on a header and
its filters hide rows.

The inputs are real: training and current samples binned and compared by tasks/quality/drift.py, as a run does."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from offline_browser import offline_page

from tasks.prediction.words import JobWords
from tasks.quality.drift import DriftAccumulator, Histogram, drift_bin_labels, drift_report_rows, reference_statistics
from tasks.reports.html_parts import write_run_report
from tasks.reports.html_report import run_report_html

N_FEATURES = 100
N_CATEGORICAL = 10
THRESHOLDS = {"psi_warn": 0.1, "psi_alert": 0.25, "ks_warn": 0.1, "ks_alert": 0.2}
FALLBACK_ROWS = [
    {"kind": "guard_repair", "detail": "all", "rows": 12, "share": 0.006, "limit": None, "breached": False},
    {"kind": "quarantine", "detail": "all", "rows": 90, "share": 0.045, "limit": 0.02, "breached": True},
    {"kind": "quarantine", "detail": "MOSTYPE in set", "rows": 90, "share": 0.045, "limit": None, "breached": False},
    {"kind": "failed_chunk", "detail": "all", "rows": 0, "share": 0.0, "limit": 0.01, "breached": False},
]
SUMMARY = {"rows_read": 2_000, "rows_scored": 1_910, "decisions": {"offer": 310, "no_offer": 1_600}}


def _wide_inputs() -> tuple[
    list[dict[str, Any]], dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], dict[str, list[str]]
]:
    """Drift rows (against the training reference and the previous partition), histograms and bin labels of 100
    features: 90 numeric, the first dozen shifted by decreasing amounts, and 10 categorical, two of them remixed."""
    rng = np.random.default_rng(36)
    numeric = [f"num_{i:02d}" for i in range(N_FEATURES - N_CATEGORICAL)]
    categorical = [f"CAT{i}" for i in range(N_CATEGORICAL)]
    names = (*numeric, *categorical)
    kinds = dict.fromkeys(categorical, "categorical")
    shifts = np.zeros(len(numeric))
    shifts[:12] = np.linspace(0.6, 0.05, 12)

    def sample(rows: int, shifted: bool) -> np.ndarray:
        columns = [rng.normal(shifts[j] if shifted else 0.0, 1.0, rows) for j in range(len(numeric))]
        for i in range(N_CATEGORICAL):
            p = np.array([0.4, 0.3, 0.2, 0.1]) if not (shifted and i < 2) else np.array([0.2, 0.3, 0.2, 0.3])
            columns.append(rng.choice(4, size=rows, p=p).astype(np.float64))
        return np.column_stack(columns)

    stats = reference_statistics(sample(6_000, False), names, kinds)
    reference = {name: Histogram.of_reference(s) for name, s in stats.items()}
    edges = {name: h.edges for name, h in reference.items()}
    psi_edges = {name: h.psi_edges for name, h in reference.items() if h.psi_edges is not None}
    current, previous = (DriftAccumulator(edges=edges, psi_edges=psi_edges, kinds=kinds) for _ in range(2))
    current.add_matrix(names, sample(2_000, True))
    previous.add_matrix(names, sample(2_000, False))
    rows = drift_report_rows(current, {"reference": reference, "previous": previous.histograms}, THRESHOLDS)
    histograms = {name: (h.edges, h.counts, reference[name].counts) for name, h in current.histograms.items()}
    labels = {name: drift_bin_labels(h) for name, h in current.histograms.items() if h.kind != "numeric"}
    return rows, histograms, labels


@pytest.fixture(scope="module")
def inputs() -> tuple[list[dict[str, Any]], dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], dict[str, list[str]]]:
    return _wide_inputs()


@pytest.fixture(scope="module")
def wide(inputs: tuple) -> tuple[list[dict[str, Any]], str]:
    rows, histograms, labels = inputs
    page = run_report_html(
        job="caravan",
        partition_date="2026-03-10",
        run_id="run-36",
        summary=SUMMARY,
        fallback_rows=FALLBACK_ROWS,
        drift_rows=rows,
        histograms=histograms,
        bin_labels=labels,
    )
    return rows, page


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(
        [{"feature": r["feature"], "baseline": r["baseline"], "flag": r["flag"], "psi": r["psi"]} for r in rows]
    ).with_columns(pl.col("psi").fill_nan(None))


def _glance(page: str) -> str:
    return page.split('<section class="glance', 1)[1].split("</section>", 1)[0]


def test_the_glance_counts_the_flagged_features_of_the_drift_rows(wide: tuple[list[dict[str, Any]], str]) -> None:
    rows, page = wide
    frame = _frame(rows)
    flagged = frame.filter(pl.col("flag").is_in(["warn", "alert"]))
    n_flagged = flagged["feature"].n_unique()
    n_alert = flagged.filter(pl.col("flag") == "alert")["feature"].n_unique()
    assert 5 < n_flagged < N_FEATURES, "the inputs must flag some features and not others"
    glance = _glance(page)
    assert page.index('<section class="glance') < page.index("<h2>Run summary</h2>"), "the glance opens the page"
    assert (
        f"<b>{n_flagged} of {N_FEATURES} features flagged</b> ({n_alert} alert, {n_flagged - n_alert} warn)" in glance
    )
    # The five most drifted: alerts before warnings, each by its flagged row's largest PSI.
    severity = flagged.with_columns(pl.col("flag").replace_strict({"alert": 0, "warn": 1}).alias("rank"))
    top = (
        severity.group_by("feature")
        .agg(pl.col("rank").min(), pl.col("psi").filter(pl.col("rank") == pl.col("rank").min()).max())
        .sort(["rank", "psi", "feature"], descending=[False, True, False])
        .head(5)
    )
    listed = re.findall(r"<tr><td>([^<]*)</td><td><span class=\"flag", glance)
    assert [html.unescape(f) for f in listed] == top["feature"].to_list()
    for feature, psi in top.select("feature", "psi").iter_rows():
        assert f"<td>{html.escape(feature)}</td>" in glance and f"{psi:,.4g}" in glance
    # Fallbacks: the kinds that counted rows, the breached limit named; the decisions' mix of the run.
    assert (
        "quarantine 90 rows (4.50%, <b>limit 2.00% BREACHED</b>)" in glance and "guard_repair 12 rows (0.60%)" in glance
    )
    assert "failed_chunk" not in glance and "1 limit breached" in glance
    assert f"no_offer 1,600 ({1_600 / 1_910:.2%})" in glance and "decision_monitoring" in glance


def test_flagged_histograms_come_first_and_the_others_are_folded(wide: tuple[list[dict[str, Any]], str]) -> None:
    rows, page = wide
    frame = _frame(rows)
    flagged = set(frame.filter(pl.col("flag").is_in(["warn", "alert"]))["feature"])
    section = page.split("<h2>Feature histograms", 1)[1]
    opened, folded = section.split('<details class="folded"', 1)
    assert not folded.startswith(" open") and "<details" not in opened and folded.count("<details") == 0
    shown = [html.unescape(f) for f in re.findall(r'<figure class="plot" data-feature="([^"]*)">', opened)]
    hidden = [html.unescape(f) for f in re.findall(r'<figure class="plot" data-feature="([^"]*)">', folded)]
    assert set(shown) == flagged and len(shown) == len(flagged)
    assert set(hidden) == set(frame["feature"]) - flagged and len(shown) + len(hidden) == N_FEATURES
    # Alerts before warnings among the shown; the folded ones by reference PSI, descending.
    worst = (
        frame.filter(pl.col("feature").is_in(list(flagged)))
        .group_by("feature")
        .agg((pl.col("flag") == "alert").any().alias("alert"))
    )
    alerts = set(worst.filter(pl.col("alert"))["feature"])
    assert [f in alerts for f in shown] == sorted((f in alerts for f in shown), reverse=True)
    psi = dict(frame.filter(pl.col("baseline") == "reference").select("feature", "psi").iter_rows())
    assert [psi[f] for f in hidden] == sorted((psi[f] for f in hidden), reverse=True)


def test_the_page_for_100_features_stays_under_1_mb(wide: tuple[list[dict[str, Any]], str]) -> None:
    rows, page = wide
    size = len(page.encode("utf-8"))
    print(f"run page for {N_FEATURES} features, {len(rows)} drift rows: {size:,} bytes")
    assert len(rows) == 2 * N_FEATURES and page.count('<figure class="plot"') == N_FEATURES
    assert size < 1_000_000
    assert not re.findall(r"""\b(?:src|href)\s*=""", page, flags=re.I) and "url(" not in page


@pytest.mark.browser
def test_the_drift_table_sorts_and_filters_offline_in_chromium(
    wide: tuple[list[dict[str, Any]], str], tmp_path: Path
) -> None:
    rows, page_html = wide
    report = write_run_report(tmp_path / "wide.html", page_html)
    frame = _frame(rows)
    visible = "() => Array.from(document.querySelectorAll('#drift-table tbody tr')).filter(r => !r.hidden)"
    with offline_page(report) as opened:
        page = opened.page
        folded_closed = page.evaluate("() => !document.querySelector('details.folded').open")
        page.click("#drift-table thead th:nth-child(5)")  # PSI: largest first
        psi_down = page.evaluate(f"() => ({visible})().map(r => r.cells[4].getAttribute('data-v'))")
        page.click("#drift-table thead th:nth-child(5)")
        psi_up = page.evaluate(f"() => ({visible})().map(r => r.cells[4].getAttribute('data-v'))")
        page.click("#drift-table thead th:nth-child(1)")  # feature: A to Z
        by_name = page.evaluate(f"() => ({visible})().map(r => r.getAttribute('data-feature'))")
        page.check("#drift-flagged")
        flagged_rows = page.evaluate(
            f"() => ({visible})().map(r => [r.getAttribute('data-feature'), r.cells[2].textContent])"
        )
        page.fill("#drift-filter", "num_03")
        both = page.evaluate(f"() => ({visible})().map(r => r.getAttribute('data-feature'))")
        page.uncheck("#drift-flagged")
        page.fill("#drift-filter", "cat")
        by_text = page.evaluate(f"() => ({visible})().map(r => r.getAttribute('data-feature'))")
        shown_text = page.inner_text("#drift-shown")

    assert opened.errors == [] and opened.fetched_elsewhere == []
    assert folded_closed
    psi = [v for v in frame["psi"].to_list() if v is not None]
    assert len(psi_down) == len(rows)
    descending = [float(v) for v in psi_down if v is not None]
    np.testing.assert_allclose(descending, sorted(psi, reverse=True), rtol=1e-5)
    assert psi_down[len(descending) :] == [None] * (len(rows) - len(descending)), "rows without a PSI sort last"
    np.testing.assert_allclose([float(v) for v in psi_up if v is not None], sorted(psi), rtol=1e-5)
    assert by_name == sorted(by_name, key=str.lower) and len(by_name) == len(rows)
    expected = frame.filter(pl.col("flag").is_in(["warn", "alert"]))
    assert sorted(map(tuple, flagged_rows)) == sorted(expected.select("feature", "baseline").iter_rows())
    assert both == expected.filter(pl.col("feature") == "num_03")["feature"].to_list() and both
    assert (
        sorted(by_text) == sorted(f for f in frame["feature"] if "cat" in f.lower())
        and len(by_text) == 2 * N_CATEGORICAL
    )
    assert shown_text == f"{2 * N_CATEGORICAL} of {len(rows)} rows shown"


def test_a_feature_is_printed_by_its_plain_name_everywhere(inputs: tuple) -> None:
    rows, histograms, labels = inputs
    words = JobWords(
        subject="purchase",
        score_name="propensity score",
        score_higher="a purchase is more likely",
        decisions=("offer", "no_offer"),
        actions=("offer",),
        decision_labels={"no_offer": "no offer made"},
        feature_labels={"num_00": "Annual km"},
    )
    page = run_report_html(
        job="caravan",
        partition_date="2026-03-10",
        run_id="run-36",
        summary=SUMMARY,
        fallback_rows=FALLBACK_ROWS,
        drift_rows=rows,
        histograms=histograms,
        bin_labels=labels,
        words=words,
    )
    glance, table = _glance(page), page.split("<h2>Drift</h2>", 1)[1].split("<h2>", 1)[0]
    figures = page.split("<h2>Feature histograms", 1)[1]
    assert "<td>Annual km (num_00)</td>" in glance and table.count("<td>Annual km (num_00)</td>") == 2
    assert "<b>Annual km (num_00)</b>" in figures and ">num_00<" not in page
    assert "CAT0</td>" in glance, "a code without a label stays the code"
    assert "no offer made 1,600" in glance


def test_the_score_is_no_feature_its_drift_is_the_decisions_shift() -> None:
    def row(feature: str, baseline: str, psi: float, ks: float, flag: str) -> dict[str, Any]:
        return {
            "feature": feature,
            "kind": "numeric",
            "baseline": baseline,
            "psi": psi,
            "ks": ks,
            "ks_upper": None,
            "wasserstein": 0.1,
            "js": 0.01,
            "flag": flag,
            "rows": 1_000,
            "null_share": 0.0,
            "baseline_null_share": 0.0,
            "outside_p1_p99_share": 0.02,
            "unseen_share": None,
        }

    rows = [
        row("age", "reference", 0.02, 0.03, "ok"),
        row("income", "reference", 0.12, 0.05, "warn"),
        row("tenure", "previous", 0.01, 0.02, "ok"),
        row("score", "previous", 0.31, 0.22, "alert"),
        row("score", "reference", 0.05, 0.04, "ok"),
    ]
    edges = np.linspace(0.0, 1.0, 9)
    page = run_report_html(
        job="j",
        partition_date="2026-03-10",
        run_id="r",
        summary={"decisions": {}},
        fallback_rows=[],
        drift_rows=rows,
        histograms={f: (edges, np.arange(10), np.ones(10)) for f in ("age", "income", "tenure", "score")},
    )
    glance = _glance(page)
    assert "<b>1 of 3 features flagged</b> (0 alert, 1 warn)" in glance and "<td>score</td>" not in glance
    assert "<b>score distribution:</b>" in glance and "PSI 0.31 · KS 0.22 against the previous partition" in glance
    assert "no rows decided" in glance and "Fallbacks:</b> none" in glance
    words = JobWords(
        subject="purchase",
        score_name="propensity score",
        score_higher="a purchase is more likely",
        decisions=(),
        actions=(),
    )
    worded = run_report_html(
        job="j",
        partition_date="2026-03-10",
        run_id="r",
        summary={"decisions": {}},
        fallback_rows=[],
        drift_rows=rows,
        histograms={f: (edges, np.arange(10), np.ones(10)) for f in ("age", "income", "tenure", "score")},
        words=words,
    )
    named = _glance(worded)
    assert "<b>propensity score distribution:</b>" in named and "<b>1 of 3 features flagged</b>" in named
    # The score's histogram and drift rows are captioned with the job's name for it, not as a feature called "score".
    assert '<figure class="plot" data-feature="score"><figcaption><b>propensity score</b>' in worded
    assert "Score (score)" not in worded
    opened = page.split("<h2>Feature histograms", 1)[1].split("<details", 1)[0]
    assert re.findall(r'data-feature="([^"]*)"', opened) == ["score", "income"], (
        "a flagged score is drawn first all the same"
    )


def test_a_wide_jobs_guard_breakdown_is_folded_and_a_breached_row_stays_in_view() -> None:
    columns = [f"col_{i:02d}" for i in range(30)]
    repaired = {c: i + 1 for i, c in enumerate(columns)}
    fallback = [
        {
            "kind": "guard_repair",
            "detail": "all",
            "rows": sum(repaired.values()),
            "share": 0.2,
            "limit": 0.2,
            "breached": False,
        }
    ]
    fallback += [
        {
            "kind": "guard_repair",
            "detail": f"{c}: be_between({c})",
            "rows": n,
            "share": n / 1000,
            "limit": None,
            "breached": False,
        }
        for c, n in repaired.items()
    ]
    fallback += [
        {
            "kind": "quarantine",
            "detail": "be_in_set(region)",
            "rows": 90,
            "share": 0.09,
            "limit": 0.05,
            "breached": True,
        }
    ]
    page = run_report_html(
        job="j",
        partition_date="2026-03-10",
        run_id="r",
        summary={"decisions": {}, "guard_counts": {f"be_between({c})": {"repair": n} for c, n in repaired.items()}},
        fallback_rows=fallback,
        drift_rows=[],
        histograms={},
    )
    section = page[
        page.index("<h2>Fallback report</h2>") : page.index("<h2>", page.index("<h2>Fallback report</h2>") + 5)
    ]
    visible, folded = section.split("<details", 1)
    # Every column's repair row is in the folded part, none in view; the total and the breached row are in view.
    assert all(f"be_between({c})" in folded and f"be_between({c})" not in visible for c in columns)
    assert "BREACHED" in visible and "be_in_set(region)" in visible and "BREACHED" not in folded
    assert f"<summary>By expectation: {len(columns)} guards" in folded and "<details open" not in section
    engineering = page[page.index("<h2>Engineering details</h2>") :]
    assert f"<details><summary>{len(columns)} entries</summary>" in engineering
