"""Champion against challenger on the same rows: what the challenger would have decided, counted per
chunk in the scoring pass and summed per partition (the `shadow_comparison` and `decision_flips`
tables). Business comparison only: it reads two prediction tables and loads no ML runtime.

The sums are exact and merge in any order, so units and Dask workers add theirs up like the other
monitoring sums.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SHADOW_SECTIONS = ("summary", "crosstab", "decision_mix", "expected_event_rate", "score_delta", "score_delta_histogram")
"""The sections of a binary job's `shadow_comparison`, in the order the page shows them:
- `summary`: `rows_compared`, `rows_flipped` and `rows_failed` (rows: the count; challenger_value: its share of the rows
  compared, or of the rows scored for `rows_failed`);
- `crosstab`: one row per (champion decision, challenger decision) with rows, and the mean probability under each model;
- `decision_mix`: per decision, its share of the rows under each model;
- `expected_event_rate`: per decision, the mean calibrated probability of the rows each model puts there (rows: the
  champion's count), and `all` for every row;
- `score_delta`: the challenger's score minus the champion's: `mean`, `mean_abs`, `p01` … `p99` in challenger_value;
- `score_delta_histogram`: rows per score delta (champion_item)."""
FORECAST_SHADOW_SECTIONS = (
    "summary",
    "crosstab",
    "decision_mix",
    "mean_forecast",
    "mean_interval_width",
    "forecast_delta",
)
"""The sections of a forecast job's `shadow_comparison`: `summary` and `decision_mix` as a binary job's;
- `crosstab`: one row per (champion decision, challenger decision) with rows, and the mean forecast under each model;
- `mean_forecast`: per decision, the mean forecast of the rows each model puts there (rows: the champion's count), and
  `all` for every row;
- `mean_interval_width`: `all`, the mean width forecast_high − forecast_low of each model's interval;
- `forecast_delta`: the challenger's forecast minus the champion's, in the target's unit: `mean`, `mean_abs` (exact),
  `p01` … `p99` (within FORECAST_DELTA_RELATIVE_ERROR of the exact quantile's value) in challenger_value."""
CLASS_SHADOW_SECTIONS = ("summary", "crosstab", "decision_mix", "expected_accuracy", "class_crosstab", "class_mix")
"""The sections of a multiclass job's `shadow_comparison`: `summary` as a binary job's, with `rows_class_changed` (rows
whose predicted class the challenger changes, whatever their decision; challenger_value: their share), and `decision_mix`;
- `crosstab`: one row per (champion decision, challenger decision) with rows, and the mean probability of the predicted
  class under each model;
- `expected_accuracy`: per decision, the mean calibrated probability of the predicted class of the rows each model puts
  there (rows: the champion's count), and `all` for every row: the accuracy each model expects of itself;
- `class_crosstab`: one row per (champion class, challenger class) with rows, and the mean probability of the predicted
  class under each model: the flips by class;
- `class_mix`: per class, its share of the rows under each model."""
_DELTA_QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
FLIP_EXAMPLES = 20

_DELTA_GAMMA = 1.02
"""Forecast deltas are counted in buckets (γ^(k−1), γ^k] of their magnitude, per sign (DDSketch's
log buckets): sums of counts merge exactly in any order, like the score deltas' counts, while a
delta in a target's own unit has no fixed grid to count it on."""
FORECAST_DELTA_RELATIVE_ERROR = (_DELTA_GAMMA - 1) / (_DELTA_GAMMA + 1)
"""How far a forecast delta's reported quantile may lie from the exact one, relative to it (≈ 1 %)."""
FORECAST_DELTA_ZERO = 1e-9
"""Deltas smaller than this in magnitude count as 0 (the same forecast up to rounding)."""
_BUCKET_OFFSET = 1 - math.floor(math.log(FORECAST_DELTA_ZERO) / math.log(_DELTA_GAMMA))
"""Added to a magnitude's bucket index so that every counted key but 0's is at least 1 in magnitude."""


def _delta_keys(delta: np.ndarray) -> np.ndarray:
    """Each delta's signed bucket key: 0 for |delta| < FORECAST_DELTA_ZERO, ±(k + offset) otherwise, so
    keys order as the deltas do."""
    magnitude = np.abs(delta)
    counted = magnitude >= FORECAST_DELTA_ZERO
    k = np.ceil(np.log(np.where(counted, magnitude, 1.0)) / math.log(_DELTA_GAMMA)).astype(np.int64)
    return np.where(counted, np.sign(delta).astype(np.int64) * (k + _BUCKET_OFFSET), 0)


def _delta_of_key(key: int) -> float:
    """The value a bucket stands for: 2γ^k/(γ + 1), within FORECAST_DELTA_RELATIVE_ERROR of every delta in it."""
    if key == 0:
        return 0.0
    k = abs(key) - _BUCKET_OFFSET
    return math.copysign(2 * _DELTA_GAMMA**k / (_DELTA_GAMMA + 1), key)


def _decision_codes(decisions: pa.Array | pa.ChunkedArray | np.ndarray, known: tuple[str, ...]) -> np.ndarray:
    """Each row's decision as its position in `known` (the rule table's decisions)."""
    encoded = pc.dictionary_encode(pa.array(decisions, pa.string()) if isinstance(decisions, np.ndarray) else decisions)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    lookup = np.array([known.index(d) for d in encoded.dictionary.to_pylist()], dtype=np.int64)
    return lookup[encoded.indices.to_numpy(zero_copy_only=False)]


@dataclass
class ShadowAccumulator:
    """Champion × challenger sums of one unit or partition over the rule table's `decisions`: of the
    calibrated probabilities and scores (a binary job's), of the forecasts (`forecasts`: a forecast job's), or of
    the predicted classes and their probabilities (`classes`, target.classes: a multiclass job's)."""

    decisions: tuple[str, ...] = ()
    forecasts: bool = False
    classes: tuple[str, ...] = ()
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Rows per (champion decision, challenger decision), flattened row-major."""
    champion_estimate: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Sum of the champion's estimate (probability or forecast) per cell of `rows`."""
    challenger_estimate: np.ndarray = field(default_factory=lambda: np.zeros(0))
    score_deltas: Counter[int] = field(default_factory=Counter)
    """Rows per score delta (binary jobs)."""
    forecast_deltas: Counter[int] = field(default_factory=Counter)
    """Rows per signed bucket of the forecast delta (`_delta_keys`; forecast jobs)."""
    forecast_delta_sum: float = 0.0
    forecast_delta_abs_sum: float = 0.0
    champion_width: float = 0.0
    """Sum of the champion's interval widths (forecast jobs)."""
    challenger_width: float = 0.0
    class_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Rows per (champion class, challenger class), flattened row-major (multiclass jobs)."""
    class_champion_probability: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Sum of the champion's probability of its predicted class per cell of `class_rows`."""
    class_challenger_probability: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rows_failed: int = 0
    failures: list[str] = field(default_factory=list)
    """Why the challenger did not shadow (it did not load, or a chunk failed), one line each."""
    examples: list[dict[str, Any]] = field(default_factory=list)
    """The first FLIP_EXAMPLES flipped rows (`flipped_rows`' columns), for the run page and artifact."""

    def __post_init__(self) -> None:
        cells = len(self.decisions) ** 2
        if self.rows.size != cells:
            self.rows = np.zeros(cells, dtype=np.int64)
            self.champion_estimate = np.zeros(cells)
            self.challenger_estimate = np.zeros(cells)
        class_cells = len(self.classes) ** 2
        if self.class_rows.size != class_cells:
            self.class_rows = np.zeros(class_cells, dtype=np.int64)
            self.class_champion_probability = np.zeros(class_cells)
            self.class_challenger_probability = np.zeros(class_cells)

    def add(self, champion: pa.Table, challenger: pa.Table) -> np.ndarray:
        """Count a chunk's two prediction tables (same rows, same order); the mask of rows whose decision flips."""
        if champion.num_rows != challenger.num_rows:
            raise ValueError(
                f"champion has {champion.num_rows} rows, challenger {challenger.num_rows}: not the same chunk"
            )
        d = len(self.decisions)
        mine = _decision_codes(champion.column("decision"), self.decisions)
        theirs = _decision_codes(challenger.column("decision"), self.decisions)
        cell = mine * d + theirs
        estimate = "forecast" if self.forecasts else "probability"
        self.rows += np.bincount(cell, minlength=d * d)
        self.champion_estimate += np.bincount(cell, champion.column(estimate).to_numpy(), minlength=d * d)
        self.challenger_estimate += np.bincount(cell, challenger.column(estimate).to_numpy(), minlength=d * d)
        if self.forecasts:
            delta = challenger.column("forecast").to_numpy() - champion.column("forecast").to_numpy()
            self.forecast_deltas.update(_counted(_delta_keys(delta)))
            self.forecast_delta_sum += float(delta.sum())
            self.forecast_delta_abs_sum += float(np.abs(delta).sum())
            self.champion_width += float(
                (champion.column("forecast_high").to_numpy() - champion.column("forecast_low").to_numpy()).sum()
            )
            self.challenger_width += float(
                (challenger.column("forecast_high").to_numpy() - challenger.column("forecast_low").to_numpy()).sum()
            )
        elif self.classes:
            k = len(self.classes)
            class_cell = _decision_codes(champion.column("predicted_class"), self.classes) * k + _decision_codes(
                challenger.column("predicted_class"), self.classes
            )
            self.class_rows += np.bincount(class_cell, minlength=k * k)
            self.class_champion_probability += np.bincount(
                class_cell, champion.column("probability").to_numpy(), minlength=k * k
            )
            self.class_challenger_probability += np.bincount(
                class_cell, challenger.column("probability").to_numpy(), minlength=k * k
            )
        else:
            delta = challenger.column("score").to_numpy().astype(np.int64) - champion.column("score").to_numpy().astype(
                np.int64
            )
            self.score_deltas.update(_counted(delta))
        flipped = mine != theirs
        if len(self.examples) < FLIP_EXAMPLES and flipped.any():
            first = np.flatnonzero(flipped)[: FLIP_EXAMPLES - len(self.examples)]
            self.examples += flipped_rows(
                champion.take(first), challenger.take(first), np.ones(first.size, dtype=bool)
            ).to_pylist()
        return flipped

    def add_failed(self, rows: int, why: str) -> None:
        self.rows_failed += rows
        self.failures.append(why)

    def merge(self, other: ShadowAccumulator) -> None:
        if other.decisions != self.decisions or other.forecasts != self.forecasts or other.classes != self.classes:
            raise ValueError(
                f"cannot merge shadow sums over decisions {other.decisions} (forecasts: {other.forecasts}, classes: {other.classes}) "
                f"into {self.decisions} (forecasts: {self.forecasts}, classes: {self.classes})"
            )
        self.rows += other.rows
        self.champion_estimate += other.champion_estimate
        self.challenger_estimate += other.challenger_estimate
        self.score_deltas.update(other.score_deltas)
        self.forecast_deltas.update(other.forecast_deltas)
        self.forecast_delta_sum += other.forecast_delta_sum
        self.forecast_delta_abs_sum += other.forecast_delta_abs_sum
        self.champion_width += other.champion_width
        self.challenger_width += other.challenger_width
        self.class_rows += other.class_rows
        self.class_champion_probability += other.class_champion_probability
        self.class_challenger_probability += other.class_challenger_probability
        self.rows_failed += other.rows_failed
        self.failures += other.failures
        self.examples = (self.examples + other.examples)[:FLIP_EXAMPLES]


def _counted(values: np.ndarray) -> dict[int, int]:
    keys, counts = np.unique(values, return_counts=True)
    return dict(zip(keys.tolist(), counts.tolist(), strict=True))


def flipped_rows(champion: pa.Table, challenger: pa.Table, flipped: np.ndarray) -> pa.Table:
    """The rows of a chunk whose decision the challenger would change, with both sides (DECISION_FLIPS's columns after the run key)."""
    rows = pa.array(np.flatnonzero(flipped))
    mine, theirs = champion.take(rows), challenger.take(rows)

    def side(table: pa.Table, column: str, kind: pa.DataType) -> pa.Array:
        # Each kind's tables lack the others' columns (a binary job's a forecast and a class, a forecast job's
        # a score, a probability and a class, a multiclass job's a score and a forecast): null there.
        return table.column(column) if column in table.column_names else pa.nulls(table.num_rows, kind)

    return pa.table(
        {
            "entity_id": mine.column("entity_id"),
            "champion_version": mine.column("model_version"),
            "challenger_version": theirs.column("model_version"),
            "champion_decision": mine.column("decision"),
            "challenger_decision": theirs.column("decision"),
            "champion_score": side(mine, "score", pa.int16()),
            "challenger_score": side(theirs, "score", pa.int16()),
            "champion_probability": side(mine, "probability", pa.float64()),
            "challenger_probability": side(theirs, "probability", pa.float64()),
            "champion_reason_codes": mine.column("reason_codes"),
            "challenger_reason_codes": theirs.column("reason_codes"),
            "champion_forecast": side(mine, "forecast", pa.float64()),
            "challenger_forecast": side(theirs, "forecast", pa.float64()),
            "champion_class": side(mine, "predicted_class", pa.string()),
            "challenger_class": side(theirs, "predicted_class", pa.string()),
        }
    )


def _quantile(deltas: Counter[int], q: float) -> int:
    """The inverted CDF (numpy's "inverted_cdf") of counted keys: the smallest key with at least q of the rows at or below it."""
    values = np.array(sorted(deltas), dtype=np.int64)
    counts = np.array([deltas[int(v)] for v in values], dtype=np.float64)
    cumulative = np.cumsum(counts)
    return int(values[np.searchsorted(cumulative, q * cumulative[-1], side="left")])


def shadow_comparison_rows(
    acc: ShadowAccumulator, *, champion_version: str, challenger_version: str | None, rows_scored: int
) -> list[dict[str, Any]]:
    """The partition's `shadow_comparison` rows (sections: SHADOW_SECTIONS, FORECAST_SHADOW_SECTIONS for a forecast job,
    CLASS_SHADOW_SECTIONS for a multiclass job)."""
    d = len(acc.decisions)
    rows = acc.rows.reshape(d, d)
    compared = int(rows.sum())
    flipped = compared - int(np.trace(rows)) if d else 0
    base = {"champion_version": champion_version, "challenger_version": challenger_version}

    def row(
        section: str, champion_item: str, challenger_item: str, n: int, champion: float | None, challenger: float | None
    ) -> dict:
        return {
            **base,
            "section": section,
            "champion_item": champion_item,
            "challenger_item": challenger_item,
            "rows": int(n),
            "champion_value": champion,
            "challenger_value": challenger,
        }

    out = [
        row("summary", "rows_compared", "rows_compared", compared, None, 1.0 if compared else None),
        row("summary", "rows_flipped", "rows_flipped", flipped, None, flipped / compared if compared else None),
        row(
            "summary",
            "rows_failed",
            "rows_failed",
            acc.rows_failed,
            None,
            acc.rows_failed / rows_scored if rows_scored else None,
        ),
    ]
    k = len(acc.classes)
    class_rows = acc.class_rows.reshape(k, k)
    if acc.classes:
        changed = compared - int(np.trace(class_rows))
        out.append(
            row(
                "summary",
                "rows_class_changed",
                "rows_class_changed",
                changed,
                None,
                changed / compared if compared else None,
            )
        )
    if not compared:
        return out
    p_mine = acc.champion_estimate.reshape(d, d)
    p_theirs = acc.challenger_estimate.reshape(d, d)
    for i, mine in enumerate(acc.decisions):
        for j, theirs in enumerate(acc.decisions):
            if rows[i, j]:
                out.append(
                    row("crosstab", mine, theirs, rows[i, j], p_mine[i, j] / rows[i, j], p_theirs[i, j] / rows[i, j])
                )
    by_mine, by_theirs = rows.sum(axis=1), rows.sum(axis=0)
    for i, decision in enumerate(acc.decisions):
        out.append(row("decision_mix", decision, decision, compared, by_mine[i] / compared, by_theirs[i] / compared))
    means = "mean_forecast" if acc.forecasts else "expected_accuracy" if acc.classes else "expected_event_rate"
    for i, decision in enumerate(acc.decisions):
        out.append(
            row(
                means,
                decision,
                decision,
                by_mine[i],
                p_mine[i].sum() / by_mine[i] if by_mine[i] else None,
                p_theirs[:, i].sum() / by_theirs[i] if by_theirs[i] else None,
            )
        )
    out.append(row(means, "all", "all", compared, p_mine.sum() / compared, p_theirs.sum() / compared))
    if acc.classes:
        mine_p, theirs_p = acc.class_champion_probability.reshape(k, k), acc.class_challenger_probability.reshape(k, k)
        for i, mine in enumerate(acc.classes):
            for j, theirs in enumerate(acc.classes):
                if class_rows[i, j]:
                    n = class_rows[i, j]
                    out.append(row("class_crosstab", mine, theirs, n, mine_p[i, j] / n, theirs_p[i, j] / n))
        by_mine, by_theirs = class_rows.sum(axis=1), class_rows.sum(axis=0)
        out += [
            row("class_mix", c, c, compared, by_mine[i] / compared, by_theirs[i] / compared)
            for i, c in enumerate(acc.classes)
        ]
        return out
    quantiles = [(f"p{round(q * 100):02d}", q) for q in _DELTA_QUANTILES]
    if acc.forecasts:
        out.append(
            row(
                "mean_interval_width",
                "all",
                "all",
                compared,
                acc.champion_width / compared,
                acc.challenger_width / compared,
            )
        )
        out.append(row("forecast_delta", "mean", "mean", compared, None, acc.forecast_delta_sum / compared))
        out.append(row("forecast_delta", "mean_abs", "mean_abs", compared, None, acc.forecast_delta_abs_sum / compared))
        out += [
            row("forecast_delta", name, name, compared, None, _delta_of_key(_quantile(acc.forecast_deltas, q)))
            for name, q in quantiles
        ]
        return out
    deltas = acc.score_deltas
    total = sum(deltas.values())
    mean = sum(v * n for v, n in deltas.items()) / total
    out.append(row("score_delta", "mean", "mean", total, None, mean))
    out.append(
        row("score_delta", "mean_abs", "mean_abs", total, None, sum(abs(v) * n for v, n in deltas.items()) / total)
    )
    out += [row("score_delta", name, name, total, None, float(_quantile(deltas, q))) for name, q in quantiles]
    out += [row("score_delta_histogram", str(v), str(v), n, None, None) for v, n in sorted(deltas.items())]
    return out


def shadow_headline(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What `score run` prints of a run's comparison: the challenger, flipped rows and share, failures; None without one."""
    if not rows:
        return None
    summary = {r["champion_item"]: r for r in rows if r["section"] == "summary"}
    top = sorted(
        (r for r in rows if r["section"] == "crosstab" and r["champion_item"] != r["challenger_item"]),
        key=lambda r: -r["rows"],
    )
    return {
        "challenger_version": rows[0]["challenger_version"],
        "rows_compared": summary["rows_compared"]["rows"],
        "rows_flipped": summary["rows_flipped"]["rows"],
        "flipped_share": summary["rows_flipped"]["challenger_value"],
        "rows_failed": summary["rows_failed"]["rows"],
        "top_flips": [f"{r['champion_item']}→{r['challenger_item']}: {r['rows']}" for r in top[:3]]
        + ([f"{len(top) - 3} more transitions ({sum(r['rows'] for r in top[3:])} rows)"] if len(top) > 3 else []),
    }
