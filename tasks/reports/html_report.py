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

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tasks.prediction.words import JobWords
from tasks.quality.drift import FORECAST_DRIFT_NAME, KS_BOUND_SHOWN_WITHIN, SCORE_DRIFT_NAME
from tasks.quality.fallback_report import fallback_kind_totals
from tasks.reports.html_parts import (
    cell_text,
    count_shares,
    esc,
    flag_badge,
    html_table,
    is_number,
    page_html,
    percent,
    svg_number,
    svg_text,
    table_cell,
)
from tasks.reports.plain_words import DRIFT_MEASURE_WORDS, moved_direction, plain_summary

Histograms = Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]
BinLabels = Mapping[str, Sequence[str]]
"""Boolean / categorical feature → the name of each of its bins (categories, then unseen)."""

_FLAGGED = ("alert", "warn")
_SEVERITY = {"alert": 3, "warn": 2, "ok": 1, "no_data": 0}
_GLANCE_FEATURES = 5
_ESTIMATES = (SCORE_DRIFT_NAME, FORECAST_DRIFT_NAME)
"""Drift rows of the model's own output, not of a feature: the glance gives them as the decisions' shift."""
_BASELINE_WORDS = {"reference": "training reference", "previous": "previous partition"}
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


def feature_text(feature: str, words: JobWords | None = None) -> str:
    """A feature as the page prints it (not yet escaped): its plain name, the column after it where the job's words give
    one. Every caption, cell and summary line of the run pages names a feature here."""
    if feature == SCORE_DRIFT_NAME and words is not None:
        # The score's own drift rows sit among the features' under the name `score`: the page calls it what the job does.
        return words.score_name
    return words.feature_and_column(feature) if words is not None else feature


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
            rows += [f"<tr><th>{esc(key)}.{esc(k)}</th>{table_cell(v)}</tr>" for k, v in value.items()]
        elif names.get(key, key) is not None:
            if isinstance(value, Mapping) and len(value) > FOLDED_BEYOND:
                # A wide job's guards act on dozens of columns: one line of them would fill the screen.
                cell = f"<td><details><summary>{len(value)} entries</summary>{esc(cell_text(value))}</details></td>"
                rows.append(f"<tr><th>{esc(names.get(key, key))}</th>{cell}</tr>")
                continue
            rows.append(f"<tr><th>{esc(names.get(key, key))}</th>{table_cell(value)}</tr>")
    return rows


def summary_section(
    summary: Mapping[str, Any],
    names: Mapping[str, str | None] | None = None,
    words: JobWords | None = None,
) -> str:
    """The ledger counts an analyst reads, one row each (`ENGINEERING_COUNTS` are `engineering_section`'s); `names`
    renames a count (None leaves it out); `words` names the decisions."""
    names = {**_SUMMARY_NAMES, **(names or {})}
    if words is not None and isinstance(summary.get("decisions"), Mapping):
        summary = {**summary, "decisions": {words.decision(d): n for d, n in summary["decisions"].items()}}
    counts = {k: v for k, v in summary.items() if k not in ENGINEERING_COUNTS}
    return "<h2>Run summary</h2>" + html_table(["count", "value"], _count_rows(counts, names))


def engineering_section(summary: Mapping[str, Any], names: Mapping[str, str | None] | None = None) -> str:
    """The `ENGINEERING_COUNTS` of the run, last on its page."""
    names = {**_SUMMARY_NAMES, **(names or {})}
    counts = {k: summary[k] for k in ENGINEERING_COUNTS if k in summary}
    return (
        "<h2>Engineering details</h2>"
        '<p class="muted">For whoever runs the scoring: rows whose interval straddles a decision cut-off, the rows each '
        "feature guard acted on, and how inference ran.</p>"
        + html_table(["count", "value"], _count_rows(counts, names))
    )


def lead_section(
    summary: Mapping[str, Any],
    drift_rows: list[Mapping[str, Any]],
    histograms: Histograms,
    bin_labels: BinLabels,
    *,
    shifts: Sequence[Mapping[str, Any]] | None,
    window_days: int | None,
    reason_codes: Sequence[Mapping[str, Any]],
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
        shifts=shifts,
        drift_rows=drift_rows,
        n_features=len(features),
        directions=directions,
        reason_codes=reason_codes,
        rows_with_reasons=int(summary.get("rows_with_reasons") or 0),
        rows_quarantined=int(summary.get("rows_quarantined") or 0),
        rows_read=int(summary.get("rows_read") or 0),
        words=words,
        window_days=window_days,
    )
    return (
        '<section class="lead" id="summary"><h2>In short</h2>'
        + "".join(f"<p>{esc(s)}</p>" for s in sentences)
        + "</section>"
    )


def reasons_section(reason_codes: Sequence[Mapping[str, Any]], rows_with_reasons: int) -> str:
    """Each reason code given with its rows and share of the rows given reasons, most given first."""
    body = [
        "<tr>"
        + table_cell(r["code"])
        + table_cell(r["text"])
        + table_cell(r["rows"])
        + f'<td class="n">{esc(percent(r["rows"] / rows_with_reasons if rows_with_reasons else None))}</td></tr>'
        for r in reason_codes
    ]
    return (
        "<h2>Reasons given</h2>"
        f'<p class="muted">Codes of the features that pushed a row most toward its decision, on the {cell_text(rows_with_reasons)} '
        "rows whose decision asks for reasons; a row counts once per code.</p>"
        + html_table(["code", "reason", "rows", "share of rows with reasons"], body)
    )


def _fallback_row(r: Mapping[str, Any]) -> str:
    breached = bool(r.get("breached"))
    return (
        ('<tr class="breached">' if breached else "<tr>")
        + table_cell(r.get("kind"))
        + table_cell(r.get("detail"))
        + table_cell(r.get("rows"))
        + f'<td class="n">{esc(percent(r.get("share")))}</td><td class="n">{esc(percent(r.get("limit")))}</td>'
        + table_cell(breached, "BREACHED" if breached else "no")
        + "</tr>"
    )


def fallback_section(fallback_rows: list[Mapping[str, Any]]) -> str:
    """Every kind's total row; the guards' breakdown by expectation beside them, folded when a wide job has many."""
    header = ["kind", "detail", "rows", "share", "limit", "breached"]
    breakdown = [
        r
        for r in fallback_rows
        if r.get("kind") in ("guard_repair", "quarantine") and r.get("detail") != "all" and not r.get("breached")
    ]
    if len(breakdown) <= FOLDED_BEYOND:
        return "<h2>Fallback report</h2>" + html_table(header, [_fallback_row(r) for r in fallback_rows])
    shown = [r for r in fallback_rows if not any(r is b for b in breakdown)]
    return (
        "<h2>Fallback report</h2>"
        + html_table(header, [_fallback_row(r) for r in shown])
        + f'<details class="folded"><summary>By expectation: {len(breakdown)} guards that repaired or quarantined rows</summary>'
        + html_table(header, [_fallback_row(r) for r in breakdown])
        + "</details>"
    )


def _reference_psi(drift_rows: list[Mapping[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in drift_rows:
        psi = r.get("psi")
        if r.get("baseline") == "reference" and is_number(psi) and not math.isnan(float(psi)):
            out[str(r["feature"])] = float(psi)
    return out


def _psi_or_minus_one(row: Mapping[str, Any]) -> float:
    psi = row.get("psi")
    return float(psi) if is_number(psi) and not math.isnan(float(psi)) else -1.0


def worst_drift_rows(drift_rows: list[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Each feature's row the page shows it by: its most severe flagged row (alert before warn, then the larger
    PSI) where one is flagged, else the one against the training reference, else against the previous partition."""
    baselines = {"reference": 0, "previous": 1}

    def rank(r: Mapping[str, Any]) -> tuple:
        flagged = r.get("flag") in _FLAGGED
        return (
            -_SEVERITY[r["flag"]] if flagged else 0,
            -_psi_or_minus_one(r) if flagged else 0.0,
            baselines.get(str(r.get("baseline")), 2),
            str(r.get("baseline")),
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
    if not is_number(value) or math.isnan(float(value)):
        return f"<td>{esc(cell_text(value) if text is None else text)}</td>"
    return f'<td class="n" data-v="{float(value):.6g}">{esc(cell_text(value) if text is None else text)}</td>'


def _drift_section(drift_rows: list[Mapping[str, Any]], order: list[str], words: JobWords | None) -> str:
    rank = {f: i for i, f in enumerate(order)}
    ordered = sorted(
        drift_rows,
        key=lambda r: (
            rank.get(str(r.get("feature")), len(rank)),
            str(r.get("feature")),
            r.get("baseline") != "reference",
            str(r.get("baseline")),
        ),
    )
    rows = []
    for r in ordered:
        feature, flag = str(r.get("feature")), r.get("flag")
        rows.append(
            f'<tr data-feature="{esc(feature)}" data-flagged="{int(flag in _FLAGGED)}">'
            + f"<td>{esc(feature_text(feature, words))}</td>"
            + table_cell(r.get("kind") or "numeric")
            + table_cell(r.get("baseline"))
            + f'<td data-v="{_SEVERITY.get(str(flag), -1)}">{flag_badge(flag)}</td>'
            + _sort_cell(r.get("psi"))
            + _sort_cell(r.get("ks"), _ks_text(r.get("ks"), r.get("ks_upper")))
            + _sort_cell(r.get("wasserstein"))
            + _sort_cell(r.get("js"))
            + _sort_cell(r.get("rows"))
            + _sort_cell(r.get("null_share"), percent(r.get("null_share")))
            + _sort_cell(r.get("outside_p1_p99_share"), percent(r.get("outside_p1_p99_share")))
            + _sort_cell(r.get("unseen_share"), percent(r.get("unseen_share")))
            + "</tr>"
        )
    header = [
        ("feature", "text"),
        ("kind", "text"),
        ("baseline", "text"),
        ("flag", "num"),
        ("PSI", "num"),
        ("KS", "num"),
        ("Wasserstein", "num"),
        ("JS", "num"),
        ("rows", "num"),
        ("null share", "num"),
        ("outside training p1–p99", "num"),
        ("unseen values", "num"),
    ]
    head = "".join(
        f'<th data-type="{kind}" title="{esc(DRIFT_MEASURE_WORDS[name] + "; " if name in DRIFT_MEASURE_WORDS else "")}sort by '
        f'{esc(name)}">{esc(name)}</th>'
        for name, kind in header
    )
    body = "".join(rows) or f'<tr><td colspan="{len(header)}" class="muted">none</td></tr>'
    tools = (
        '<div class="tools"><input type="search" id="drift-filter" placeholder="filter by feature" aria-label="filter the drift '
        'table by feature"><label><input type="checkbox" id="drift-flagged"> flagged only (warn, alert)</label>'
        f'<span id="drift-shown" class="muted">{len(rows)} rows</span></div>'
    )
    note = (
        '<p class="muted">What the measures say: '
        + "; ".join(f"<b>{esc(k)}</b>: {esc(v)}" for k, v in DRIFT_MEASURE_WORDS.items())
        + ". A feature is flagged <b>warn</b> when it moved, <b>alert</b> when it moved a lot, against the training data "
        "(baseline reference) or the previous partition (baseline previous).</p>"
        '<p class="muted">Click a header to sort by it (again to reverse). KS is a lower bound from the bins; "≤" gives its '
        f"upper bound where that is within {KS_BOUND_SHOWN_WITHIN:g} of it. Outside training p1–p99: numeric values below the "
        "reference's 1st or above its 99th percentile. Unseen values: boolean or categorical values the training reference "
        "never had.</p>"
    )
    return (
        "<h2>Drift</h2>"
        + tools
        + f'<div class="scroll"><table id="drift-table" class="sortable"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
        + note
    )


def _health_section(rows: list[Mapping[str, Any]]) -> str:
    """Model health before labels: every estimate with its interval, then the flagged drift rows."""
    if not rows:
        return ""
    estimates = [r for r in rows if r["section"] == "estimated_performance"]
    flagged = [
        r
        for r in rows
        if r["section"] != "estimated_performance"
        and (r["flag"] in ("warn", "alert") or r["measure"] in ("rank_agreement", "reconstruction_error"))
    ]
    body = [
        "<tr>"
        + table_cell(r["measure"])
        + table_cell(r["item"])
        + table_cell(r["value"])
        + table_cell(r["low"])
        + table_cell(r["high"])
        + table_cell(r["rows"])
        + "</tr>"
        for r in estimates
    ]
    drift = [
        "<tr>"
        + table_cell(r["section"])
        + table_cell(r["measure"])
        + table_cell(r["item"])
        + table_cell(r["value"])
        + table_cell(r["reference"])
        + table_cell(r["delta"])
        + (f"<td>{flag_badge(r['flag'])}</td>" if r["flag"] else "<td>—</td>")
        + "</tr>"
        for r in flagged
    ]
    return (
        "<h2>Model health before labels</h2>"
        '<p class="muted">Estimated from the calibrated probabilities (table <code>model_health</code>); the realized '
        "values join them when labels land (<code>outcome_estimates</code>).</p>"
        + html_table(["measure", "item", "estimate", "low", "high", "rows"], body)
        + html_table(["section", "measure", "item", "value", "reference", "change", "flag"], drift)
    )


def _ks_text(ks: Any, ks_upper: Any) -> str | None:
    """`ks (≤ upper)` where the report kept an upper bound above it; None leaves the plain cell."""
    if not (is_number(ks) and is_number(ks_upper)) or math.isnan(float(ks)) or math.isnan(float(ks_upper)):
        return None
    return f"{cell_text(ks)} (≤ {cell_text(ks_upper)})" if float(ks_upper) > float(ks) else None


_W, _H = 480.0, 190.0
_LEFT, _RIGHT, _TOP, _BOTTOM = 56.0, 8.0, 20.0, 34.0
_REFERENCE, _CURRENT = "#9fb7d6", "#c62828"


def histogram_svg(
    feature: str,
    edges: np.ndarray,
    current: np.ndarray,
    reference: np.ndarray | None,
    *,
    labels: Sequence[str] | None = None,
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
    shares = {"current": count_shares(current)} | ({} if reference is None else {"reference": count_shares(reference)})
    peak = max(float(max(s.max(initial=0.0) for s in shares.values())), 1e-9)
    top = peak * 1.08
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    base = _TOP + plot_h

    def y(share: float) -> float:
        return base - share / top * plot_h

    def x(slot: float) -> float:
        return _LEFT + slot / n_bins * plot_w

    parts = [
        f'<line class="axis" x1="{svg_number(_LEFT)}" y1="{svg_number(base)}" x2="{svg_number(_LEFT + plot_w)}" y2="{svg_number(base)}"/>',
        f'<line class="axis" x1="{svg_number(_LEFT)}" y1="{svg_number(_TOP)}" x2="{svg_number(_LEFT)}" y2="{svg_number(base)}"/>',
    ]
    for tick in (0.0, peak / 2, peak):
        parts.append(svg_text(_LEFT - 4, y(tick) + 3, f"{tick:.1%}", anchor="end"))
    parts.append(svg_text(10, _TOP + plot_h / 2, "share per bin" if labels is None else "share per value", rotate=-90))
    if labels is None:
        for series, share in (("reference", shares.get("reference")), ("current", shares["current"])):
            if share is None:
                continue
            steps = "".join(
                f"H{svg_number(x(i))}V{svg_number(y(v))}H{svg_number(x(i + 1))}" for i, v in enumerate(share)
            )
            if series == "reference":
                parts.insert(
                    0,
                    f'<path class="reference" d="M{svg_number(x(0))},{svg_number(base)}{steps}V{svg_number(base)}Z"/>',
                )
            else:
                parts.append(
                    f'<path class="current" d="M{svg_number(x(0))},{svg_number(base)}{steps[steps.index("V") :]}V{svg_number(base)}"/>'
                )
        step = max(1, len(edges) // 6)
        for i in range(0, len(edges), step):
            parts.append(svg_text(x(i + 1), base + 14, f"{edges[i]:.3g}"))
    else:
        rotate = -20.0 if n_bins > 5 else 0.0
        for i, label in enumerate(labels):
            for series, offset in (("reference", 0.1), ("current", 0.5)):
                if series in shares:
                    value = float(shares[series][i])
                    parts.append(
                        f'<rect class="{series}" x="{svg_number(x(i + offset))}" y="{svg_number(y(value))}" '
                        f'width="{svg_number(0.4 / n_bins * plot_w)}" height="{svg_number(base - y(value))}"/>'
                    )
            parts.append(
                svg_text(x(i + 0.5), base + 14, str(label), anchor="end" if rotate else "middle", rotate=rotate)
            )
    legend = [("reference", _REFERENCE)] * ("reference" in shares) + [("current", _CURRENT)]
    for k, (name, colour) in enumerate(reversed(legend)):
        right = _W - _RIGHT - k * 80
        parts.append(f'<rect x="{svg_number(right - 74)}" y="5" width="10" height="9" fill="{colour}"/>')
        parts.append(svg_text(right - 60, 13, name, anchor="start"))
    return (
        f'<svg class="histogram" viewBox="0 0 {svg_number(_W)} {svg_number(_H)}" role="img" '
        f'aria-label="{esc(f"histogram of {feature}")}"><title>{esc(f"histogram of {feature}")}</title>{"".join(parts)}</svg>'
    )


def _figures(
    histograms: Histograms,
    drift_rows: list[Mapping[str, Any]],
    features: list[str],
    bin_labels: BinLabels,
    words: JobWords | None,
) -> str:
    figures = []
    worst = worst_drift_rows(drift_rows)
    for feature in features:
        edges, current, reference = histograms[feature]
        shown = worst.get(feature, {})
        flag, psi, ks, baseline = shown.get("flag"), shown.get("psi"), shown.get("ks"), shown.get("baseline")
        # KS flags a feature as PSI does: a caption with PSI alone would show a warning beside a small PSI.
        psi_text = (
            f"PSI {cell_text(psi)}" + (f" · KS {cell_text(ks)}" if is_number(ks) else "") + f" vs {baseline}"
            if baseline
            else "no baseline"
        )
        name = feature_text(feature, words)
        figures.append(
            f'<figure class="plot" data-feature="{esc(feature)}"><figcaption><b>{esc(name)}</b> '
            f'{flag_badge(flag)} <span class="muted">{esc(psi_text)}</span></figcaption>'
            f"{histogram_svg(name, edges, current, reference, labels=bin_labels.get(feature))}</figure>"
        )
    return f'<div class="plots">{"".join(figures)}</div>'


def _plots_section(
    histograms: Histograms,
    drift_rows: list[Mapping[str, Any]],
    order: list[str],
    bin_labels: BinLabels,
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
        (
            f"<h3>Flagged: {len(shown)} feature{'s' * (len(shown) != 1)}</h3>"
            + _figures(histograms, drift_rows, shown, bin_labels, words)
        )
        if shown
        else '<p class="muted">No feature is flagged.</p>'
    )
    folded_part = (
        (
            f'<details class="folded" id="unflagged-histograms"><summary>{"The other " if shown else ""}{len(folded)} '
            f'feature{"s" * (len(folded) != 1)}, not flagged <span class="hint muted">(click to show)</span></summary>'
            + _figures(histograms, drift_rows, folded, bin_labels, words)
            + "</details>"
        )
        if folded
        else ""
    )
    return intro + open_part + folded_part


def shadow_section(
    rows: list[Mapping[str, Any]], examples: list[Mapping[str, Any]], words: JobWords | None = None
) -> str:
    """Champion against challenger: flipped rows, the decision crosstab, each decision's share and
    expected event rate (a forecast job: mean forecast) under both, the score (forecast) delta, and the
    first flipped rows with both reasons."""
    if not rows:
        return ""
    forecasts = any(r["section"] == "forecast_delta" for r in rows)
    classifies = any(r["section"] == "class_mix" for r in rows)
    means, delta_section = (
        ("mean_forecast", "forecast_delta")
        if forecasts
        else ("expected_accuracy", "")
        if classifies
        else ("expected_event_rate", "score_delta")
    )
    mean_text = cell_text if forecasts else percent
    summary = {r["champion_item"]: r for r in rows if r["section"] == "summary"}
    first = rows[0]
    compared, flipped, failed = (summary[k]["rows"] for k in ("rows_compared", "rows_flipped", "rows_failed"))
    decisions = list(dict.fromkeys(r["champion_item"] for r in rows if r["section"] == "decision_mix"))
    named = words.decision if words is not None else str
    cells = {(r["champion_item"], r["challenger_item"]): r["rows"] for r in rows if r["section"] == "crosstab"}
    crosstab = [
        f"<tr><th>{esc(named(mine))}</th>"
        + "".join(table_cell(cells.get((mine, theirs), 0)) for theirs in decisions)
        + "</tr>"
        for mine in decisions
    ]
    by_decision = {(r["section"], r["champion_item"]): r for r in rows if r["section"] in ("decision_mix", means)}
    mix = [
        "<tr>"
        + table_cell(named(d))
        + f'<td class="n">{esc(percent(by_decision[("decision_mix", d)]["champion_value"]))}</td>'
        + f'<td class="n">{esc(percent(by_decision[("decision_mix", d)]["challenger_value"]))}</td>'
        + f'<td class="n">{esc(mean_text(by_decision[(means, d)]["champion_value"]))}</td>'
        + f'<td class="n">{esc(mean_text(by_decision[(means, d)]["challenger_value"]))}</td></tr>'
        for d in decisions
        if ("decision_mix", d) in by_decision
    ]
    delta = [
        "<tr>" + table_cell(r["champion_item"]) + table_cell(r["challenger_value"]) + "</tr>"
        for r in rows
        if r["section"] == delta_section
    ]
    estimate = "forecast" if forecasts else "class" if classifies else "score"
    # A binary job's score under its own name (`propensity score`); the rows' keys stay `*_score`.
    estimate_name = words.score_name if words is not None and estimate == "score" else estimate
    flips = [
        "<tr>"
        + table_cell(x["entity_id"])
        + table_cell(named(x["champion_decision"]))
        + table_cell(named(x["challenger_decision"]))
        + table_cell(x[f"champion_{estimate}"])
        + table_cell(x[f"challenger_{estimate}"])
        + table_cell(", ".join(x["champion_reason_codes"] or []))
        + table_cell(", ".join(x["challenger_reason_codes"] or []))
        + "</tr>"
        for x in examples
    ]
    mean_name = "mean forecast" if forecasts else "expected accuracy" if classifies else "expected event rate"
    share = f"{flipped / compared:.2%}" if compared else "n/a"
    if classifies:
        # The flips by class: where the challenger moves each class's rows, whatever their decision.
        classes = list(dict.fromkeys(r["champion_item"] for r in rows if r["section"] == "class_mix"))
        moved = {
            (r["champion_item"], r["challenger_item"]): r["rows"] for r in rows if r["section"] == "class_crosstab"
        }
        changed = summary["rows_class_changed"]["rows"] if "rows_class_changed" in summary else 0
        by_class = (
            f"<h3>Predicted classes: champion (rows) × challenger (columns); {changed} rows change class</h3>"
            + html_table(
                ["champion \\ challenger", *classes],
                [
                    f"<tr><th>{esc(mine)}</th>"
                    + "".join(table_cell(moved.get((mine, theirs), 0)) for theirs in classes)
                    + "</tr>"
                    for mine in classes
                ],
            )
        )
    else:
        by_class = (
            f"<h3>{esc(estimate_name[:1].upper() + estimate_name[1:])} delta (challenger − champion)</h3>"
            + html_table(["statistic", "delta"], delta)
        )
    shadow_table = "shadow_forecasts" if forecasts else "shadow_classifications" if classifies else "shadow_predictions"
    return (
        "<h2>Champion and challenger</h2>"
        f"<p>Champion <b>{esc(first['champion_version'])}</b> decided; challenger <b>{esc(first['challenger_version'] or '(not loaded)')}</b> "
        f"scored the same {compared} rows as a shadow and would flip <b>{flipped}</b> decisions ({share}). "
        f"Rows the challenger could not {'forecast' if forecasts else 'score'}: {failed}.</p>"
        '<p class="muted">Tables <code>shadow_comparison</code>, <code>decision_flips</code> (every flipped row) and '
        f"<code>{shadow_table}</code>; nothing the challenger computes drives a decision.</p>"
        + "<h3>Decisions: champion (rows) × challenger (columns)</h3>"
        + html_table(["champion \\ challenger", *(named(d) for d in decisions)], crosstab)
        + html_table(
            [
                "decision",
                "share (champion)",
                "share (challenger)",
                f"{mean_name} (champion)",
                f"{mean_name} (challenger)",
            ],
            mix,
        )
        + by_class
        + "<h3>First flipped rows</h3>"
        + html_table(
            [
                "entity",
                "champion",
                "challenger",
                f"champion {estimate_name}",
                f"challenger {estimate_name}",
                "champion reasons",
                "challenger reasons",
            ],
            flips,
        )
    )


def glance_section(
    summary: Mapping[str, Any],
    fallback_rows: list[Mapping[str, Any]],
    drift_rows: list[Mapping[str, Any]],
    features: list[str],
    *,
    health_rows: list[Mapping[str, Any]] | None = None,
    shadow_rows: list[Mapping[str, Any]] | None = None,
    words: JobWords | None = None,
    compared: bool = False,
) -> str:
    """What needs a look first: the features flagged (how many, the worst few with their PSI and KS), the fallbacks
    that counted rows (breached limits first), and the decisions' mix with the shift the run itself measured (the
    score's or forecast's drift, a multiclass job's class mix against the model's reference, a challenger's flips).
    `features` are the names the run drew a histogram of; the score or forecast among them is no feature."""
    worst = worst_drift_rows(drift_rows)
    estimates = {n: worst[n] for n in _ESTIMATES if n in worst}
    inputs = [f for f in dict.fromkeys([*features, *worst]) if f not in _ESTIMATES]
    flagged = [f for f in flagged_features(drift_rows) if f not in _ESTIMATES]
    totals = sorted(
        (r for r in fallback_kind_totals(fallback_rows) if r.get("rows")),
        key=lambda r: (not r.get("breached"), -int(r["rows"])),
    )
    breached = sum(bool(r.get("breached")) for r in totals)
    return (
        f'<section class="glance{" flagged" if flagged or breached else ""}" id="glance"><h2>At a glance</h2>'
        + _drift_glance(flagged, worst, len(inputs), words)
        + _fallback_glance(totals, breached)
        + _decision_glance(
            summary.get("decisions") or {}, estimates, health_rows or [], shadow_rows or [], words, compared
        )
        + "</section>"
    )


def _drift_glance(
    flagged: list[str], worst: Mapping[str, Mapping[str, Any]], n_features: int, words: JobWords | None
) -> str:
    if not flagged:
        return (
            f"<p><b>No feature flagged</b> of {n_features} (drift against the training reference and the previous "
            "partition).</p>"
        )
    alerts = sum(worst[f]["flag"] == "alert" for f in flagged)
    return (
        f"<p><b>{len(flagged)} of {n_features} features flagged</b> ({alerts} alert, {len(flagged) - alerts} warn)"
        + (f"; the {_GLANCE_FEATURES} most drifted:" if len(flagged) > _GLANCE_FEATURES else ":")
        + "</p>"
        + html_table(
            ["feature", "flag", "PSI", "KS", "against"],
            [
                "<tr>"
                + f"<td>{esc(feature_text(f, words))}</td><td>{flag_badge(worst[f]['flag'])}</td>"
                + table_cell(worst[f].get("psi"))
                + table_cell(worst[f].get("ks"))
                + table_cell(worst[f].get("baseline"))
                + "</tr>"
                for f in flagged[:_GLANCE_FEATURES]
            ],
        )
        + f'<p class="muted"><b>PSI</b>: {esc(DRIFT_MEASURE_WORDS["PSI"])}; <b>KS</b>: {esc(DRIFT_MEASURE_WORDS["KS"])}.</p>'
    )


def _fallback_glance(totals: list[Mapping[str, Any]], breached: int) -> str:
    """Each kind's total that counted rows, the breached first."""
    fallbacks = "; ".join(
        f"{esc(r['kind'])} {esc(cell_text(r['rows']))} rows ({esc(percent(r.get('share')))}"
        + (f", <b>limit {esc(percent(r.get('limit')))} BREACHED</b>" if r.get("breached") else "")
        + ")"
        for r in totals
    )
    return (
        f"<p><b>Fallbacks:</b> {fallbacks or 'none'}"
        + (f" — {breached} limit{'s' * (breached != 1)} breached" if breached else "")
        + ".</p>"
    )


def _decision_glance(
    decisions: Mapping[str, int],
    estimates: Mapping[str, Mapping[str, Any]],
    health_rows: list[Mapping[str, Any]],
    shadow_rows: list[Mapping[str, Any]],
    words: JobWords | None,
    compared: bool = False,
) -> str:
    """The run's decision mix and the changes the run itself measured: its score's (forecast's) drift against the
    reference and the previous partition, a class's predicted share against the model's reference, the challenger's
    flips. Against the trailing window, the page's opening gives the shift when it was `compared` before the page was
    written; else the page says where that shift is (table decision_monitoring) rather than guessing it."""
    total = sum(int(n) for n in decisions.values())
    named = words.decision if words is not None else str
    mix = (
        " · ".join(f"{esc(named(d))} {esc(cell_text(n))} ({esc(percent(n / total))})" for d, n in decisions.items())
        if total
        else "no rows decided"
    )
    lines = [
        f"<p><b>Decisions:</b> {mix}."
        + (
            " Their shift against the trailing window: above, and in table <code>decision_monitoring</code>.</p>"
            if compared
            else " Their shift against the trailing window: table <code>decision_monitoring</code> and the job's monitoring page, "
            "written after this run is published.</p>"
        )
    ]
    for name, r in estimates.items():
        ks = f" · KS {esc(cell_text(r.get('ks')))}" if is_number(r.get("ks")) else ""
        lines.append(
            f"<p><b>{esc(words.score_name if words is not None and name == SCORE_DRIFT_NAME else name)} distribution:</b> "
            f"{flag_badge(r.get('flag'))} PSI "
            f"{esc(cell_text(r.get('psi')))}{ks} against the {esc(_BASELINE_WORDS.get(str(r.get('baseline')), r.get('baseline')))}.</p>"
        )
    shares = [
        r
        for r in health_rows
        if r.get("section") == "class_mix"
        and r.get("measure") == "predicted_share"
        and is_number(r.get("value"))
        and is_number(r.get("reference"))
    ]
    if shares:
        moved = max(shares, key=lambda r: abs(float(r["value"]) - float(r["reference"])))
        psi = next((r for r in health_rows if r.get("section") == "class_mix" and r.get("measure") == "psi"), None)
        lines.append(
            f"<p><b>Class mix against the model's reference:</b> the largest change is {esc(moved['item'])}, "
            f"{esc(percent(moved['value']))} of rows (reference {esc(percent(moved['reference']))})"
            + (f"; PSI {esc(cell_text(psi['value']))} {flag_badge(psi.get('flag'))}" if psi is not None else "")
            + ".</p>"
        )
    counts = {r.get("champion_item"): r.get("rows") for r in shadow_rows if r.get("section") == "summary"}
    if counts.get("rows_compared"):
        lines.append(
            f"<p><b>Challenger:</b> would flip {esc(cell_text(counts.get('rows_flipped') or 0))} of {esc(cell_text(counts['rows_compared']))} "
            f"decisions ({esc(percent((counts.get('rows_flipped') or 0) / counts['rows_compared']))}).</p>"
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
    meta = f"job <b>{esc(job)}</b> · partition <b>{esc(partition_date)}</b> · run <code>{esc(run_id)}</code>"
    if words is not None:
        meta += f" · event: {esc(words.subject)} · {esc(words.score_meaning)}"
    return page_html(
        f"Scoring run {job} {partition_date}",
        meta,
        lead_section(
            summary,
            drift_rows,
            histograms,
            bin_labels or {},
            shifts=shifts,
            window_days=window_days,
            reason_codes=reason_codes or [],
            words=words,
        )
        + glance_section(
            summary,
            fallback_rows,
            drift_rows,
            list(histograms),
            health_rows=health_rows,
            shadow_rows=shadow_rows,
            words=words,
            compared=shifts is not None,
        )
        + summary_section(summary, words=words)
        + (reasons_section(reason_codes, int(summary.get("rows_with_reasons") or 0)) if reason_codes else "")
        + fallback_section(fallback_rows)
        + _health_section(health_rows or [])
        + shadow_section(shadow_rows or [], flip_examples or [], words)
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
