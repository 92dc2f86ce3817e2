"""Drift of the model inputs and the score, computed streaming from mergeable per-chunk histograms.

Each feature is binned on fixed bins stored with the model, so a chunk's counts add up exactly to
the partition's, and the report needs memory for the bins only, whatever the partition size.
Nulls and NaN are counted apart. The bins depend on the feature's kind:

- numeric: the training reference's percentiles p1…p99 are the edges; values below the first and
  at or above the last fall in an underflow and an overflow bin. Values strictly above p99 are
  also counted apart, so `outside_p1_p99_share` (below p1 or above p99) does not count a value
  that sits exactly on p99 — on a count or a 0/1 feature, p99 is a common value, not an outlier;
- boolean and categorical: one bin per value the reference took (`edges` holds those values,
  ascending), then one bin for every other value (`unseen_share`), never put into a neighbour.

Metrics, per feature and baseline (the training reference, and the previous scored partition):
- PSI, numeric: on the reference's deciles (the fine bins summed into them); boolean and
  categorical: on the value bins and the unseen bin. Shares are floored at 1e-4 so an empty bin
  does not make it infinite — and a value the reference never had weighs heavily, as it should;
  ten bins keep the noise on a few thousand rows well below the warn level, where a hundred would not;
- KS: the largest CDF gap at the bin edges, a lower bound of the exact statistic; the exact value
  is at most that plus the largest bin share of either side. That bound is reported (`ks_upper`)
  only where it is within KS_BOUND_SHOWN_WITHIN of `ks`: with ~100 quantile bins it is tight to
  about a percent, but a feature whose values pile up in one bin gets a bracket like [0.02, 0.7]
  that spans every threshold and says nothing. Boolean: two ordered values, no value lies inside a
  bin, so KS on them is exact (`ks_upper` = `ks`: the change in the share of 1s). Categorical
  codes have no order, so KS is empty (null);
- Wasserstein-1 between the binned distributions (mass at bin midpoints, booleans at 0 and 1;
  scipy); empty for categorical, whose codes are not distances;
- Jensen–Shannon divergence (base 2, in 0..1; scipy) on the fine bins, unseen included.

KS and Wasserstein of a boolean are taken over the rows with a known value (the unseen bin left
out, the shares renormalised): an unseen value has no place on the 0–1 axis.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tasks.contracts import FeatureKind
from tasks.inference.registry import ReferenceStats

SCORE_EDGES = np.arange(0.5, 100.0, 1.0)
"""Integer scores 0..100 each get their own bin."""
SCORE_PSI_EDGES = np.arange(9.5, 90.0, 10.0)
"""PSI of the score on bands of ten points."""
SCORE_DRIFT_NAME = "score"
FORECAST_DRIFT_NAME = "forecast"
"""The drift tables' `feature` of a binary job's scores and of a forecast job's forecasts. The scores'
bins are fixed (SCORE_EDGES); the forecasts' are the reference forecasts' percentiles, stored with the
model (`ModelMetadata.forecast_reference`) as a numeric feature's are."""
KS_BOUND_SHOWN_WITHIN = 0.05
"""`ks_upper` is reported only when it is at most this far above `ks`: half the default `ks_warn`,
so the bracket can still tell a feature below the warn level from one above the alert level."""
_FLOOR = 1e-4
_REFERENCE_QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)


def drift_bin_counts(values: np.ndarray, edges: np.ndarray, kind: FeatureKind = "numeric") -> tuple[np.ndarray, int]:
    """Counts per bin and the number of missing values.

    Numeric: underflow, the bins between `edges`, overflow. Boolean / categorical: one bin per
    value in `edges` (ascending), then the values not among them.
    """
    values = np.asarray(values, dtype=np.float64)
    if kind == "numeric":
        # Every feature of every chunk passes here, against up to 99 percentile edges. The values sorted once
        # (NaN last) are cut at each edge by a binary search for the count below it: ~5x faster on a 50 k-row
        # chunk than a comparison pass over the values per edge, ~4x faster than a binary search per value.
        nulls = int(np.count_nonzero(np.isnan(values)))
        present = np.sort(values)[: values.size - nulls]
        below = np.searchsorted(present, edges, side="left")
        return np.diff(np.concatenate(([0], below, [present.size]))).astype(np.int64), nulls
    present = values[~np.isnan(values)]
    index = np.searchsorted(edges, present, side="left")
    known = index < len(edges)
    known[known] = edges[index[known]] == present[known]
    index = np.where(known, index, len(edges))
    return np.bincount(index, minlength=len(edges) + 1).astype(np.int64), int(values.size - present.size)


def reference_statistics(
    matrix: np.ndarray, names: tuple[str, ...], kinds: Mapping[str, FeatureKind] | None = None
) -> dict[str, ReferenceStats]:
    """Per-feature training distribution: moments, quantiles, a decile histogram and the drift bins.

    Numeric features get percentile edges; boolean and categorical ones (per `kinds`; unnamed
    features are numeric) one bin per value they took, the unseen bin empty by construction.
    """
    kinds = kinds or {}
    unknown = sorted(set(kinds) - set(names))
    if unknown:
        raise ValueError(f"kinds names features {unknown} that are not among the matrix's columns {list(names)}")
    stats: dict[str, ReferenceStats] = {}
    for j, name in enumerate(names):
        kind = kinds.get(name, "numeric")
        col = matrix[:, j].astype(np.float64)
        present = col[~np.isnan(col)]
        if present.size == 0:
            stats[name] = ReferenceStats(
                count=col.size, null_count=col.size, mean=None, std=None, min=None, max=None, kind=kind
            )
            continue
        qs = np.quantile(present, _REFERENCE_QUANTILES)
        edges = np.unique(np.quantile(present, np.linspace(0, 1, 11)))
        counts, _ = np.histogram(present, bins=edges) if edges.size > 1 else (np.array([present.size]), None)
        drift: dict[str, Any]
        if kind == "numeric":
            # Interior quantiles only: the training extremes would put one row in an edge bin of its own.
            percentiles = np.quantile(present, np.arange(1, 100) / 100)
            drift_edges, psi_edges = np.unique(percentiles), np.unique(percentiles[9::10])
            drift = {
                "drift_edges": drift_edges.tolist(),
                "drift_counts": drift_bin_counts(col, drift_edges)[0].tolist(),
                "psi_edges": psi_edges.tolist(),
            }
        else:
            categories = np.unique(present)
            drift = {
                "categories": categories.tolist(),
                "drift_counts": drift_bin_counts(col, categories, kind)[0].tolist(),
            }
        stats[name] = ReferenceStats(
            count=col.size,
            null_count=int(col.size - present.size),
            mean=float(present.mean()),
            std=float(present.std()),
            min=float(present.min()),
            max=float(present.max()),
            quantiles={f"p{int(q * 100):02d}": float(v) for q, v in zip(_REFERENCE_QUANTILES, qs, strict=True)},
            bin_edges=edges.tolist(),
            bin_counts=counts.tolist(),
            kind=kind,
            **drift,
        )
    return stats


@dataclass
class Histogram:
    edges: np.ndarray
    """Numeric: the bin edges. Boolean / categorical: the values that have a bin, ascending."""
    counts: np.ndarray
    nulls: int = 0
    psi_edges: np.ndarray | None = None
    """Coarser edges, each one of `edges`, that PSI is computed on; None: PSI on `edges`."""
    kind: FeatureKind = "numeric"
    above_last_edge: int = 0
    """Numeric: values strictly above the last edge (the overflow bin also holds those equal to it)."""

    @classmethod
    def of_reference(cls, stats: ReferenceStats) -> Histogram | None:
        """The training histogram stored in a feature's reference, or None if it has no drift bins."""
        if stats.kind == "numeric":
            if not stats.drift_edges:
                return None
            return cls(
                edges=np.asarray(stats.drift_edges, dtype=np.float64),
                counts=np.asarray(stats.drift_counts, dtype=np.int64),
                nulls=stats.null_count,
                psi_edges=np.asarray(stats.psi_edges, dtype=np.float64),
            )
        if not stats.categories:
            return None
        return cls(
            edges=np.asarray(stats.categories, dtype=np.float64),
            counts=np.asarray(stats.drift_counts, dtype=np.int64),
            nulls=stats.null_count,
            kind=stats.kind,
        )

    def same_bins(self, other: Histogram) -> bool:
        return self.kind == other.kind and np.array_equal(self.edges, other.edges)

    def psi_counts(self) -> np.ndarray:
        if self.psi_edges is None or self.kind != "numeric":
            return self.counts
        # Fine bin i starts at edges[i-1] (the underflow bin at -inf); it lies inside one coarse bin.
        starts = np.concatenate([[-np.inf], self.edges])
        return np.bincount(
            np.searchsorted(self.psi_edges, starts, side="right"),
            weights=self.counts,
            minlength=len(self.psi_edges) + 1,
        ).astype(np.int64)

    @property
    def total(self) -> int:
        return int(self.counts.sum()) + self.nulls

    def shares(self) -> np.ndarray:
        n = self.counts.sum()
        return self.counts / n if n else np.zeros_like(self.counts, dtype=np.float64)


@dataclass
class DriftAccumulator:
    """Per-feature histograms of one run, filled chunk by chunk."""

    edges: dict[str, np.ndarray]
    psi_edges: dict[str, np.ndarray] = field(default_factory=dict)
    kinds: dict[str, FeatureKind] = field(default_factory=dict)
    """Boolean / categorical features; every other one is numeric."""
    histograms: dict[str, Histogram] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, edges in self.edges.items():
            self.histograms[name] = Histogram(
                edges=edges,
                counts=np.zeros(len(edges) + 1, dtype=np.int64),
                psi_edges=self.psi_edges.get(name),
                kind=self.kinds.get(name, "numeric"),
            )

    def add(self, name: str, values: np.ndarray) -> None:
        hist = self.histograms[name]
        values = np.asarray(values, dtype=np.float64)
        counts, nulls = drift_bin_counts(values, hist.edges, hist.kind)
        hist.counts += counts
        hist.nulls += nulls
        if hist.kind == "numeric" and len(hist.edges):
            hist.above_last_edge += int(np.count_nonzero(values > hist.edges[-1]))

    def add_matrix(self, names: tuple[str, ...], matrix: np.ndarray) -> None:
        # One transposing copy, so each feature's pass reads contiguous float64 instead of a
        # strided float32 column converted per call.
        columns = np.ascontiguousarray(np.asarray(matrix).T, dtype=np.float64)
        for j, name in enumerate(names):
            if name in self.histograms:
                self.add(name, columns[j])

    def merge(self, other: DriftAccumulator) -> None:
        for name, hist in other.histograms.items():
            mine = self.histograms[name]
            if not mine.same_bins(hist):
                raise ValueError(f"cannot merge drift histograms of {name!r} built on different bin edges or kinds")
            mine.counts += hist.counts
            mine.nulls += hist.nulls
            mine.above_last_edge += hist.above_last_edge


UNSEEN_LABEL = "unseen"


def drift_bin_labels(hist: Histogram, names: tuple[str, ...] = ()) -> list[str]:
    """Names of a boolean or categorical histogram's bins: each category, then `unseen`; [] for numeric.

    `names` are the feature module's CATEGORIES (code 0, 1, … stands for names[0], names[1], …);
    a code without a name is shown as the value itself, a boolean's as `0 (false)` / `1 (true)`.
    """
    if hist.kind == "numeric":
        return []
    if hist.kind == "boolean":
        return [{0.0: "0 (false)", 1.0: "1 (true)"}.get(float(v), f"{v:g}") for v in hist.edges.tolist()] + [
            UNSEEN_LABEL
        ]
    labels = []
    for value in hist.edges.tolist():
        code = int(value) if float(value).is_integer() else -1
        labels.append(names[code] if 0 <= code < len(names) else f"{value:g}")
    return [*labels, UNSEEN_LABEL]


def _midpoints(edges: np.ndarray) -> np.ndarray:
    width = np.diff(edges).mean() if len(edges) > 1 else 1.0
    inner = (edges[:-1] + edges[1:]) / 2
    return np.concatenate([[edges[0] - width / 2], inner, [edges[-1] + width / 2]])


def _known_shares(hist: Histogram) -> np.ndarray:
    """Shares of the value bins among the rows with a value the reference had (unseen bin left out)."""
    known = hist.counts[:-1].astype(np.float64)
    return known / known.sum() if known.sum() else known


# Both measures compare two histograms on the same ascending support, where each has a closed form:
# scipy.stats' and scipy.spatial's general versions would add ~45 MB and ~1 s of imports to every run
# for two sums (tests/test_drift.py checks these against them).


def _jensen_shannon_bits(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence in bits (the square of scipy's base-2 distance)."""
    from scipy.special import rel_entr

    p, q = p / p.sum(), q / q.sum()
    m = (p + q) / 2.0
    return float((rel_entr(p, m).sum() + rel_entr(q, m).sum()) / np.log(2.0) / 2.0)


def _wasserstein_on_support(support: np.ndarray, u: np.ndarray, v: np.ndarray) -> float:
    """Wasserstein-1 between weights `u` and `v` on one ascending `support`: the area between the CDFs."""
    gaps = np.abs(np.cumsum(u)[:-1] / u.sum() - np.cumsum(v)[:-1] / v.sum())
    return float(gaps @ np.diff(support))


def drift_metrics(reference: Histogram, current: Histogram) -> dict[str, float | None]:
    """PSI, KS (with its upper bound), Wasserstein-1 and JS of `current` against `reference`.

    None where the metric does not apply to the kind (KS, Wasserstein of a categorical) or, for
    `ks_upper`, where the bound is too loose to inform (see KS_BOUND_SHOWN_WITHIN).
    """
    if not reference.same_bins(current):
        raise ValueError("drift metrics need both histograms on the same bins of the same kind")
    ref, cur = reference.shares(), current.shares()
    if ref.sum() == 0 or cur.sum() == 0:
        nan = float("nan")
        return {"psi": nan, "ks": nan, "ks_upper": nan, "wasserstein": nan, "js": nan}
    ref_psi, cur_psi = reference.psi_counts(), current.psi_counts()
    r, c = np.maximum(ref_psi / ref_psi.sum(), _FLOOR), np.maximum(cur_psi / cur_psi.sum(), _FLOOR)
    metrics: dict[str, float | None] = {
        "psi": float(np.sum((c - r) * np.log(c / r))),
        "js": _jensen_shannon_bits(ref, cur),
    }
    if current.kind == "categorical":
        return {**metrics, "ks": None, "ks_upper": None, "wasserstein": None}
    if current.kind == "boolean":
        ref_known, cur_known = _known_shares(reference), _known_shares(current)
        if ref_known.sum() == 0 or cur_known.sum() == 0:
            return {**metrics, "ks": None, "ks_upper": None, "wasserstein": None}
        ks = float(np.abs(np.cumsum(ref_known) - np.cumsum(cur_known))[:-1].max(initial=0.0))
        values = current.edges
        wasserstein = _wasserstein_on_support(values, ref_known + 1e-12, cur_known + 1e-12)
        return {**metrics, "ks": ks, "ks_upper": ks, "wasserstein": wasserstein}
    gaps = np.abs(np.cumsum(ref) - np.cumsum(cur))[:-1]
    ks = float(gaps.max()) if gaps.size else 0.0
    upper = min(1.0, ks + float(np.maximum(ref, cur).max()))
    mids = _midpoints(reference.edges)
    return {
        **metrics,
        "ks": ks,
        "ks_upper": upper if upper - ks <= KS_BOUND_SHOWN_WITHIN else None,
        "wasserstein": _wasserstein_on_support(mids, ref + 1e-12, cur + 1e-12),
    }


def drift_flag(
    metrics: Mapping[str, float | None], *, psi_warn: float, psi_alert: float, ks_warn: float, ks_alert: float
) -> str:
    """`alert` / `warn` / `ok` on PSI and (where the kind has one) KS; `no_data` without rows."""
    psi, ks = metrics["psi"], metrics["ks"]
    if psi is None or np.isnan(psi):
        return "no_data"
    ks = -1.0 if ks is None or np.isnan(ks) else ks
    if psi >= psi_alert or ks >= ks_alert:
        return "alert"
    if psi >= psi_warn or ks >= ks_warn:
        return "warn"
    return "ok"


def drift_report_rows(
    current: DriftAccumulator,
    baselines: dict[str, dict[str, Histogram]],
    thresholds: dict[str, float],
) -> list[dict[str, Any]]:
    """One row per (feature, baseline) that has a histogram on the same bins, most drifted first.

    `outside_p1_p99_share` is given for numeric features binned on their training percentiles
    (those with a training reference); `unseen_share` for boolean and categorical features.
    """
    training = baselines.get("reference", {})
    rows = []
    for name, hist in current.histograms.items():
        present = int(hist.counts.sum())
        outside = unseen = None
        if hist.kind == "numeric" and name in training and present:
            outside = float(hist.counts[0] + hist.above_last_edge) / present
        if hist.kind != "numeric" and present:
            unseen = float(hist.counts[-1]) / present
        for baseline, histograms in baselines.items():
            base = histograms.get(name)
            if base is None or not base.same_bins(hist):
                continue
            metrics = drift_metrics(base, hist)
            rows.append(
                {
                    "feature": name,
                    "kind": hist.kind,
                    "baseline": baseline,
                    **metrics,
                    "flag": drift_flag(metrics, **thresholds),
                    "rows": hist.total,
                    "null_share": hist.nulls / hist.total if hist.total else 0.0,
                    "baseline_null_share": base.nulls / base.total if base.total else 0.0,
                    "outside_p1_p99_share": outside,
                    "unseen_share": unseen,
                }
            )
    return sorted(rows, key=lambda r: (r["baseline"], -np.nan_to_num(r["psi"], nan=-1.0)))
