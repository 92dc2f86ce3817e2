"""Model health the morning after, before any label: estimated performance, attribution drift and
multivariate drift of one partition, from sums accumulated chunk by chunk inside the scoring pass.

Every accumulator holds sums only, so a unit's (or a Dask worker's) adds up to the partition's exactly
whatever the order, and memory stays flat whatever the partition size.

**Estimated performance** (confidence-based, from the calibrated probabilities p with their interval
[p_low, p_high]). For a group of n rows (a decision, a rule, every row) the expected event rate is
Σp/n. Its interval adds two uncertainties: the calibrator's (every row's bound moves together, so
the bounds add: Σp_low/n … Σp_high/n) and the draw of the outcomes (the realized count of events is
Poisson-binomial with variance Σp(1−p)): [Σp_low/n − z·√Σp(1−p)/n, Σp_high/n + z·√Σp(1−p)/n].
The expected precision of an action decision is its expected event rate; its expected recall is
Σp over its rows / Σp over all rows (bounds from p_low inside / p_high outside and the reverse, widened
by the delta method's sampling error). The expected AUC comes from histograms of the probability on
fine logit bins weighted by p (expected events) and 1 − p (expected non-events):
Σ_b P_b·(N_below b + N_b/2) / (ΣP·ΣN); its interval spans the AUCs weighted by p_low and p_high,
widened by Hanley and McNeil's standard error for ΣP events and ΣN non-events, and by the same
estimator's error on the hold-out at registration (|realized − expected| plus z times its standard
error): how well the calibrated probabilities keep the spread of the risk is what the AUC leans on.

**Estimated error** (forecast jobs; direct loss estimation, as NannyML's DLE). The error model gives
each row σ̂, its expected |actual − forecast| (never below the interval's `sigma_floor`). Registration
fits on the conformal calibration part of the hold-out (rows neither the model nor the error model
saw) k = Σ|e|/Σσ̂ and c = Σe²/Σσ̂², each with its standard error, and how far rows scatter around them:
ρ₁ = Σ(|e| − kσ̂)²/Σσ̂² and ρ₂ = Σ(e² − cσ̂²)²/Σσ̂⁴ (a row's |e| varies as ρ₁σ̂², its e² as ρ₂σ̂⁴;
weighted as a partition's sums weigh its rows). Per partition, from Σσ̂, Σσ̂², Σσ̂⁴ and the row count n:
the estimated MAE is k·Σσ̂/n and the estimated RMSE √(c·Σσ̂²/n). Each interval adds two uncertainties
in quadrature: the draw of the n actuals (variance ρ₁Σσ̂²/n² for the MAE, ρ₂Σσ̂⁴/n² for the MSE) and
the estimator's own calibration (k's standard error times Σσ̂/n, c's times Σσ̂²/n). The MSE's interval
is taken on the log scale (its relative standard error), as a mean of squares leans right; the RMSE's
bounds are the square roots of the MSE's. The reference is the hold-out's held-back MAE (RMSE), itself
measured on a fifth of the hold-out: its standard error is stored with it. A partition is flagged
`alert` when the interval's low end lies above the reference by more than `estimated_error_tolerance`
(relative) and more than that noise at the interval's level: the model is expected to err more than
it did at registration; `warn` when it lies above the reference's noise only.
Covariate shift into rows the error model knows to be harder moves the estimate before any actual lands;
a change of the relation between inputs and actual does not (only the realized error shows it).

**Estimated class performance** (multiclass jobs; CBPE for multiclass, tasks/monitoring/multiclass_measures.py):
from each row's calibrated probability vector and its predicted class, the expected accuracy (the mean
probability of the predicted class), macro F1, and per class the expected share of rows truly of it
(`class_rate`), precision, recall and F1, each with its interval; the predicted class's interval
[p_low, p_high] adds the calibrator's uncertainty as a binary job's does. **Class mix** (`class_mix`): the
shares of the predicted classes against the model's reference rows' (`metadata.class_reference`), with
PSI, the Jensen–Shannon distance and the chi-square p-value; PSI at `drift.psi_warn` / `drift.psi_alert`
with p < CLASS_MIX_ALPHA flags it.

**Attribution drift**: the mean |contribution| per model input over the scored rows whose TreeSHAP
contributions were computed for it (`monitoring.health.attribution_share` of the rows, chosen by a
hash of the row's position, so the same rows are chosen on a re-run, and at least
`attribution_min_rows` of them), against the reference rows' at registration; the same for the mean
signed contribution. A feature's change is (current − reference) / Σ reference mean |contribution|:
how much of the model's total attribution moved to or from it. Kendall's tau-b compares the rankings.

**Multivariate drift**: the model inputs standardized and projected on the principal components
fitted at registration (enough to explain `PCA_VARIANCE` of the reference's variance); the squared
reconstruction error per row, averaged. The reference's own mean and row spread come from the half
of the reference rows the components were not fitted on. A broken correlation leaves every marginal
as it was and still moves the rows off the reference's principal plane.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from tasks.monitoring.measures import exact_auc
from tasks.monitoring.multiclass_measures import (
    multiclass_class_mix,
    multiclass_estimate_sums,
    multiclass_estimated_performance_from_sums,
    multiclass_predicted_counts,
    multiclass_sum_size,
)

ERROR_CAP_QUANTILE = 0.999
"""Each row's reconstruction error counts at most the reference's 99.9th percentile: a few wild rows (an
electrical spike, a sentinel value) cannot move the mean as a broken correlation over many rows does;
they are counted apart (`beyond_cap_share`)."""
PCA_VARIANCE = 0.65
"""Share of the reference's standardized variance the kept components explain."""
_LOGIT_LOW, _LOGIT_HIGH, _LOGIT_STEP = -12.0, 12.0, 0.01
AUC_BINS = int(round((_LOGIT_HIGH - _LOGIT_LOW) / _LOGIT_STEP)) + 2
"""Fine probability bins on the logit scale, an under- and an overflow bin: ties inside a bin are rare
enough that the binned AUC stays within ~1e-4 of the exact one."""
ATTRIBUTION_REFERENCE_ROWS = 20_000
ALL = "all"
ANY_ACTION = "any action"
"""The `decision` (`item`) of the row that pools every action decision (those that act on the entity)."""
ANY_ACTION_BEFORE = "any adverse"
"""What that row was called in the `model_health` rows of runs before: their estimates still meet their realized values."""
ESTIMATED = "estimated_performance"
ESTIMATED_ERROR = "estimated_error"
CLASS_MIX = "class_mix"
CLASS_MIX_ALPHA = 0.01
"""A class mix is flagged only where the chi-square test finds the change real at this level (and PSI finds it large)."""
ATTRIBUTION = "attribution"
MULTIVARIATE = "multivariate"
PARTITION_FLAG_MEASURES = (("event_rate", ALL), ("auc", ALL))
"""Estimates whose realized value, outside the interval, flags the partition: the relation of the
model to the world changed. The other measures' verdicts are shown but flag nothing on their own, or
a healthy partition with a dozen measures would be flagged by chance one time in three."""
CLASS_PARTITION_FLAG_MEASURES = (("accuracy", ALL),)
"""A multiclass job's: the estimated accuracy whose realized value, outside the interval, flags the partition."""


def _z(level: float) -> float:
    from scipy.special import ndtri

    return float(ndtri((1.0 + level) / 2.0))


def _auc_bin(probability: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        logit = np.log(probability) - np.log1p(-probability)
    index = np.floor((logit - _LOGIT_LOW) / _LOGIT_STEP) + 1
    return np.clip(np.nan_to_num(index, nan=0.0, posinf=AUC_BINS - 1, neginf=0.0), 0, AUC_BINS - 1).astype(np.int64)


def binned_auc(events: np.ndarray, non_events: np.ndarray) -> float:
    """AUC of bins in ascending order holding `events` and `non_events` (weights); ties count one half."""
    positives, negatives = float(events.sum()), float(non_events.sum())
    if positives <= 0 or negatives <= 0:
        return float("nan")
    below = np.concatenate(([0.0], np.cumsum(non_events)[:-1]))
    return float((events * (below + non_events / 2.0)).sum() / (positives * negatives))


def hanley_mcneil_se(auc: float, positives: float, negatives: float) -> float:
    """Standard error of an AUC on `positives` events and `negatives` non-events (Hanley & McNeil, 1982)."""
    if not (positives > 1 and negatives > 1) or math.isnan(auc):
        return float("nan")
    q1, q2 = auc / (2.0 - auc), 2.0 * auc * auc / (1.0 + auc)
    variance = (auc * (1 - auc) + (positives - 1) * (q1 - auc * auc) + (negatives - 1) * (q2 - auc * auc)) / (
        positives * negatives
    )
    return math.sqrt(max(variance, 0.0))


def holdout_auc_check(probability: np.ndarray, outcome: np.ndarray) -> dict[str, float]:
    """How far the expected AUC (from the calibrated probabilities alone) fell from the realized one on the
    hold-out, and the realized AUC's standard error there: the estimator's own error on labels it could
    see. A calibrator that keeps less of the risk's spread than there is reads the AUC low."""
    p, y = np.asarray(probability, dtype=np.float64), np.asarray(outcome, dtype=np.float64)
    weights = HealthAccumulator()
    weights.add_decided(p, p, p, np.zeros(p.size, dtype=np.int16))
    expected, realized = binned_auc(weights.auc_weights[0], weights.auc_weights[1]), exact_auc(y, p)
    positives = float(y.sum())
    return {"expected": expected, "realized": realized, "se": hanley_mcneil_se(realized, positives, y.size - positives)}


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b of two rankings (ties in either counted as tau-b does); NaN under two items."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size < 2:
        return float("nan")
    i, j = np.triu_indices(x.size, k=1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    concordant_minus_discordant = float((dx * dy).sum())
    pairs_x, pairs_y = float(np.count_nonzero(dx)), float(np.count_nonzero(dy))
    if pairs_x == 0 or pairs_y == 0:
        return float("nan")
    return concordant_minus_discordant / math.sqrt(pairs_x * pairs_y)


def fitted_health_reference(
    matrix: np.ndarray,
    names: Sequence[str],
    contributions: np.ndarray | None = None,
    *,
    seed: int = 0,
    holdout_auc: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """What a model's health is measured against, from its reference rows (registration time).

    `contributions`: TreeSHAP contributions of (a sample of) the same rows, one column per feature;
    None where the model has none (an ONNX model). `holdout_auc`: `holdout_auc_check` of the hold-out.
    Returned as plain JSON for the model's metadata.
    """
    x = np.asarray(matrix, dtype=np.float64)
    n, d = x.shape
    reference: dict[str, Any] = {"features": list(names)}
    if holdout_auc is not None and not any(math.isnan(v) for v in holdout_auc.values()):
        reference["auc"] = dict(holdout_auc)
    if n >= 20 and d >= 2:
        mean = np.nanmean(x, axis=0)
        mean = np.where(np.isnan(mean), 0.0, mean)
        scale = np.nanstd(x, axis=0)
        scale = np.where(~np.isfinite(scale) | (scale == 0), 1.0, scale)
        standardized = _standardized(x, mean, scale)
        fit = np.random.default_rng(seed).random(n) < 0.5
        fitted = standardized[fit].astype(np.float64)
        _, singular, vt = np.linalg.svd(fitted - fitted.mean(axis=0), full_matrices=False)
        explained = singular**2 / max(float((singular**2).sum()), 1e-300)
        k = int(min(np.searchsorted(np.cumsum(explained), PCA_VARIANCE) + 1, d - 1))
        components = vt[:k]
        errors = _reconstruction_errors(standardized[~fit], components)
        cap = float(np.quantile(errors, ERROR_CAP_QUANTILE))
        capped = np.minimum(errors, cap)
        reference["pca"] = {
            "mean": mean.tolist(),
            "scale": scale.tolist(),
            "components": components.tolist(),
            "explained_variance": float(explained[:k].sum()),
            "error_cap": cap,
            "error_mean": float(capped.mean()),
            "error_std": float(capped.std(ddof=1)),
            "rows": int((~fit).sum()),
        }
    if contributions is not None and len(contributions):
        values = np.asarray(contributions, dtype=np.float64)
        reference["attribution"] = {
            "mean_abs": dict(zip(names, np.abs(values).mean(axis=0).tolist(), strict=True)),
            "mean": dict(zip(names, values.mean(axis=0).tolist(), strict=True)),
            "rows": int(values.shape[0]),
        }
    return reference


def _standardized(x: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    # float32, as the model inputs are: half the memory traffic of the chunk's pass. A missing or
    # infinite input is put at the reference mean: it adds no error of its own (the guards and the
    # drift tables count missing values already).
    z = (np.asarray(x, dtype=np.float32) - np.asarray(mean, dtype=np.float32)) / np.asarray(scale, dtype=np.float32)
    return np.nan_to_num(z, copy=False, nan=0.0, posinf=0.0, neginf=0.0)


def _reconstruction_errors(standardized: np.ndarray, components: np.ndarray) -> np.ndarray:
    # The components are orthonormal rows, so |z - CᵀCz|² = |z|² - |Cz|²: no reconstruction is built.
    # Each row's few squares add up in float32 well within 1e-5; the partition's sums are float64.
    projected = standardized @ components.T.astype(standardized.dtype)
    errors = np.einsum("ij,ij->i", standardized, standardized) - np.einsum("ij,ij->i", projected, projected)
    return np.maximum(errors, 0.0).astype(np.float64)


@dataclass(frozen=True)
class PcaReference:
    """A model's `health.pca` as the chunk pass uses it: float32 arrays, built once per run, not per chunk."""

    mean: np.ndarray
    scale: np.ndarray
    components: np.ndarray
    error_cap: float | None

    @classmethod
    def of(cls, pca: Mapping[str, Any] | None) -> PcaReference | None:
        if not pca:
            return None
        mean, scale, components = (np.asarray(pca[k], dtype=np.float32) for k in ("mean", "scale", "components"))
        return cls(mean, scale, components, pca.get("error_cap"))


def attribution_share(share: float, min_rows: int, partition_rows: int) -> float:
    """The share of a partition's rows explained for attribution: `share`, raised on a small partition so
    that at least `min_rows` are (its means then rest on enough rows to tell a shift from noise); 0: off."""
    return max(share, min(1.0, min_rows / max(partition_rows, 1))) if share > 0 else 0.0


def attribution_sample(first_row: int, rows: int, share: float) -> np.ndarray:
    """Row indexes (0-based in the chunk starting at the unit's row `first_row`) chosen for attribution:
    a multiplicative hash of the row's position, so the choice is spread, fixed and needs no state."""
    if share <= 0 or rows == 0:
        return np.empty(0, dtype=np.int64)
    if share >= 1:
        return np.arange(rows, dtype=np.int64)
    position = np.arange(first_row, first_row + rows, dtype=np.uint64)
    hashed = (position * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    return np.flatnonzero(hashed < np.uint64(int(share * 2**32))).astype(np.int64)


def fitted_error_estimator(errors: np.ndarray, sigma: np.ndarray) -> dict[str, float]:
    """How the error model's σ̂ (floored as the interval floors it) turn into a partition's MAE and RMSE,
    fitted on rows neither the model nor the error model saw (the conformal calibration part): the
    scales k (MAE) and c (MSE) with their standard errors (ratio estimators), and the rows' scatter
    around them. Plain JSON for `metadata.interval.estimated_error`."""
    e, s = np.asarray(errors, dtype=np.float64), np.asarray(sigma, dtype=np.float64)
    absolute, squared, s2 = np.abs(e), e * e, s * s
    k = float(absolute.sum() / s.sum())
    c = float(squared.sum() / s2.sum())
    mae_residual = float(((absolute - k * s) ** 2).sum())
    mse_residual = float(((squared - c * s2) ** 2).sum())
    return {
        "rows": int(e.size),
        "mae_scale": k,
        "mae_scale_se": math.sqrt(mae_residual) / float(s.sum()),
        "mae_dispersion": mae_residual / float(s2.sum()),
        "mse_scale": c,
        "mse_scale_se": math.sqrt(mse_residual) / float(s2.sum()),
        "mse_dispersion": mse_residual / float((s2 * s2).sum()),
    }


_SUM_NAMES = ("rows", "p_sum", "p_var_sum", "low_sum", "high_sum")
_EXPECTED_ERROR_SUMS = 4
"""rows, Σσ̂, Σσ̂², Σσ̂⁴ of a forecast job's scored rows."""


@dataclass
class HealthAccumulator:
    """Sums of one unit (or partition) for its model health; `merge` adds another's."""

    features: tuple[str, ...] = ()
    rule_ids: tuple[str, ...] = ()
    rule_decisions: tuple[str, ...] = ()
    """The rule table's ids and the decision of each, in order: per-rule sums are kept by position."""
    rule_sums: np.ndarray = field(default_factory=lambda: np.zeros((len(_SUM_NAMES), 0)))
    """Per rule: rows, Σp, Σp(1−p), Σp_low, Σp_high."""
    auc_weights: np.ndarray = field(default_factory=lambda: np.zeros((6, AUC_BINS)))
    """Per fine probability bin: Σp, Σ(1−p), Σp_low, Σ(1−p_low), Σp_high, Σ(1−p_high)."""
    error_rows: int = 0
    error_sum: float = 0.0
    error_beyond_cap: int = 0
    attribution_rows: int = 0
    attribution_abs_sum: np.ndarray | None = None
    attribution_sum: np.ndarray | None = None
    expected_error_sums: np.ndarray = field(default_factory=lambda: np.zeros(_EXPECTED_ERROR_SUMS))
    """Forecast jobs: rows, Σσ̂, Σσ̂², Σσ̂⁴ of the error model's expected |actual − forecast| (floored)."""
    class_sums: np.ndarray | None = None
    """Multiclass jobs: `multiclass_estimate_sums` of the classified rows; None until a chunk adds some."""

    def __post_init__(self) -> None:
        if self.rule_sums.shape[1] != len(self.rule_ids):
            self.rule_sums = np.zeros((len(_SUM_NAMES), len(self.rule_ids)))

    def add_decided(self, probability: np.ndarray, low: np.ndarray, high: np.ndarray, rule_index: np.ndarray) -> None:
        """One decided chunk: calibrated probabilities with their interval, and each row's rule position."""
        p, lo, hi = (np.asarray(a, dtype=np.float64) for a in (probability, low, high))
        k = len(self.rule_ids)
        for row, weights in enumerate((None, p, p * (1.0 - p), lo, hi)):
            self.rule_sums[row] += np.bincount(rule_index, weights=weights, minlength=k)[:k]
        index = _auc_bin(p)
        # Σ(1 − x) per bin is the bin's count less Σx: four passes instead of six.
        count = np.bincount(index, minlength=AUC_BINS)
        for row, weights in ((0, p), (2, lo), (4, hi)):
            summed = np.bincount(index, weights=weights, minlength=AUC_BINS)
            self.auc_weights[row] += summed
            self.auc_weights[row + 1] += count - summed

    def add_expected_error(self, expected_error: np.ndarray, *, floor: float) -> None:
        """One forecast chunk's σ̂, floored as its interval floors them (`sigma_floor`)."""
        sigma = np.maximum(np.asarray(expected_error, dtype=np.float64), floor)
        s2 = sigma * sigma
        self.expected_error_sums += (sigma.size, float(sigma.sum()), float(s2.sum()), float((s2 * s2).sum()))

    def add_classified(
        self, probabilities: np.ndarray, predicted: np.ndarray, low: np.ndarray, high: np.ndarray
    ) -> None:
        """One multiclass chunk: calibrated vectors (rows, K), predicted class indices, the predicted class's interval."""
        sums = multiclass_estimate_sums(
            probabilities, predicted, n_classes=probabilities.shape[1], probability_low=low, probability_high=high
        )
        self.class_sums = sums if self.class_sums is None else self.class_sums + sums

    def add_inputs(self, matrix: np.ndarray, pca: PcaReference | None) -> None:
        if pca is None:
            return
        errors = _reconstruction_errors(_standardized(matrix, pca.mean, pca.scale), pca.components)
        if pca.error_cap is not None:
            self.error_beyond_cap += int(np.count_nonzero(errors > pca.error_cap))
            errors = np.minimum(errors, pca.error_cap)
        self.error_rows += errors.size
        self.error_sum += float(errors.sum())

    def add_contributions(self, values: np.ndarray) -> None:
        if values.shape[0]:
            self.add_contribution_sums(np.abs(values).sum(axis=0), values.sum(axis=0), values.shape[0])

    def merge(self, other: HealthAccumulator) -> None:
        if other.rule_ids != self.rule_ids:
            raise ValueError(f"cannot merge model-health sums of rule tables {other.rule_ids} and {self.rule_ids}")
        self.rule_sums = self.rule_sums + other.rule_sums
        self.auc_weights = self.auc_weights + other.auc_weights
        self.error_rows += other.error_rows
        self.error_sum += other.error_sum
        self.error_beyond_cap += other.error_beyond_cap
        self.expected_error_sums = self.expected_error_sums + other.expected_error_sums
        if other.class_sums is not None:
            self.class_sums = other.class_sums.copy() if self.class_sums is None else self.class_sums + other.class_sums
        if other.attribution_abs_sum is not None and other.attribution_sum is not None:
            self.add_contribution_sums(other.attribution_abs_sum, other.attribution_sum, other.attribution_rows)

    def add_contribution_sums(self, abs_sums: np.ndarray, sums: np.ndarray, rows: int) -> None:
        if self.attribution_abs_sum is None or self.attribution_sum is None:
            self.attribution_abs_sum, self.attribution_sum = abs_sums.copy(), sums.copy()
        else:
            self.attribution_abs_sum, self.attribution_sum = (
                self.attribution_abs_sum + abs_sums,
                self.attribution_sum + sums,
            )
        self.attribution_rows += rows

    def decision_sums(self) -> pl.DataFrame:
        """Rows and sums per (decision, rule_id), in the rule table's order."""
        return pl.DataFrame(
            {
                "decision": list(self.rule_decisions),
                "rule_id": list(self.rule_ids),
                **{name: self.rule_sums[i] for i, name in enumerate(_SUM_NAMES)},
            },
            schema={"decision": pl.String, "rule_id": pl.String, **dict.fromkeys(_SUM_NAMES, pl.Float64)},
        )


def _row(
    measure: str,
    item: str,
    value: float,
    low: float | None = None,
    high: float | None = None,
    *,
    section: str,
    rows: int,
    reference: float | None = None,
    flag: str | None = None,
) -> dict[str, Any]:
    def clean(v: float | None) -> float | None:
        return None if v is None else float(v)

    return {
        "section": section,
        "measure": measure,
        "item": item,
        "value": clean(value),
        "low": clean(low),
        "high": clean(high),
        "reference": clean(reference),
        "flag": flag,
        "rows": int(rows),
    }


def _rate_row(measure: str, item: str, sums: Mapping[str, float], z: float) -> dict[str, Any]:
    n = sums["rows"]
    if not n:
        nan = float("nan")
        return _row(measure, item, nan, nan, nan, section=ESTIMATED, rows=0)
    noise = z * math.sqrt(sums["p_var_sum"]) / n
    return _row(
        measure,
        item,
        sums["p_sum"] / n,
        max(0.0, sums["low_sum"] / n - noise),
        min(1.0, sums["high_sum"] / n + noise),
        section=ESTIMATED,
        rows=int(n),
    )


def _summed(frame: pl.DataFrame) -> dict[str, float]:
    return {c: float(frame[c].sum()) for c in ("rows", "p_sum", "p_var_sum", "low_sum", "high_sum")}


def estimated_performance_rows(
    health: HealthAccumulator,
    *,
    decisions: Sequence[str],
    rule_ids: Sequence[str],
    actions: Sequence[str],
    level: float,
    holdout_auc: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Expected event rate (all rows, per decision, per rule), expected precision and recall of each
    action decision and of all of them together, and the expected AUC, each with its interval."""
    z = _z(level)
    sums = health.decision_sums()
    rows = [_rate_row("event_rate", ALL, _summed(sums), z)]
    for decision in [*decisions, *sorted(set(sums["decision"].to_list()) - set(decisions))]:
        rows.append(
            _rate_row("event_rate_by_decision", decision, _summed(sums.filter(pl.col("decision") == decision)), z)
        )
    for rule in [*rule_ids, *sorted(set(sums["rule_id"].to_list()) - set(rule_ids))]:
        rows.append(_rate_row("event_rate_by_rule", rule, _summed(sums.filter(pl.col("rule_id") == rule)), z))
    total = _summed(sums)
    for item, chosen in [*((d, [d]) for d in actions), (ANY_ACTION, list(actions))]:
        inside = _summed(sums.filter(pl.col("decision").is_in(chosen)))
        rows.append({**_rate_row("precision", item, inside, z)})
        rows.append(_recall_row(item, inside, total, z))
    rows.append(_auc_row(health.auc_weights, z, holdout_auc))
    return rows


def _recall_row(item: str, inside: Mapping[str, float], total: Mapping[str, float], z: float) -> dict[str, Any]:
    a, b = inside["p_sum"], total["p_sum"] - inside["p_sum"]
    if a + b <= 0:
        nan = float("nan")
        return _row("recall", item, nan, nan, nan, section=ESTIMATED, rows=int(inside["rows"]))
    va, vb = inside["p_var_sum"], total["p_var_sum"] - inside["p_var_sum"]
    noise = z * math.sqrt(b * b * va + a * a * max(vb, 0.0)) / (a + b) ** 2
    low_a, high_a = inside["low_sum"], inside["high_sum"]
    low_b, high_b = total["low_sum"] - low_a, total["high_sum"] - high_a
    low = low_a / (low_a + high_b) if low_a + high_b > 0 else 0.0
    high = high_a / (high_a + low_b) if high_a + low_b > 0 else 1.0
    return _row(
        "recall",
        item,
        a / (a + b),
        max(0.0, min(low, a / (a + b)) - noise),
        min(1.0, max(high, a / (a + b)) + noise),
        section=ESTIMATED,
        rows=int(inside["rows"]),
    )


def _auc_row(weights: np.ndarray, z: float, holdout: Mapping[str, float] | None) -> dict[str, Any]:
    estimate = binned_auc(weights[0], weights[1])
    bounds = [binned_auc(weights[2], weights[3]), binned_auc(weights[4], weights[5]), estimate]
    noise = z * hanley_mcneil_se(estimate, float(weights[0].sum()), float(weights[1].sum()))
    if holdout:
        # The estimator's own error on the hold-out, and how sure that error is: the calibrator's bins
        # may keep less of the risk's spread than there is, and no partition can tell.
        noise += abs(holdout["realized"] - holdout["expected"]) + z * holdout["se"]
    rows = int(round(weights[0].sum() + weights[1].sum()))
    if math.isnan(estimate) or math.isnan(noise):
        return _row("auc", ALL, estimate, float("nan"), float("nan"), section=ESTIMATED, rows=rows)
    return _row(
        "auc", ALL, estimate, max(0.0, min(bounds) - noise), min(1.0, max(bounds) + noise), section=ESTIMATED, rows=rows
    )


def _error_flag(low: float, reference: float | None, reference_margin: float, tolerance: float) -> str | None:
    """`alert` when the interval lies above the hold-out's error by more than `tolerance` (relative) and
    more than `reference_margin` (the hold-out's own noise at the interval's level), `warn` when it lies
    above it by more than that noise only, `ok` otherwise; None without an interval or a reference."""
    if reference is None or math.isnan(low) or math.isnan(reference):
        return None
    if low > max(reference * (1.0 + tolerance), reference + reference_margin):
        return "alert"
    return "warn" if low > reference + reference_margin else "ok"


def estimated_error_rows(
    health: HealthAccumulator, interval: Mapping[str, Any], *, level: float, tolerance: float
) -> list[dict[str, Any]]:
    """A forecast partition's estimated MAE and RMSE with their intervals, against the hold-out's held-back
    MAE and RMSE (`interval.check`); none without scored rows. A model registered before the estimator's
    calibration (`interval.estimated_error`) gets the bare estimates, k = 1 and c = (RMSE/MAE)² of the
    held-back rows, with no interval and no flag: nothing says how far to trust them."""
    n, s1, s2, s4 = (float(v) for v in health.expected_error_sums)
    if not n:
        return []
    check = interval.get("check") or {}
    mae_reference, rmse_reference = check.get("mae"), check.get("rmse")
    fitted = interval.get("estimated_error")
    nan = float("nan")
    z = _z(level)
    margins = {measure: z * float((fitted or {}).get(f"check_{measure}_se", 0.0)) for measure in ("mae", "rmse")}
    if fitted:
        mae = fitted["mae_scale"] * s1 / n
        mae_half = z * math.sqrt(fitted["mae_dispersion"] * s2 / n**2 + (fitted["mae_scale_se"] * s1 / n) ** 2)
        mse = fitted["mse_scale"] * s2 / n
        # On the log scale: a mean of squared errors leans right (a few large errors), and its interval with it.
        mse_spread = (
            z * math.sqrt(fitted["mse_dispersion"] * s4 / n**2 + (fitted["mse_scale_se"] * s2 / n) ** 2) / mse
            if mse > 0
            else 0.0
        )
        mae_bounds = (max(0.0, mae - mae_half), mae + mae_half)
        rmse_bounds = (math.sqrt(mse * math.exp(-mse_spread)), math.sqrt(mse * math.exp(mse_spread)))
    else:
        mae = s1 / n
        scale = (rmse_reference / mae_reference) ** 2 if mae_reference and rmse_reference is not None else nan
        mse = scale * s2 / n
        mae_bounds = rmse_bounds = (nan, nan)
    rows = []
    for measure, value, (low, high), reference in (
        ("mae", mae, mae_bounds, mae_reference),
        ("rmse", math.sqrt(mse) if mse >= 0 else nan, rmse_bounds, rmse_reference),
    ):
        row = _row(
            measure,
            ALL,
            value,
            low,
            high,
            section=ESTIMATED_ERROR,
            rows=int(n),
            reference=reference,
            flag=_error_flag(low, reference, margins[measure], tolerance),
        )
        row["delta"] = value / reference - 1.0 if reference else None
        rows.append(row)
    return rows


def attribution_rows(
    health: HealthAccumulator, reference: Mapping[str, Any] | None, *, warn: float, alert: float
) -> list[dict[str, Any]]:
    """Per feature: its mean |contribution| and mean contribution now and at registration, each
    change as a share of the reference's total mean |contribution| (flagged), and Kendall's tau-b of
    the two rankings by mean |contribution|.

    Both means are needed: a feature whose values move (the demo's utilization +0.15) shifts its mean
    contribution at once, while its mean |contribution| can stay put when as many rows move towards
    the reference's centre as away from it."""
    if health.attribution_abs_sum is None or health.attribution_sum is None or not health.attribution_rows:
        return []
    names, n = health.features, health.attribution_rows
    ref_abs_means, ref_means = (reference or {}).get("mean_abs", {}), (reference or {}).get("mean", {})
    ref = np.array([ref_abs_means.get(name, np.nan) for name in names], dtype=np.float64)
    total = float(np.nansum(ref)) if ref_abs_means else float("nan")
    rows = []
    for measure, current, before_of in (
        ("mean_abs_contribution", health.attribution_abs_sum / n, ref_abs_means),
        ("mean_contribution", health.attribution_sum / n, ref_means),
    ):
        for name, now in zip(names, current, strict=True):
            before = before_of.get(name)
            change = (now - before) / total if before is not None and total > 0 else float("nan")
            flag = (
                None
                if math.isnan(change)
                else ("alert" if abs(change) >= alert else "warn" if abs(change) >= warn else "ok")
            )
            rows.append(
                {
                    **_row(measure, name, float(now), section=ATTRIBUTION, rows=n, reference=before, flag=flag),
                    "delta": float(change),
                }
            )
    current = health.attribution_abs_sum / n
    known = ~np.isnan(ref)
    tau = kendall_tau_b(current[known], ref[known]) if ref_means else float("nan")
    rows.append(_row("rank_agreement", "kendall_tau_b", tau, section=ATTRIBUTION, rows=n, reference=1.0))
    rows[-1]["delta"] = None if math.isnan(tau) else tau - 1.0
    return rows


def estimated_class_rows(
    health: HealthAccumulator,
    *,
    classes: Sequence[str],
    level: float,
    calibration_rows: int | None = None,
) -> list[dict[str, Any]]:
    """A multiclass job's estimated accuracy and macro F1 (item `all`), and per class its expected share of the rows
    (`class_rate`), precision, recall and F1, each with its interval at `level` (the labels' draw and, with
    `calibration_rows`, the calibration's own uncertainty from its hold-out); NaN before any classified row."""
    sums = health.class_sums if health.class_sums is not None else np.zeros(multiclass_sum_size(len(classes)))
    estimate = multiclass_estimated_performance_from_sums(
        sums, classes=classes, level=level, calibration_rows=calibration_rows
    )
    n = estimate["rows"]
    rows = [
        _row(
            measure,
            ALL,
            estimate[measure]["value"],
            estimate[measure]["low"],
            estimate[measure]["high"],
            section=ESTIMATED,
            rows=n,
        )
        for measure in ("accuracy", "macro_f1")
    ]
    for name in classes:
        of_class = estimate["classes"][name]
        expected = of_class["expected_rows"]
        share = [v / n if n else float("nan") for v in (expected["value"], expected["low"], expected["high"])]
        rows.append(_row("class_rate", name, share[0], share[1], min(1.0, share[2]), section=ESTIMATED, rows=n))
        for measure in ("precision", "recall", "f1"):
            m = of_class[measure]
            rows.append(
                _row(
                    measure,
                    name,
                    m["value"],
                    m["low"],
                    m["high"],
                    section=ESTIMATED,
                    rows=of_class["predicted_rows"] if measure == "precision" else n,
                )
            )
    return rows


def class_mix_rows(
    health: HealthAccumulator,
    reference: Mapping[str, Any] | None,
    *,
    classes: Sequence[str],
    psi_warn: float,
    psi_alert: float,
) -> list[dict[str, Any]]:
    """A multiclass job's predicted class mix against its model's reference rows: each class's share (`predicted_share`,
    reference: the reference rows' share, delta: the difference), and the mix's `psi` (flagged `warn`/`alert`),
    `js_distance` and chi-square `p_value`; nothing without a reference or a classified row."""
    if not reference or not reference.get("rows") or health.class_sums is None:
        return []
    counts = multiclass_predicted_counts(health.class_sums, n_classes=len(classes))
    shares = reference.get("predicted_share", {})
    reference_counts = {name: int(round(float(shares.get(name, 0.0)) * int(reference["rows"]))) for name in classes}
    mix = multiclass_class_mix(
        dict(zip(classes, counts.tolist(), strict=True)),
        reference_counts,
        alpha=CLASS_MIX_ALPHA,
        psi_warn=psi_warn,
        psi_alert=psi_alert,
    )
    n = int(counts.sum())
    rows = [
        {
            **_row(
                "predicted_share",
                c["class"],
                c["share"],
                section=CLASS_MIX,
                rows=c["rows"],
                reference=c["reference_share"],
            ),
            "delta": c["share"] - c["reference_share"],
        }
        for c in mix["classes"]
    ]
    rows.append({**_row("psi", ALL, mix["psi"], section=CLASS_MIX, rows=n, flag=mix["flag"]), "delta": None})
    rows.append({**_row("js_distance", ALL, mix["js_distance"], section=CLASS_MIX, rows=n), "delta": None})
    rows.append({**_row("p_value", ALL, mix["p_value"], section=CLASS_MIX, rows=n), "delta": None})
    return rows


def multivariate_rows(
    health: HealthAccumulator, pca: Mapping[str, Any] | None, *, tolerance: float, z_alert: float = 3.0
) -> list[dict[str, Any]]:
    """The mean reconstruction error against the reference's: `alert` when it is both beyond
    `z_alert` standard errors of the reference's row spread and more than `tolerance` (relative) above it."""
    if not pca or not health.error_rows:
        return []
    n = health.error_rows
    mean = health.error_sum / n
    ref_mean, ref_std = float(pca["error_mean"]), float(pca["error_std"])
    band = z_alert * ref_std / math.sqrt(n)
    relative = mean / ref_mean - 1.0 if ref_mean > 0 else float("nan")
    significant = abs(mean - ref_mean) > band
    flag = "alert" if significant and abs(relative) > tolerance else "warn" if significant else "ok"
    row = _row(
        "reconstruction_error",
        ALL,
        mean,
        ref_mean - band,
        ref_mean + band,
        section=MULTIVARIATE,
        rows=n,
        reference=ref_mean,
        flag=flag,
    )
    row["delta"] = relative
    rows = [row]
    if "error_cap" in pca:
        beyond = _row(
            "beyond_cap_share",
            ALL,
            health.error_beyond_cap / n,
            section=MULTIVARIATE,
            rows=n,
            reference=1.0 - ERROR_CAP_QUANTILE,
        )
        rows.append({**beyond, "delta": None})
    return rows


HEALTH_COLUMNS = (
    "model_version",
    "section",
    "measure",
    "item",
    "value",
    "low",
    "high",
    "reference",
    "delta",
    "flag",
    "rows",
)


def model_health_rows(
    health: HealthAccumulator,
    reference: Mapping[str, Any],
    *,
    model_version: str,
    decisions: Sequence[str],
    rule_ids: Sequence[str],
    actions: Sequence[str],
    level: float,
    attribution_warn: float,
    attribution_alert: float,
    multivariate_tolerance: float,
    interval: Mapping[str, Any] | None = None,
    estimated_error_tolerance: float = 0.10,
    classes: Sequence[str] = (),
    class_reference: Mapping[str, Any] | None = None,
    psi_warn: float = 0.1,
    psi_alert: float = 0.25,
    calibration_rows: int | None = None,
) -> list[dict[str, Any]]:
    """Every model-health row of one partition, in the `model_health` table's columns (run key aside).

    `interval`: a forecast model's `metadata.interval`; its partitions get the estimated error instead
    of the estimated performance of a binary model's calibrated probabilities. `classes`: a multiclass job's
    (target.classes); its partitions get the estimated class performance and the class mix against
    `class_reference` (`metadata.class_reference`), flagged at `psi_warn` / `psi_alert`; `calibration_rows` the hold-out
    rows its calibration was fitted on (`metadata.training.rows_holdout`)."""
    if interval is not None:
        rows = estimated_error_rows(health, interval, level=level, tolerance=estimated_error_tolerance)
    elif classes:
        rows = estimated_class_rows(health, classes=classes, level=level, calibration_rows=calibration_rows)
        rows += class_mix_rows(health, class_reference, classes=classes, psi_warn=psi_warn, psi_alert=psi_alert)
    else:
        rows = estimated_performance_rows(
            health,
            decisions=decisions,
            rule_ids=rule_ids,
            actions=actions,
            level=level,
            holdout_auc=reference.get("auc"),
        )
    rows += attribution_rows(health, reference.get("attribution"), warn=attribution_warn, alert=attribution_alert)
    rows += multivariate_rows(health, reference.get("pca"), tolerance=multivariate_tolerance)
    return [{"model_version": model_version, "delta": None, **row} for row in rows]


def health_headline(
    rows: Sequence[Mapping[str, Any]], *, forecasts: bool = False, classifies: bool = False
) -> dict[str, Any]:
    """What a terminal shows of a run's `model_health` rows: a binary job's expected event rate and AUC, a
    multiclass job's (`classifies`) estimated accuracy and macro F1, a forecast job's (`forecasts`) estimated MAE and RMSE
    where the rows have them (each [value, low, high], the hold-out's as `*_reference`), and every flagged row as
    `section item measure flag`; {} without rows."""
    if not rows:
        return {}
    flagged = [f"{r['section']} {r['item']} {r['measure']} {r['flag']}" for r in rows if r["flag"] in ("warn", "alert")]
    estimate = {(r["measure"], r["item"]): [r["value"], r["low"], r["high"]] for r in rows if r["section"] == ESTIMATED}
    if classifies:
        # A multiclass job has no event rate, AUC or forecast error to name, even as null.
        return {
            "accuracy": estimate.get(("accuracy", ALL)),
            "macro_f1": estimate.get(("macro_f1", ALL)),
            "flagged": flagged,
        }
    if not forecasts:
        return {"event_rate": estimate.get(("event_rate", ALL)), "auc": estimate.get(("auc", ALL)), "flagged": flagged}
    # A forecast job has no event rate or AUC to name, even as null.
    error = {r["measure"]: r for r in rows if r["section"] == ESTIMATED_ERROR and r["item"] == ALL}
    headline: dict[str, Any] = {"flagged": flagged}
    for measure in ("mae", "rmse"):
        if measure in error:
            row = error[measure]
            headline |= {measure: [row["value"], row["low"], row["high"]], f"{measure}_reference": row["reference"]}
    return headline
