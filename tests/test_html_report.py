"""The per-run HTML report: self-contained, every feature plotted in drift order (inline SVG whose
bars are the counts' shares), text escaped, and — in a real headless chromium with the network
blocked — rendered without errors."""

from __future__ import annotations

import base64
import hashlib
import html
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread
from offline_browser import offline_page

from tasks.reports.html_parts import write_run_report
from tasks.reports.html_report import DRIFT_TABLE_SCRIPT, run_report_html

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EVIL = "<script>alert('x')</script>"
# Expected plot order: the flagged features (warn or alert against any baseline), alerts first, each by its flagged
# row's PSI; then the others by reference PSI descending, then those without a reference PSI, by name.
EXPECTED_ORDER = ["income", "new_feature", EVIL, "utilisation", "age", "zz_no_data"]
FLAGGED = {"income", "new_feature", EVIL}


def _counts(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Underflow, the bins between edges, overflow — the layout of tasks.quality.drift.drift_bin_counts."""
    return np.bincount(np.searchsorted(edges, values, side="right"), minlength=len(edges) + 1)


def _histograms(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    shifts = {"income": 1.0, EVIL: 0.4, "utilisation": 0.25, "age": 0.02, "new_feature": 0.0, "zz_no_data": 0.0}
    out = {}
    for name, shift in shifts.items():
        reference = rng.normal(0.0, 1.0, 20_000)
        edges = np.quantile(reference, np.linspace(0.01, 0.99, 40))
        current = _counts(rng.normal(shift, 1.1, 5_000), edges)
        out[name] = (edges, current, None if name == "new_feature" else _counts(reference, edges))
    return out


def _drift_row(feature: str, baseline: str, psi: float, flag: str) -> dict[str, Any]:
    return {
        "feature": feature,
        "baseline": baseline,
        "psi": psi,
        "ks": psi / 3,
        "ks_upper": psi / 3 + 0.02,
        "wasserstein": psi / 2,
        "js": psi / 10,
        "flag": flag,
        "rows": 5_000,
        "null_share": 0.001,
        "baseline_null_share": 0.0,
        "outside_p1_p99_share": 0.02,
        "unseen_share": None,
    }


DRIFT_ROWS = [
    _drift_row("age", "reference", 0.004, "ok"),
    _drift_row("income", "reference", 0.61, "alert"),
    _drift_row("utilisation", "reference", 0.07, "ok"),
    _drift_row(EVIL, "reference", 0.16, "warn"),
    _drift_row("zz_no_data", "reference", float("nan"), "no_data"),
    _drift_row("income", "previous", 0.02, "ok"),
    _drift_row("new_feature", "previous", 0.3, "alert"),
]
FALLBACK_ROWS = [
    {"kind": "guard_repair", "detail": "all", "rows": 40, "share": 0.008, "limit": 0.05, "breached": False},
    {"kind": "guard_repair", "detail": "income: clip <0", "rows": 40, "share": 0.008, "limit": None, "breached": False},
    {"kind": "quarantine", "detail": "all", "rows": 400, "share": 0.08, "limit": 0.02, "breached": True},
    {
        "kind": "fallback_model",
        "detail": "primary model loaded",
        "rows": 0,
        "share": 0.0,
        "limit": None,
        "breached": False,
    },
]
SUMMARY = {
    "rows_read": 5_000,
    "rows_scored": 4_600,
    "rows_repaired": 40,
    "rows_quarantined": 400,
    "rows_failed": 0,
    "rows_fallback": 0,
    "decisions": {"approve": 4_000, "review": 450, "decline": 150},
    "guard_counts": {"income_not_negative": {"repair": 40}},
    "inference": {
        "device_type": "cpu",
        "providers": ["CPUExecutionProvider"],
        "model_version": "v3 & <b>",
        "chunks": 1,
        "latency_ms_p50": 12.5,
        "inference_rows_per_s": None,
    },
}


@pytest.fixture(scope="module")
def page_html() -> str:
    return run_report_html(
        job="credit_risk",
        partition_date="2026-03-10",
        run_id="run-<42>&co",
        summary=SUMMARY,
        fallback_rows=FALLBACK_ROWS,
        drift_rows=DRIFT_ROWS,
        histograms=_histograms(np.random.default_rng(7)),
    )


def _plot_svgs(page: str) -> dict[str, ET.Element]:
    """Each figure's inline SVG, parsed as XML (so it must be well-formed), by feature."""
    figures = re.findall(r'<figure class="plot" data-feature="([^"]*)">.*?(<svg .*?</svg>)</figure>', page, flags=re.S)
    return {html.unescape(feature): ET.fromstring(svg) for feature, svg in figures}


def drawn_heights(svg: ET.Element, series: str) -> np.ndarray:
    """Heights above the baseline of a numeric plot's step path (`M x,base` then `V y H x` per bin)."""
    path = next(p for p in svg.iter("path") if p.get("class") == series)
    d = path.get("d")
    base = float(re.match(r"M[\d.]+,([\d.]+)", d).group(1))
    levels = [float(v) for v in re.findall(r"V([\d.]+)", d)][:-1]  # the last drops back to the baseline
    return base - np.array(levels)


def _distinct_colours(image: np.ndarray) -> int:
    """Distinct colours of an imread image (floats in 0..1, grey, RGB or RGBA), each packed into one int."""
    channels = np.round(np.atleast_3d(image) * 255).astype(np.uint32)
    codes = np.zeros(channels.shape[:2], dtype=np.uint32)
    for i in range(channels.shape[2]):
        codes = (codes << 8) | channels[..., i]
    return int(np.unique(codes).size)


# --- the page itself -----------------------------------------------------------------------------


def test_page_is_self_contained(page_html: str) -> None:
    refs = re.findall(r"""\b(?:src|href)\s*=\s*["']?([^"'\s>]*)""", page_html, flags=re.IGNORECASE)
    assert refs == [], "the plots are inline markup: the page references nothing"
    assert len(_plot_svgs(page_html)) == len(EXPECTED_ORDER)
    assert "http://" not in page_html and "https://" not in page_html
    assert "<link" not in page_html and "@import" not in page_html and "url(" not in page_html


def test_every_feature_appears_in_drift_order_with_its_flag(page_html: str) -> None:
    figures = re.findall(r'<figure class="plot" data-feature="([^"]*)">(.*?)</figure>', page_html, flags=re.S)
    assert [html.unescape(f) for f, _ in figures] == EXPECTED_ORDER
    flags = {html.unescape(f): re.search(r'class="flag [^"]*">([^<]*)<', body).group(1) for f, body in figures}
    assert flags == {
        "income": "alert",
        EVIL: "warn",
        "utilisation": "ok",
        "age": "ok",
        "new_feature": "alert",
        "zz_no_data": "no_data",
    }  # new_feature: vs the previous partition
    drift_table = page_html.split("<h2>Drift</h2>")[1].split("<h2>")[0]
    for feature in EXPECTED_ORDER:
        assert f"<td>{html.escape(feature)}</td>" in drift_table
    histograms = page_html.split("<h2>Feature histograms")[1]
    opened, folded = histograms.split('<details class="folded"')
    assert [
        html.unescape(f) for f in re.findall(r'<figure class="plot" data-feature="([^"]*)">', opened)
    ] == EXPECTED_ORDER[:3]
    assert "<details " not in opened and not folded.startswith(" open")


def test_each_plot_draws_the_shares_of_its_counts(page_html: str) -> None:
    histograms = _histograms(np.random.default_rng(7))
    svgs = _plot_svgs(page_html)
    assert list(svgs) == EXPECTED_ORDER
    for feature, svg in svgs.items():
        edges, current, reference = histograms[feature]
        drawn = drawn_heights(svg, "current")
        assert len(drawn) == len(edges) + 1
        # Heights are shares on one y scale: proportional to the counts, to the 0.1 px the markup keeps.
        scale = drawn.max() / (current.max() / current.sum()) if current.sum() else 0.0
        np.testing.assert_allclose(drawn, current / max(current.sum(), 1) * scale, atol=0.1)
        if reference is None:
            assert not [p for p in svg.iter("path") if p.get("class") == "reference"]
        else:
            np.testing.assert_allclose(drawn_heights(svg, "reference"), reference / reference.sum() * scale, atol=0.1)
        assert svg.find("title").text == f"histogram of {feature}"


def test_text_is_escaped(page_html: str) -> None:
    # The one script is the page's own, the only one its policy lets run (by its SHA-256).
    assert re.findall(r"<script[^>]*>(.*?)</script>", page_html, flags=re.S | re.I) == [DRIFT_TABLE_SCRIPT]
    digest = base64.b64encode(hashlib.sha256(DRIFT_TABLE_SCRIPT.encode()).digest()).decode()
    policy = html.unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page_html).group(1))
    assert policy.endswith(f"script-src 'sha256-{digest}'") and "unsafe-inline'" not in policy.split("script-src")[1]
    assert html.escape(EVIL) in page_html
    assert "run-&lt;42&gt;&amp;co" in page_html and "v3 &amp; &lt;b&gt;" in page_html


def test_sections_and_breached_fallback_rows(page_html: str) -> None:
    headings = re.findall(r"<h2>([^<]*)</h2>", page_html)
    assert headings == [
        "In short",
        "At a glance",
        "Run summary",
        "Fallback report",
        "Drift",
        "Feature histograms (most drifted first)",
        "Engineering details",
    ]
    breached = re.findall(r'<tr class="breached">(.*?)</tr>', page_html)
    assert len(breached) == 1 and "<td>quarantine</td>" in breached[0] and "BREACHED" in breached[0]
    assert "approve: 4,000; review: 450; decline: 150" in page_html
    # The engineers' rows have a section of their own, after everything an analyst reads.
    summary, engineering = (
        page_html.split("<h2>Run summary</h2>")[1].split("<h2>")[0],
        page_html.split("<h2>Engineering details</h2>")[1],
    )
    assert "<th>inference.latency_ms_p50</th>" in engineering and "<th>guard_counts</th>" in engineering
    assert "inference." not in summary and "guard_counts" not in summary and "<th>rows_read</th>" in summary


def test_the_page_opens_with_the_run_in_plain_words() -> None:
    """What moved against the trailing window (a share's relative change), the features that moved and which way (the
    fixture shifts income's and EVIL's values up and gives new_feature no reference), the rows set aside and the reason
    given most; the drift statistics explained beside their table."""
    value, baseline = 0.231, 0.20625
    reasons = [
        {"code": "R01", "text": "Debt ratio high", "rows": 300},
        {"code": "R02", "text": "Short history", "rows": 120},
    ]
    page = run_report_html(
        job="credit_risk",
        partition_date="2026-03-10",
        run_id="r1",
        summary={**SUMMARY, "rows_with_reasons": 600},
        fallback_rows=FALLBACK_ROWS,
        drift_rows=DRIFT_ROWS,
        histograms=_histograms(np.random.default_rng(7)),
        shifts=[
            {
                "measure": "decision_share",
                "item": "review",
                "value": value,
                "baseline": baseline,
                "delta": value - baseline,
            }
        ],
        window_days=7,
        reason_codes=reasons,
    )
    lead = html.unescape(page.split('<section class="lead" id="summary">')[1].split("</section>")[0])
    assert page.index('class="lead"') < page.index("At a glance")
    assert (
        f"Review: {(value - baseline) / baseline:.0%} more than the trailing 7 days (23.1% of rows, was 20.6%)." in lead
    )
    assert (
        f"3 of 6 features moved away from the training data or the previous partition: income moved up, new_feature and {EVIL} moved up."
        in lead
    )
    assert "400 of 5,000 rows were set aside (quarantined) and not scored." in lead
    assert "Reason given most: 300 rows (50.0% of the rows given reasons): Debt ratio high (R01)." in lead
    assert "PSI" not in lead and "<h2>Reasons given</h2>" in page
    assert "<b>PSI</b>: how far the spread of values moved" in page and "<b>Wasserstein</b>:" in page
    quiet = run_report_html(
        job="credit_risk",
        partition_date="2026-03-10",
        run_id="r1",
        summary=SUMMARY,
        fallback_rows=[],
        drift_rows=[],
        histograms={},
        shifts=[],
        window_days=7,
    )
    assert (
        "The decisions are in line with the trailing 7 days." in quiet
        and "No feature moved beyond its warning threshold" in quiet
    )


def test_write_run_report_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "reports" / "run.html"
    assert write_run_report(target, "<p>one</p>") == target
    write_run_report(target, "<p>two</p>")
    assert target.read_text(encoding="utf-8") == "<p>two</p>"

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_run_report(target, "<p>three</p>")
    assert target.read_text(encoding="utf-8") == "<p>two</p>"
    assert [p.name for p in target.parent.iterdir()] == ["run.html"], "temp file left behind"


# --- in a real browser, offline ------------------------------------------------------------------


@pytest.mark.browser
def test_report_renders_offline_in_chromium(page_html: str, tmp_path: Path) -> None:
    report = write_run_report(tmp_path / "report.html", page_html)
    with offline_page(report) as opened:
        page = opened.page
        page.click("details.folded > summary")
        plots = page.evaluate(
            "() => Array.from(document.querySelectorAll('figure.plot svg')).map(s => {"
            " const box = s.getBoundingClientRect(); const line = s.querySelector('path.current');"
            " return {w: box.width, h: box.height, line: line ? line.getTotalLength() : 0}; })"
        )
        title = page.title()
        screenshot = tmp_path / "report.png"
        page.screenshot(path=str(screenshot), full_page=True)

    assert opened.errors == [] and opened.fetched_elsewhere == []
    assert title == "Scoring run credit_risk 2026-03-10"
    assert len(plots) == len(EXPECTED_ORDER)
    assert all(p["w"] > 300 and p["h"] > 100 and p["line"] > 100 for p in plots), plots
    data = screenshot.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    shot = imread(str(screenshot))
    assert shot.shape[0] > 900  # full page: taller than the viewport
    assert float(shot.std()) > 0 and _distinct_colours(shot) > 10
