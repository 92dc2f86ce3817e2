"""Where a model's exact feature contributions come from, whatever its framework.

Every engine that explains rows holds one of these: `TreeContributions` (any tree ensemble, through
the one table TreeSHAP kernel, checked at load against the framework's own contributions where the
framework has them, against the model's own output otherwise) or `LinearContributions` (coefficient
× (value − reference mean), exact for a model linear in its inputs). Both return rows × features on
the scale the model's trees or coefficients add up to, the bias left out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np

from tasks.inference.registry import ModelExplanation
from tasks.inference.treeshap import (
    GUARD_ROWS,
    GUARD_TOLERANCE,
    KERNEL_NAME,
    TIE_TOLERANCE,
    ContributionCounts,
    ContributionKernel,
    KernelChoice,
    TreeArrays,
    TreeShapUnsupported,
    inference_guard_rows,
    inference_max_abs_diff,
    inference_near_tie_rows,
    inference_row_scale,
    inference_treeshap_kernel,
)

log = logging.getLogger("scoring.inference")

LINEAR_NAME = "linear"
EXPLAINED_BY_PRODUCT = frozenset({KERNEL_NAME, LINEAR_NAME})
"""`explained_by` values of contributions the product computed; any other names the framework that did."""


def inference_output_checked_treeshap(
    trees: TreeArrays,
    output: Callable[[np.ndarray], np.ndarray],
    *,
    model_label: str,
    framework: str,
    nthread: int = 0,
    tolerance: float = GUARD_TOLERANCE,
    kernel_of: Callable[[TreeArrays], ContributionKernel] | None = None,
) -> KernelChoice:
    """The table kernel of a framework without contributions of its own (scikit-learn, ONNX tree nodes), kept
    only if its contributions plus bias add up to the model's own output (`output`: rows → the value the trees
    sum to) on the guard rows: a misread split, leaf or bias shows there. Raises TreeShapUnsupported when the
    kernel cannot represent the trees or does not add up: nothing else could explain them. `kernel_of` builds
    another kernel of the same contributions (the oblivious-tree one)."""
    start = time.perf_counter()
    kernel = inference_treeshap_kernel(trees) if kernel_of is None else kernel_of(trees)
    rows = inference_guard_rows(kernel, rows=GUARD_ROWS)
    max_diff = inference_max_abs_diff(
        kernel.contributions(rows, nthread=nthread).sum(axis=1), np.asarray(output(rows)).reshape(-1)
    )
    if not max_diff <= tolerance:
        raise TreeShapUnsupported(
            f"the trees as read add up to the model's own output only within {max_diff:.3g} on {rows.shape[0]} "
            f"load-time rows (tolerance {tolerance:g})"
        )
    load_s = time.perf_counter() - start
    log.info(
        "[INF] model_name=%s contributions by %s: trees=%d widest_path=%d table_mib=%.1f "
        "local_accuracy_max_abs_diff=%.2g load_ms=%.0f",
        model_label,
        KERNEL_NAME,
        kernel.n_trees,
        kernel.widest_path,
        kernel.table_bytes / 2**20,
        max_diff,
        load_s * 1000,
    )
    return KernelChoice(kernel, None, max_diff, load_s, framework)


class TreeContributions:
    """TreeSHAP contributions of a tree ensemble: the table kernel where it is in use, the framework's own
    (`framework_contributions`: rows → rows × (features + 1), bias last) otherwise. With `top_k`, rows whose
    top-k reasons the kernel's float noise could reorder are recomputed by the framework where it can."""

    def __init__(
        self,
        choice: KernelChoice,
        framework_contributions: Callable[[np.ndarray], np.ndarray] | None,
        *,
        nthread: int = 0,
        framework_label: str = "XGBoost pred_contribs",
        output: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        if choice.kernel is None and framework_contributions is None:
            raise ValueError("a tree model without a kernel needs the framework's own contributions")
        self.framework_contributions = framework_contributions
        self.framework_label = framework_label
        self.output = output
        """rows → what the contributions plus bias add up to, where the framework has no
        contributions to check against."""
        self.kernel = choice.kernel
        self.name = choice.name
        self.reason = choice.reason
        self.load_s = choice.load_s
        self.max_abs_diff = choice.max_abs_diff
        self.counts = ContributionCounts()
        self._framework = framework_contributions
        self._nthread = nthread

    def values(self, rows: np.ndarray, top_k: int | None, *, by_size: bool = False) -> tuple[np.ndarray, int]:
        """(rows × features contributions, rows recomputed by the framework for a near tie); `by_size`: the
        reasons rank by |contribution| (a forecast job's), so ties are looked for there."""
        if self.kernel is None:
            assert self._framework is not None
            values = np.asarray(self._framework(rows), dtype=np.float64)[:, :-1]
            self.counts.add(framework_rows=rows.shape[0])
            return values, 0
        full = self.kernel.contributions(rows, nthread=self._nthread)
        values = full[:, :-1]
        recomputed = 0
        if top_k is not None and self._framework is not None:
            tied = inference_near_tie_rows(
                values,
                top_k,
                exact=~self.kernel.used_features,
                tolerance=TIE_TOLERANCE * inference_row_scale(full).reshape(-1),
                by_size=by_size,
            )
            recomputed = int(tied.sum())
            if recomputed:
                values[tied] = np.asarray(self._framework(rows[tied]), dtype=np.float64)[:, :-1]
        self.counts.add(kernel_rows=rows.shape[0], tie_recomputed_rows=recomputed)
        return values, recomputed


class LinearContributions:
    """Exact contributions of a model linear in its (transformed) inputs: coefficient × (value − reference mean).

    `transform` maps the raw rows to the columns the coefficients apply to, one per feature (a scaler,
    an imputer); the reference mean is of those columns on the registration's reference rows.
    """

    def __init__(
        self,
        coefficients: np.ndarray,
        reference_mean: np.ndarray,
        intercept: float,
        *,
        transform: Callable[[np.ndarray], np.ndarray] | None = None,
        output: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self.coefficients = np.asarray(coefficients, dtype=np.float64).reshape(-1)
        self.reference_mean = np.asarray(reference_mean, dtype=np.float64).reshape(-1)
        if self.coefficients.shape != self.reference_mean.shape:
            raise ValueError(f"{self.coefficients.size} coefficients but {self.reference_mean.size} reference means")
        self._transform = transform
        self.bias = float(intercept) + float(self.coefficients @ self.reference_mean)
        """What the model gives at the reference mean: contributions plus this add up to the margin."""
        self.output = output
        self.name = LINEAR_NAME
        self.reason: str | None = None
        self.load_s = 0.0
        self.max_abs_diff: float | None = None
        self.counts = ContributionCounts()

    def values(self, rows: np.ndarray, top_k: int | None) -> tuple[np.ndarray, int]:
        columns = np.asarray(rows if self._transform is None else self._transform(rows), dtype=np.float64)
        values = self.coefficients * (columns - self.reference_mean)
        self.counts.add(kernel_rows=rows.shape[0])
        return values, 0


EXPLANATION_CHECK_ROWS = 2000
"""Hold-out rows the contributions are checked on at registration: enough to reach most leaves, seconds at most."""


def inference_checked_explanation(engine, holdout: np.ndarray, model_label: object) -> ModelExplanation:  # noqa: ANN001  (an engine)
    """The version's explanation, checked on the hold-out: the kernel against the framework's own contributions
    to GUARD_TOLERANCE on the margin scale (a mismatch is refused: reasons would not be the framework's), or,
    where the framework has none, the contributions plus bias against the model's own output (local accuracy).
    A multiclass model's contributions are checked class by class (`engine.class_contributions`), each against
    the framework's own contributions to that class or against that class's own output."""
    settled = engine.metadata.explanation or ModelExplanation(method="treeshap")
    source = getattr(engine, "contributions_source", None)
    if source is None:
        return ModelExplanation(
            method="none",
            detail=settled.detail
            or (
                "an ONNX graph with no tree-ensemble or linear node"
                if engine.metadata.framework == "onnx"
                else f"a {engine.metadata.framework} model with no trees or coefficients"
            ),
        )
    rows = np.ascontiguousarray(holdout[:EXPLANATION_CHECK_ROWS], dtype=np.float32)
    if rows.shape[0] == 0:
        return settled
    explained = engine._explained_rows(rows)
    per_class = getattr(engine, "class_contributions", None)
    if per_class is None:
        checked, max_diff = _checked_source(source, rows, explained, settled.method, model_label, "")
    else:
        classes = list(engine.metadata.classes)
        results = [
            _checked_source(
                s,
                rows,
                explained,
                settled.method,
                model_label,
                f" of class {classes[k]!r}" if k < len(classes) else f" of output {k}",
            )
            for k, s in enumerate(per_class)
        ]
        diffs = [d for _, d in results if d is not None]
        max_diff = max(diffs) if diffs else None
        said = sorted({text for text, _ in results})
        checked = f"{'; '.join(said)}, for each of the {len(per_class)} classes"
    update: dict[str, object] = {"checked_against": checked}
    if max_diff is not None:
        update["max_abs_diff"] = max_diff
    return settled.model_copy(update=update)


def _checked_source(
    source: TreeContributions | LinearContributions,
    rows: np.ndarray,
    explained: np.ndarray,
    method: str,
    model_label: object,
    of: str,
) -> tuple[str, float | None]:
    """What one source's contributions were checked against on the hold-out rows and by how much they differ (None:
    the framework computes them itself); ModelArtifactError when they differ beyond GUARD_TOLERANCE. `of` names the
    class of a multiclass model's source in the refusal (" of class 'leak'")."""
    from tasks.errors import ModelArtifactError

    if isinstance(source, TreeContributions) and source.kernel is None:
        return (
            f"computed by {source.framework_label} itself: the table kernel cannot represent "
            f"the model ({source.reason})"
        ), None
    if isinstance(source, TreeContributions) and source.framework_contributions is not None:
        assert source.kernel is not None, "a source without a kernel returned above"
        max_diff = inference_max_abs_diff(
            source.kernel.contributions(explained), source.framework_contributions(explained)
        )
        if not max_diff <= GUARD_TOLERANCE:
            raise ModelArtifactError(
                f"model file {model_label}: the product's TreeSHAP{of} differs from {source.framework_label} by up to "
                f"{max_diff:.3g} on {rows.shape[0]} hold-out rows (tolerance {GUARD_TOLERANCE:g}); its reasons "
                "would not be the framework's"
            )
        return f"{source.framework_label} on {rows.shape[0]} hold-out rows", max_diff
    if source.output is None:
        raise ValueError("contributions without the framework's own or the model's output cannot be checked")
    if isinstance(source, TreeContributions):
        assert source.kernel is not None, "a source without a kernel returned above"
        total = source.kernel.contributions(explained).sum(axis=1)
    else:
        total = source.values(rows, None)[0].sum(axis=1) + source.bias
    max_diff = inference_max_abs_diff(total, np.asarray(source.output(rows)).reshape(-1))
    if not max_diff <= GUARD_TOLERANCE:
        raise ModelArtifactError(
            f"model file {model_label}: the {method} contributions{of} plus bias differ from the model's own output by "
            f"up to {max_diff:.3g} on {rows.shape[0]} hold-out rows (tolerance {GUARD_TOLERANCE:g}); its "
            "reasons would not be exact"
        )
    return f"local accuracy: contributions + bias = the model's own output on {rows.shape[0]} hold-out rows", max_diff
