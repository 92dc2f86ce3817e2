"""The per-run HTML report: one self-contained page (inline CSS, plots as inline SVG, one inline script).

Sections: a glance at what needs a look (features flagged and by how much, fallbacks, the decision mix),
the run summary (ledger counts, decisions, inference stats), the fallback report (breached kinds
highlighted), the drift table (sorted by a click on a header, filtered by name or to the flagged rows),
then one reference-vs-current histogram per feature: the flagged features' first, most severe first, the
others folded in a closed <details> (reference PSI descending; features without one after, by name), so a
job with a hundred features opens on what moved rather than on a wall of plots. The page fetches nothing:
a Content-Security-Policy meta tag allows inline styles, data: images and only the page's own script (by
its hash), so it opens offline as one file and cannot phone home.

Plots are inline SVG markup: a page is drawn inside every scoring run, and a matplotlib figure per
feature cost more than the scoring of a small partition.
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tasks.prediction.words import JobWords
from tasks.reports.plain_words import DRIFT_MEASURE_WORDS, moved_direction, plain_summary
from tasks.quality.drift import FORECAST_DRIFT_NAME, KS_BOUND_SHOWN_WITHIN, SCORE_DRIFT_NAME
from tasks.quality.fallback_report import fallback_kind_totals

Histograms = Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]
BinLabels = Mapping[str, Sequence[str]]
"""Boolean / categorical feature → the name of each of its bins (categories, then unseen)."""

_FLAGS = ("alert", "warn", "ok", "no_data")
_FLAGGED = ("alert", "warn")
_SEVERITY = {"alert": 3, "warn": 2, "ok": 1, "no_data": 0}
_GLANCE_FEATURES = 5
_ESTIMATES = (SCORE_DRIFT_NAME, FORECAST_DRIFT_NAME)
"""Drift rows of the model's own output, not of a feature: the glance gives them as the decisions' shift."""
_BASELINE_WORDS = {"reference": "training reference", "previous": "previous partition"}
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.15em;margin:1.4em 0 .4em;border-bottom:1px solid #ddd}
.meta{color:#555;margin:0 0 1em}
table{border-collapse:collapse;font-size:13px;margin:.3em 0}
th,td{border:1px solid #ddd;padding:2px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.breached td{background:#fde2e1;font-weight:600}
.flag{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px;font-weight:600;color:#fff;background:#888}
.flag-ok{background:#2e7d32}.flag-warn{background:#e69500}.flag-alert{background:#c62828}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(460px,1fr));gap:12px}
figure{margin:0;border:1px solid #ddd;padding:6px}figcaption{margin-bottom:4px}
figure img,figure svg{width:100%;height:auto;display:block}
svg text{font-size:10px;fill:#444}svg .axis{stroke:#999;stroke-width:1}
svg .reference{fill:#9fb7d6;opacity:.85}svg path.current{fill:none;stroke:#c62828;stroke-width:1.4}svg rect.current{fill:#c62828}
.muted{color:#777}
.glance{border:1px solid #ddd;border-left:4px solid #888;padding:.4em 1em;margin:.5em 0 1em;background:#fafafa}
.glance.flagged{border-left-color:#c62828}.glance h2{border:0;margin:.3em 0}.glance p{margin:.3em 0}
.lead{font-size:1.05em;padding:.2em 0 .4em}.lead h2{border:0;margin:.3em 0}.lead p{margin:.3em 0}
.tools{margin:.4em 0;display:flex;gap:1em;align-items:center;flex-wrap:wrap}
.scroll{max-height:28em;overflow:auto;border:1px solid #ddd;display:inline-block;max-width:100%}
.scroll table{margin:0}.scroll thead th{position:sticky;top:0;z-index:1}
table.sortable th{cursor:pointer;user-select:none}table.sortable th:hover{background:#e8e8e8}
th[aria-sort=ascending]::after{content:" \\25B2";font-size:9px}th[aria-sort=descending]::after{content:" \\25BC";font-size:9px}
details.folded{margin:.8em 0}details.folded>summary{cursor:pointer;font-weight:600;padding:.3em 0}
details[open]>summary .hint{display:none}.scroll td.n,.scroll td:first-child{white-space:nowrap}
"""
DRIFT_TABLE_SCRIPT = """(function () {
  var table = document.getElementById("drift-table");
  if (!table) return;
  var body = table.tBodies[0], heads = table.tHead.rows[0].cells;
  var box = document.getElementById("drift-filter"), only = document.getElementById("drift-flagged");
  var shown = document.getElementById("drift-shown");
  var rows = Array.prototype.slice.call(body.rows);
  function key(row, i, numeric) {
    var cell = row.cells[i], v = cell.getAttribute("data-v");
    if (numeric) return v === null || v === "" ? NaN : parseFloat(v);
    return (v === null ? cell.textContent : v).toLowerCase();
  }
  Array.prototype.forEach.call(heads, function (th, i) {
    th.addEventListener("click", function () {
      var numeric = th.getAttribute("data-type") === "num";
      var now = th.getAttribute("aria-sort");
      var dir = now ? (now === "ascending" ? -1 : 1) : (numeric ? -1 : 1);
      Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
      var keyed = rows.map(function (r) { return [key(r, i, numeric), r]; });
      keyed.sort(function (a, b) {
        var x = a[0], y = b[0];
        if (numeric) {
          if (isNaN(x) || isNaN(y)) return isNaN(x) - isNaN(y);
          return (x - y) * dir;
        }
        return x < y ? -dir : x > y ? dir : 0;
      });
      keyed.forEach(function (k) { body.appendChild(k[1]); });
    });
  });
  function filter() {
    var q = box.value.trim().toLowerCase(), n = 0;
    rows.forEach(function (r) {
      var hide = (only.checked && r.getAttribute("data-flagged") !== "1") ||
        (q !== "" && (r.getAttribute("data-feature") + " " + r.cells[0].textContent).toLowerCase().indexOf(q) < 0);
      r.hidden = hide;
      if (!hide) n += 1;
    });
    shown.textContent = n + " of " + rows.length + " rows shown";
  }
  box.addEventListener("input", filter);
  only.addEventListener("change", filter);
  filter();
})();"""
"""What a page with `drift_sections` passes to `page_html`: the drift table sorted by a click on a header (numbers
largest first, names A to Z; a second click reverses; rows without a number last) and filtered by the text box (the
feature's column name or printed name) and the "flagged only" box."""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _fmt(value: Any) -> str:
    """A cell's text (not yet escaped)."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return "—" if math.isnan(value) else f"{value:,.4g}"
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {_fmt(v)}" for k, v in value.items()) or "—"
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt(v) for v in value) or "—"
    return str(value)


def _pct(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{float(value):.2%}"


def _cell(value: Any, text: str | None = None) -> str:
    cls = ' class="n"' if _is_num(value) else ""
    return f"<td{cls}>{_e(_fmt(value) if text is None else text)}</td>"


def feature_text(feature: str, words: JobWords | None = None) -> str:
    """A feature as the page prints it (not yet escaped): its plain name, the column after it where the job's words give
    one. Every caption, cell and summary line of the run pages names a feature here."""
    if feature == SCORE_DRIFT_NAME and words is not None:
        # The score's own drift rows sit among the features' under the name `score`: the page calls it what the job does.
        return words.score_name
    return words.feature_and_column(feature) if words is not None else feature


def _flag_badge(flag: str | None) -> str:
    flag = flag or "no baseline"
    cls = f"flag-{flag}" if flag in _FLAGS else "flag-other"
    return f'<span class="flag {cls}">{_e(flag)}</span>'


def _table(header: list[str], rows: list[str]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(rows) or f'<tr><td colspan="{len(header)}" class="muted">none</td></tr>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_SUMMARY_NAMES = {"rows_without_adverse_reason": "rows_without_reason"}
"""The ledger's column keeps its first name; a page says what it counts."""


FOLDED_BEYOND = 8
"""More entries than this (guard counts, the fallback report's rows by expectation) are folded on the run page."""


ENGINEERING_COUNTS = ("rows_straddling", "guard_counts", "inference")
"""Ledger counts an engineer reads (rows near a cut-off, guard counts per expectation, inference statistics): a run
page shows them in a section of their own, after what an analyst reads."""


def _count_rows(summary: Mapping[str, Any], names: Mapping[str, str | None]) -> list[str]:
    rows = []
    for key, value in summary.items():
        if key == "inference" and isinstance(value, Mapping):
            rows += [f"<tr><th>{_e(key)}.{_e(k)}</th>{_cell(v)}</tr>" for k, v in value.items()]
        elif names.get(key, key) is not None:
            if isinstance(value, Mapping) and len(value) > FOLDED_BEYOND:
                # A wide job's guards act on dozens of columns: one line of them would fill the screen.
                cell = f"<td><details><summary>{len(value)} entries</summary>{_e(_fmt(value))}</details></td>"
                rows.append(f"<tr><th>{_e(names.get(key, key))}</th>{cell}</tr>")
                continue
            rows.append(f"<tr><th>{_e(names.get(key, key))}</th>{_cell(value)}</tr>")
    return rows


def _summary_section(
    summary: Mapping[str, Any], names: Mapping[str, str | None] | None = None, words: JobWords | None = None,
) -> str:
    """The ledger counts an analyst reads, one row each (`ENGINEERING_COUNTS` are `engineering_section`'s); `names`
    renames a count (None leaves it out); `words` names the decisions."""
    names = {**_SUMMARY_NAMES, **(names or {})}
    if words is not None and isinstance(summary.get("decisions"), Mapping):
        summary = {**summary, "decisions": {words.decision(d): n for d, n in summary["decisions"].items()}}
    counts = {k: v for k, v in summary.items() if k not in ENGINEERING_COUNTS}
    return "<h2>Run summary</h2>" + _table(["count", "value"], _count_rows(counts, names))


def engineering_section(summary: Mapping[str, Any], names: Mapping[str, str | None] | None = None) -> str:
    """The `ENGINEERING_COUNTS` of the run, last on its page."""
    names = {**_SUMMARY_NAMES, **(names or {})}
    counts = {k: summary[k] for k in ENGINEERING_COUNTS if k in summary}
    return (
        "<h2>Engineering details</h2>"
        '<p class="muted">For whoever runs the scoring: rows whose interval straddles a decision cut-off, the rows each '
        "feature guard acted on, and how inference ran.</p>"
        + _table(["count", "value"], _count_rows(counts, names))
    )


def lead_section(
    summary: Mapping[str, Any], drift_rows: list[Mapping[str, Any]], histograms: Histograms, bin_labels: BinLabels, *,
    shifts: Sequence[Mapping[str, Any]] | None, window_days: int | None, reason_codes: Sequence[Mapping[str, Any]],
    words: JobWords | None,
) -> str:
    """The page's opening: what the run says in plain words (tasks/reports/plain_words.py: plain_summary): the
    decision-mix shift against the trailing window (`shifts`, None when not compared), the features that moved and
    which way (a numeric feature's mean, from its histogram), the rows set aside and the reason given most."""
    directions = {
        name: None if name in bin_labels else moved_direction(edges, current, reference)
        for name, (edges, current, reference) in histograms.items()
    }
    features = {str(f) for f in [*histograms, *(r.get("feature") for r in drift_rows)] if f not in _ESTIMATES}
    sentences = plain_summary(
        shifts=shifts, drift_rows=drift_rows, n_features=len(features), directions=directions, reason_codes=reason_codes,
        rows_with_reasons=int(summary.get("rows_with_reasons") or 0), rows_quarantined=int(summary.get("rows_quarantined") or 0),
        rows_read=int(summary.get("rows_read") or 0), words=words, window_days=window_days,
    )
    return '<section class="lead" id="summary"><h2>In short</h2>' + "".join(f"<p>{_e(s)}</p>" for s in sentences) + "</section>"


def reasons_section(reason_codes: Sequence[Mapping[str, Any]], rows_with_reasons: int) -> str:
    """Each reason code given with its rows and share of the rows given reasons, most given first."""
    body = [
        "<tr>" + _cell(r["code"]) + _cell(r["text"]) + _cell(r["rows"])
        + f'<td class="n">{_e(_pct(r["rows"] / rows_with_reasons if rows_with_reasons else None))}</td></tr>'
        for r in reason_codes
    ]
    return (
        "<h2>Reasons given</h2>"
        f'<p class="muted">Codes of the features that pushed a row most toward its decision, on the {_fmt(rows_with_reasons)} '
        "rows whose decision asks for reasons; a row counts once per code.</p>"
        + _table(["code", "reason", "rows", "share of rows with reasons"], body)
    )


def _fallback_row(r: Mapping[str, Any]) -> str:
    breached = bool(r.get("breached"))
    return (
        ('<tr class="breached">' if breached else "<tr>")
        + _cell(r.get("kind")) + _cell(r.get("detail")) + _cell(r.get("rows"))
        + f'<td class="n">{_e(_pct(r.get("share")))}</td><td class="n">{_e(_pct(r.get("limit")))}</td>'
        + _cell(breached, "BREACHED" if breached else "no") + "</tr>"
    )


def _fallback_section(fallback_rows: list[Mapping[str, Any]]) -> str:
    """Every kind's total row; the guards' breakdown by expectation beside them, folded when a wide job has many."""
    header = ["kind", "detail", "rows", "share", "limit", "breached"]
    breakdown = [r for r in fallback_rows if r.get("kind") in ("guard_repair", "quarantine") and r.get("detail") != "all"
                 and not r.get("breached")]
    if len(breakdown) <= FOLDED_BEYOND:
        return "<h2>Fallback report</h2>" + _table(header, [_fallback_row(r) for r in fallback_rows])
    shown = [r for r in fallback_rows if not any(r is b for b in breakdown)]
    return (
        "<h2>Fallback report</h2>" + _table(header, [_fallback_row(r) for r in shown])
        + f'<details class="folded"><summary>By expectation: {len(breakdown)} guards that repaired or quarantined rows</summary>'
        + _table(header, [_fallback_row(r) for r in breakdown]) + "</details>"
    )


def _reference_psi(drift_rows: list[Mapping[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in drift_rows:
        psi = r.get("psi")
        if r.get("baseline") == "reference" and _is_num(psi) and not math.isnan(float(psi)):
            out[str(r["feature"])] = float(psi)
    return out


def _psi_or_minus_one(row: Mapping[str, Any]) -> float:
    psi = row.get("psi")
    return float(psi) if _is_num(psi) and not math.isnan(float(psi)) else -1.0


def worst_drift_rows(drift_rows: list[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Each feature's row the page shows it by: its most severe flagged row (alert before warn, then the larger
    PSI) where one is flagged, else the one against the training reference, else against the previous partition."""
    baselines = {"reference": 0, "previous": 1}

    def rank(r: Mapping[str, Any]) -> tuple:
        flagged = r.get("flag") in _FLAGGED
        return (
            -_SEVERITY[r["flag"]] if flagged else 0, -_psi_or_minus_one(r) if flagged else 0.0,
            baselines.get(str(r.get("baseline")), 2), str(r.get("baseline")),
        )

    worst: dict[str, Mapping[str, Any]] = {}
    for r in sorted(drift_rows, key=rank):
        worst.setdefault(str(r.get("feature")), r)
    return worst


def flagged_features(drift_rows: list[Mapping[str, Any]]) -> list[str]:
    """The features with a drift row at warn or alert (against any baseline), most severe first: alerts before
    warnings, then by the PSI of that row, descending; then by name."""
    worst = worst_drift_rows(drift_rows)
    flagged = [f for f, r in worst.items() if r.get("flag") in _FLAGGED]
    return sorted(flagged, key=lambda f: (-_SEVERITY[worst[f]["flag"]], -_psi_or_minus_one(worst[f]), f))


def feature_order(drift_rows: list[Mapping[str, Any]], features: list[str]) -> list[str]:
    """The flagged features most severe first (`flagged_features`); then the others by reference PSI, descending,
    and those without a reference PSI after, by name."""
    drawn = set(features)
    flagged = [f for f in flagged_features(drift_rows) if f in drawn]
    psi = _reference_psi(drift_rows)
    rest = sorted(drawn - set(flagged), key=lambda f: (0, -psi[f], f) if f in psi else (1, 0.0, f))
    return flagged + rest


def _sort_cell(value: Any, text: str | None = None) -> str:
    """A cell that sorts by its number (`data-v`), whatever its text says (a share in %, a KS with its bound)."""
    if not _is_num(value) or math.isnan(float(value)):
        return f"<td>{_e(_fmt(value) if text is None else text)}</td>"
    return f'<td class="n" data-v="{float(value):.6g}">{_e(_fmt(value) if text is None else text)}</td>'


def _drift_section(drift_rows: list[Mapping[str, Any]], order: list[str], words: JobWords | None) -> str:
    rank = {f: i for i, f in enumerate(order)}
    ordered = sorted(drift_rows, key=lambda r: (rank.get(str(r.get("feature")), len(rank)), str(r.get("feature")),
                                                 r.get("baseline") != "reference", str(r.get("baseline"))))
    rows = []
    for r in ordered:
        feature, flag = str(r.get("feature")), r.get("flag")
        rows.append(
            f'<tr data-feature="{_e(feature)}" data-flagged="{int(flag in _FLAGGED)}">'
            + f"<td>{_e(feature_text(feature, words))}</td>" + _cell(r.get("kind") or "numeric") + _cell(r.get("baseline"))
            + f'<td data-v="{_SEVERITY.get(str(flag), -1)}">{_flag_badge(flag)}</td>'
            + _sort_cell(r.get("psi")) + _sort_cell(r.get("ks"), _ks_text(r.get("ks"), r.get("ks_upper")))
            + _sort_cell(r.get("wasserstein")) + _sort_cell(r.get("js")) + _sort_cell(r.get("rows"))
            + _sort_cell(r.get("null_share"), _pct(r.get("null_share")))
            + _sort_cell(r.get("outside_p1_p99_share"), _pct(r.get("outside_p1_p99_share")))
            + _sort_cell(r.get("unseen_share"), _pct(r.get("unseen_share"))) + "</tr>"
        )
    header = [
        ("feature", "text"), ("kind", "text"), ("baseline", "text"), ("flag", "num"), ("PSI", "num"), ("KS", "num"),
        ("Wasserstein", "num"), ("JS", "num"), ("rows", "num"), ("null share", "num"), ("outside training p1–p99", "num"),
        ("unseen values", "num"),
    ]
    head = "".join(
        f'<th data-type="{kind}" title="{_e(DRIFT_MEASURE_WORDS[name] + "; " if name in DRIFT_MEASURE_WORDS else "")}sort by '
        f'{_e(name)}">{_e(name)}</th>' for name, kind in header
    )
    body = "".join(rows) or f'<tr><td colspan="{len(header)}" class="muted">none</td></tr>'
    tools = (
        '<div class="tools"><input type="search" id="drift-filter" placeholder="filter by feature" aria-label="filter the drift '
        'table by feature"><label><input type="checkbox" id="drift-flagged"> flagged only (warn, alert)</label>'
        f'<span id="drift-shown" class="muted">{len(rows)} rows</span></div>'
    )
    note = (
        '<p class="muted">What the measures say: ' + "; ".join(f"<b>{_e(k)}</b>: {_e(v)}" for k, v in DRIFT_MEASURE_WORDS.items())
        + ". A feature is flagged <b>warn</b> when it moved, <b>alert</b> when it moved a lot, against the training data "
        "(baseline reference) or the previous partition (baseline previous).</p>"
        '<p class="muted">Click a header to sort by it (again to reverse). KS is a lower bound from the bins; "≤" gives its '
        f"upper bound where that is within {KS_BOUND_SHOWN_WITHIN:g} of it. Outside training p1–p99: numeric values below the "
        "reference's 1st or above its 99th percentile. Unseen values: boolean or categorical values the training reference "
        "never had.</p>"
    )
    return (
        "<h2>Drift</h2>" + tools
        + f'<div class="scroll"><table id="drift-table" class="sortable"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
        + note
    )


def _health_section(rows: list[Mapping[str, Any]]) -> str:
    """Model health before labels: every estimate with its interval, then the flagged drift rows."""
    if not rows:
        return ""
    estimates = [r for r in rows if r["section"] == "estimated_performance"]
    flagged = [r for r in rows if r["section"] != "estimated_performance" and (r["flag"] in ("warn", "alert") or r["measure"] in
               ("rank_agreement", "reconstruction_error"))]
    body = [
        "<tr>" + _cell(r["measure"]) + _cell(r["item"]) + _cell(r["value"]) + _cell(r["low"]) + _cell(r["high"])
        + _cell(r["rows"]) + "</tr>" for r in estimates
    ]
    drift = [
        "<tr>" + _cell(r["section"]) + _cell(r["measure"]) + _cell(r["item"]) + _cell(r["value"]) + _cell(r["reference"])
        + _cell(r["delta"]) + (f"<td>{_flag_badge(r['flag'])}</td>" if r["flag"] else "<td>—</td>") + "</tr>" for r in flagged
    ]
    return (
        "<h2>Model health before labels</h2>"
        '<p class="muted">Estimated from the calibrated probabilities (table <code>model_health</code>); the realized '
        "values join them when labels land (<code>outcome_estimates</code>).</p>"
        + _table(["measure", "item", "estimate", "low", "high", "rows"], body)
        + _table(["section", "measure", "item", "value", "reference", "change", "flag"], drift)
    )


def _ks_text(ks: Any, ks_upper: Any) -> str | None:
    """`ks (≤ upper)` where the report kept an upper bound above it; None leaves the plain cell."""
    if not (_is_num(ks) and _is_num(ks_upper)) or math.isnan(float(ks)) or math.isnan(float(ks_upper)):
        return None
    return f"{_fmt(ks)} (≤ {_fmt(ks_upper)})" if float(ks_upper) > float(ks) else None


def _shares(counts: np.ndarray) -> np.ndarray:
    counts = np.asarray(counts, dtype=np.float64)
    total = counts.sum()
    return counts / total if total > 0 else np.zeros_like(counts)


_W, _H = 480.0, 190.0
_LEFT, _RIGHT, _TOP, _BOTTOM = 56.0, 8.0, 20.0, 34.0
_REFERENCE, _CURRENT = "#9fb7d6", "#c62828"


def _n(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _svg_text(x: float, y: float, text: str, *, anchor: str = "middle", rotate: float = 0.0) -> str:
    turn = f' transform="rotate({_n(rotate)} {_n(x)} {_n(y)})"' if rotate else ""
    return f'<text x="{_n(x)}" y="{_n(y)}" text-anchor="{anchor}"{turn}>{_e(text)}</text>'


def histogram_svg(
    feature: str, edges: np.ndarray, current: np.ndarray, reference: np.ndarray | None, *, labels: Sequence[str] | None = None
) -> str:
    """Shares per bin of the current partition over the reference, as an inline SVG element.

    Numeric (no `labels`): underflow, bins, overflow, drawn at equal width by index — the edges
    are the reference's quantiles, so the reference is about flat and any drift stands out; ticks
    show a few edge values. Boolean / categorical (`labels`, one per bin): one pair of bars per
    category and one for the unseen values, each named.

    Written as markup rather than drawn by matplotlib: a figure there cost 50–70 ms per feature,
    a third of a 20 k-row partition's wall, where these few rectangles and paths cost microseconds.
    """
    edges = np.asarray(edges, dtype=np.float64)
    n_bins = len(edges) + 1
    if len(current) != n_bins or (reference is not None and len(reference) != n_bins):
        raise ValueError(f"{feature}: counts need len(edges) + 1 = {n_bins} bins")
    if labels is not None and len(labels) != n_bins:
        raise ValueError(f"{feature}: {len(labels)} bin labels for {n_bins} bins")
    shares = {"current": _shares(current)} | ({} if reference is None else {"reference": _shares(reference)})
    peak = max(float(max(s.max(initial=0.0) for s in shares.values())), 1e-9)
    top = peak * 1.08
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    base = _TOP + plot_h

    def y(share: float) -> float:
        return base - share / top * plot_h

    def x(slot: float) -> float:
        return _LEFT + slot / n_bins * plot_w

    parts = [f'<line class="axis" x1="{_n(_LEFT)}" y1="{_n(base)}" x2="{_n(_LEFT + plot_w)}" y2="{_n(base)}"/>',
             f'<line class="axis" x1="{_n(_LEFT)}" y1="{_n(_TOP)}" x2="{_n(_LEFT)}" y2="{_n(base)}"/>']
    for tick in (0.0, peak / 2, peak):
        parts.append(_svg_text(_LEFT - 4, y(tick) + 3, f"{tick:.1%}", anchor="end"))
    parts.append(_svg_text(10, _TOP + plot_h / 2, "share per bin" if labels is None else "share per value", rotate=-90))
    if labels is None:
        for series, share in (("reference", shares.get("reference")), ("current", shares["current"])):
            if share is None:
                continue
            steps = "".join(f"H{_n(x(i))}V{_n(y(v))}H{_n(x(i + 1))}" for i, v in enumerate(share))
            if series == "reference":
                parts.insert(0, f'<path class="reference" d="M{_n(x(0))},{_n(base)}{steps}V{_n(base)}Z"/>')
            else:
                parts.append(f'<path class="current" d="M{_n(x(0))},{_n(base)}{steps[steps.index("V"):]}V{_n(base)}"/>')
        step = max(1, len(edges) // 6)
        for i in range(0, len(edges), step):
            parts.append(_svg_text(x(i + 1), base + 14, f"{edges[i]:.3g}"))
    else:
        rotate = -20.0 if n_bins > 5 else 0.0
        for i, label in enumerate(labels):
            for series, offset in (("reference", 0.1), ("current", 0.5)):
                if series in shares:
                    value = float(shares[series][i])
                    parts.append(
                        f'<rect class="{series}" x="{_n(x(i + offset))}" y="{_n(y(value))}" '
                        f'width="{_n(0.4 / n_bins * plot_w)}" height="{_n(base - y(value))}"/>'
                    )
            parts.append(_svg_text(x(i + 0.5), base + 14, str(label), anchor="end" if rotate else "middle", rotate=rotate))
    legend = [("reference", _REFERENCE)] * ("reference" in shares) + [("current", _CURRENT)]
    for k, (name, colour) in enumerate(reversed(legend)):
        right = _W - _RIGHT - k * 80
        parts.append(f'<rect x="{_n(right - 74)}" y="5" width="10" height="9" fill="{colour}"/>')
        parts.append(_svg_text(right - 60, 13, name, anchor="start"))
    return (
        f'<svg class="histogram" viewBox="0 0 {_n(_W)} {_n(_H)}" role="img" '
        f'aria-label="{_e(f"histogram of {feature}")}"><title>{_e(f"histogram of {feature}")}</title>{"".join(parts)}</svg>'
    )


def _figures(
    histograms: Histograms, drift_rows: list[Mapping[str, Any]], features: list[str], bin_labels: BinLabels,
    words: JobWords | None,
) -> str:
    figures = []
    worst = worst_drift_rows(drift_rows)
    for feature in features:
        edges, current, reference = histograms[feature]
        shown = worst.get(feature, {})
        flag, psi, ks, baseline = shown.get("flag"), shown.get("psi"), shown.get("ks"), shown.get("baseline")
        # KS flags a feature as PSI does: a caption with PSI alone would show a warning beside a small PSI.
        psi_text = f"PSI {_fmt(psi)}" + (f" · KS {_fmt(ks)}" if _is_num(ks) else "") + f" vs {baseline}" if baseline else "no baseline"
        name = feature_text(feature, words)
        figures.append(
            f'<figure class="plot" data-feature="{_e(feature)}"><figcaption><b>{_e(name)}</b> '
            f"{_flag_badge(flag)} <span class=\"muted\">{_e(psi_text)}</span></figcaption>"
            f"{histogram_svg(name, edges, current, reference, labels=bin_labels.get(feature))}</figure>"
        )
    return f'<div class="plots">{"".join(figures)}</div>'


def _plots_section(
    histograms: Histograms, drift_rows: list[Mapping[str, Any]], order: list[str], bin_labels: BinLabels,
    words: JobWords | None,
) -> str:
    """The flagged features' histograms open, most severe first; the others inside one closed <details>."""
    flagged = set(flagged_features(drift_rows))
    shown, folded = [f for f in order if f in flagged], [f for f in order if f not in flagged]
    intro = (
        "<h2>Feature histograms (most drifted first)</h2>"
        '<p class="muted">Share of rows per bin: current partition (red) over the training reference '
        "(blue). Numeric features: first and last bins are below the reference's 1st and from its 99th "
        "percentile on. Boolean and categorical features: one bar per value, then the unseen values.</p>"
    )
    if not order:
        return intro + '<p class="muted">no histograms</p>'
    open_part = (
        f"<h3>Flagged: {len(shown)} feature{'s' * (len(shown) != 1)}</h3>"
        + _figures(histograms, drift_rows, shown, bin_labels, words)
    ) if shown else '<p class="muted">No feature is flagged.</p>'
    folded_part = (
        f'<details class="folded" id="unflagged-histograms"><summary>{"The other " if shown else ""}{len(folded)} '
        f"feature{'s' * (len(folded) != 1)}, not flagged <span class=\"hint muted\">(click to show)</span></summary>"
        + _figures(histograms, drift_rows, folded, bin_labels, words) + "</details>"
    ) if folded else ""
    return intro + open_part + folded_part


def _shadow_section(rows: list[Mapping[str, Any]], examples: list[Mapping[str, Any]], words: JobWords | None = None) -> str:
    """Champion against challenger: flipped rows, the decision crosstab, each decision's share and
    expected event rate (a forecast job: mean forecast) under both, the score (forecast) delta, and the
    first flipped rows with both reasons."""
    if not rows:
        return ""
    forecasts = any(r["section"] == "forecast_delta" for r in rows)
    classifies = any(r["section"] == "class_mix" for r in rows)
    means, delta_section = (
        ("mean_forecast", "forecast_delta") if forecasts else ("expected_accuracy", "") if classifies else ("expected_event_rate", "score_delta")
    )
    mean_text = _fmt if forecasts else _pct
    summary = {r["champion_item"]: r for r in rows if r["section"] == "summary"}
    first = rows[0]
    compared, flipped, failed = (summary[k]["rows"] for k in ("rows_compared", "rows_flipped", "rows_failed"))
    decisions = list(dict.fromkeys(r["champion_item"] for r in rows if r["section"] == "decision_mix"))
    named = words.decision if words is not None else str
    cells = {(r["champion_item"], r["challenger_item"]): r["rows"] for r in rows if r["section"] == "crosstab"}
    crosstab = [
        f"<tr><th>{_e(named(mine))}</th>" + "".join(_cell(cells.get((mine, theirs), 0)) for theirs in decisions) + "</tr>"
        for mine in decisions
    ]
    by_decision = {(r["section"], r["champion_item"]): r for r in rows if r["section"] in ("decision_mix", means)}
    mix = [
        "<tr>" + _cell(named(d)) + f'<td class="n">{_e(_pct(by_decision[("decision_mix", d)]["champion_value"]))}</td>'
        + f'<td class="n">{_e(_pct(by_decision[("decision_mix", d)]["challenger_value"]))}</td>'
        + f'<td class="n">{_e(mean_text(by_decision[(means, d)]["champion_value"]))}</td>'
        + f'<td class="n">{_e(mean_text(by_decision[(means, d)]["challenger_value"]))}</td></tr>'
        for d in decisions if ("decision_mix", d) in by_decision
    ]
    delta = ["<tr>" + _cell(r["champion_item"]) + _cell(r["challenger_value"]) + "</tr>" for r in rows if r["section"] == delta_section]
    estimate = "forecast" if forecasts else "class" if classifies else "score"
    # A binary job's score under its own name (`propensity score`); the rows' keys stay `*_score`.
    estimate_name = words.score_name if words is not None and estimate == "score" else estimate
    flips = [
        "<tr>" + _cell(x["entity_id"]) + _cell(named(x["champion_decision"])) + _cell(named(x["challenger_decision"]))
        + _cell(x[f"champion_{estimate}"]) + _cell(x[f"challenger_{estimate}"]) + _cell(", ".join(x["champion_reason_codes"] or []))
        + _cell(", ".join(x["challenger_reason_codes"] or [])) + "</tr>"
        for x in examples
    ]
    mean_name = "mean forecast" if forecasts else "expected accuracy" if classifies else "expected event rate"
    share = f"{flipped / compared:.2%}" if compared else "n/a"
    if classifies:
        # The flips by class: where the challenger moves each class's rows, whatever their decision.
        classes = list(dict.fromkeys(r["champion_item"] for r in rows if r["section"] == "class_mix"))
        moved = {(r["champion_item"], r["challenger_item"]): r["rows"] for r in rows if r["section"] == "class_crosstab"}
        changed = summary["rows_class_changed"]["rows"] if "rows_class_changed" in summary else 0
        by_class = (
            f"<h3>Predicted classes: champion (rows) × challenger (columns); {changed} rows change class</h3>"
            + _table(["champion \\ challenger", *classes], [
                f"<tr><th>{_e(mine)}</th>" + "".join(_cell(moved.get((mine, theirs), 0)) for theirs in classes) + "</tr>" for mine in classes
            ])
        )
    else:
        by_class = f"<h3>{_e(estimate_name[:1].upper() + estimate_name[1:])} delta (challenger − champion)</h3>" + _table(["statistic", "delta"], delta)
    shadow_table = "shadow_forecasts" if forecasts else "shadow_classifications" if classifies else "shadow_predictions"
    return (
        "<h2>Champion and challenger</h2>"
        f'<p>Champion <b>{_e(first["champion_version"])}</b> decided; challenger <b>{_e(first["challenger_version"] or "(not loaded)")}</b> '
        f"scored the same {compared} rows as a shadow and would flip <b>{flipped}</b> decisions ({share}). "
        f"Rows the challenger could not {'forecast' if forecasts else 'score'}: {failed}.</p>"
        '<p class="muted">Tables <code>shadow_comparison</code>, <code>decision_flips</code> (every flipped row) and '
        f"<code>{shadow_table}</code>; nothing the challenger computes drives a decision.</p>"
        + "<h3>Decisions: champion (rows) × challenger (columns)</h3>"
        + _table(["champion \\ challenger", *(named(d) for d in decisions)], crosstab)
        + _table(["decision", "share (champion)", "share (challenger)", f"{mean_name} (champion)", f"{mean_name} (challenger)"], mix)
        + by_class
        + "<h3>First flipped rows</h3>"
        + _table(["entity", "champion", "challenger", f"champion {estimate_name}", f"challenger {estimate_name}", "champion reasons",
                  "challenger reasons"], flips)
    )


def glance_section(
    summary: Mapping[str, Any], fallback_rows: list[Mapping[str, Any]], drift_rows: list[Mapping[str, Any]], features: list[str],
    *, health_rows: list[Mapping[str, Any]] | None = None, shadow_rows: list[Mapping[str, Any]] | None = None,
    words: JobWords | None = None, compared: bool = False,
) -> str:
    """What needs a look first: the features flagged (how many, the worst few with their PSI and KS), the fallbacks
    that counted rows (breached limits first), and the decisions' mix with the shift the run itself measured (the
    score's or forecast's drift, a multiclass job's class mix against the model's reference, a challenger's flips).
    `features` are the names the run drew a histogram of; the score or forecast among them is no feature."""
    worst = worst_drift_rows(drift_rows)
    estimates = {n: worst[n] for n in _ESTIMATES if n in worst}
    inputs = [f for f in dict.fromkeys([*features, *worst]) if f not in _ESTIMATES]
    flagged = [f for f in flagged_features(drift_rows) if f not in _ESTIMATES]
    totals = sorted((r for r in fallback_kind_totals(fallback_rows) if r.get("rows")), key=lambda r: (not r.get("breached"), -int(r["rows"])))
    breached = sum(bool(r.get("breached")) for r in totals)
    return (
        f'<section class="glance{" flagged" if flagged or breached else ""}" id="glance"><h2>At a glance</h2>'
        + _drift_glance(flagged, worst, len(inputs), words)
        + _fallback_glance(totals, breached)
        + _decision_glance(summary.get("decisions") or {}, estimates, health_rows or [], shadow_rows or [], words, compared)
        + "</section>"
    )


def _drift_glance(flagged: list[str], worst: Mapping[str, Mapping[str, Any]], n_features: int, words: JobWords | None) -> str:
    if not flagged:
        return (
            f"<p><b>No feature flagged</b> of {n_features} (drift against the training reference and the previous "
            "partition).</p>"
        )
    alerts = sum(worst[f]["flag"] == "alert" for f in flagged)
    return (
        f"<p><b>{len(flagged)} of {n_features} features flagged</b> ({alerts} alert, {len(flagged) - alerts} warn)"
        + (f"; the {_GLANCE_FEATURES} most drifted:" if len(flagged) > _GLANCE_FEATURES else ":") + "</p>"
        + _table(["feature", "flag", "PSI", "KS", "against"], [
            "<tr>" + f"<td>{_e(feature_text(f, words))}</td><td>{_flag_badge(worst[f]['flag'])}</td>"
            + _cell(worst[f].get("psi")) + _cell(worst[f].get("ks")) + _cell(worst[f].get("baseline")) + "</tr>"
            for f in flagged[:_GLANCE_FEATURES]
        ])
        + f'<p class="muted"><b>PSI</b>: {_e(DRIFT_MEASURE_WORDS["PSI"])}; <b>KS</b>: {_e(DRIFT_MEASURE_WORDS["KS"])}.</p>'
    )


def _fallback_glance(totals: list[Mapping[str, Any]], breached: int) -> str:
    """Each kind's total that counted rows, the breached first."""
    fallbacks = "; ".join(
        f"{_e(r['kind'])} {_e(_fmt(r['rows']))} rows ({_e(_pct(r.get('share')))}"
        + (f", <b>limit {_e(_pct(r.get('limit')))} BREACHED</b>" if r.get("breached") else "") + ")"
        for r in totals
    )
    return (
        f"<p><b>Fallbacks:</b> {fallbacks or 'none'}"
        + (f" — {breached} limit{'s' * (breached != 1)} breached" if breached else "") + ".</p>"
    )


def _decision_glance(
    decisions: Mapping[str, int], estimates: Mapping[str, Mapping[str, Any]], health_rows: list[Mapping[str, Any]],
    shadow_rows: list[Mapping[str, Any]], words: JobWords | None, compared: bool = False,
) -> str:
    """The run's decision mix and the changes the run itself measured: its score's (forecast's) drift against the
    reference and the previous partition, a class's predicted share against the model's reference, the challenger's
    flips. Against the trailing window, the page's opening gives the shift when it was `compared` before the page was
    written; else the page says where that shift is (table decision_monitoring) rather than guessing it."""
    total = sum(int(n) for n in decisions.values())
    named = words.decision if words is not None else str
    mix = " · ".join(f"{_e(named(d))} {_e(_fmt(n))} ({_e(_pct(n / total))})" for d, n in decisions.items()) if total else "no rows decided"
    lines = [f"<p><b>Decisions:</b> {mix}." + (
        " Their shift against the trailing window: above, and in table <code>decision_monitoring</code>.</p>" if compared else
        " Their shift against the trailing window: table <code>decision_monitoring</code> and the job's monitoring page, "
        "written after this run is published.</p>")]
    for name, r in estimates.items():
        ks = f" · KS {_e(_fmt(r.get('ks')))}" if _is_num(r.get("ks")) else ""
        lines.append(
            f"<p><b>{_e(words.score_name if words is not None and name == SCORE_DRIFT_NAME else name)} distribution:</b> "
            f"{_flag_badge(r.get('flag'))} PSI "
            f"{_e(_fmt(r.get('psi')))}{ks} against the {_e(_BASELINE_WORDS.get(str(r.get('baseline')), r.get('baseline')))}.</p>"
        )
    shares = [r for r in health_rows if r.get("section") == "class_mix" and r.get("measure") == "predicted_share"
              and _is_num(r.get("value")) and _is_num(r.get("reference"))]
    if shares:
        moved = max(shares, key=lambda r: abs(float(r["value"]) - float(r["reference"])))
        psi = next((r for r in health_rows if r.get("section") == "class_mix" and r.get("measure") == "psi"), None)
        lines.append(
            f"<p><b>Class mix against the model's reference:</b> the largest change is {_e(moved['item'])}, "
            f"{_e(_pct(moved['value']))} of rows (reference {_e(_pct(moved['reference']))})"
            + (f"; PSI {_e(_fmt(psi['value']))} {_flag_badge(psi.get('flag'))}" if psi is not None else "") + ".</p>"
        )
    counts = {r.get("champion_item"): r.get("rows") for r in shadow_rows if r.get("section") == "summary"}
    if counts.get("rows_compared"):
        lines.append(
            f"<p><b>Challenger:</b> would flip {_e(_fmt(counts.get('rows_flipped') or 0))} of {_e(_fmt(counts['rows_compared']))} "
            f"decisions ({_e(_pct((counts.get('rows_flipped') or 0) / counts['rows_compared']))}).</p>"
        )
    return "".join(lines)


def run_report_html(
    *,
    job: str,
    partition_date: Any,
    run_id: str,
    summary: dict[str, Any],
    fallback_rows: list[dict[str, Any]],
    drift_rows: list[dict[str, Any]],
    histograms: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]],
    bin_labels: BinLabels | None = None,
    health_rows: list[dict[str, Any]] | None = None,
    shadow_rows: list[dict[str, Any]] | None = None,
    flip_examples: list[dict[str, Any]] | None = None,
    words: JobWords | None = None,
    shifts: list[dict[str, Any]] | None = None,
    window_days: int | None = None,
    reason_codes: list[dict[str, Any]] | None = None,
) -> str:
    """The whole page as one string; every text from the inputs is HTML-escaped; it opens with the run in plain words
    (`lead_section`: `shifts` are the decision-mix measures that moved against the trailing `window_days`).

    `bin_labels` names the bins of the boolean and categorical features, which are drawn as bars; `words` are the
    job's own (its features' and decisions' plain names, its score's).
    """
    meta = f'job <b>{_e(job)}</b> · partition <b>{_e(partition_date)}</b> · run <code>{_e(run_id)}</code>'
    if words is not None:
        meta += f" · event: {_e(words.subject)} · {_e(words.score_meaning)}"
    return page_html(
        f"Scoring run {job} {partition_date}",
        meta,
        lead_section(summary, drift_rows, histograms, bin_labels or {}, shifts=shifts, window_days=window_days,
                     reason_codes=reason_codes or [], words=words)
        + glance_section(summary, fallback_rows, drift_rows, list(histograms), health_rows=health_rows, shadow_rows=shadow_rows,
                         words=words, compared=shifts is not None)
        + _summary_section(summary, words=words)
        + (reasons_section(reason_codes, int(summary.get("rows_with_reasons") or 0)) if reason_codes else "")
        + _fallback_section(fallback_rows)
        + _health_section(health_rows or [])
        + _shadow_section(shadow_rows or [], flip_examples or [], words)
        + drift_sections(drift_rows, histograms, bin_labels or {}, words)
        + engineering_section(summary),
        script=DRIFT_TABLE_SCRIPT,
    )


def drift_sections(
    drift_rows: list[dict[str, Any]], histograms: Histograms, bin_labels: BinLabels, words: JobWords | None = None
) -> str:
    """The drift table, then the histograms: the flagged features' first, the others folded."""
    order = feature_order(drift_rows, list(dict.fromkeys(str(f) for f in histograms)))
    return _drift_section(drift_rows, order, words) + _plots_section(histograms, drift_rows, order, bin_labels, words)


def page_html(title: str, meta: str, body: str, *, css: str = "", script: str = "") -> str:
    """A whole self-contained page: `title` (escaped here), the `meta` line and `body` (markup, escaped by their makers),
    `css` added to the shared style, `script` run at the end of the body; the page's policy lets that script run (by its
    hash) and no other."""
    policy = _CSP
    if script:
        digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
        policy += f"; script-src 'sha256-{digest}'"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(policy)}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}{css}</style></head><body>"
        f"<h1>{_e(title)}</h1>"
        f'<p class="meta">{meta}</p>'
        + body
        + (f"<script>{script}</script>" if script else "")
        + "</body></html>\n"
    )


def write_run_report(path: Path, html: str) -> Path:  # noqa: A002 (the page; shadows the module here only)
    """Write the page atomically: a temp file in the same folder, fsync, then os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(html)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
