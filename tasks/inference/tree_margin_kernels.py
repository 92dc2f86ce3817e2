"""The numba kernels of the tree-margin predictor (tasks/inference/tree_margins.py): the node layout it
reads and the margins of a block of rows.

Imported where a margin kernel is built or run, never at the top of a module (numba takes ~0.3 s to
import). The compiled kernels are cached next to this file (`cache=True`).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def inference_margin_layout(left, right, feature, value, default_left, node_start):
    """Per tree, its nodes renumbered breadth first so that every split's right child is its left child + 1,
    and two padding leaves at the end (the first three levels read a node's children and grandchildren
    even where it is a leaf). Returns (feature, threshold, child, default_right, leaf_value, root, depth):
    at a leaf the threshold is NaN and the child the leaf itself, so a row that reached it stays whatever it
    is compared with; `depth` is the deepest leaf's. Nodes no split leads to are left as such leaves."""
    n_trees = node_start.size - 1
    n_nodes = node_start[n_trees] + 2
    out_feature = np.zeros(n_nodes, np.int32)
    out_threshold = np.full(n_nodes, np.nan, np.float32)
    out_child = np.arange(n_nodes).astype(np.int32)
    out_default_right = np.zeros(n_nodes, np.bool_)
    out_leaf = np.zeros(n_nodes, np.float32)
    roots = np.empty(n_trees, np.int32)
    depth = 0
    widest = 0
    for t in range(n_trees):
        widest = max(widest, node_start[t + 1] - node_start[t])
    order = np.empty(widest, np.int64)
    level = np.empty(widest, np.int64)
    for t in range(n_trees):
        base = node_start[t]
        roots[t] = base
        order[0] = 0
        level[0] = 0
        filled = 1
        at = -1
        while at + 1 < filled:
            at += 1
            k = order[at]
            g = base + k
            here = base + at
            if left[g] < 0:
                out_leaf[here] = value[g]
                continue
            out_feature[here] = feature[g]
            out_threshold[here] = value[g]
            out_default_right[here] = default_left[g] == 0
            out_child[here] = base + filled
            order[filled] = left[g]
            order[filled + 1] = right[g]
            level[filled] = level[at] + 1
            level[filled + 1] = level[at] + 1
            depth = max(depth, level[at] + 1)
            filled += 2
    return out_feature, out_threshold, out_child, out_default_right, out_leaf, roots, depth


@numba.njit(cache=True, nogil=True, inline="always")
def _block_margins(x, first, m, feature, threshold, child, default_right, leaf, roots, depth, bias, out):
    # The block's rows are transposed so that a split reads one contiguous column. A row's margin starts at
    # the bias and adds its leaf of every tree in the model's order, all in float32, which is how XGBoost's
    # CPU predictor sums them: the margins are XGBoost's to the bit. The first three levels (seven splits) are
    # evaluated for every row without branching (constants of the tree); the deeper levels follow each
    # row's node, rows innermost, so the loop carries no dependency from one row to the next.
    n_features = x.shape[1]
    xt = np.empty((n_features, m), np.float32)
    node = np.empty(m, np.int32)
    acc = np.empty(m, np.float32)
    for j in range(m):
        acc[j] = bias
        for f in range(n_features):
            xt[f, j] = x[first + j, f]
    for t in range(roots.size):
        k = roots[t]
        a = child[k]
        b = a + 1
        aa = child[a]
        ab = aa + 1
        ba = child[b]
        bb = ba + 1
        column, at_k, right_k = xt[feature[k]], threshold[k], default_right[k]
        column_a, at_a, right_a = xt[feature[a]], threshold[a], default_right[a]
        column_b, at_b, right_b = xt[feature[b]], threshold[b], default_right[b]
        column_aa, at_aa, right_aa, child_aa = xt[feature[aa]], threshold[aa], default_right[aa], child[aa]
        column_ab, at_ab, right_ab, child_ab = xt[feature[ab]], threshold[ab], default_right[ab], child[ab]
        column_ba, at_ba, right_ba, child_ba = xt[feature[ba]], threshold[ba], default_right[ba], child[ba]
        column_bb, at_bb, right_bb, child_bb = xt[feature[bb]], threshold[bb], default_right[bb], child[bb]
        for j in range(m):
            # NaN fails every comparison: it goes right only where the default is right.
            v = column[j]
            go_b = (v >= at_k) | ((v != v) & right_k)
            v = column_a[j]
            go_ab = (v >= at_a) | ((v != v) & right_a)
            v = column_b[j]
            go_bb = (v >= at_b) | ((v != v) & right_b)
            v = column_aa[j]
            node_aa = child_aa + np.int32((v >= at_aa) | ((v != v) & right_aa))
            v = column_ab[j]
            node_ab = child_ab + np.int32((v >= at_ab) | ((v != v) & right_ab))
            v = column_ba[j]
            node_ba = child_ba + np.int32((v >= at_ba) | ((v != v) & right_ba))
            v = column_bb[j]
            node_bb = child_bb + np.int32((v >= at_bb) | ((v != v) & right_bb))
            node_a = node_ab if go_ab else node_aa
            node_b = node_bb if go_bb else node_ba
            node[j] = node_b if go_b else node_a
        for _ in range(3, depth):
            for j in range(m):
                k = node[j]
                v = xt[feature[k], j]
                node[j] = child[k] + np.int32((v >= threshold[k]) | ((v != v) & default_right[k]))
        for j in range(m):
            acc[j] += leaf[node[j]]
    for j in range(m):
        out[first + j] = acc[j]


@numba.njit(cache=True, parallel=True)
def inference_tree_margins(x, feature, threshold, child, default_right, leaf, roots, depth, bias, out, block):
    """Margins of every row of `x` into `out`, blocks of `block` rows on numba's threads."""
    n_rows = x.shape[0]
    for b in numba.prange((n_rows + block - 1) // block):
        first = b * block
        m = min(n_rows, first + block) - first
        _block_margins(x, first, m, feature, threshold, child, default_right, leaf, roots, depth, bias, out)


@numba.njit(cache=True, nogil=True)
def inference_tree_margins_serial(x, feature, threshold, child, default_right, leaf, roots, depth, bias, out, block):
    """The same on the calling thread, without the GIL: work units scored at once each run their own."""
    n_rows = x.shape[0]
    for first in range(0, n_rows, block):
        m = min(n_rows, first + block) - first
        _block_margins(x, first, m, feature, threshold, child, default_right, leaf, roots, depth, bias, out)
