"""Champion against challenger on the same rows: what the challenger would have decided, counted per
chunk in the scoring pass and summed per partition (the `shadow_comparison` and `decision_flips`
tables). Business comparison only: it reads two prediction tables and loads no ML runtime.

The sums are exact and merge in any order, so units and Dask workers add theirs up like the other
monitoring sums.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SHADOW_SECTIONS = ("summary", "crosstab", "decision_mix", "expected_event_rate", "score_delta", "score_delta_histogram")
"""The sections of `shadow_comparison`, in the order the page shows them:
- `summary`: `rows_compared`, `rows_flipped` and `rows_failed` (rows: the count; challenger_value: its share of the rows
  compared, or of the rows scored for `rows_failed`);
- `crosstab`: one row per (champion decision, challenger decision) with rows, and the mean probability under each model;
- `decision_mix`: per decision, its share of the rows under each model;
- `expected_event_rate`: per decision, the mean calibrated probability of the rows each model puts there (rows: the
  champion's count), and `all` for every row;
- `score_delta`: the challenger's score minus the champion's: `mean`, `mean_abs`, `p01` … `p99` in challenger_value;
- `score_delta_histogram`: rows per score delta (champion_item)."""
_DELTA_QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
FLIP_EXAMPLES = 20


def _decision_codes(decisions: pa.Array | pa.ChunkedArray | np.ndarray, known: tuple[str, ...]) -> np.ndarray:
    """Each row's decision as its position in `known` (the rule table's decisions)."""
    encoded = pc.dictionary_encode(pa.array(decisions, pa.string()) if isinstance(decisions, np.ndarray) else decisions)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    lookup = np.array([known.index(d) for d in encoded.dictionary.to_pylist()], dtype=np.int64)
    return lookup[encoded.indices.to_numpy(zero_copy_only=False)]


@dataclass
class ShadowAccumulator:
    """Champion × challenger sums of one unit or partition over the rule table's `decisions`."""

    decisions: tuple[str, ...] = ()
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Rows per (champion decision, challenger decision), flattened row-major."""
    champion_probability: np.ndarray = field(default_factory=lambda: np.zeros(0))
    challenger_probability: np.ndarray = field(default_factory=lambda: np.zeros(0))
    score_deltas: Counter[int] = field(default_factory=Counter)
    rows_failed: int = 0
    failures: list[str] = field(default_factory=list)
    """Why the challenger did not shadow (it did not load, or a chunk failed), one line each."""
    examples: list[dict[str, Any]] = field(default_factory=list)
    """The first FLIP_EXAMPLES flipped rows (`flipped_rows`' columns), for the run page and artifact."""

    def __post_init__(self) -> None:
        cells = len(self.decisions) ** 2
        if self.rows.size != cells:
            self.rows = np.zeros(cells, dtype=np.int64)
            self.champion_probability = np.zeros(cells)
            self.challenger_probability = np.zeros(cells)

    def add(self, champion: pa.Table, challenger: pa.Table) -> np.ndarray:
        """Count a chunk's two prediction tables (same rows, same order); the mask of rows whose decision flips."""
        if champion.num_rows != challenger.num_rows:
            raise ValueError(f"champion has {champion.num_rows} rows, challenger {challenger.num_rows}: not the same chunk")
        d = len(self.decisions)
        mine = _decision_codes(champion.column("decision"), self.decisions)
        theirs = _decision_codes(challenger.column("decision"), self.decisions)
        cell = mine * d + theirs
        self.rows += np.bincount(cell, minlength=d * d)
        self.champion_probability += np.bincount(cell, champion.column("probability").to_numpy(), minlength=d * d)
        self.challenger_probability += np.bincount(cell, challenger.column("probability").to_numpy(), minlength=d * d)
        delta = challenger.column("score").to_numpy().astype(np.int64) - champion.column("score").to_numpy().astype(np.int64)
        values, counts = np.unique(delta, return_counts=True)
        self.score_deltas.update(dict(zip(values.tolist(), counts.tolist(), strict=True)))
        flipped = mine != theirs
        if len(self.examples) < FLIP_EXAMPLES and flipped.any():
            first = np.flatnonzero(flipped)[: FLIP_EXAMPLES - len(self.examples)]
            self.examples += flipped_rows(champion.take(first), challenger.take(first), np.ones(first.size, dtype=bool)).to_pylist()
        return flipped

    def add_failed(self, rows: int, why: str) -> None:
        self.rows_failed += rows
        self.failures.append(why)

    def merge(self, other: ShadowAccumulator) -> None:
        if other.decisions != self.decisions:
            raise ValueError(f"cannot merge shadow sums over decisions {other.decisions} into {self.decisions}")
        self.rows += other.rows
        self.champion_probability += other.champion_probability
        self.challenger_probability += other.challenger_probability
        self.score_deltas.update(other.score_deltas)
        self.rows_failed += other.rows_failed
        self.failures += other.failures
        self.examples = (self.examples + other.examples)[:FLIP_EXAMPLES]


def flipped_rows(champion: pa.Table, challenger: pa.Table, flipped: np.ndarray) -> pa.Table:
    """The rows of a chunk whose decision the challenger would change, with both sides (DECISION_FLIPS's columns after the run key)."""
    rows = pa.array(np.flatnonzero(flipped))
    mine, theirs = champion.take(rows), challenger.take(rows)

    def side(table: pa.Table, column: str, kind: pa.DataType) -> pa.Array:
        # A binary job's tables have no forecast, a forecast job's no score or probability: null there.
        return table.column(column) if column in table.column_names else pa.nulls(table.num_rows, kind)

    return pa.table({
        "entity_id": mine.column("entity_id"),
        "champion_version": mine.column("model_version"), "challenger_version": theirs.column("model_version"),
        "champion_decision": mine.column("decision"), "challenger_decision": theirs.column("decision"),
        "champion_score": side(mine, "score", pa.int16()), "challenger_score": side(theirs, "score", pa.int16()),
        "champion_probability": side(mine, "probability", pa.float64()), "challenger_probability": side(theirs, "probability", pa.float64()),
        "champion_reason_codes": mine.column("reason_codes"), "challenger_reason_codes": theirs.column("reason_codes"),
        "champion_forecast": side(mine, "forecast", pa.float64()), "challenger_forecast": side(theirs, "forecast", pa.float64()),
    })


def _quantile(deltas: Counter[int], q: float) -> float:
    values = np.array(sorted(deltas), dtype=np.float64)
    counts = np.array([deltas[int(v)] for v in values], dtype=np.float64)
    cumulative = np.cumsum(counts)
    # The inverted CDF (numpy's "inverted_cdf"): the smallest delta with at least q of the rows at or below it.
    return float(values[np.searchsorted(cumulative, q * cumulative[-1], side="left")])


def shadow_comparison_rows(
    acc: ShadowAccumulator, *, champion_version: str, challenger_version: str | None, rows_scored: int
) -> list[dict[str, Any]]:
    """The partition's `shadow_comparison` rows (sections: SHADOW_SECTIONS)."""
    d = len(acc.decisions)
    rows = acc.rows.reshape(d, d)
    compared = int(rows.sum())
    flipped = compared - int(np.trace(rows)) if d else 0
    base = {"champion_version": champion_version, "challenger_version": challenger_version}

    def row(section: str, champion_item: str, challenger_item: str, n: int, champion: float | None, challenger: float | None) -> dict:
        return {**base, "section": section, "champion_item": champion_item, "challenger_item": challenger_item, "rows": int(n),
                "champion_value": champion, "challenger_value": challenger}

    out = [
        row("summary", "rows_compared", "rows_compared", compared, None, 1.0 if compared else None),
        row("summary", "rows_flipped", "rows_flipped", flipped, None, flipped / compared if compared else None),
        row("summary", "rows_failed", "rows_failed", acc.rows_failed, None, acc.rows_failed / rows_scored if rows_scored else None),
    ]
    if not compared:
        return out
    p_mine = acc.champion_probability.reshape(d, d)
    p_theirs = acc.challenger_probability.reshape(d, d)
    for i, mine in enumerate(acc.decisions):
        for j, theirs in enumerate(acc.decisions):
            if rows[i, j]:
                out.append(row("crosstab", mine, theirs, rows[i, j], p_mine[i, j] / rows[i, j], p_theirs[i, j] / rows[i, j]))
    by_mine, by_theirs = rows.sum(axis=1), rows.sum(axis=0)
    for i, decision in enumerate(acc.decisions):
        out.append(row("decision_mix", decision, decision, compared, by_mine[i] / compared, by_theirs[i] / compared))
    for i, decision in enumerate(acc.decisions):
        out.append(row(
            "expected_event_rate", decision, decision, by_mine[i],
            p_mine[i].sum() / by_mine[i] if by_mine[i] else None, p_theirs[:, i].sum() / by_theirs[i] if by_theirs[i] else None,
        ))
    out.append(row("expected_event_rate", "all", "all", compared, p_mine.sum() / compared, p_theirs.sum() / compared))
    deltas = acc.score_deltas
    total = sum(deltas.values())
    mean = sum(v * n for v, n in deltas.items()) / total
    out.append(row("score_delta", "mean", "mean", total, None, mean))
    out.append(row("score_delta", "mean_abs", "mean_abs", total, None, sum(abs(v) * n for v, n in deltas.items()) / total))
    out += [row("score_delta", f"p{round(q * 100):02d}", f"p{round(q * 100):02d}", total, None, _quantile(deltas, q)) for q in _DELTA_QUANTILES]
    out += [row("score_delta_histogram", str(v), str(v), n, None, None) for v, n in sorted(deltas.items())]
    return out


def shadow_headline(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What `score run` prints of a run's comparison: the challenger, flipped rows and share, failures; None without one."""
    if not rows:
        return None
    summary = {r["champion_item"]: r for r in rows if r["section"] == "summary"}
    top = sorted((r for r in rows if r["section"] == "crosstab" and r["champion_item"] != r["challenger_item"]), key=lambda r: -r["rows"])
    return {
        "challenger_version": rows[0]["challenger_version"],
        "rows_compared": summary["rows_compared"]["rows"],
        "rows_flipped": summary["rows_flipped"]["rows"],
        "flipped_share": summary["rows_flipped"]["challenger_value"],
        "rows_failed": summary["rows_failed"]["rows"],
        "top_flips": [f"{r['champion_item']}→{r['challenger_item']}: {r['rows']}" for r in top[:3]]
        + ([f"{len(top) - 3} more transitions ({sum(r['rows'] for r in top[3:])} rows; table decision_flips)"] if len(top) > 3 else []),
    }
