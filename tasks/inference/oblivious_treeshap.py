"""Exact path-dependent TreeSHAP for oblivious (symmetric) trees, one table per tree, built from the table kernel.

An oblivious tree of depth d asks the same question (feature, threshold, missing-value default) of every node
of a level, so a row's direction at every node of the tree is fixed by its d answers, which are the bits of
the leaf it reaches. TreeSHAP's contributions of a row depend only on which splits it follows, so each tree's
contributions are a function of the leaf index alone: at load, a table leaf index → contributions of the
tree's d' distinct features (2^d × d' floats). Explaining a row then costs d comparisons and d' additions
per tree, where the table kernel (tasks/inference/treeshap.py) reads d' entries of all 2^d leaves.

The tables hold no arithmetic of their own: each reachable leaf's row is the table kernel's contributions of
that tree alone (`TreeShapKernel.tree_kernel`) for a row that reaches the leaf. Leaf indices no row can reach
(a feature split on at several levels with contradictory answers) hold NaN: a row never lands there, and if
one did, the load-time checks would see a NaN instead of a plausible number.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tasks.inference.treeshap import (
    _PARALLEL_LAUNCH,
    DEFAULT_MAX_PATH_FEATURES,
    DEFAULT_MAX_TABLE_BYTES,
    TreeArrays,
    TreeShapKernel,
    TreeShapUnsupported,
    inference_kernel_arrays,
    inference_treeshap_kernel,
)


@dataclass
class ObliviousTreeShapKernel:
    """Per-tree tables of an oblivious tree ensemble; `contributions` explains rows like `TreeShapKernel`'s.

    Levels are concatenated root first (`tree_level_start` marks each tree's); a row goes left (bit 0) when
    `value < level_value` in float32, or, when the value is NaN, when `level_default_left`. Tree t's table
    starts at `tree_table_start[t]`, one row of `width` contributions per leaf index, in the order of the
    tree's distinct features `tree_feature[tree_feature_start[t]:tree_feature_start[t + 1]]`.
    """

    n_features: int
    level_feature: np.ndarray
    level_value: np.ndarray
    level_default_left: np.ndarray
    tree_level_start: np.ndarray
    tree_feature: np.ndarray
    tree_feature_start: np.ndarray
    tree_table_start: np.ndarray
    table: np.ndarray
    bias: float
    widest_path: int
    layout = "oblivious"

    @property
    def n_trees(self) -> int:
        return self.tree_level_start.size - 1

    @property
    def table_bytes(self) -> int:
        return self.table.nbytes

    @cached_property
    def used_features(self) -> np.ndarray:
        """Features split on somewhere; every other contribution is exactly 0, here and in the framework."""
        used = np.zeros(self.n_features, dtype=bool)
        used[self.level_feature] = True
        return used

    def split_thresholds(self, feature: int) -> np.ndarray:
        return np.unique(self.level_value[self.level_feature == feature])

    def contributions(self, features: np.ndarray, *, nthread: int = 0) -> np.ndarray:
        """rows × (features + 1) float64 contributions, the bias last, as `TreeShapKernel.contributions`."""
        import numba

        from tasks.inference.treeshap_kernels import inference_oblivious_contributions

        x, out, threads = inference_kernel_arrays(features, self.n_features, nthread)
        if x.shape[0] == 0:
            return out
        # A block's transposed rows and sums (12 bytes per feature and row) stay in L2 next to the tables; a few
        # blocks per thread keep the threads busy.
        block = int(min(1024, max(16, math.ceil(x.shape[0] / (2 * threads)))))
        with _PARALLEL_LAUNCH:
            numba.set_num_threads(threads)
            inference_oblivious_contributions(
                x,
                self.level_feature,
                self.level_value,
                self.level_default_left,
                self.tree_level_start,
                self.tree_feature,
                self.tree_feature_start,
                self.tree_table_start,
                self.table,
                self.bias,
                out,
                block,
            )
        return out


def _oblivious_depth(trees: TreeArrays, tree: int) -> int:
    """The depth of tree `tree` if it is a full binary tree in heap order whose levels each ask one question;
    raises TreeShapUnsupported otherwise."""
    first, stop = int(trees.node_start[tree]), int(trees.node_start[tree + 1])
    size = stop - first
    depth = int(round(math.log2(size + 1))) - 1
    if size < 1 or 2 ** (depth + 1) - 1 != size:
        raise TreeShapUnsupported(f"tree {tree} has {size} nodes, not a full binary tree: it is not oblivious")
    splits = 2**depth - 1
    inner = np.arange(splits)
    left, right = trees.left[first:stop], trees.right[first:stop]
    if np.any(left[:splits] != 2 * inner + 1) or np.any(right[:splits] != 2 * inner + 2) or np.any(left[splits:] >= 0):
        raise TreeShapUnsupported(f"tree {tree} is not laid out level by level: it is not oblivious")
    for level in range(depth):
        nodes = slice(first + 2**level - 1, first + 2 ** (level + 1) - 1)
        for name in ("feature", "value", "default_left"):
            column = getattr(trees, name)[nodes]
            if np.any(column != column[0]):
                raise TreeShapUnsupported(
                    f"tree {tree} splits level {level} on more than one {name}: it is not oblivious"
                )
    return depth


def _leaf_rows(
    feature: np.ndarray,
    value: np.ndarray,
    default_left: np.ndarray,
    n_features: int,
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(one row per reachable leaf index, those leaf indices, the tree's distinct features) of one oblivious tree
    whose levels (root first) split on `feature` below `value` (float32), NaN going left where `default_left`."""
    depth = feature.size
    distinct = list(dict.fromkeys(int(f) for f in feature))
    choices: list[list[tuple[float, int]]] = []
    for f in distinct:
        levels = np.flatnonzero(feature == f)
        thresholds = value[levels].astype(np.float32)
        # The thresholds cut the float32 line into intervals that each start at a threshold or at -inf; every
        # value of an interval answers alike, and NaN answers by the defaults. These values reach every answer.
        candidates = np.concatenate(
            [
                np.array([np.nan, -np.inf, np.inf], dtype=np.float32),
                thresholds,
                np.nextafter(thresholds, np.float32(-np.inf)),
            ]
        ).astype(np.float32)
        go_left = (candidates[:, None] < thresholds[None, :]) | (
            np.isnan(candidates)[:, None] & (default_left[levels] != 0)[None, :]
        )
        bits = ((~go_left).astype(np.int64) << (depth - 1 - levels)[None, :]).sum(axis=1)
        answers: dict[int, float] = {}
        for candidate, pattern in zip(candidates.tolist(), bits.tolist(), strict=True):
            answers.setdefault(int(pattern), float(candidate))
        choices.append([(v, p) for p, v in answers.items()])
    combos = list(itertools.product(*choices))
    rows = np.zeros((len(combos), n_features), dtype=np.float32)
    leaves = np.zeros(len(combos), dtype=np.int64)
    for r, combo in enumerate(combos):
        for f, (v, pattern) in zip(distinct, combo, strict=True):
            rows[r, f] = v
            leaves[r] |= pattern
    return rows, leaves, distinct


def inference_oblivious_treeshap_kernel(
    trees: TreeArrays,
    *,
    max_path_features: int = DEFAULT_MAX_PATH_FEATURES,
    max_table_bytes: int = DEFAULT_MAX_TABLE_BYTES,
) -> ObliviousTreeShapKernel:
    """The per-tree table kernel of an ensemble of oblivious trees, each a full binary tree in heap order (a
    level's nodes one after another, the root first); raises TreeShapUnsupported for anything else, and for
    whatever the table kernel it is built from cannot represent."""
    depths = [_oblivious_depth(trees, t) for t in range(trees.node_start.size - 1)]
    general: TreeShapKernel = inference_treeshap_kernel(
        trees, max_path_features=max_path_features, max_table_bytes=max_table_bytes
    )
    level_feature, level_value, level_default_left, tree_feature, tables = [], [], [], [], []
    for t, depth in enumerate(depths):
        roots = int(trees.node_start[t]) + 2 ** np.arange(depth) - 1
        feature = trees.feature[roots].astype(np.int32)
        value = trees.value[roots].astype(np.float32)
        default_left = trees.default_left[roots].astype(np.uint8)
        rows, leaves, distinct = _leaf_rows(feature, value, default_left, trees.n_features)
        table = np.full((2**depth, len(distinct)), np.nan, dtype=np.float64)
        if distinct:
            # One thread: waking the pool for a few dozen rows costs ~100× the work, once per tree.
            table[leaves] = general.tree_kernel(t).contributions(rows, nthread=1)[:, distinct]
        level_feature.append(feature)
        level_value.append(value)
        level_default_left.append(default_left)
        tree_feature.append(np.asarray(distinct, dtype=np.int32))
        tables.append(table.reshape(-1))

    def starts(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate([[0], np.cumsum([p.size for p in parts])]).astype(np.int64)

    return ObliviousTreeShapKernel(
        n_features=trees.n_features,
        level_feature=np.concatenate(level_feature).astype(np.int32),
        level_value=np.concatenate(level_value).astype(np.float32),
        level_default_left=np.concatenate(level_default_left).astype(np.uint8),
        tree_level_start=starts(level_feature),
        tree_feature=np.concatenate(tree_feature).astype(np.int32),
        tree_feature_start=starts(tree_feature),
        tree_table_start=starts(tables)[:-1].copy(),
        table=np.concatenate(tables),
        bias=general.bias,
        widest_path=general.widest_path,
    )
