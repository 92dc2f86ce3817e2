"""The monitoring page of a multiclass job (target.kind multiclass), in its classes: per partition of the range, the
latest succeeded run's class mix (each class's share of the rows classified), the mean probability of the predicted
class, the share of close calls (a small margin over the runner-up) and the decisions' shares, as the runs ledger
recorded them (`inference.classification`, tasks/monitoring/class_distribution.py).

Once labels land, the realized measures of each partition (`outcome_class_metrics`, tasks/monitoring/class_outcomes.py:
accuracy beside the interval estimated before labels, log loss, macro F1, classwise and top-label ECE) follow.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from tasks.prediction.words import JobWords
from tasks.reports.html_parts import esc, html_table, page_html, percent, table_cell


def _mix_section(
    rows: Sequence[Mapping[str, Any]], classes: Sequence[str], decisions: Sequence[str], words: JobWords | None
) -> str:
    named = words.decision if words is not None else str
    body = []
    for r in rows:
        c = r["classification"] or {}
        shares = c.get("predicted_share") or {}
        total = r["rows"] or 0
        body.append(
            "<tr>"
            + table_cell(str(r["partition_date"]))
            + table_cell(r["model_version"])
            + table_cell(total)
            + "".join(f'<td class="n">{esc(percent(shares.get(k)))}</td>' for k in classes)
            + table_cell(
                c.get("mean_probability"), "—" if c.get("mean_probability") is None else f"{c['mean_probability']:.3f}"
            )
            + f'<td class="n">{esc(percent(c.get("low_margin_share")))}</td>'
            + "".join(
                f'<td class="n">{esc(percent((r["decisions"] or {}).get(d, 0) / total if total else None))}</td>'
                for d in decisions
            )
            + "</tr>"
        )
    cut = next((r["classification"]["low_margin_cut"] for r in rows if r["classification"]), 0.1)
    return (
        "<h2>Class mix and decisions per partition</h2>"
        f'<p class="muted">Each class\'s share of the rows classified, the mean probability of the predicted class, the share '
        f"of close calls (margin over the runner-up below {cut:g}) and each decision's share, from the latest succeeded run of "
        "each partition (table <code>runs</code>; every row in <code>classifications</code>).</p>"
        + html_table(
            [
                "partition",
                "model",
                "rows",
                *(f"share {k}" for k in classes),
                "mean probability",
                f"margin < {cut:g}",
                *(f"decision {named(d)}" for d in decisions),
            ],
            body,
        )
    )


def class_monitoring_page_html(
    rows: Sequence[Mapping[str, Any]],
    *,
    job: str,
    name: str,
    classes: Sequence[str],
    decisions: Sequence[str],
    first_date: dt.date,
    last_date: dt.date,
    realized: Sequence[Mapping[str, Any]] = (),
    words: JobWords | None = None,
) -> str:
    """The multiclass job's monitoring page as one string; every text from the inputs is HTML-escaped. `realized`: the
    range's realized measures per partition and model version (tasks/reports/monitoring_page.py `realized_class_rows`); `words`
    name the decisions."""
    return page_html(
        f"Monitoring {job}",
        f"job <b>{esc(job)}</b> · classes of <b>{esc(name)}</b>: {esc(', '.join(classes))} · partitions {esc(first_date)}..{esc(last_date)}",
        _mix_section(rows, classes, decisions, words) + _realized_section(realized),
    )


_REALIZED_COLUMNS = (
    ("date", "partition"),
    ("model_version", "model"),
    ("rows", "rows"),
    ("labelled", "labelled"),
    ("accuracy", "accuracy"),
    ("estimated_accuracy", "estimated before labels"),
    ("accuracy_in_interval", "inside"),
    ("log_loss", "log loss"),
    ("macro_f1", "macro F1"),
    ("classwise_ece", "classwise ECE"),
    ("top_label_ece", "top-label ECE"),
    ("labels_quarantined", "labels of quarantined rows"),
    ("labels_unknown_entity", "labels of entities never scored"),
)


def _realized_section(realized: Sequence[Mapping[str, Any]]) -> str:
    body = ["<tr>" + "".join(table_cell(r.get(key)) for key, _ in _REALIZED_COLUMNS) + "</tr>" for r in realized]
    return (
        "<h2>Realized measures</h2>"
        '<p class="muted">On the classifications with a label: accuracy beside the interval estimated the morning after '
        "(<code>outcome_estimates</code>), log loss of the calibrated vector, macro F1, classwise ECE (mean one-vs-rest) and "
        "top-label ECE (<code>outcome_class_metrics</code>; per class and slice in <code>outcome_class_rates</code>, "
        "calibration bins in <code>outcome_class_calibration</code>). The last two columns count labels no classification "
        "answers: of rows the guards quarantined, and of entities the partition never held (a wrong date or id; table "
        "<code>outcome_partitions</code>).</p>" + html_table([header for _, header in _REALIZED_COLUMNS], body)
    )
