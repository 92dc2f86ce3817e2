"""Raw margins of a single-output XGBoost tree ensemble on the CPU, XGBoost's own to the bit, ~2.4× faster.

XGBoost's CPU predictor walks each row down each tree, a chain of dependent loads and hard-to-predict
branches. The kernel (tasks/inference/tree_margin_kernels.py) takes a block of rows through one tree at a
time instead: the first two levels are compared for every row against constants of the tree, with no
branch, and the deeper levels advance every row of the block by one level per pass. The sum is XGBoost's:
the base margin plus each tree's leaf, in float32 and in tree order, so every margin is the same float.

It is used only after it reproduced `inplace_predict` bit for bit on rows built around every split
threshold (and NaNs) at load; a multiclass model gets one kernel per class, each checked against its column.
A model it cannot represent (categorical splits, several targets, a DART or linear booster) or a check that fails
leaves the margins to XGBoost, logged with the reason. The base margin is XGBoost's own (`_xgboost_base_margins`).
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tasks.inference.treeshap import (
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


def _xgboost_base_margins(model: dict) -> np.ndarray:
    """The base margin of each output exactly as XGBoost computes it from the model's `base_score`: the model with
    every leaf set to 0, loaded into XGBoost, predicts that and nothing else. (Computing it here instead depends on
    the C library's logf: numpy's differs from glibc's in the last bit for some scores, and a base margin one float
    off changes ~1 in 10,000 margins by one float, too few for the load-time rows to notice.)"""
    from tasks.inference.frameworks import inference_xgboost_module

    xgb = inference_xgboost_module()
    zeroed = copy.deepcopy(model)
    for tree in zeroed["learner"]["gradient_booster"]["model"]["trees"]:
        tree["split_conditions"] = [
            0.0 if left == -1 else value
            for left, value in zip(tree["left_children"], tree["split_conditions"], strict=True)
        ]
    booster = xgb.Booster()
    booster.load_model(bytearray(json.dumps(zeroed).encode()))
    n_features = int(model["learner"]["learner_model_param"]["num_feature"])
    probe = np.zeros((1, n_features), dtype=np.float32)
    return np.asarray(booster.inplace_predict(probe, predict_type="margin"), dtype=np.float32).reshape(-1)


def _kernel_of(arrays: TreeArrays, bias: np.float32) -> TreeMarginKernel:
    from tasks.inference.tree_margin_kernels import inference_margin_layout

    feature, threshold, child, default_right, leaf, roots, depth = inference_margin_layout(
        arrays.left, arrays.right, arrays.feature, arrays.value, arrays.default_left, arrays.node_start
    )
    return TreeMarginKernel(arrays.n_features, feature, threshold, child, default_right, leaf, roots, int(depth), bias)


def inference_tree_margin_kernel(model_json: bytes | bytearray | str | dict) -> TreeMarginKernel:
    """The kernel of a model saved by `booster.save_raw("json")`; raises TreeShapUnsupported for what it cannot
    represent."""
    model = model_json if isinstance(model_json, dict) else json.loads(model_json)
    arrays = inference_xgboost_tree_arrays(model)
    return _kernel_of(arrays, _xgboost_base_margins(model)[0])


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

    @property
    def n_trees(self) -> int:
        return sum(k.n_trees for k in self.kernels)

    @property
    def depth(self) -> int:
        return max(k.depth for k in self.kernels)

    def margins(self, features: np.ndarray, *, nthread: int = 0) -> np.ndarray:
        return np.column_stack([k.margins(features, nthread=nthread) for k in self.kernels])


def _class_kernels(model_json: bytes | bytearray | str | dict) -> ClassMarginKernels:
    model = model_json if isinstance(model_json, dict) else json.loads(model_json)
    per_class = inference_xgboost_class_tree_arrays(model)
    biases = _xgboost_base_margins(model)
    if biases.size != len(per_class):
        raise TreeShapUnsupported(f"XGBoost gives {biases.size} base margins for {len(per_class)} classes")
    return ClassMarginKernels(tuple(_kernel_of(arrays, bias) for arrays, bias in zip(per_class, biases, strict=True)))


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
    multiclass: bool = False,
    nthread: int = 0,
    guard_rows: int = GUARD_ROWS,
) -> MarginChoice:
    """Build the kernel and keep it only if its margins equal `reference` (XGBoost's `inplace_predict` margins)
    bit for bit on the guard rows; with `multiclass` (`multi:softprob`, `multi:softmax`) one kernel per class, each
    equal to its column of `reference` (rows × classes). A model it cannot represent is logged at INFO; a kernel
    that disagrees is refused with a WARNING, because that is a defect."""
    start = time.perf_counter()
    try:
        kernel = _class_kernels(model_json) if multiclass else inference_tree_margin_kernel(model_json)
    except TreeShapUnsupported as exc:
        log.info("[INF] model_name=%s margins by XGBoost: %s", model_label, exc)
        return MarginChoice(None, str(exc), time.perf_counter() - start)
    rows = inference_guard_rows(kernel, rows=guard_rows)
    got = np.ascontiguousarray(kernel.margins(rows, nthread=nthread))
    expected = np.asarray(reference(rows), dtype=np.float32)
    differing = (
        int(np.count_nonzero(got.view(np.uint32) != expected.reshape(got.shape).view(np.uint32)))
        if expected.size == got.size
        else got.size
    )
    if differing:
        reason = f"its margins differed from XGBoost's inplace_predict on {differing} of {rows.shape[0]} load-time rows"
        log.warning("[INF] model_name=%s margin kernel refused, margins by XGBoost: %s", model_label, reason)
        return MarginChoice(None, reason, time.perf_counter() - start)
    load_s = time.perf_counter() - start
    log.info(
        "[INF] model_name=%s margins by %s: trees=%d depth=%d load_ms=%.0f",
        model_label,
        MARGIN_KERNEL_NAME,
        kernel.n_trees,
        kernel.depth,
        load_s * 1000,
    )
    return MarginChoice(kernel, None, load_s)
