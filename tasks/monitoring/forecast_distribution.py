"""What a forecast job's run forecast, summed chunk by chunk: the forecast's and the interval width's
distribution in the target's unit, the mean forecast, interval and expected error, and the reason codes
given (up and down), for the run page and the key numbers.

A binary job's score has fixed bins (0..100); a forecast has no range known before the run, and units
scored in parallel must add up exactly. So each value is counted in a decimal bucket of four significant
digits, [k·10^j, (k+1)·10^j) with 1000 ≤ |k| < 10000 (a fixed grid over the real line, kept sparse): units
merge by adding counts, memory stays at the buckets the run touched (at most 9000 per decade of values),
and the page's bins, chosen once the run is complete, are whole buckets, so its counts are the rows' own
wherever its edges need no more than four significant digits (`exact` says whether they did).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tasks.prediction.reasons import FORECAST_DIRECTIONS

SIGNIFICANT_DIGITS = 4
_LOWEST_DECADE = -9
"""Values nearer 0 than 1e-9 share buckets 1e-12 wide: no forecast is read at that precision."""
_KEY_SPAN = 20_003
"""|k| ≤ 10 000 (and one more either side for a value rounded onto an edge), packed densely so a chunk's codes span
little more than its values' decades."""
_EXPONENT_OFFSET = 400
_FOLDED_EVERY = 16
DISPLAY_BINS = 30
"""About this many bins between the 0.5th and the 99.5th percentile, on a 1-2-5 step."""
DISPLAY_TAIL = 0.005
QUANTILES = (0.05, 0.5, 0.95)


_POWERS_OF_TEN = np.array([float(10**k) for k in range(23)])
"""10^0 … 10^22, every one exact in float64."""
_HIGHEST_DECADE = 22 + SIGNIFICANT_DIGITS - 1
"""Values of 1e26 and beyond are not bucketed: no forecast is that large unless the model is broken, and the
bucket's edges would no longer be exact."""


def _scale(exponents: np.ndarray) -> tuple[np.ndarray | float, np.ndarray | float]:
    """(times, over) with 10^j = times / over, both exact powers of ten, so k * times / over is k·10^j correctly
    rounded: one of the two is 1 and exact, where k * 10.0**j would round twice (105 * 0.1 is 10.500000000000002,
    105 / 10 is 10.5)."""
    exponents = np.asarray(exponents, dtype=np.int64)
    if exponents.size and exponents.max() < 0:
        return 1.0, _POWERS_OF_TEN[-exponents]
    if exponents.size and exponents.min() >= 0:
        return _POWERS_OF_TEN[exponents], 1.0
    return _POWERS_OF_TEN[np.maximum(exponents, 0)], _POWERS_OF_TEN[np.maximum(-exponents, 0)]


def _scaled(keys: np.ndarray, exponents: np.ndarray) -> np.ndarray:
    """k·10^j, correctly rounded."""
    times, over = _scale(exponents)
    return np.asarray(keys, dtype=np.float64) * times / over


def decimal_buckets(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's bucket as (k, j): the value lies in [k·10^j, (k+1)·10^j), the width four significant digits
    of the value's own magnitude. Only finite values below 1e26 in magnitude (`bucketed`) may be given."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(divide="ignore"):
        magnitude = np.log10(np.abs(values))
    # A bucket reaches up from its lower edge: a negative value's is the decade of the bucket's far end, so that
    # -10 falls in [-10, -9.999) beside -9.9999, not in an overlapping [-10, -9.99).
    decade = (
        np.floor(magnitude)
        if not values.size or values.min() >= 0
        else np.where(values < 0, np.ceil(magnitude) - 1, np.floor(magnitude))
    )
    exponents = np.maximum(decade, _LOWEST_DECADE).astype(np.int64) - (SIGNIFICANT_DIGITS - 1)
    times, over = _scale(exponents)
    keys = np.floor(values / times * over).astype(np.int64)
    # The division rounds once, so a value on (or a hair off) an edge can land one bucket off: compare with
    # the correctly rounded edges, the same floats the page's bins and np.histogram use.
    keys -= keys * times / over > values
    keys += (keys + 1) * times / over <= values
    return keys, exponents


def bucketed(values: np.ndarray) -> np.ndarray:
    """The values a bucket can hold: finite and below 1e26 in magnitude."""
    values = np.asarray(values, dtype=np.float64)
    return values[np.abs(values) < 10.0**_HIGHEST_DECADE]


def _codes(keys: np.ndarray, exponents: np.ndarray) -> np.ndarray:
    return (exponents + _EXPONENT_OFFSET) * _KEY_SPAN + (keys + _KEY_SPAN // 2)


def _decoded(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    codes = np.asarray(codes, dtype=np.int64)
    return codes % _KEY_SPAN - _KEY_SPAN // 2, codes // _KEY_SPAN - _EXPONENT_OFFSET


@dataclass
class BucketCounts:
    """Rows per decimal bucket (`decimal_buckets`), sparse: the codes of the buckets touched, ascending, and their rows.
    A chunk's counts wait in `pending` and are folded in every few chunks, so adding one costs no sort of them all."""

    codes: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    rows: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    pending: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    def add(self, values: np.ndarray) -> None:
        values = bucketed(values)
        if not values.size:
            return
        codes = _codes(*decimal_buckets(values))
        low = int(codes.min())
        # Counting by offset is linear where np.unique sorts; a chunk whose values span many decades sorts.
        if int(codes.max()) - low <= 16 * codes.size:
            rows = np.bincount(codes - low)
            present = np.flatnonzero(rows)
            self.pending.append((present + low, rows[present]))
        else:
            self.pending.append(np.unique(codes, return_counts=True))
        if len(self.pending) >= _FOLDED_EVERY:
            self._fold()

    def _fold(self) -> None:
        if not self.pending:
            return
        codes = np.concatenate([self.codes, *(c for c, _ in self.pending)])
        rows = np.concatenate([self.rows, *(r for _, r in self.pending)])
        self.codes, inverse = np.unique(codes, return_inverse=True)
        self.rows = np.bincount(inverse, weights=rows, minlength=self.codes.size).astype(np.int64)
        self.pending = []

    def merge(self, other: BucketCounts) -> None:
        self.pending += [(other.codes, other.rows), *other.pending]
        self._fold()

    def bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each bucket's lower and upper edge and its rows, ascending."""
        self._fold()
        keys, exponents = _decoded(self.codes)
        rows = self.rows
        low, high = _scaled(keys, exponents), _scaled(keys + 1, exponents)
        order = np.argsort(low, kind="stable")
        return low[order], high[order], rows[order]

    def quantile_range(self, q: float) -> tuple[float, float]:
        """The bucket holding the q-quantile (the lowest value with at least q of the rows at or below it)."""
        low, high, rows = self.bounds()
        if not rows.size:
            return math.nan, math.nan
        i = int(np.searchsorted(np.cumsum(rows), q * rows.sum(), side="left"))
        i = min(i, rows.size - 1)
        return float(low[i]), float(high[i])


def _nice_step(span: float, bins: int) -> tuple[int, int]:
    """A step m·10^j (m in 1, 2, 5) that cuts `span` into about `bins` bins, as (m, j)."""
    raw = span / bins if span > 0 else 1.0
    decade = math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * 10.0**decade >= raw:
            return (1, decade + 1) if m == 10 else (m, decade)
    return 1, decade + 1


def display_histogram(buckets: BucketCounts, *, bins: int = DISPLAY_BINS, tail: float = DISPLAY_TAIL) -> dict[str, Any]:
    """The page's histogram: `edges` on a 1-2-5 step over the central 1 − 2·tail of the rows, `counts` per bin with
    an underflow bin first and an overflow bin last (len(edges) + 1, as np.searchsorted(edges, v, 'right') counts),
    and `exact`: whether every bucket fell wholly inside one bin (else a bucket straddling an edge counts in the bin
    of its lower edge, off by less than one part in a thousand of the value)."""
    low, high, rows = buckets.bounds()
    if not rows.size:
        return {"edges": [], "counts": [], "exact": True}
    first, _ = buckets.quantile_range(tail)
    _, last = buckets.quantile_range(1.0 - tail)
    m, j = _nice_step(last - first, bins)
    step = _scaled(np.array([m]), np.array([j]))[0]
    start, stop = math.floor(first / step), math.ceil(last / step)
    if stop <= start:
        stop = start + 1
    multiples = np.arange(start, stop + 1, dtype=np.int64) * m
    edges = _scaled(multiples, np.full(multiples.shape, j))
    index = np.searchsorted(edges, low, side="right")
    counts = np.bincount(index, weights=rows, minlength=edges.size + 1).astype(np.int64)
    exact = bool(np.array_equal(index, np.searchsorted(edges, high, side="left")))
    return {"edges": edges.tolist(), "counts": counts.tolist(), "exact": exact}


_SUMMED = ("forecast", "forecast_low", "forecast_high", "expected_error")


@dataclass
class ForecastDistribution:
    """A forecast job's outputs summed over chunks: rows, sums of the forecast, its interval and expected error,
    the buckets of the forecast and of the interval width, and the rows given each reason code."""

    rows: int = 0
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys((*_SUMMED, "width"), 0.0))
    forecast: BucketCounts = field(default_factory=BucketCounts)
    width: BucketCounts = field(default_factory=BucketCounts)
    reason_codes: Counter[str] = field(default_factory=Counter)

    def add(self, table: pa.Table) -> None:
        """Count one chunk of the forecast contract (tasks/catalog.py FORECASTS)."""
        column = {name: table.column(name).to_numpy() for name in _SUMMED}
        width = column["forecast_high"] - column["forecast_low"]
        self.rows += table.num_rows
        for name, values in (*column.items(), ("width", width)):
            # A width is +inf where the hold-out was too small for the level: the mean width is then +inf too, as it is.
            self.sums[name] += float(values.sum())
        self.forecast.add(column["forecast"])
        self.width.add(width)
        self.reason_codes.update(reason_code_counts(table.column("reason_codes")))

    def merge(self, other: ForecastDistribution) -> None:
        self.rows += other.rows
        for name, value in other.sums.items():
            self.sums[name] += value
        self.forecast.merge(other.forecast)
        self.width.merge(other.width)
        self.reason_codes.update(other.reason_codes)


_SYMBOLS = {"lt": "<", "le": "≤", "gt": ">", "ge": "≥"}


def rule_condition_text(when: Mapping[str, Mapping[str, float]], classes: Sequence[str] = ()) -> str:
    """A rule's `when` as people read it (`forecast_high ≥ 12 and forecast < 40`, a multiclass job's
    `class in {bearing, leak} and probability ≥ 0.5`); `always` for the catch-all."""
    named = [f"class = {classes[0]}" if len(classes) == 1 else f"class in {{{', '.join(classes)}}}"] if classes else []
    parts = [f"{name} {_SYMBOLS[op]} {threshold:g}" for name, ops in when.items() for op, threshold in ops.items()]
    return " and ".join(named + parts) or "always"


def reason_code_counts(codes: pa.ChunkedArray | pa.Array) -> dict[str, int]:
    """Rows given each reason code, from a chunk's `reason_codes` list column (a row names a code once)."""
    flat = pc.list_flatten(codes)
    if not len(flat):
        return {}
    counted = pc.value_counts(flat)
    return dict(zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True))


def reason_code_text(code: str, texts: Mapping[str, str]) -> str:
    """`PRICE_UP` → "Price raised the forecast", from the spec's code → default text; the code itself when unknown."""
    for suffix, words in FORECAST_DIRECTIONS:
        if code.endswith(suffix) and code[: -len(suffix)] in texts:
            return f"{texts[code[: -len(suffix)]]} {words}"
    return code


def forecast_run_summary(
    distribution: ForecastDistribution,
    *,
    target: Mapping[str, str],
    level: float,
    rules: Sequence[Mapping[str, Any]],
    rule_rows: Mapping[str, int],
    reason_texts: Mapping[str, str],
) -> dict[str, Any]:
    """What the run page and the key numbers show of a forecast job's run: the target, the means, quantile buckets
    and display histograms of the forecast and the interval width, the rows per rule and the reason codes given.
    `rules` are the spec's rules as dicts (id, decision, when), `rule_rows` the rows each rule decided, `reason_texts`
    the spec's reason code → default text."""
    rows = distribution.rows

    def mean(name: str) -> float | None:
        return distribution.sums[name] / rows if rows else None

    def quantiles(buckets: BucketCounts) -> dict[str, list[float]]:
        return {f"p{round(q * 100):02d}": list(buckets.quantile_range(q)) for q in QUANTILES}

    codes = sorted(distribution.reason_codes.items(), key=lambda item: (-item[1], item[0]))
    return {
        "kind": target["kind"],
        "name": target["name"],
        "unit": target["unit"],
        "level": level,
        "rows": rows,
        "forecast_mean": mean("forecast"),
        "forecast_low_mean": mean("forecast_low"),
        "forecast_high_mean": mean("forecast_high"),
        "width_mean": mean("width"),
        "expected_error_mean": mean("expected_error"),
        "forecast_quantiles": quantiles(distribution.forecast),
        "width_quantiles": quantiles(distribution.width),
        "histograms": {
            "forecast": display_histogram(distribution.forecast),
            "interval_width": display_histogram(distribution.width),
        },
        "rules": [
            {
                "rule_id": r["id"],
                "decision": r["decision"],
                "condition": rule_condition_text(r.get("when") or {}),
                "rows": int(rule_rows.get(r["id"], 0)),
            }
            for r in rules
        ],
        "reason_codes": [
            {"code": code, "text": reason_code_text(code, reason_texts), "rows": int(n)} for code, n in codes
        ],
    }
