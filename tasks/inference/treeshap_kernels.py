"""The numba kernels of the table TreeSHAP (tasks/inference/treeshap.py): the tree layout, the leaf
tables, the subtree (group) tables summed from them and the contributions of a block of rows.

numba takes ~0.3 s to import (more on a cold disk) and is needed only once a model's contributions
are explained, so treeshap.py imports this module where it builds or runs a kernel, never at the
top: `score --help` and the flows' imports stay free of it. The compiled kernels are cached next to
this file (`cache=True`).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, error_model="numpy")
def inference_tree_layout(left, right, split_feature, split_value, default_left, hess, node_start, max_width):
    """Reachable nodes of every tree in preorder, each split's pattern bit, each leaf's path, and each node's
    number of distinct features above it (its pattern's width).

    A split's bit is the position of its feature among the distinct features on the path from the
    root down to it, so all leaves below a split agree on it and a row's pattern can be pushed
    down the tree one split at a time.
    """
    n_trees = node_start.size - 1
    total = node_start[n_trees]
    o_feature = np.full(total, -1, np.int32)
    o_value = np.zeros(total, np.float32)
    o_default_left = np.zeros(total, np.uint8)
    o_bit = np.zeros(total, np.int32)
    o_left = np.full(total, -1, np.int32)
    o_right = np.full(total, -1, np.int32)
    parent = np.full(total, -1, np.int32)
    original = np.zeros(total, np.int64)
    above = np.zeros(total, np.int32)
    adds_bit = np.zeros(total, np.uint8)
    mean = np.zeros(total, np.float64)
    tree_node_start = np.zeros(n_trees + 1, np.int64)
    tree_leaf_start = np.zeros(n_trees + 1, np.int64)
    tree_mean = np.zeros(n_trees, np.float64)
    leaf_node = np.zeros(total, np.int32)
    leaf_width = np.zeros(total, np.int32)
    leaf_feature = np.full((total, max_width), -1, np.int32)
    leaf_zero = np.ones((total, max_width), np.float64)
    leaf_value = np.zeros(total, np.float64)
    widest = 0
    stack_node = np.zeros(total + 1, np.int64)
    stack_parent = np.zeros(total + 1, np.int32)
    stack_is_left = np.zeros(total + 1, np.uint8)
    out = 0
    leaves = 0
    for t in range(n_trees):
        first = node_start[t]
        base = out
        tree_node_start[t] = base
        tree_leaf_start[t] = leaves
        top = 0
        stack_node[0] = first
        stack_parent[0] = -1
        stack_is_left[0] = 0
        top = 1
        while top > 0:
            top -= 1
            node = stack_node[top]
            up = stack_parent[top]
            local = out - base
            g = out
            out += 1
            original[g] = node
            parent[g] = up
            if up >= 0:
                above[g] = above[base + up] + adds_bit[base + up]
                if stack_is_left[top]:
                    o_left[base + up] = local
                else:
                    o_right[base + up] = local
            if left[node] < 0:
                width = above[g]
                if width > widest:
                    widest = width
                leaf_node[leaves] = local
                leaf_width[leaves] = width
                leaf_value[leaves] = split_value[node]
                if width <= max_width:
                    child = g
                    a = up
                    while a >= 0:
                        ga = base + a
                        slot = o_bit[ga]
                        leaf_feature[leaves, slot] = o_feature[ga]
                        leaf_zero[leaves, slot] *= np.float64(hess[original[child]]) / np.float64(hess[original[ga]])
                        child = ga
                        a = parent[ga]
                leaves += 1
                continue
            f = split_feature[node]
            o_feature[g] = f
            o_value[g] = split_value[node]
            o_default_left[g] = default_left[node]
            found = -1
            a = up
            while a >= 0:
                if o_feature[base + a] == f:
                    found = o_bit[base + a]
                    break
                a = parent[base + a]
            if found >= 0:
                o_bit[g] = found
                adds_bit[g] = 0
            else:
                o_bit[g] = above[g]
                adds_bit[g] = 1
            # Right pushed first: the left subtree is laid out right after its parent (preorder).
            stack_node[top] = first + right[node]
            stack_parent[top] = local
            stack_is_left[top] = 0
            stack_node[top + 1] = first + left[node]
            stack_parent[top + 1] = local
            stack_is_left[top + 1] = 1
            top += 2
        # XGBoost's node means: cover-weighted averages of the children, children first.
        for g in range(out - 1, base - 1, -1):
            node = original[g]
            if o_left[g] < 0:
                mean[g] = split_value[node]
            else:
                gl = base + o_left[g]
                gr = base + o_right[g]
                mean[g] = (mean[gl] * hess[original[gl]] + mean[gr] * hess[original[gr]]) / hess[node]
        tree_mean[t] = mean[base]
    tree_node_start[n_trees] = out
    tree_leaf_start[n_trees] = leaves
    return (
        o_feature[:out],
        o_value[:out],
        o_default_left[:out],
        o_bit[:out],
        o_left[:out],
        o_right[:out],
        tree_node_start,
        tree_leaf_start,
        tree_mean,
        leaf_node[:leaves],
        leaf_width[:leaves],
        leaf_feature[:leaves],
        leaf_zero[:leaves],
        leaf_value[:leaves],
        widest,
        above[:out],
    )


@numba.njit(cache=True, inline="always", error_model="numpy")
def _extend_path(pweight, depth, zero_fraction, one_fraction):
    pweight[depth] = 1.0 if depth == 0 else 0.0
    for i in range(depth - 1, -1, -1):
        pweight[i + 1] += one_fraction * pweight[i] * (i + 1) / (depth + 1)
        pweight[i] = zero_fraction * pweight[i] * (depth - i) / (depth + 1)


@numba.njit(cache=True, inline="always", error_model="numpy")
def _unwound_path_sum(pweight, depth, zero_fraction, one_fraction):
    total = 0.0
    if one_fraction != 0.0:
        next_one_portion = pweight[depth]
        for i in range(depth - 1, -1, -1):
            tmp = next_one_portion * (depth + 1) / ((i + 1) * one_fraction)
            total += tmp
            next_one_portion = pweight[i] - tmp * zero_fraction * (depth - i) / (depth + 1)
    else:
        for i in range(depth - 1, -1, -1):
            total += (pweight[i] / zero_fraction) / ((depth - i) / (depth + 1))
    return total


@numba.njit(cache=True, inline="always")
def _block_columns(x, first, m, block):
    """Rows first..first+m of x, one feature per row of the result, so a split reads one contiguous run."""
    xt = np.empty((x.shape[1], block), np.float32)
    for j in range(m):
        for f in range(x.shape[1]):
            xt[f, j] = x[first + j, f]
    return xt


@numba.njit(cache=True, parallel=True, error_model="numpy")
def inference_leaf_tables(leaf_width, leaf_zero, leaf_value, leaf_offset, table):
    """For every leaf and bit pattern, TreeSHAP's contribution of each path feature (slot order)."""
    for leaf in numba.prange(leaf_width.size):
        d = leaf_width[leaf]
        if d == 0:
            continue
        z = leaf_zero[leaf]
        v = leaf_value[leaf]
        pweight = np.zeros(d + 1, np.float64)
        offset = leaf_offset[leaf]
        for pattern in range(1 << d):
            # Element 0 is TreeSHAP's root element (zero and one fraction 1), as in XGBoost.
            _extend_path(pweight, 0, 1.0, 1.0)
            for i in range(d):
                _extend_path(pweight, i + 1, z[i], np.float64((pattern >> i) & 1))
            for i in range(d):
                one = np.float64((pattern >> i) & 1)
                w = _unwound_path_sum(pweight, d, z[i], one)
                table[offset + pattern * d + i] = w * (one - z[i]) * v


@numba.njit(cache=True, parallel=True)
def inference_oblivious_contributions(
    x,
    level_feature,
    level_value,
    level_default_left,
    tree_level_start,
    tree_feature,
    tree_feature_start,
    tree_table_start,
    table,
    bias,
    out,
    block,
):
    # An oblivious tree asks every row the same question at each level, so a row's leaf index is its answers'
    # bits (root first) and the tree's contributions to it are one row of the tree's table.
    n_rows, n_features = x.shape
    n_trees = tree_level_start.size - 1
    n_blocks = (n_rows + block - 1) // block
    for b in numba.prange(n_blocks):
        first = b * block
        m = min(n_rows, first + block) - first
        xt = _block_columns(x, first, m, block)
        acc = np.zeros((n_features, block), np.float64)
        at = np.empty(block, np.int64)
        for t in range(n_trees):
            for j in range(m):
                at[j] = 0
            for k in range(tree_level_start[t], tree_level_start[t + 1]):
                threshold = level_value[k]
                default_left = np.int64(level_default_left[k])
                column = xt[level_feature[k]]
                for j in range(m):
                    value = column[j]
                    # NaN fails every comparison: it goes left (bit 0) only when the default is left.
                    go_left = np.int64(value < threshold) | (np.int64(value != value) & default_left)
                    at[j] = (at[j] << 1) | (1 - go_left)
            width = tree_feature_start[t + 1] - tree_feature_start[t]
            if width == 0:
                continue
            offset = tree_table_start[t]
            for j in range(m):
                at[j] = offset + at[j] * width
            for i in range(width):
                row = acc[tree_feature[tree_feature_start[t] + i]]
                for j in range(m):
                    row[j] += table[at[j] + i]
        for j in range(m):
            for f in range(n_features):
                out[first + j, f] = acc[f, j]
            out[first + j, n_features] = bias


@numba.njit(cache=True, error_model="numpy")
def inference_group_layout(
    node_left, node_right, width, tree_node_start, leaf_node, leaf_width, leaf_feature, tree_leaf_start, group_bits
):
    """Which subtrees are explained as one table (groups), and what each group's table is indexed by.

    A group is a subtree whose root path has w distinct features and which has m splits of its own, with
    w + m <= group_bits, or a single leaf. The contributions of all its leaves to a row are a function of
    the row's pattern at the group's root (w bits) and its m decisions inside the group, so one table of
    2^(w+m) rows replaces the leaves' own tables and a row reads only the group's distinct features once.
    Nodes above the groups still push the pattern down (`push_node`).
    """
    n_trees = tree_node_start.size - 1
    total = tree_node_start[n_trees]
    size = np.ones(total, np.int64)
    splits = np.zeros(total, np.int64)
    for t in range(n_trees):
        base = tree_node_start[t]
        for g in range(tree_node_start[t + 1] - 1, base - 1, -1):
            lk = node_left[g]
            if lk >= 0:
                size[g] = 1 + size[base + lk] + size[base + node_right[g]]
                splits[g] = 1 + splits[base + lk] + splits[base + node_right[g]]
    push_node = np.zeros(total, np.int32)
    tree_push_start = np.zeros(n_trees + 1, np.int64)
    group_root = np.zeros(total, np.int32)
    group_width = np.zeros(total, np.int32)
    group_node_start = np.zeros(total + 1, np.int64)
    group_node = np.zeros(total, np.int32)
    group_leaf_start = np.zeros(total + 1, np.int64)
    tree_group_start = np.zeros(n_trees + 1, np.int64)
    stack = np.zeros(total + 1, np.int64)
    pushes = 0
    groups = 0
    members = 0
    for t in range(n_trees):
        base = tree_node_start[t]
        tree_push_start[t] = pushes
        tree_group_start[t] = groups
        stack[0] = 0
        top = 1
        leaf = tree_leaf_start[t]
        while top > 0:
            top -= 1
            k = stack[top]
            g = base + k
            if node_left[g] >= 0 and width[g] + splits[g] > group_bits:
                push_node[pushes] = k
                pushes += 1
                stack[top] = node_right[g]
                stack[top + 1] = node_left[g]
                top += 2
                continue
            group_root[groups] = k
            group_width[groups] = width[g]
            group_node_start[groups] = members
            group_leaf_start[groups] = leaf
            for j in range(k, k + size[g]):
                if node_left[base + j] >= 0:
                    group_node[members] = j
                    members += 1
            # Leaves are numbered in preorder too, so the group's leaves are the next ones.
            while leaf < tree_leaf_start[t + 1] and leaf_node[leaf] < k + size[g]:
                leaf += 1
            groups += 1
    tree_push_start[n_trees] = pushes
    tree_group_start[n_trees] = groups
    group_node_start[groups] = members
    group_leaf_start[groups] = tree_leaf_start[n_trees]
    # Each group's distinct features (the union of its leaves' path features) in first-seen order.
    max_width = leaf_feature.shape[1]
    group_feature = np.full(groups * (group_bits + max_width + 1), -1, np.int32)
    group_feature_start = np.zeros(groups + 1, np.int64)
    used = 0
    for q in range(groups):
        group_feature_start[q] = used
        for leaf in range(group_leaf_start[q], group_leaf_start[q + 1]):
            for i in range(leaf_width[leaf]):
                f = leaf_feature[leaf, i]
                seen = False
                for u in range(group_feature_start[q], used):
                    if group_feature[u] == f:
                        seen = True
                        break
                if not seen:
                    group_feature[used] = f
                    used += 1
    group_feature_start[groups] = used
    return (
        push_node[:pushes],
        tree_push_start,
        group_root[:groups],
        group_width[:groups],
        group_node_start[: groups + 1],
        group_node[:members],
        group_leaf_start[: groups + 1],
        group_feature_start,
        group_feature[:used],
        tree_group_start,
    )


@numba.njit(cache=True, parallel=True, error_model="numpy")
def inference_group_tables(
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
    table,
    group_table,
):
    """Each group's table: for every root pattern and decisions inside it, the sum of its leaves' table
    entries at the patterns those give them, per group feature."""
    n_trees = tree_node_start.size - 1
    for t in numba.prange(n_trees):
        base = tree_node_start[t]
        for q in range(tree_group_start[t], tree_group_start[t + 1]):
            w = group_width[q]
            first_node = group_node_start[q]
            m = group_node_start[q + 1] - first_node
            first_feature = group_feature_start[q]
            n_group_features = group_feature_start[q + 1] - first_feature
            if n_group_features == 0:
                continue
            offset = group_offset[q]
            for leaf in range(group_leaf_start[q], group_leaf_start[q + 1]):
                d = leaf_width[leaf]
                if d == 0:
                    continue
                target = leaf_node[leaf]
                # The group's splits on the way to this leaf: their position among the group's splits, their
                # pattern bit, and whether the way goes left.
                on_path = np.zeros(m, np.int64)
                path_bit = np.zeros(m, np.int64)
                path_left = np.zeros(m, np.int64)
                steps = 0
                k = group_root[q]
                while node_left[base + k] >= 0:
                    position = 0
                    while group_node[first_node + position] != k:
                        position += 1
                    lk = node_left[base + k]
                    rk = node_right[base + k]
                    on_path[steps] = position
                    path_bit[steps] = node_bit[base + k]
                    # Preorder: the left subtree is every node from the left child up to the right child.
                    goes_left = target < rk
                    path_left[steps] = 1 if goes_left else 0
                    steps += 1
                    k = lk if goes_left else rk
                slot = np.zeros(d, np.int64)
                for i in range(d):
                    f = leaf_feature[leaf, i]
                    u = 0
                    while group_feature[first_feature + u] != f:
                        u += 1
                    slot[i] = u
                mask = (np.int64(1) << d) - 1
                for index in range(np.int64(1) << (w + m)):
                    pattern = index | ~((np.int64(1) << w) - 1)
                    for s in range(steps):
                        went_left = (index >> (w + on_path[s])) & 1
                        if went_left != path_left[s]:
                            pattern &= ~(np.int64(1) << path_bit[s])
                    at = leaf_offset[leaf] + (pattern & mask) * d
                    row = offset + index * n_group_features
                    for i in range(d):
                        group_table[row + slot[i]] += table[at + i]


@numba.njit(cache=True, parallel=True)
def inference_group_contributions(
    x,
    node_feature,
    node_value,
    node_default_left,
    node_bit,
    node_left,
    node_right,
    tree_node_start,
    push_node,
    tree_push_start,
    tree_group_start,
    group_root,
    group_width,
    group_node_start,
    group_node,
    group_feature_start,
    group_feature,
    group_offset,
    group_table,
    bias,
    out,
    block,
):
    # Rows are the innermost loop everywhere: every row of a block does the same split or reads the same
    # group's table, so the loops carry no dependency, branch on nothing and stay in cache. The pattern is pushed
    # only down to the groups' roots; each group's table row is found from that pattern and the row's decisions
    # at the group's splits.
    n_rows, n_features = x.shape
    n_trees = tree_node_start.size - 1
    widest_tree = 0
    for t in range(n_trees):
        widest_tree = max(widest_tree, tree_node_start[t + 1] - tree_node_start[t])
    n_blocks = (n_rows + block - 1) // block
    for b in numba.prange(n_blocks):
        first = b * block
        m = min(n_rows, first + block) - first
        xt = _block_columns(x, first, m, block)
        acc = np.zeros((n_features, block), np.float64)
        pattern = np.empty((widest_tree, block), np.int32)
        at = np.empty(block, np.int64)
        for t in range(n_trees):
            base = tree_node_start[t]
            for j in range(m):
                pattern[0, j] = -1
            for p in range(tree_push_start[t], tree_push_start[t + 1]):
                k = push_node[p]
                g = base + k
                lk = node_left[g]
                rk = node_right[g]
                threshold = node_value[g]
                default_left = np.int32(node_default_left[g])
                bit = np.int32(1) << node_bit[g]
                column = xt[node_feature[g]]
                for j in range(m):
                    value = column[j]
                    # NaN fails every comparison: it goes left only when the default is left.
                    go_left = np.int32(value < threshold) | (np.int32(value != value) & default_left)
                    here = pattern[k, j]
                    pattern[lk, j] = here & ~(bit * (1 - go_left))
                    pattern[rk, j] = here & ~(bit * go_left)
            for q in range(tree_group_start[t], tree_group_start[t + 1]):
                first_feature = group_feature_start[q]
                width = group_feature_start[q + 1] - first_feature
                if width == 0:
                    continue
                w = group_width[q]
                mask = (np.int32(1) << w) - 1
                reached = pattern[group_root[q]]
                for j in range(m):
                    at[j] = reached[j] & mask
                shift = w
                for s in range(group_node_start[q], group_node_start[q + 1]):
                    g = base + group_node[s]
                    threshold = node_value[g]
                    goes_left_if_missing = np.int64(node_default_left[g])
                    column = xt[node_feature[g]]
                    for j in range(m):
                        value = column[j]
                        decided_left = np.int64(value < threshold) | (np.int64(value != value) & goes_left_if_missing)
                        at[j] |= decided_left << shift
                    shift += 1
                offset = group_offset[q]
                for j in range(m):
                    at[j] = offset + at[j] * width
                for i in range(width):
                    row = acc[group_feature[first_feature + i]]
                    for j in range(m):
                        row[j] += group_table[at[j] + i]
        for j in range(m):
            for f in range(n_features):
                out[first + j, f] = acc[f, j]
            out[first + j, n_features] = bias


@numba.njit(cache=True, nogil=True)
def inference_near_ties(values, top_k, exact, tolerance, by_size):
    """Per row, whether its top-k reasons could change under float noise of `tolerance[row]`; the test of
    `tasks.inference.treeshap.inference_near_tie_rows`, on each row's `top_k + 1` largest values (or |values|
    with `by_size`) found by a partial selection, ranked as `np.argsort(-values, kind="stable")` ranks them:
    equal values by position, NaN last. Serial and without the GIL: it is cheap next to the kernel, and needs
    no turn at the parallel launch (treeshap._PARALLEL_LAUNCH) while another worker's kernel runs."""
    n_rows, n_features = values.shape
    ranks = min(top_k + 1, n_features)
    flagged = np.zeros(n_rows, np.bool_)
    picked = np.zeros(n_features, np.bool_)
    ranked = np.empty(ranks, np.float64)
    ranked_exact = np.zeros(ranks, np.bool_)
    chosen = np.empty(ranks, np.int64)
    for r in range(n_rows):
        for k in range(ranks):
            best = -1
            b = 0.0
            for i in range(n_features):
                if picked[i]:
                    continue
                v = abs(values[r, i]) if by_size else values[r, i]
                if best < 0 or v > b or (b != b and v == v):
                    best = i
                    b = v
            picked[best] = True
            chosen[k] = best
            ranked[k] = b
            ranked_exact[k] = exact[best]
        for k in range(ranks):
            picked[chosen[k]] = False
        tol = tolerance[r]
        for j in range(min(top_k, n_features)):
            if not ranked[j] > -tol:
                continue
            if abs(ranked[j]) < tol and not ranked_exact[j]:
                flagged[r] = True
            if j + 1 < ranks and ranked[j] - ranked[j + 1] < tol and not (ranked_exact[j] and ranked_exact[j + 1]):
                flagged[r] = True
    return flagged
