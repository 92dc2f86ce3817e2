"""Slices: the decision mix, the expected event rate and the score distribution of each value of the
columns named in `monitoring.slices`, each tested against the same slice in the trailing window.

Each chunk's rows are counted per (slice column, value, decision, score band) with the sum of their
probabilities and of its square (`slice_counts`), so units and partitions add up exactly. Per slice
value three measures are tested, each with a p-value:

- `decision_mix`: the largest change of a decision's share; chi-square test of homogeneity of the
  decision counts, this partition against the window;
- `expected_event_rate`: the change of the mean calibrated probability; Welch's z-test from the sums;
- `score_psi`: PSI of the ten-point score bands; chi-square test of homogeneity of the band counts.

The false discovery rate is controlled across every slice value × measure of the partition
(Benjamini–Hochberg, the adjusted p-values of `scipy.stats.false_discovery_control`): a measure is flagged `shift` when its
adjusted p-value (`q_value`) is at most `monitoring.slice_fdr`. Values the window never had are
`no_baseline`; the values beyond the `monitoring.slice_max_values` most frequent of a column are
pooled into `(other)` so a high-cardinality column cannot flood the table.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa

from tasks.catalog import SLICE_COUNTS, SLICE_MONITORING

if TYPE_CHECKING:
    from tasks.jobspec import JobSpec
    from tasks.sinks.warehouse import Warehouse

OTHER = "(other)"
NULL_VALUE = "(null)"
SCORE_BANDS = 10
COUNT_COLUMNS = ("rows", "probability_sum", "probability_sq_sum")
SLICE_KEYS = ("slice_column", "slice_value", "decision", "score_band")
_FLOOR = 1e-4
SLICE_COUNT_SCHEMA = {
    "slice_column": pl.String,
    "slice_value": pl.String,
    "decision": pl.String,
    "score_band": pl.Int16,
    "rows": pl.Int64,
    "probability_sum": pl.Float64,
    "probability_sq_sum": pl.Float64,
}


def chunk_slice_counts(
    slices: pl.DataFrame, probability: np.ndarray, rule_index: np.ndarray, rule_decisions: np.ndarray, score: np.ndarray
) -> pl.DataFrame:
    """One chunk counted per (slice column, value, decision, score band); `slices` holds the slice
    columns, `rule_index` each row's position in the rule table, `rule_decisions` each rule's decision."""
    if not slices.width:
        return pl.DataFrame(schema=SLICE_COUNT_SCHEMA)
    band = np.minimum(np.asarray(score, dtype=np.int64) // 10, SCORE_BANDS - 1)
    # Rule and band in one small integer, so each column's count is one group-by on (value, key).
    base = pl.DataFrame(
        {
            "key": (np.asarray(rule_index, dtype=np.int32) * SCORE_BANDS + band).astype(np.int32),
            "p": np.asarray(probability, dtype=np.float64),
        }
    )
    parts = []
    for column in slices.columns:
        grouped = (
            base.with_columns(slices[column].cast(pl.String).fill_null(NULL_VALUE).alias("slice_value"))
            .lazy()
            .group_by("slice_value", "key")
            .agg(
                pl.len().cast(pl.Int64).alias("rows"),
                pl.col("p").sum().alias("probability_sum"),
                (pl.col("p") * pl.col("p")).sum().alias("probability_sq_sum"),
            )
            .collect()
        )
        key = grouped["key"].to_numpy()
        parts.append(
            grouped.select(
                pl.lit(column).alias("slice_column"),
                "slice_value",
                pl.Series("decision", rule_decisions[key // SCORE_BANDS], dtype=pl.String),
                pl.Series("score_band", (key % SCORE_BANDS).astype(np.int16)),
                *COUNT_COLUMNS,
            )
        )
    # Rows of two rules of one decision stay apart here; `merged_slice_counts` adds them up once per run.
    # Copied out of the chunk's buffers (see decisions.prediction_groups): a run keeps every chunk's counts.
    return pl.from_arrow(pl.concat(parts).to_arrow())


def slice_counts_frame(rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    """`merged_slice_counts` rows (as `ScoringSummary.slice_counts` holds them) in their schema."""
    return pl.DataFrame(list(rows), schema=SLICE_COUNT_SCHEMA)


def summed_slice_counts(parts: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """Chunks' counts added up per (column, value, decision, band), nothing pooled: a unit folds its
    chunks' counts together as it goes, so they take the room of its distinct keys, not of its chunks."""
    frames = [p for p in parts if p.height]
    if not frames:
        return pl.DataFrame(schema=SLICE_COUNT_SCHEMA)
    return pl.concat(frames).group_by(*SLICE_KEYS).agg(pl.col(c).sum() for c in COUNT_COLUMNS)


def merged_slice_counts(parts: Sequence[pl.DataFrame], *, max_values: int) -> pl.DataFrame:
    """Chunks' counts added up; per column the values beyond the `max_values` most frequent pooled as `(other)`."""
    merged = summed_slice_counts(parts)
    if not merged.height:
        return merged
    totals = merged.group_by("slice_column", "slice_value").agg(pl.col("rows").sum().alias("total"))
    kept = (
        totals.sort(["total", "slice_value"], descending=[True, False])
        .group_by("slice_column", maintain_order=True)
        .head(max_values)
    )
    pooled = merged.join(
        kept.select("slice_column", "slice_value", pl.lit(True).alias("kept")),
        on=["slice_column", "slice_value"],
        how="left",
    )
    pooled = pooled.with_columns(
        pl.when(pl.col("kept")).then(pl.col("slice_value")).otherwise(pl.lit(OTHER)).alias("slice_value")
    )
    return (
        pooled.group_by(*SLICE_KEYS)
        .agg(pl.col(c).sum() for c in COUNT_COLUMNS)
        .sort(*SLICE_KEYS)
        .cast(SLICE_COUNT_SCHEMA)
    )


def _chi2_homogeneity(a: np.ndarray, b: np.ndarray) -> float:
    """p-value of the chi-square test that counts `a` and `b` over the same categories come from one distribution."""
    # scipy.special, not scipy.stats: the run path already loads the former; the latter costs ~0.7 s to import.
    from scipy.special import chdtrc

    keep = (a + b) > 0
    a, b = a[keep].astype(np.float64), b[keep].astype(np.float64)
    if a.size < 2 or a.sum() == 0 or b.sum() == 0:
        return float("nan")
    table = np.vstack([a, b])
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    statistic = float(((table - expected) ** 2 / expected).sum())
    return float(chdtrc(a.size - 1, statistic))


def _welch_p(n1: float, s1: float, q1: float, n2: float, s2: float, q2: float) -> tuple[float, float]:
    """(difference of means, two-sided p-value) from counts, sums and sums of squares."""
    from scipy.special import ndtr

    if n1 < 2 or n2 < 2:
        return float("nan"), float("nan")
    m1, m2 = s1 / n1, s2 / n2
    v1, v2 = max(q1 / n1 - m1 * m1, 0.0) * n1 / (n1 - 1), max(q2 / n2 - m2 * m2, 0.0) * n2 / (n2 - 1)
    se = math.sqrt(v1 / n1 + v2 / n2)
    if se == 0:
        return m1 - m2, (1.0 if m1 == m2 else 0.0)
    return m1 - m2, float(2.0 * ndtr(-abs(m1 - m2) / se))


def _psi(a: np.ndarray, b: np.ndarray) -> float:
    if a.sum() == 0 or b.sum() == 0:
        return float("nan")
    c, r = np.maximum(a / a.sum(), _FLOOR), np.maximum(b / b.sum(), _FLOOR)
    return float(np.sum((c - r) * np.log(c / r)))


def slice_monitoring_rows(
    current: pl.DataFrame, baseline: pl.DataFrame, *, decisions: Sequence[str], fdr: float
) -> list[dict[str, Any]]:
    """Per slice value and measure: value, baseline, p-value, Benjamini–Hochberg q-value and flag.

    `current` holds the partition's `slice_counts`, `baseline` the window's (summed over its partitions).
    """
    decision_order = list(dict.fromkeys([*decisions, *current["decision"].unique().sort().to_list()]))
    rows: list[dict[str, Any]] = []
    for (column, value), frame in sorted(current.group_by("slice_column", "slice_value"), key=lambda kv: kv[0]):
        base = baseline.filter((pl.col("slice_column") == column) & (pl.col("slice_value") == value))
        n, s, q = (float(frame[c].sum()) for c in COUNT_COLUMNS)
        bn, bs, bq = (float(base[c].sum()) for c in COUNT_COLUMNS) if base.height else (0.0, 0.0, 0.0)
        key = {"slice_column": column, "slice_value": value, "rows": int(n), "baseline_rows": int(bn)}

        def by(frame: pl.DataFrame, name: str, order: list[Any]) -> np.ndarray:
            counts = dict(frame.group_by(name).agg(pl.col("rows").sum()).iter_rows())
            return np.array([counts.get(k, 0) for k in order], dtype=np.float64)

        mix, base_mix = by(frame, "decision", decision_order), by(base, "decision", decision_order)
        bands, base_bands = (
            by(frame, "score_band", list(range(SCORE_BANDS))),
            by(base, "score_band", list(range(SCORE_BANDS))),
        )
        if bn:
            shares = mix / n - base_mix / bn
            largest = int(np.argmax(np.abs(shares)))
            difference, rate_p = _welch_p(n, s, q, bn, bs, bq)
            measured = [
                ("decision_mix", float(shares[largest]), decision_order[largest], _chi2_homogeneity(mix, base_mix)),
                ("expected_event_rate", s / n, None, rate_p),
                ("score_psi", _psi(bands, base_bands), None, _chi2_homogeneity(bands, base_bands)),
            ]
            baselines = {"decision_mix": 0.0, "expected_event_rate": bs / bn, "score_psi": 0.0}
            for measure, value_, detail, p in measured:
                rows.append(
                    {
                        **key,
                        "measure": measure,
                        "value": value_,
                        "baseline": baselines[measure],
                        "detail": detail,
                        "p_value": p,
                    }
                )
        else:
            for measure, value_ in (
                ("decision_mix", float("nan")),
                ("expected_event_rate", s / n if n else float("nan")),
                ("score_psi", float("nan")),
            ):
                rows.append(
                    {
                        **key,
                        "measure": measure,
                        "value": value_,
                        "baseline": None,
                        "detail": None,
                        "p_value": float("nan"),
                    }
                )
    tested = [i for i, r in enumerate(rows) if not math.isnan(r["p_value"])]
    q_values = _bh(np.array([rows[i]["p_value"] for i in tested]))
    for r in rows:
        r["q_value"] = None
        r["flag"] = "no_baseline" if r["baseline"] is None else "no_data"
    for i, q in zip(tested, q_values, strict=True):
        rows[i]["q_value"] = float(q)
        rows[i]["flag"] = "shift" if q <= fdr else "ok"
    return rows


def _bh(p_values: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (as `scipy.stats.false_discovery_control(p, method="bh")`,
    which tests/test_model_health.py checks them against; scipy.stats would add ~0.7 s to every run)."""
    m = p_values.size
    if not m:
        return p_values
    order = np.argsort(p_values)
    scaled = p_values[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    out = np.empty(m)
    out[order] = adjusted
    return out


def monitored_slices(
    warehouse: Warehouse, spec: JobSpec, *, partition_date: dt.date, run_id: str, counts: pl.DataFrame | None
) -> dict[str, pa.Table]:
    """The partition's `slice_counts` (the run's own, or those stored when monitoring again) tested
    against the trailing window's: both tables' rows for the partition, to be replaced together."""
    key = {"job": spec.name, "partition_date": partition_date}
    window = spec.monitoring.window_days
    if counts is None:
        stored = pl.from_arrow(
            warehouse.monitoring_rows(
                SLICE_COUNTS.table, job=spec.name, first_date=partition_date, last_date=partition_date
            )
        )
        counts = stored.filter(pl.col("run_id") == run_id).select(*SLICE_KEYS, *COUNT_COLUMNS).cast(SLICE_COUNT_SCHEMA)
    history = pl.from_arrow(
        warehouse.monitoring_rows(
            SLICE_COUNTS.table,
            job=spec.name,
            first_date=partition_date - dt.timedelta(days=window),
            last_date=partition_date - dt.timedelta(days=1),
        )
    )
    baseline = (
        history.group_by(*SLICE_KEYS).agg(pl.col(c).sum() for c in COUNT_COLUMNS)
        if history.height
        else pl.DataFrame(schema=SLICE_COUNT_SCHEMA)
    )
    rows = slice_monitoring_rows(
        counts,
        baseline,
        decisions=list(dict.fromkeys(r.decision for r in spec.prediction.rules)),
        fdr=spec.monitoring.slice_fdr,
    )
    stored_counts = counts.select(
        pl.lit(spec.name).alias("job"),
        pl.lit(partition_date).alias("partition_date"),
        pl.lit(run_id).alias("run_id"),
        pl.all(),
    )
    return {
        SLICE_COUNTS.table: stored_counts.select(SLICE_COUNTS.schema.names).to_arrow().cast(SLICE_COUNTS.schema),
        SLICE_MONITORING.table: pa.Table.from_pylist(
            [{**key, "run_id": run_id, **r} for r in rows], schema=SLICE_MONITORING.schema
        ),
    }
