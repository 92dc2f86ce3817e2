"""A run's numbers in plain words: the sentences a run page and its key numbers open with, the decision-mix shift
against the trailing window, the drift flags and the reason codes given. An analyst reads what moved and by how
much; the statistics (PSI, KS, Wasserstein, JS) stay in the tables, each explained where it is shown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tasks.prediction.words import JobWords, predict_joined_words
from tasks.quality.drift import FORECAST_DRIFT_NAME, SCORE_DRIFT_NAME

BASELINE_WORDS = {"reference": "the training data", "previous": "the previous partition"}
FLAG_WORDS = {"warn": "moved", "alert": "moved a lot"}
DRIFT_MEASURE_WORDS = {
    "PSI": "how far the spread of values moved (population stability index: under 0.1 little, 0.1–0.25 some, "
    "over 0.25 a lot)",
    "KS": "the largest gap between the two cumulative shares of rows (Kolmogorov–Smirnov, 0 to 1)",
    "Wasserstein": "how far values moved on average, in the feature's own unit (Wasserstein distance)",
    "JS": "how different the two shares of rows per bin are (Jensen–Shannon distance, 0 to 1)",
}
"""Each drift statistic a page shows, in the words an analyst reads beside it."""
_ESTIMATES = (SCORE_DRIFT_NAME, FORECAST_DRIFT_NAME)
"""Drift rows of the model's own output, not of a feature."""


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def _share(value: float) -> str:
    return f"{value:.1%}"


def _measure_subject(measure: str, item: str, words: JobWords | None) -> str:
    if measure == "decision_share":
        return words.decision(item) if words is not None else item
    if measure == "rule_share":
        return f"rule {item}"
    if measure == "class_share":
        return f"predicted {item}"
    if measure == "straddling_share":
        return "rows too close to a cut-off to call"
    if measure == "expected_event_rate":
        return f"expected {words.subject if words is not None else 'event'} rate"
    if measure == "score_mean":
        return f"mean {words.score_name if words is not None else 'score'}"
    if measure == "forecast_mean":
        return "mean forecast"
    return f"{measure.replace('_', ' ')} {item}".strip()


def shift_parts(row: Mapping[str, Any], words: JobWords | None, window_days: int) -> tuple[str, str]:
    """One shifted `decision_monitoring` row as what moved and how: a share's relative change against the trailing mean
    (`manual review`, `12% more than the trailing 7 days (23.1% of rows, was 20.6%)`), a mean's move up or down."""
    measure, value, baseline = str(row["measure"]), float(row["value"]), row.get("baseline")
    subject = _measure_subject(measure, str(row.get("item") or ""), words)
    window = f"the trailing {window_days} days"
    if baseline is None or baseline != baseline:
        return subject, "no trailing days to compare with"
    baseline = float(baseline)
    if measure.endswith("_share") or measure == "expected_event_rate":
        if baseline == 0:
            return subject, f"{_share(value)} of rows, none in {window}"
        change, of_rows = (value - baseline) / baseline, " of rows" if measure.endswith("_share") else ""
        return (
            subject,
            f"{abs(change):.0%} {'more' if change > 0 else 'less'} than {window} ({_share(value)}{of_rows}, was {_share(baseline)})",
        )
    return (
        subject,
        f"moved {'up' if value > baseline else 'down'} from {baseline:,.4g} to {value:,.4g} against {window}",
    )


def shift_text(row: Mapping[str, Any], words: JobWords | None, window_days: int) -> str:
    """`manual review: 12% more than the trailing 7 days (23.1% of rows, was 20.6%)`."""
    return ": ".join(shift_parts(row, words, window_days))


def moved_direction(edges: np.ndarray, current: np.ndarray, reference: np.ndarray | None) -> str | None:
    """`up` or `down`: which way a numeric feature's mean moved, from its binned counts (underflow, the bins between
    `edges`, overflow) with each bin at its middle and the outer bins at the outer edges; None without a reference
    or rows."""
    edges = np.asarray(edges, dtype=float)
    if reference is None or len(edges) < 2 or not np.all(np.isfinite(edges)):
        return None
    middles = np.concatenate([[edges[0]], (edges[:-1] + edges[1:]) / 2, [edges[-1]]])
    current, reference = np.asarray(current, dtype=float), np.asarray(reference, dtype=float)
    if len(middles) != len(current) or current.sum() == 0 or reference.sum() == 0:
        return None
    delta = middles @ current / current.sum() - middles @ reference / reference.sum()
    return None if delta == 0 else "up" if delta > 0 else "down"


def flagged_drift_rows(drift_rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The flagged rows of the features (not the score or forecast), alerts first, then by PSI, descending."""
    flagged = [r for r in drift_rows if r.get("flag") in FLAG_WORDS and r.get("feature") not in _ESTIMATES]

    def psi(row: Mapping[str, Any]) -> float:
        value = row.get("psi")
        return float(value) if value is not None and value == value else 0.0

    return sorted(flagged, key=lambda r: (r["flag"] != "alert", -psi(r)))


def drift_flag_text(row: Mapping[str, Any], direction: str | None = None) -> str:
    """`moved a lot (up) against the training data`: one flagged drift row, in words."""
    moved = FLAG_WORDS[str(row["flag"])] + (f" ({direction})" if direction else "")
    return f"{moved} against {BASELINE_WORDS.get(str(row.get('baseline')), str(row.get('baseline')))}"


def reason_text(row: Mapping[str, Any], rows_with_reasons: int) -> str:
    """`1,234 rows (23.4% of the rows given reasons): Debt ratio high (R01)`."""
    share = f" ({row['rows'] / rows_with_reasons:.1%} of the rows given reasons)" if rows_with_reasons else ""
    text = str(row.get("text") or row["code"])
    return f"{int(row['rows']):,} rows{share}: {text}" + (f" ({row['code']})" if text != row["code"] else "")


def plain_summary(
    *,
    shifts: Sequence[Mapping[str, Any]] | None,
    drift_rows: Sequence[Mapping[str, Any]],
    n_features: int,
    directions: Mapping[str, str | None],
    reason_codes: Sequence[Mapping[str, Any]],
    rows_with_reasons: int,
    rows_quarantined: int,
    rows_read: int,
    words: JobWords | None,
    window_days: int | None,
) -> list[str]:
    """The sentences a run's page opens with: what moved in the decisions against the trailing window (`shifts`, the
    shifted `decision_monitoring` rows; None when not compared), the features that moved, the rows set aside and the
    reason given most."""
    sentences = []
    if shifts is not None and window_days is not None:
        sentences.append(
            _sentence("; ".join(shift_text(r, words, window_days) for r in shifts))
            if shifts
            else f"The decisions are in line with the trailing {window_days} days."
        )
    features = list(dict.fromkeys(str(r["feature"]) for r in flagged_drift_rows(drift_rows)))
    if features:
        named = [
            (words.feature(f) if words is not None else f) + (f" moved {directions[f]}" if directions.get(f) else "")
            for f in features[:3]
        ]
        more = f" and {len(features) - 3} more" if len(features) > 3 else ""
        sentences.append(
            f"{len(features)} of {n_features} feature{'s' * (n_features != 1)} moved away from the training data or the "
            f"previous partition: {predict_joined_words(named) if not more else ', '.join(named)}{more}."
        )
    else:
        sentences.append(f"No feature moved beyond its warning threshold ({n_features} checked).")
    if rows_quarantined:
        sentences.append(f"{rows_quarantined:,} of {rows_read:,} rows were set aside (quarantined) and not scored.")
    if reason_codes:
        sentences.append(f"Reason given most: {reason_text(reason_codes[0], rows_with_reasons)}.")
    return sentences


def feature_directions(histograms: Mapping[str, Mapping[str, Any]]) -> dict[str, str | None]:
    """Each numeric feature's `moved_direction` from a run's drift histograms (`ScoringSummary.drift_histograms`);
    a boolean or categorical feature has none."""
    return {
        name: moved_direction(
            np.asarray(h["edges"]), np.asarray(h["current"]), np.asarray(h["reference"]) if h["reference"] else None
        )
        if h.get("kind", "numeric") == "numeric"
        else None
        for name, h in histograms.items()
    }
