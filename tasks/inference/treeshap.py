"""Exact path-dependent TreeSHAP for XGBoost tree models, from lookup tables built at model load.

Path-dependent TreeSHAP gives each leaf's contribution to the d distinct features split on along
its root path as a function of d bits only: for each of those features, whether the row follows
every split on it towards the leaf (a missing value takes the default branch). The cover ratios
and the leaf value are constants of the leaf, so at load the leaf's d contributions are computed
for all 2^d bit patterns with TreeSHAP's own extend/unwind arithmetic (Lundberg et al., as XGBoost
does it). Explaining a row then costs one comparison per split plus d additions per leaf, instead
of TreeSHAP's O(leaves × depth²) per tree.

The same holds for a whole subtree: its leaves' patterns follow from the row's pattern at the
subtree's root and the row's decisions at the subtree's own splits. So a small subtree (its root's
path features plus its splits within 8 bits: three levels below the root's first feature, two below
five) gets one table at load, the sum of its leaves' entries, and a row reads each of the subtree's
distinct features once: a depth-4 tree becomes two subtrees below its root, ~8 reads each instead of
16 leaves × 4, and 3.4 × the rows per second of the leaf-by-leaf reads on the credit model
(bench/reasons.py).

The kernel is only trusted after it matched XGBoost's `pred_contribs` on a sample of rows at load;
anything it cannot represent (categorical splits, several outputs, linear or DART boosters, paths
too wide for a table) is left to XGBoost.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np

log = logging.getLogger("scoring.inference")

KERNEL_NAME = "table_treeshap"
XGBOOST_NAME = "xgboost"
DEFAULT_MAX_PATH_FEATURES = 12
# 8 bits (a subtree of 3 levels below 1 feature, or 2 levels below 5) measured fastest at depths 4, 6 and 8 on
# these cores (bench/reasons.py); past it the tables stop fitting in L2 and grow faster than the reads shrink.
DEFAULT_GROUP_BITS = 8
_MAX_GROUP_BITS = 16
# A 300-tree depth-6 model needs at most ~60 MB; a depth-8 one up to 4 MB per tree. Past this the tables stop
# fitting next to the worker's chunks, and XGBoost's own TreeSHAP is the better trade.
DEFAULT_MAX_TABLE_BYTES = 256 * 2**20
GUARD_TOLERANCE = 1e-5
GUARD_ROWS = 256
# Kernel and XGBoost each may be off by up to the guard tolerance, so two contributions closer
# than twice that may rank either way in XGBoost.
TIE_TOLERANCE = 2 * GUARD_TOLERANCE
_SENTINEL_THRESHOLD = float(np.finfo(np.float32).max) / 2
# Bits of the int32 pattern word; far beyond what the table-size cap lets through.
_PATTERN_BITS = 30
# numba's workqueue threading layer (what is left where neither TBB nor OpenMP is installed)
# aborts the process when two threads launch parallel kernels at once; each launch already
# uses every core, so serialising them costs nothing.
_PARALLEL_LAUNCH = threading.Lock()

# XGBoost keeps `base_score` on the scale of the prediction; the bias column holds it as a margin.
_LOGIT_OBJECTIVES = frozenset({"binary:logistic", "reg:logistic"})
_LOG_OBJECTIVES = frozenset({"count:poisson", "reg:gamma", "reg:tweedie", "survival:cox"})
_IDENTITY_OBJECTIVES = frozenset(
    {
        "reg:squarederror",
        "reg:squaredlogerror",
        "reg:pseudohubererror",
        "reg:absoluteerror",
        "reg:quantileerror",
        "binary:hinge",
        "binary:logitraw",
    }
)


class TreeShapUnsupported(Exception):
    """The model has something the table kernel does not represent; XGBoost explains it."""


def _base_margin(learner: dict) -> float:
    objective = learner["objective"]["name"]
    base_score = json.loads(learner["learner_model_param"]["base_score"])
    score = float(np.float32(base_score[0] if isinstance(base_score, list) else base_score))
    if objective in _LOGIT_OBJECTIVES:
        return -math.log(1.0 / score - 1.0)
    if objective in _LOG_OBJECTIVES:
        return math.log(score)
    if objective in _IDENTITY_OBJECTIVES:
        return score
    raise TreeShapUnsupported(f"objective {objective}: its base_score margin is not known to the kernel")


@dataclass
class TreeShapKernel:
    """Subtree tables of one single-output tree ensemble; `contributions` explains rows.

    The nodes of every tree are laid out in preorder (`tree_node_start` marks each tree's first). A group is a
    subtree explained by one table, or a single leaf: its table is indexed by the row's pattern at the group's
    root (`group_width` bits, one per distinct feature above it: does the row follow every split on it?) and
    the row's decisions at the group's own splits (`group_node`, in order, next bits up), and holds, per
    distinct feature of the group (`group_feature`), the sum of its leaves' TreeSHAP contributions. The splits
    above the groups (`push_node`) push each row's pattern down to the groups' roots.
    """

    n_features: int
    node_feature: np.ndarray
    node_value: np.ndarray
    node_default_left: np.ndarray
    node_bit: np.ndarray
    node_left: np.ndarray
    node_right: np.ndarray
    tree_node_start: np.ndarray
    push_node: np.ndarray
    tree_push_start: np.ndarray
    group_root: np.ndarray
    group_width: np.ndarray
    group_node_start: np.ndarray
    group_node: np.ndarray
    group_feature_start: np.ndarray
    group_feature: np.ndarray
    group_offset: np.ndarray
    tree_group_start: np.ndarray
    table: np.ndarray
    bias: float
    widest_path: int
    layout = "paths"
    """Tables per subtree and pattern (any tree shape); `oblivious` kernels have one table per tree."""

    @property
    def n_trees(self) -> int:
        return self.tree_node_start.size - 1

    def tree_kernel(self, tree: int) -> TreeShapKernel:
        """The kernel of tree `tree` alone (bias 0): the same tables, so its contributions are that tree's share
        of this kernel's, computed by the same arithmetic."""
        nodes = slice(int(self.tree_node_start[tree]), int(self.tree_node_start[tree + 1]))
        pushes = slice(int(self.tree_push_start[tree]), int(self.tree_push_start[tree + 1]))
        groups = slice(int(self.tree_group_start[tree]), int(self.tree_group_start[tree + 1]))
        members = self.group_node_start[groups.start : groups.stop + 1]
        features = self.group_feature_start[groups.start : groups.stop + 1]
        # Groups' tables follow one another tree by tree: this tree's end where the next tree's first group starts.
        first = int(self.group_offset[groups.start]) if groups.stop > groups.start else 0
        last = int(self.group_offset[groups.stop]) if groups.stop < self.group_offset.size else self.table.size
        return TreeShapKernel(
            n_features=self.n_features,
            node_feature=self.node_feature[nodes],
            node_value=self.node_value[nodes],
            node_default_left=self.node_default_left[nodes],
            node_bit=self.node_bit[nodes],
            node_left=self.node_left[nodes],
            node_right=self.node_right[nodes],
            tree_node_start=np.array([0, nodes.stop - nodes.start], dtype=np.int64),
            push_node=self.push_node[pushes],
            tree_push_start=np.array([0, pushes.stop - pushes.start], dtype=np.int64),
            group_root=self.group_root[groups],
            group_width=self.group_width[groups],
            group_node_start=members - members[0],
            group_node=self.group_node[int(members[0]) : int(members[-1])],
            group_feature_start=features - features[0],
            group_feature=self.group_feature[int(features[0]) : int(features[-1])],
            group_offset=self.group_offset[groups] - first,
            tree_group_start=np.array([0, groups.stop - groups.start], dtype=np.int64),
            table=self.table[first:last],
            bias=0.0,
            widest_path=self.widest_path,
        )

    @property
    def table_bytes(self) -> int:
        return self.table.nbytes

    @cached_property
    def used_features(self) -> np.ndarray:
        """Features split on somewhere; every other contribution is exactly 0, here and in XGBoost."""
        used = np.zeros(self.n_features, dtype=bool)
        used[self.node_feature[self.node_left >= 0]] = True
        return used

    def split_thresholds(self, feature: int) -> np.ndarray:
        splits = (self.node_left >= 0) & (self.node_feature == feature)
        return np.unique(self.node_value[splits])

    def contributions(self, features: np.ndarray, *, nthread: int = 0) -> np.ndarray:
        """rows × (features + 1) float64 contributions, the bias last, like XGBoost's `pred_contribs`."""
        import numba

        from tasks.inference.treeshap_kernels import inference_group_contributions

        x, out, threads = inference_kernel_arrays(features, self.n_features, nthread)
        if x.shape[0] == 0:
            return out
        # Long blocks amortise each tree's setup, as long as a tree's patterns for the block stay in
        # L2 (512 KiB of int32); a few blocks per thread keep the threads busy.
        widest_tree = int(np.diff(self.tree_node_start).max())
        block = int(min(512, 2**17 // widest_tree, max(16, math.ceil(x.shape[0] / (2 * threads)))))
        with _PARALLEL_LAUNCH:
            numba.set_num_threads(threads)
            inference_group_contributions(
                x,
                self.node_feature,
                self.node_value,
                self.node_default_left,
                self.node_bit,
                self.node_left,
                self.node_right,
                self.tree_node_start,
                self.push_node,
                self.tree_push_start,
                self.tree_group_start,
                self.group_root,
                self.group_width,
                self.group_node_start,
                self.group_node,
                self.group_feature_start,
                self.group_feature,
                self.group_offset,
                self.table,
                self.bias,
                out,
                max(block, 1),
            )
        return out


@dataclass(frozen=True)
class TreeArrays:
    """A single-output tree ensemble in the one layout the table kernel reads, whatever framework it came from.

    Per-tree node arrays are concatenated (`node_start` marks each tree's first node); children are
    indices within their tree, -1 at a leaf. A row goes left when `value < threshold` and, when the
    value is NaN, when `default_left`. `value` holds each split's threshold (a float32 number, compared
    in float32 as the features are) and each leaf's value (float64). `cover` is what TreeSHAP weighs
    the branches with (training hessians, data counts or sample weights, as the framework keeps them).
    The ensemble's output is `bias` plus the sum of the leaves the row reaches, times nothing else.
    """

    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    value: np.ndarray
    default_left: np.ndarray
    cover: np.ndarray
    node_start: np.ndarray
    bias: float
    n_features: int


def inference_kernel_arrays(features: np.ndarray, n_features: int, nthread: int) -> tuple[np.ndarray, np.ndarray, int]:
    """What a kernel's `contributions` hands its numba function: the rows as C-contiguous float32, the zeroed
    rows × (features + 1) output, and the threads to run on (0: all numba has)."""
    import numba

    x = np.ascontiguousarray(features, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != n_features:
        raise ValueError(f"the kernel explains {n_features} features, got an array of shape {x.shape}")
    # numba.config sets its settings at import, from the environment: they are not attributes mypy can see.
    available: int = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
    threads = available if nthread <= 0 else min(nthread, available)
    return x, np.zeros((x.shape[0], n_features + 1), dtype=np.float64), threads


def inference_leq_threshold(threshold: float | np.ndarray) -> np.ndarray:
    """The float32 threshold t' with `x < t'` exactly when `x <= threshold`, for every float32 x.

    LightGBM, scikit-learn and CatBoost send a row left (or to bit 0) when its value is at most a
    float64 threshold; the kernel compares float32 values with `<`. The largest float32 not above
    the threshold splits the float32 values the same way, and its successor turns `<=` into `<`.
    """
    t = np.asarray(threshold, dtype=np.float64)
    # A threshold beyond float32 (LightGBM's +inf or 1e300 "missing values only" splits) becomes ±inf, which is exact.
    with np.errstate(over="ignore", invalid="ignore"):
        low = t.astype(np.float32)
        low = np.where(low.astype(np.float64) > t, np.nextafter(low, np.float32(-np.inf)), low)
        return np.nextafter(low, np.float32(np.inf)).astype(np.float32)


def inference_xgboost_tree_arrays(model_json: bytes | bytearray | str | dict) -> TreeArrays:
    """The trees of a model saved by `booster.save_raw("json")`; raises TreeShapUnsupported."""
    model = model_json if isinstance(model_json, dict) else json.loads(model_json)
    learner = model["learner"]
    params = learner["learner_model_param"]
    booster = learner["gradient_booster"]
    if booster["name"] != "gbtree":
        raise TreeShapUnsupported(f"booster {booster['name']}: the kernel explains plain gbtree models only")
    if int(params.get("num_class", "0")) > 1 or int(params.get("num_target", "1")) > 1:
        raise TreeShapUnsupported(
            f"{params.get('num_class')} classes, {params.get('num_target')} targets: the kernel explains "
            "single-output models only"
        )
    trees = booster["model"]["trees"]
    if not trees:
        raise TreeShapUnsupported("the model has no trees")
    for tree in trees:
        if int(tree["tree_param"].get("size_leaf_vector", "1")) > 1:
            raise TreeShapUnsupported(f"tree {tree['id']} has vector leaves (multi-target)")
        if any(tree["split_type"]) or tree.get("categories_nodes"):
            raise TreeShapUnsupported(f"tree {tree['id']} has categorical splits")
    sizes = np.array([len(tree["left_children"]) for tree in trees], dtype=np.int64)

    def concatenated(key: str, dtype: type) -> np.ndarray:
        return np.concatenate([np.asarray(tree[key], dtype=dtype) for tree in trees])

    # XGBoost keeps split conditions and leaf values as float32 and compares `x < condition`.
    return TreeArrays(
        left=concatenated("left_children", np.int64),
        right=concatenated("right_children", np.int64),
        feature=concatenated("split_indices", np.int64),
        value=concatenated("split_conditions", np.float32).astype(np.float64),
        default_left=concatenated("default_left", np.uint8),
        cover=concatenated("sum_hessian", np.float32).astype(np.float64),
        node_start=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        bias=_base_margin(learner),
        n_features=int(params["num_feature"]),
    )


def inference_xgboost_class_tree_arrays(model_json: bytes | bytearray | str | dict) -> list[TreeArrays]:
    """The trees of a multiclass model (`multi:softprob`) split by class: the k-th holds the trees whose
    `tree_info` is k, whose leaves add up to class k's margin. Each one's `bias` is 0: a softmax model's base
    score is the margin of every class alike, so the caller sets it from XGBoost's own bias column."""
    model = model_json if isinstance(model_json, dict) else json.loads(model_json)
    learner = model["learner"]
    n_classes = int(learner["learner_model_param"].get("num_class", "0"))
    if n_classes < 2:
        raise TreeShapUnsupported("not a multiclass model")
    gbtree = learner["gradient_booster"]
    if gbtree["name"] != "gbtree":
        raise TreeShapUnsupported(f"booster {gbtree['name']}: the kernel explains plain gbtree models only")
    trees, tree_info = gbtree["model"]["trees"], gbtree["model"]["tree_info"]
    per_class = []
    for k in range(n_classes):
        own = [t for t, info in zip(trees, tree_info, strict=True) if info == k]
        single = {
            "learner": {
                **learner,
                "learner_model_param": {
                    **learner["learner_model_param"],
                    "num_class": "0",
                    "base_score": "0",
                    "num_target": "1",
                },
                "objective": {"name": "reg:squarederror"},
                "gradient_booster": {**gbtree, "model": {**gbtree["model"], "trees": own, "tree_info": [0] * len(own)}},
            }
        }
        per_class.append(dataclasses.replace(inference_xgboost_tree_arrays(single), bias=0.0))
    return per_class


def _table_offsets(entries: np.ndarray, max_table_bytes: int) -> np.ndarray:
    """Where each table starts in one float64 array of them all; refuses tables over the cap."""
    table_bytes = int(entries.sum()) * 8
    if table_bytes > max_table_bytes:
        raise TreeShapUnsupported(
            f"the tables would take {table_bytes / 2**20:.0f} MiB, over the cap of {max_table_bytes / 2**20:.0f} MiB"
        )
    return np.concatenate([[0], np.cumsum(entries)[:-1]]).astype(np.int64)


def inference_treeshap_kernel(
    model: TreeArrays | bytes | bytearray | str | dict,
    *,
    max_path_features: int = DEFAULT_MAX_PATH_FEATURES,
    max_table_bytes: int = DEFAULT_MAX_TABLE_BYTES,
    group_bits: int = DEFAULT_GROUP_BITS,
) -> TreeShapKernel:
    """The table kernel of a tree ensemble (`TreeArrays`, or XGBoost's `save_raw("json")`);
    raises TreeShapUnsupported.

    Each leaf's contributions for all 2^d patterns of its d path features are computed first; then a subtree
    whose root pattern and own splits fit in `group_bits` bits gets one table summing its leaves' entries
    (0: every leaf is its own group). A row then reads each group's distinct features once, instead of d
    entries of every leaf."""
    if not 0 <= max_path_features <= _PATTERN_BITS:
        raise ValueError(f"max_path_features must be within 0..{_PATTERN_BITS}, got {max_path_features}")
    if not 0 <= group_bits <= _MAX_GROUP_BITS:
        raise ValueError(f"group_bits must be within 0..{_MAX_GROUP_BITS}, got {group_bits}")
    trees = model if isinstance(model, TreeArrays) else inference_xgboost_tree_arrays(model)
    if trees.node_start.size < 2:
        raise TreeShapUnsupported("the model has no trees")
    # A split at +inf is exact (only NaN by its default and +inf cross it: CatBoost's missing-value border
    # under nan_mode Max, `x <= FLT_MAX`); a NaN threshold or an infinite leaf is not.
    is_leaf = trees.left < 0
    if np.isnan(trees.value).any() or not np.isfinite(trees.value[is_leaf]).all():
        raise TreeShapUnsupported("a split threshold is NaN or a leaf value is not finite")
    bias_margin = trees.bias
    node_start = trees.node_start
    # numba takes ~0.3 s to import (more on a cold disk): the kernels load with the first model
    # explained, not with this module, so `score --help` and the flows' imports never pay for it.
    from tasks.inference.treeshap_kernels import (
        inference_group_layout,
        inference_group_tables,
        inference_leaf_tables,
        inference_tree_layout,
    )

    layout = inference_tree_layout(
        trees.left,
        trees.right,
        trees.feature,
        trees.value,
        trees.default_left,
        trees.cover,
        node_start,
        max_path_features,
    )
    (
        node_feature,
        node_value,
        node_default_left,
        node_bit,
        node_left,
        node_right,
        tree_node_start,
        tree_leaf_start,
        tree_mean,
        leaf_node,
        leaf_width,
        leaf_feature,
        leaf_zero,
        leaf_value,
        widest,
        node_width,
    ) = layout
    if widest > max_path_features:
        raise TreeShapUnsupported(
            f"a root path splits on {widest} distinct features, over the table cap of {max_path_features}"
        )
    entries = leaf_width.astype(np.int64) << leaf_width.astype(np.int64)
    leaf_offset = _table_offsets(entries, max_table_bytes)
    leaf_table = np.empty(int(entries.sum()), dtype=np.float64)
    with _PARALLEL_LAUNCH:
        inference_leaf_tables(leaf_width, leaf_zero, leaf_value, leaf_offset, leaf_table)
    if not np.isfinite(leaf_table).all():
        # A zero-cover branch makes TreeSHAP divide by zero; the framework's answer there is its own.
        raise TreeShapUnsupported("a split has a branch with zero cover")
    n_features = trees.n_features
    if node_feature.size and int(node_feature.max()) >= n_features:
        raise TreeShapUnsupported(f"a split uses feature {int(node_feature.max())} of a {n_features}-feature model")
    leaf_feature = np.ascontiguousarray(leaf_feature[:, : max(1, widest)])
    (
        push_node,
        tree_push_start,
        group_root,
        group_width,
        group_node_start,
        group_node,
        group_leaf_start,
        group_feature_start,
        group_feature,
        tree_group_start,
    ) = inference_group_layout(
        node_left,
        node_right,
        node_width,
        tree_node_start,
        leaf_node,
        leaf_width,
        leaf_feature,
        tree_leaf_start,
        group_bits,
    )
    group_entries = np.diff(group_feature_start) << (group_width.astype(np.int64) + np.diff(group_node_start))
    group_offset = _table_offsets(group_entries, max_table_bytes)
    table = np.zeros(int(group_entries.sum()), dtype=np.float64)
    with _PARALLEL_LAUNCH:
        inference_group_tables(
            node_left,
            node_right,
            node_bit,
            tree_node_start,
            tree_group_start,
            group_root,
            group_width,
            group_node_start,
            group_node,
            group_leaf_start,
            group_feature_start,
            group_feature,
            group_offset,
            leaf_node,
            leaf_width,
            leaf_feature,
            leaf_offset,
            leaf_table,
            table,
        )
    return TreeShapKernel(
        n_features=n_features,
        node_feature=node_feature,
        node_value=node_value,
        node_default_left=node_default_left,
        node_bit=node_bit,
        node_left=node_left,
        node_right=node_right,
        tree_node_start=tree_node_start,
        push_node=push_node,
        tree_push_start=tree_push_start,
        group_root=group_root,
        group_width=group_width,
        group_node_start=group_node_start,
        group_node=group_node,
        group_feature_start=group_feature_start,
        group_feature=group_feature,
        group_offset=group_offset,
        tree_group_start=tree_group_start,
        table=table,
        bias=bias_margin + float(tree_mean.sum()),
        widest_path=int(widest),
    )


class SplitSource(Protocol):
    """What the guard rows are built from: a model's features and the thresholds it splits each one at."""

    @property
    def n_features(self) -> int: ...

    @property
    def used_features(self) -> np.ndarray: ...

    def split_thresholds(self, feature: int) -> np.ndarray: ...


def inference_guard_rows(kernel: SplitSource, *, rows: int = GUARD_ROWS, seed: int = 0) -> np.ndarray:
    """Rows that exercise the splits: exact thresholds, values just below them, values around them, NaNs."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, kernel.n_features)).astype(np.float32)
    for feature in np.flatnonzero(kernel.used_features):
        thresholds = kernel.split_thresholds(int(feature))
        # Thresholds at the ends of the float32 range (CatBoost's missing-value borders at ±FLT_MAX, scikit-learn's
        # "missing values only" splits, a split at +inf) send every finite value one way and NaN the other; the NaNs
        # below test them. As values they are no model input (scikit-learn reads its own +inf split as the float32
        # maximum, which a value of exactly that would cross), and they would stretch the spread past float32.
        inner = thresholds[np.abs(thresholds) < _SENTINEL_THRESHOLD]
        if inner.size == 0:
            continue
        lo, hi = float(inner.min()), float(inner.max())
        pad = 0.1 * (hi - lo) + 0.05 * max(abs(lo), abs(hi)) + 1e-3
        picked = inner[rng.integers(0, inner.size, rows)]
        kind = rng.random(rows)
        around = rng.uniform(lo - pad, hi + pad, rows).astype(np.float32)
        below = np.nextafter(picked, np.float32(-np.inf))
        x[:, feature] = np.where(kind < 0.25, picked, np.where(kind < 0.4, below, around))
    x[rng.random(x.shape) < 0.1] = np.nan
    return x


def inference_treeshap_max_diff(
    kernel: ContributionKernel, reference: Callable[[np.ndarray], np.ndarray], rows: np.ndarray, *, nthread: int = 0
) -> float:
    """Largest absolute difference to `reference` (XGBoost's pred_contribs), bias column included; inf on NaN."""
    return inference_max_abs_diff(kernel.contributions(rows, nthread=nthread), reference(rows))


def inference_row_scale(values: np.ndarray) -> np.ndarray:
    """Per row, the magnitude its float noise is relative to: 1, or the row's largest |value| where that is
    larger. A float32 framework keeps ~7 significant digits, so a regression whose base value is 50,000 agrees
    with any exact computation only to ~0.01: its contributions are compared relative to that magnitude."""
    values = np.asarray(values, dtype=np.float64)
    return np.maximum(1.0, np.abs(values).max(axis=-1, keepdims=True) if values.ndim > 1 else np.abs(values))


def inference_max_abs_diff(ours: np.ndarray, theirs: np.ndarray) -> float:
    """The largest absolute difference, divided by the row's magnitude where that exceeds 1 (`inference_row_scale`
    of `theirs`: log-odds contributions stay compared absolutely); inf where the shapes differ, nothing was
    compared or a value is not finite."""
    theirs = np.asarray(theirs, dtype=np.float64)
    if theirs.shape != ours.shape or ours.size == 0:
        return math.inf
    diff = np.abs(ours - theirs) / inference_row_scale(theirs)
    return float(diff.max()) if np.isfinite(diff).all() else math.inf


class ContributionKernel(Protocol):
    """What explains rows and what the load-time checks read: `TreeShapKernel`, or the oblivious-tree kernel
    (tasks/inference/oblivious_treeshap.py) built from one."""

    n_features: int
    bias: float
    widest_path: int
    layout: str

    @property
    def n_trees(self) -> int: ...

    @property
    def table_bytes(self) -> int: ...

    @property
    def used_features(self) -> np.ndarray: ...

    def split_thresholds(self, feature: int) -> np.ndarray: ...

    def contributions(self, features: np.ndarray, *, nthread: int = 0) -> np.ndarray: ...


@dataclass(frozen=True)
class KernelChoice:
    """Which kernel explains the model's rows, and why the framework's own TreeSHAP does when it does."""

    kernel: ContributionKernel | None
    reason: str | None
    max_abs_diff: float | None
    load_s: float
    framework: str = XGBOOST_NAME

    @property
    def name(self) -> str:
        return KERNEL_NAME if self.kernel is not None else self.framework


def inference_checked_treeshap(
    model: TreeArrays | bytes | bytearray | str | dict,
    reference: Callable[[np.ndarray], np.ndarray],
    *,
    model_label: str,
    framework: str = XGBOOST_NAME,
    reference_name: str = "XGBoost pred_contribs",
    nthread: int = 0,
    max_path_features: int = DEFAULT_MAX_PATH_FEATURES,
    max_table_bytes: int = DEFAULT_MAX_TABLE_BYTES,
    guard_rows: int = GUARD_ROWS,
    tolerance: float = GUARD_TOLERANCE,
    rows_as_seen: Callable[[np.ndarray], np.ndarray] | None = None,
    kernel_of: Callable[[TreeArrays], ContributionKernel] | None = None,
) -> KernelChoice:
    """Build the table kernel and keep it only if it matches `reference` (the framework's own
    contributions, `framework` naming who computes them instead) on the guard rows. `rows_as_seen` is
    what the engine does to rows before explaining them (its `_explained_rows`); the guard rows go
    through it too, so the check covers the kernel as it will be used. `kernel_of` builds another kernel of the
    same contributions from `model`'s TreeArrays (the oblivious-tree one); it is checked the same way.

    A model the kernel cannot represent is logged at INFO (a property of the model); a kernel
    that disagrees with the framework is refused with a WARNING, because that is a defect.
    """
    start = time.perf_counter()
    try:
        kernel = (
            inference_treeshap_kernel(model, max_path_features=max_path_features, max_table_bytes=max_table_bytes)
            if kernel_of is None
            else kernel_of(model if isinstance(model, TreeArrays) else inference_xgboost_tree_arrays(model))
        )
    except TreeShapUnsupported as exc:
        log.info("[INF] model_name=%s contributions by %s: %s", model_label, reference_name, exc)
        return KernelChoice(None, str(exc), None, time.perf_counter() - start, framework)
    rows = inference_guard_rows(kernel, rows=guard_rows)
    if rows_as_seen is not None:
        rows = rows_as_seen(rows)
    try:
        max_diff = inference_treeshap_max_diff(kernel, reference, rows, nthread=nthread)
    except Exception as exc:  # the reference is the framework itself: whatever fails there, it keeps the job
        reason = f"load-time check against {reference_name} failed: {type(exc).__name__}: {exc}"
        log.warning(
            "[INF] model_name=%s TreeSHAP kernel refused, contributions by %s: %s", model_label, reference_name, reason
        )
        return KernelChoice(None, reason, None, time.perf_counter() - start, framework)
    if not max_diff <= tolerance:
        reason = (
            f"max_abs_diff={max_diff:.3g} against {reference_name} on {rows.shape[0]} load-time rows, "
            f"over the tolerance {tolerance:g}"
        )
        log.warning(
            "[INF] model_name=%s TreeSHAP kernel refused, contributions by %s: %s", model_label, reference_name, reason
        )
        return KernelChoice(None, reason, max_diff, time.perf_counter() - start, framework)
    load_s = time.perf_counter() - start
    log.info(
        "[INF] model_name=%s contributions by %s: trees=%d widest_path=%d table_mib=%.1f max_abs_diff=%.2g "
        "load_ms=%.0f",
        model_label,
        KERNEL_NAME,
        kernel.n_trees,
        kernel.widest_path,
        kernel.table_bytes / 2**20,
        max_diff,
        load_s * 1000,
    )
    return KernelChoice(kernel, None, max_diff, load_s, framework)


def inference_near_tie_rows(
    values: np.ndarray,
    top_k: int,
    *,
    exact: np.ndarray | None = None,
    tolerance: float | np.ndarray = TIE_TOLERANCE,
    by_size: bool = False,
) -> np.ndarray:
    """Rows whose top-k reasons could change under float noise of `tolerance` (a number, or one per row) in
    the contributions.

    Mirrors how reasons are ranked: by signed value, largest first, only values above 0 kept (a binary
    job's reasons), or with `by_size` by |value|, largest first, any sign but 0 (a forecast job's reasons
    up and down: the same test on |value|). A row is flagged when, within its first k ranks, a value that
    could be positive lies within `tolerance` of 0 or of the next rank's value. `exact` marks features
    whose value is exactly known (never split on: 0 in every implementation), so two of them never make a tie.
    """
    n_rows, n_features = values.shape
    if n_rows == 0 or n_features == 0 or top_k <= 0:
        return np.zeros(n_rows, dtype=bool)
    exact = np.zeros(n_features, dtype=bool) if exact is None else np.asarray(exact, dtype=bool)
    tolerance = np.broadcast_to(np.asarray(tolerance, dtype=np.float64).reshape(-1), (n_rows,))
    from tasks.inference.treeshap_kernels import inference_near_ties

    return inference_near_ties(
        np.asarray(values, dtype=np.float64), top_k, exact, np.ascontiguousarray(tolerance), by_size
    )


@dataclass
class ContributionCounts:
    """Rows explained so far by each path; `tie_recomputed` rows were explained twice."""

    kernel_rows: int = 0
    tie_recomputed_rows: int = 0
    framework_rows: int = 0
    """Rows the framework's own TreeSHAP explained (the kernel could not represent the model)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, *, kernel_rows: int = 0, tie_recomputed_rows: int = 0, framework_rows: int = 0) -> None:
        with self._lock:
            self.kernel_rows += kernel_rows
            self.tie_recomputed_rows += tie_recomputed_rows
            self.framework_rows += framework_rows
