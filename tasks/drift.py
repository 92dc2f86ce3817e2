"""Drift of the model inputs and the score, computed streaming from mergeable per-chunk histograms.

Each feature is binned on fixed edges — the training reference's quantile edges, stored with the
model — so a chunk's counts add up exactly to the partition's, and the report needs memory for
the bins only, whatever the partition size. Values below the first edge and at or above the last
fall in an underflow and an overflow bin; nulls and NaN are counted apart.

Metrics, per feature and baseline (the training reference, and the previous scored partition):
- PSI on the reference's deciles (the fine bins summed into them; shares floored at 1e-4 so an
  empty bin does not make it infinite) — ten bins keep its noise on a few thousand rows well
  below the warn level, where a hundred would not;
- KS: the largest CDF gap at the bin edges, a lower bound of the exact statistic; the exact value
  is at most that plus the largest bin share of either side (`ks_upper`), so with ~100 quantile
  bins of the reference the bound is tight to about a percent;
- Wasserstein-1 between the binned distributions (mass at bin midpoints; scipy);
- Jensen–Shannon divergence (base 2, in 0..1; scipy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.spatial.distance import jensenshannon
from scipy.stats import wasserstein_distance

SCORE_EDGES = np.arange(0.5, 100.0, 1.0)
"""Integer scores 0..100 each get their own bin."""
SCORE_PSI_EDGES = np.arange(9.5, 90.0, 10.0)
"""PSI of the score on bands of ten points."""
_FLOOR = 1e-4


def drift_bin_counts(values: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, int]:
    """Counts per bin (underflow, the bins between edges, overflow) and the number of missing values."""
    values = np.asarray(values, dtype=np.float64)
    present = values[~np.isnan(values)]
    index = np.searchsorted(edges, present, side="right")
    return np.bincount(index, minlength=len(edges) + 1).astype(np.int64), int(values.size - present.size)


@dataclass
class Histogram:
    edges: np.ndarray
    counts: np.ndarray
    nulls: int = 0
    psi_edges: np.ndarray | None = None
    """Coarser edges, each one of `edges`, that PSI is computed on; None: PSI on `edges`."""

    def psi_counts(self) -> np.ndarray:
        if self.psi_edges is None:
            return self.counts
        # Fine bin i starts at edges[i-1] (the underflow bin at -inf); it lies inside one coarse bin.
        starts = np.concatenate([[-np.inf], self.edges])
        return np.bincount(np.searchsorted(self.psi_edges, starts, side="right"), weights=self.counts,
                           minlength=len(self.psi_edges) + 1).astype(np.int64)

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
    histograms: dict[str, Histogram] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, edges in self.edges.items():
            self.histograms[name] = Histogram(
                edges=edges, counts=np.zeros(len(edges) + 1, dtype=np.int64), psi_edges=self.psi_edges.get(name)
            )

    def add(self, name: str, values: np.ndarray) -> None:
        hist = self.histograms[name]
        counts, nulls = drift_bin_counts(values, hist.edges)
        hist.counts += counts
        hist.nulls += nulls

    def add_matrix(self, names: tuple[str, ...], matrix: np.ndarray) -> None:
        for j, name in enumerate(names):
            if name in self.histograms:
                self.add(name, matrix[:, j])

    def merge(self, other: DriftAccumulator) -> None:
        for name, hist in other.histograms.items():
            mine = self.histograms[name]
            if not np.array_equal(mine.edges, hist.edges):
                raise ValueError(f"cannot merge drift histograms of {name!r} built on different bin edges")
            mine.counts += hist.counts
            mine.nulls += hist.nulls


def _midpoints(edges: np.ndarray) -> np.ndarray:
    width = np.diff(edges).mean() if len(edges) > 1 else 1.0
    inner = (edges[:-1] + edges[1:]) / 2
    return np.concatenate([[edges[0] - width / 2], inner, [edges[-1] + width / 2]])


def drift_metrics(reference: Histogram, current: Histogram) -> dict[str, float]:
    """PSI, KS (with its upper bound), Wasserstein-1 and JS of `current` against `reference`."""
    if not np.array_equal(reference.edges, current.edges):
        raise ValueError("drift metrics need both histograms on the same bin edges")
    ref, cur = reference.shares(), current.shares()
    if ref.sum() == 0 or cur.sum() == 0:
        nan = float("nan")
        return {"psi": nan, "ks": nan, "ks_upper": nan, "wasserstein": nan, "js": nan}
    ref_psi, cur_psi = reference.psi_counts(), current.psi_counts()
    r, c = np.maximum(ref_psi / ref_psi.sum(), _FLOOR), np.maximum(cur_psi / cur_psi.sum(), _FLOOR)
    gaps = np.abs(np.cumsum(ref) - np.cumsum(cur))[:-1]
    ks = float(gaps.max()) if gaps.size else 0.0
    mids = _midpoints(reference.edges)
    return {
        "psi": float(np.sum((c - r) * np.log(c / r))),
        "ks": ks,
        "ks_upper": min(1.0, ks + float(np.maximum(ref, cur).max())),
        "wasserstein": float(wasserstein_distance(mids, mids, u_weights=ref + 1e-12, v_weights=cur + 1e-12)),
        "js": float(jensenshannon(ref, cur, base=2) ** 2),
    }


def drift_flag(metrics: dict[str, float], *, psi_warn: float, psi_alert: float, ks_warn: float, ks_alert: float) -> str:
    psi, ks = metrics["psi"], metrics["ks"]
    if np.isnan(psi):
        return "no_data"
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
    """One row per (feature, baseline) that has a histogram on the same edges, most drifted first."""
    rows = []
    for name, hist in current.histograms.items():
        for baseline, histograms in baselines.items():
            base = histograms.get(name)
            if base is None or not np.array_equal(base.edges, hist.edges):
                continue
            metrics = drift_metrics(base, hist)
            shares = hist.shares()
            rows.append({
                "feature": name, "baseline": baseline, **metrics,
                "flag": drift_flag(metrics, **thresholds),
                "rows": hist.total, "null_share": hist.nulls / hist.total if hist.total else 0.0,
                "baseline_null_share": base.nulls / base.total if base.total else 0.0,
                "out_of_range_share": float(shares[0] + shares[-1]),
            })
    return sorted(rows, key=lambda r: (r["baseline"], -np.nan_to_num(r["psi"], nan=-1.0)))


# SHIM
def reference_statistics(matrix, names, kinds=None) :
    """Per-feature training distribution: moments, quantiles and a decile histogram."""
    stats: dict[str, ReferenceStats] = {}
    for j, name in enumerate(names):
        col = matrix[:, j].astype(np.float64)
        present = col[~np.isnan(col)]
        if present.size == 0:
            stats[name] = __import__('tasks.inference.registry', fromlist=['x']).ReferenceStats(count=col.size, null_count=col.size, mean=None, std=None, min=None, max=None)
            continue
        qs = np.quantile(present, [0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99])
        edges = np.unique(np.quantile(present, np.linspace(0, 1, 11)))
        counts, _ = np.histogram(present, bins=edges) if edges.size > 1 else (np.array([present.size]), None)
        # Interior quantiles only: the training extremes would put one row in an edge bin of its own.
        percentiles = np.quantile(present, np.arange(1, 100) / 100)
        drift_edges, psi_edges = np.unique(percentiles), np.unique(percentiles[9::10])
        stats[name] = __import__('tasks.inference.registry', fromlist=['x']).ReferenceStats(
            count=col.size,
            null_count=int(col.size - present.size),
            mean=float(present.mean()),
            std=float(present.std()),
            min=float(present.min()),
            max=float(present.max()),
            quantiles={f"p{int(q * 100):02d}": float(v) for q, v in zip([0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99], qs)},
            bin_edges=edges.tolist(),
            bin_counts=counts.tolist(),
            drift_edges=drift_edges.tolist(),
            drift_counts=drift_bin_counts(col, drift_edges)[0].tolist(),
            psi_edges=psi_edges.tolist(),
        )
    return stats
