"""The pieces every page of the house is made of: its Content-Security-Policy and style, escaping, a cell's
text, tables, flag badges, SVG text, the whole page and its atomic write. The run pages (html_report.py,
forecast_report.py, class_report.py), the monitoring pages and the model card share them, so all pages read alike."""

from __future__ import annotations

import base64
import hashlib
import html
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

FLAGS = ("alert", "warn", "ok", "no_data")
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
CSS = """
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


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def cell_text(value: Any) -> str:
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
        return "; ".join(f"{k}: {cell_text(v)}" for k, v in value.items()) or "—"
    if isinstance(value, (list, tuple)):
        return ", ".join(cell_text(v) for v in value) or "—"
    return str(value)


def percent(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{float(value):.2%}"


def table_cell(value: Any, text: str | None = None) -> str:
    cls = ' class="n"' if is_number(value) else ""
    return f"<td{cls}>{esc(cell_text(value) if text is None else text)}</td>"


def flag_badge(flag: str | None) -> str:
    flag = flag or "no baseline"
    cls = f"flag-{flag}" if flag in FLAGS else "flag-other"
    return f'<span class="flag {cls}">{esc(flag)}</span>'


def html_table(header: list[str], rows: list[str]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join(rows) or f'<tr><td colspan="{len(header)}" class="muted">none</td></tr>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def count_shares(counts: np.ndarray) -> np.ndarray:
    counts = np.asarray(counts, dtype=np.float64)
    total = counts.sum()
    return counts / total if total > 0 else np.zeros_like(counts)


def svg_number(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def svg_text(x: float, y: float, text: str, *, anchor: str = "middle", rotate: float = 0.0) -> str:
    turn = f' transform="rotate({svg_number(rotate)} {svg_number(x)} {svg_number(y)})"' if rotate else ""
    return f'<text x="{svg_number(x)}" y="{svg_number(y)}" text-anchor="{anchor}"{turn}>{esc(text)}</text>'


def page_html(title: str, meta: str, body: str, *, css: str = "", script: str = "") -> str:
    """A whole self-contained page: `title` (escaped here), the `meta` line and `body` (markup, escaped by their makers),
    `css` added to the shared style, `script` run at the end of the body; the page's policy lets that script run (by its
    hash) and no other."""
    policy = CSP
    if script:
        digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
        policy += f"; script-src 'sha256-{digest}'"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(policy)}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}{css}</style></head><body>"
        f"<h1>{esc(title)}</h1>"
        f'<p class="meta">{meta}</p>' + body + (f"<script>{script}</script>" if script else "") + "</body></html>\n"
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
