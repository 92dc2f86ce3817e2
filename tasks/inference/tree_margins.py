"""Raw margins of a single-output XGBoost tree ensemble on the CPU, XGBoost's own to the bit, ~2.4× faster.

XGBoost's CPU predictor walks each row down each tree, a chain of dependent loads and hard-to-predict
branches. The kernel (tasks/inference/tree_margin_kernels.py) takes a block of rows through one tree at a
time instead: the first two levels are compared for every row against constants of the tree, with no
branch, and the deeper levels advance every row of the block by one level per pass. The sum is XGBoost's:
the base margin plus each tree's leaf, in float32 and in tree order, so every margin is the same float.

It is used only after it reproduced `inplace_predict` bit for bit on rows built around every split
threshold (and NaNs) at load; a multiclass model gets one kernel per class, each checked against its column.
A model it cannot represent (categorical splits, several targets, a DART or linear booster, an objective whose
base margin it does not know) or a check that fails leaves the margins to XGBoost, logged with the reason.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tasks.inference.treeshap import (
    _IDENTITY_OBJECTIVES,
    _LOG_OBJECTIVES,
    _LOGIT_OBJECTIVES,
    _PARALLEL_LAUNCH,
    GUARD_ROWS,
    TreeArrays,
    TreeShapUnsupported,
    inference_guard_rows,
    inference_kernel_arrays,
    inference_xgboost_class_tree_arrays,
    inference_xgboost_tree_arrays,
)

log = logging.getLogger("scoring.inference")

MARGIN_KERNEL_NAME = "tree_margins"
_BLOCK_ROWS = 256
_BIAS_ULPS = 4
_SOFTMAX_OBJECTIVES = frozenset({"multi:softprob", "multi:softmax"})


@dataclass(frozen=True)
class TreeMarginKernel:
    """A tree ensemble in the kernel's node layout (`inference_margin_layout`) and its base margin."""

    n_features: int
    feature: np.ndarray
    threshold: np.ndarray
    child: np.ndarray
    default_right: np.ndarray
    leaf: np.ndarray
    roots: np.ndarray
    depth: int
    bias: np.float32

    @property
    def n_trees(self) -> int:
        return int(self.roots.size)

    @cached_property
    def _splits(self) -> np.ndarray:
        return np.flatnonzero(~np.isnan(self.threshold))

    @property
    def used_features(self) -> np.ndarray:
        used = np.zeros(self.n_features, dtype=bool)
        used[self.feature[self._splits]] = True
        return used

    def split_thresholds(self, feature: int) -> np.ndarray:
        return self.threshold[self._splits[self.feature[self._splits] == feature]]

    def with_bias(self, bias: np.float32) -> TreeMarginKernel:
        return TreeMarginKernel(
            self.n_features,
            self.feature,
            self.threshold,
            self.child,
            self.default_right,
            self.leaf,
            self.roots,
            self.depth,
            bias,
        )

    def margins(self, features: np.ndarray, *, nthread: int = 0) -> np.ndarray:
        """One float32 margin per row of `features` (rows × n_features), on `nthread` threads (0: all numba has).
        On one thread the kernel runs on the caller's, without the GIL and without the launch lock, so work
        units scored at once each run their own."""
        import numba

        from tasks.inference.tree_margin_kernels import inference_tree_margins, inference_tree_margins_serial

        x, _, threads = inference_kernel_arrays(features, self.n_features, nthread)
        out = np.empty(x.shape[0], dtype=np.float32)
        if x.shape[0] == 0:
            return out
        arrays = (self.feature, self.threshold, self.child, self.default_right, self.leaf, self.roots)
        if threads == 1:
            inference_tree_margins_serial(x, *arrays, self.depth, self.bias, out, _BLOCK_ROWS)
            return out
        with _PARALLEL_LAUNCH:
            numba.set_num_threads(threads)
            inference_tree_margins(x, *arrays, self.depth, self.bias, out, _BLOCK_ROWS)
        return out


def _base_scores(learner: dict) -> list[np.float32]:
    base_score = json.loads(learner["learner_model_param"]["base_score"])
    return [np.float32(b) for b in (base_score if isinstance(base_score, list) else [base_score])]


def _bias_candidates(learner: dict, score: np.float32 | None = None) -> list[np.float32]:
    """The base margins XGBoost may hold for `base_score` (`score`: one class's), most likely first: its own
    float32 arithmetic, the float64 result rounded, then their neighbours up to `_BIAS_ULPS` floats away. The model
    file keeps `base_score` as decimal text, which need not be the float a booster trained in this process holds,
    and the C library's logf and numpy's may differ in the last bit; the load-time check keeps the one that
    reproduces XGBoost's margins."""
    objective = learner["objective"]["name"]
    score = _base_scores(learner)[0] if score is None else score
    one = np.float32(1.0)
    with np.errstate(all="ignore"):
        if objective in _LOGIT_OBJECTIVES:
            nominal = [-np.log(one / score - one), np.float32(-math.log(1.0 / float(score) - 1.0))]
        elif objective in _LOG_OBJECTIVES:
            nominal = [np.log(score), np.float32(math.log(float(score)))]
        elif objective in _IDENTITY_OBJECTIVES or objective in _SOFTMAX_OBJECTIVES:
            nominal = [score]
        else:
            raise TreeShapUnsupported(f"objective {objective}: its base margin is not known to the kernel")
    candidates = [np.float32(c) for c in nominal]
    for step in range(1, _BIAS_ULPS + 1):
        for c in nominal:
            down = up = np.float32(c)
            for _ in range(step):
                down, up = np.nextafter(down, np.float32(-np.inf)), np.nextafter(up, np.float32(np.inf))
            candidates += [down, up]
    unique: list[np.float32] = []
    for c in candidates:
        if np.isfinite(c) and not any(c.tobytes() == u.tobytes() for u in unique):
            unique.append(c)
    if not unique:
        raise TreeShapUnsupported(f"base_score {score} has no finite margin under {objective}")
    return unique


def _kernel_of(arrays: TreeArrays, bias: np.float32) -> TreeMarginKernel:
    from tasks.inference.tree_margin_kernels import inference_margin_layout

    feature, threshold, child, default_right, leaf, roots, depth = inference_margin_layout(
        arrays.left, arrays.right, arrays.feature, arrays.value, arrays.default_left, arrays.node_start
    )
    return TreeMarginKernel(arrays.n_features, feature, threshold, child, default_right, leaf, roots, int(depth), bias)


def inference_tree_margin_kernel(
    model_json: bytes | bytearray | str | dict,
) -> tuple[TreeMarginKernel, list[np.float32]]:
    """The kernel of a model saved by `booster.save_raw("json")` with its first base margin candidate, and all
    the candidates; raises TreeShapUnsupported for what it cannot represent."""
    model = model_json if isinstance(model_json, dict) else json.loads(model_json)
    arrays = inference_xgboost_tree_arrays(model)
    candidates = _bias_candidates(model["learner"])
    return _kernel_of(arrays, candidates[0]), candidates


@dataclass(frozen=True)
class ClassMarginKernels:
    """A multiclass model's margins, rows × classes: one kernel per class over the trees XGBoost adds to that
    class's margin (`tree_info`), in their order, from that class's base margin."""

    kernels: tuple[TreeMarginKernel, ...]

    @property
    def n_features(self) -> int:
        return self.kernels[0].n_features

    @property
    def used_features(self) -> np.ndarray:
        return np.logical_or.reduce([k.used_features for k in self.kernels])

    def split_thresholds(self, feature: int) -> np.ndarray:
        return np.concatenate([k.split_thresholds(feature) for k in self.kernels])

    def margins(self, features: np.ndarray, *, nthread: int = 0) -> np.ndarray:
        return np.column_stack([k.margins(features, nthread=nthread) for k in self.kernels])


@dataclass(frozen=True)
class MarginChoice:
    """The margin kernel to use, or why XGBoost's own predictor computes the margins."""

    kernel: TreeMarginKernel | ClassMarginKernels | None
    reason: str | None
    load_s: float


def inference_checked_tree_margins(
    model_json: bytes | bytearray | str | dict,
    reference: Callable[[np.ndarray], np.ndarray],
    *,
    model_label: str,
    nthread: int = 0,
    guard_rows: int = GUARD_ROWS,
) -> MarginChoice:
    """Build the kernel and keep it only if its margins equal `reference` (XGBoost's `inplace_predict` margins)
    bit for bit on the guard rows. A model it cannot represent is logged at INFO; a kernel that disagrees is
    refused with a WARNING, because that is a defect."""
    start = time.perf_counter()
    try:
        kernel, candidates = inference_tree_margin_kernel(model_json)
    except TreeShapUnsupported as exc:
        log.info("[INF] model_name=%s margins by XGBoost: %s", model_label, exc)
        return MarginChoice(None, str(exc), time.perf_counter() - start)
    rows = inference_guard_rows(kernel, rows=guard_rows)
    expected = np.asarray(reference(rows), dtype=np.float32).reshape(-1)
    differing = rows.shape[0]
    for bias in candidates:
        candidate = kernel.with_bias(bias)
        got = candidate.margins(rows, nthread=nthread)
        differing = min(differing, int(np.count_nonzero(got.view(np.uint32) != expected.view(np.uint32))))
        if differing == 0:
            load_s = time.perf_counter() - start
            log.info(
                "[INF] model_name=%s margins by %s: trees=%d depth=%d load_ms=%.0f",
                model_label,
                MARGIN_KERNEL_NAME,
                candidate.n_trees,
                candidate.depth,
                load_s * 1000,
            )
            return MarginChoice(candidate, None, load_s)
    reason = (
        f"its margins differed from XGBoost's inplace_predict on {differing} of {rows.shape[0]} load-time rows "
        f"(the closest of {len(candidates)} base margins)"
    )
    log.warning("[INF] model_name=%s margin kernel refused, margins by XGBoost: %s", model_label, reason)
    return MarginChoice(None, reason, time.perf_counter() - start)


def inference_checked_class_tree_margins(
    model_json: bytes | bytearray | str | dict,
    reference: Callable[[np.ndarray], np.ndarray],
    *,
    model_label: str,
    nthread: int = 0,
    guard_rows: int = GUARD_ROWS,
) -> MarginChoice:
    """`inference_checked_tree_margins` for a multiclass model (`multi:softprob`, `multi:softmax`): every class's
    margins must equal column k of `reference` (XGBoost's `inplace_predict` margins, rows × classes) bit for bit."""
    start = time.perf_counter()
    try:
        model = model_json if isinstance(model_json, dict) else json.loads(model_json)
        learner = model["learner"]
        per_class = inference_xgboost_class_tree_arrays(model)
        scores = _base_scores(learner)
        if len(scores) not in (1, len(per_class)):
            raise TreeShapUnsupported(f"{len(scores)} base scores for {len(per_class)} classes")
        candidates = [_bias_candidates(learner, scores[k if len(scores) > 1 else 0]) for k in range(len(per_class))]
    except TreeShapUnsupported as exc:
        log.info("[INF] model_name=%s margins by XGBoost: %s", model_label, exc)
        return MarginChoice(None, str(exc), time.perf_counter() - start)
    kernels = [_kernel_of(arrays, c[0]) for arrays, c in zip(per_class, candidates, strict=True)]
    rows = inference_guard_rows(ClassMarginKernels(tuple(kernels)), rows=guard_rows)
    expected = np.asarray(reference(rows), dtype=np.float32)
    if expected.shape != (rows.shape[0], len(kernels)):
        reason = f"XGBoost's margins have shape {expected.shape}, not one per class of {len(kernels)}"
        log.warning("[INF] model_name=%s margin kernel refused, margins by XGBoost: %s", model_label, reason)
        return MarginChoice(None, reason, time.perf_counter() - start)
    chosen: list[TreeMarginKernel] = []
    for k, (kernel, biases) in enumerate(zip(kernels, candidates, strict=True)):
        column = np.ascontiguousarray(expected[:, k])
        differing = rows.shape[0]
        for bias in biases:
            candidate = kernel.with_bias(bias)
            got = candidate.margins(rows, nthread=nthread)
            differing = min(differing, int(np.count_nonzero(got.view(np.uint32) != column.view(np.uint32))))
            if differing == 0:
                chosen.append(candidate)
                break
        else:
            reason = (
                f"class {k}'s margins differed from XGBoost's inplace_predict on {differing} of {rows.shape[0]} "
                f"load-time rows (the closest of {len(biases)} base margins)"
            )
            log.warning("[INF] model_name=%s margin kernel refused, margins by XGBoost: %s", model_label, reason)
            return MarginChoice(None, reason, time.perf_counter() - start)
    load_s = time.perf_counter() - start
    log.info(
        "[INF] model_name=%s margins by %s: classes=%d trees=%d depth=%d load_ms=%.0f",
        model_label,
        MARGIN_KERNEL_NAME,
        len(chosen),
        sum(k.n_trees for k in chosen),
        max(k.depth for k in chosen),
        load_s * 1000,
    )
    return MarginChoice(ClassMarginKernels(tuple(chosen)), None, load_s)
