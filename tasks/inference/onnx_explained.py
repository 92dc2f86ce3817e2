"""Exact reasons for an ONNX graph whose model is a tree ensemble or a linear model.

An ONNX graph keeps no contributions of its own, but the graph itself says what it computes. When the
output that scores (`ModelMetadata.onnx_output`) is computed by one `ai.onnx.ml` node — a
`TreeEnsembleClassifier` / `TreeEnsembleRegressor` or a `LinearClassifier` / `LinearRegressor` —
whose input is the graph's input, directly or through nodes that work column by column (`Imputer`,
`Scaler`, `Cast` to float, `Identity`: what skl2onnx writes for a SimpleImputer and a StandardScaler),
that node is read here into the product's own forms: the trees into `TreeArrays` for the table
TreeSHAP, the coefficients into `LinearContributions`. Any other graph (an MLP, a stack of models, a
node whose splits the table does not read) scores with reasons off, and says why.

What the trees add up to (`z`) follows ONNX Runtime's reading of the node, which differs by converter:

- onnxmltools' LightGBM export: one class's weights, mixed signs, `post_transform` LOGISTIC; ONNX
  Runtime returns [sigmoid(−z), sigmoid(z)], so the trees sum to the margin logit(p) exactly.
- skl2onnx's GradientBoostingClassifier: the same, with the prior's log-odds in `base_values`.
- skl2onnx's RandomForestClassifier: one class's weights (each tree's probability of class 1 over the
  number of trees), all positive; ONNX Runtime then returns [1 − z, z] whatever `post_transform`
  says, so the trees sum to the event's probability: contributions are on the probability scale.
- weights of both classes: class e's column after `post_transform` (SOFTMAX: the difference of the two
  columns is the margin).
- a regressor's `TreeEnsembleRegressor` or `LinearRegressor` (a forecast job): `z` is the forecast itself, or,
  where an Exp node computes the forecast from it (onnxmltools' Poisson, gamma and Tweedie LightGBM exports),
  its log: the margin either way (`OnnxOutput.kind` `margin` or `exp`).

Every reading is checked, not trusted: at registration the graph with the node's `post_transform` set
to NONE must give `z`, `z` through the link (logistic or identity) must give the scored output's
event probability on the hold-out, and the kernel's contributions plus bias must add up to `z`
(local accuracy) on rows built to straddle every threshold. A graph that fails any of these scores
with reasons off, its detail naming the check.

ONNX tree nodes carry no node cover, which path-dependent TreeSHAP weighs branches with. It is
counted at registration: each node's cover is the number of the registration's reference rows that
reach it, stored in the version's metadata (`explanation.node_cover`, `cover_rows`). A leaf that no
reference row reaches counts as UNREACHED_LEAF_COVER rows, and every node's cover is the sum of its
children's, so TreeSHAP never divides by zero and a cover counted from the training rows is exactly the
training count a framework keeps (LightGBM's `internal_count`, scikit-learn's `n_node_samples` without
bootstrap).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tasks.inference.contributions import LinearContributions, TreeContributions, inference_output_checked_treeshap
from tasks.inference.registry import ModelExplanation, ModelMetadata, OnnxOutput
from tasks.inference.treeshap import TreeArrays, TreeShapUnsupported, inference_leq_threshold

log = logging.getLogger("scoring.inference")

ONNX_RUNTIME_LABEL = "ONNX Runtime"
TREE_OPS = ("TreeEnsembleClassifier", "TreeEnsembleRegressor")
LINEAR_OPS = ("LinearClassifier", "LinearRegressor")
COLUMN_OPS = ("Imputer", "Scaler", "Cast", "Identity")
"""Nodes between the graph input and the explaining node that keep each column a function of itself."""
UNREACHED_LEAF_COVER = 0.5
"""The cover of a leaf no reference row reached: TreeSHAP divides by covers, so a branch the reference
never took weighs half of what a branch one reference row took weighs, which keeps the leaf in the
expectation without pretending it was seen. Local accuracy holds whatever the covers are."""
SEMANTICS_TOLERANCE = 1e-5
"""How far the trees' or coefficients' value through the link may be from the scored output's event
probability (a float32 number) on a hold-out row."""
NO_NODE = "an ONNX graph with no tree-ensemble or linear node"
_FLOAT = 1
"""onnx.TensorProto.FLOAT."""
_DOUBLE = 11
"""onnx.TensorProto.DOUBLE."""
_DOUBLE_ATTRIBUTES = ("nodes_values", "class_weights", "target_weights", "base_values")
"""Tree attributes the sessions that give `z` hold as double tensors (ai.onnx.ml opset 3; see `_value_nodes`)."""
_FLOAT32_ROUNDING_PER_TREE = 1e-7
"""How far a float32 sum drifts per tree added, at margins of a few units: what the scored output may differ from
`z` by beyond SEMANTICS_TOLERANCE (ONNX Runtime sums a graph's float trees in float32)."""


class OnnxUnexplained(Exception):
    """Why the graph gets no exact reasons; the message completes "model X is …" (`ModelExplanation.detail`)."""


@dataclass(frozen=True)
class ColumnSteps:
    """The nodes between the graph input and the explaining node, as numpy does them in float32, the way
    ONNX Runtime's CPU kernels do: `Imputer` replaces a value (NaN for skl2onnx) per column, `Scaler`
    computes (x − offset) × scale per column."""

    steps: tuple[tuple[str, np.ndarray, np.ndarray], ...] = ()

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.steps]

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        x = np.asarray(rows, dtype=np.float32)
        for name, a, b in self.steps:
            if name == "Imputer":
                hit = np.isnan(x) if np.isnan(a).all() else x == a
                x = np.where(hit, np.broadcast_to(b, x.shape), x).astype(np.float32)
            elif name == "Scaler":
                x = ((x - a) * b).astype(np.float32)
        return np.ascontiguousarray(x, dtype=np.float32)


@dataclass(frozen=True)
class OnnxExplainedNode:
    """The graph's explaining node, read: what its event value `z` is and how the scored output follows from it.

    `z` is the node's scores with `post_transform` NONE, times `columns` (one column, or the event's minus
    the other's under SOFTMAX); the scored output's event probability is `link(z)`. Trees: per-node arrays
    in ONNX's (tree id, node id) order, leaf values already on the `z` scale. Linear: `z = coefficients · x
    + intercept` on the stepped columns.
    """

    op_type: str
    node_index: int
    steps: ColumnSteps
    columns: np.ndarray
    link: Literal["identity", "logistic"]
    n_features: int
    trees: TreeArrays | None = None
    coefficients: np.ndarray | None = None
    intercept: float = 0.0
    what: str = ""
    """The node in words, for the registration report."""

    def scale(self, output: OnnxOutput) -> Literal["margin", "probability"]:
        """What `z` is to the product: the margin, or the event's probability (whose clipped logit is the margin)."""
        if output.kind in ("margin", "exp"):
            if self.link != "identity":
                raise OnnxUnexplained(
                    f"an ONNX graph whose scored output {output.name!r} is not the {self.op_type} node's value"
                )
            return "margin"
        return "margin" if self.link == "logistic" else "probability"


@dataclass(frozen=True)
class OnnxContributions:
    """What an ONNX engine explains with: the contributions' source and the rows as it sees them."""

    source: TreeContributions | LinearContributions
    explained_rows: Callable[[np.ndarray], np.ndarray]


def inference_onnx_explained_node(model: Any, output: OnnxOutput) -> OnnxExplainedNode:
    """The node of `model` (an onnx.ModelProto) that computes `output`, read; raises OnnxUnexplained."""
    graph = model.graph
    producer = {name: i for i, node in enumerate(graph.node) for name in node.output}
    inputs = [i for i in graph.input if i.name not in {init.name for init in graph.initializer}]
    if len(inputs) != 1:
        raise OnnxUnexplained(
            f"an ONNX graph with {len(inputs)} inputs (reasons read one input of the model's features)"
        )
    n_features = _columns_of(inputs[0])
    explaining = []
    seen: set[int] = set()
    stack = [output.name]
    while stack:
        index = producer.get(stack.pop())
        if index is None or index in seen:
            continue
        seen.add(index)
        node = graph.node[index]
        if node.domain == "ai.onnx.ml" and node.op_type in (*TREE_OPS, *LINEAR_OPS):
            explaining.append(index)
            continue
        if node.domain == "ai.onnx.ml" and node.op_type == "TreeEnsemble":
            raise OnnxUnexplained(
                "an ONNX graph whose model is a TreeEnsemble node (ai.onnx.ml opset 5), which reasons do not read"
            )
        stack.extend(node.input)
    if not explaining:
        raise OnnxUnexplained(NO_NODE)
    if len(explaining) > 1:
        ops = sorted({graph.node[i].op_type for i in explaining})
        raise OnnxUnexplained(f"an ONNX graph that combines {len(explaining)} model nodes ({', '.join(ops)})")
    index = explaining[0]
    node = graph.node[index]
    steps = _column_steps(graph, producer, node, inputs[0].name)
    attrs = _attributes(node)
    if node.op_type in TREE_OPS:
        return _tree_node(node, index, attrs, steps, output, n_features)
    return _linear_node(node, index, attrs, steps, output, n_features)


def inference_onnx_counted_trees(
    explained: OnnxExplainedNode, rows: np.ndarray | None = None, *, cover: np.ndarray | None = None
) -> tuple[TreeArrays, int]:
    """The node's trees with each node's cover counted from `rows` (the model's raw inputs), or the `cover`
    stored at registration; and how many reachable leaves no row reached (they count UNREACHED_LEAF_COVER)."""
    trees = explained.trees
    if trees is None:
        raise ValueError(f"a {explained.op_type} node has no trees")
    if cover is not None:
        stored = np.asarray(cover, dtype=np.float64)
        if stored.shape != trees.left.shape:
            raise OnnxUnexplained(
                f"an ONNX graph whose stored node cover has {stored.size} values for {trees.left.size} tree nodes"
            )
        return _with_cover(trees, stored), 0
    if rows is None:
        raise ValueError("the cover is counted from rows, or read from the registration's")
    counts = _leaf_counts(trees, explained.steps(rows))
    counted, unreached = _summed_cover(trees, counts)
    return _with_cover(trees, counted), unreached


def inference_onnx_registration_explanation(
    model_path: Path, output: OnnxOutput, holdout: np.ndarray, reference: np.ndarray
) -> tuple[ModelExplanation, list[str]]:
    """The version's explanation (method, scale, counted cover or reference mean) and the registration
    report's line on it; a graph that cannot be explained exactly gets method `none` and its detail."""
    import onnx

    model = onnx.load(str(model_path))
    try:
        explained = inference_onnx_explained_node(model, output)
        scale = explained.scale(output)
        sessions = _Sessions(model, explained)
        _check_semantics(model_path, sessions, explained, output, holdout)
        if explained.trees is not None:
            trees, unreached = inference_onnx_counted_trees(explained, reference)
            _checked_kernel(trees, sessions, f"ONNX model {model_path.name}")
            explanation = ModelExplanation(
                method="treeshap",
                scale=scale,
                node_cover=trees.cover.tolist(),
                cover_rows=int(reference.shape[0]),
            )
            unseen = (
                f"; {unreached} leaves no reference row reached count as {UNREACHED_LEAF_COVER:g} rows"
                if unreached
                else ""
            )
            return explanation, [
                f"reasons: exact TreeSHAP of the graph's {explained.what}, adding up to {_scale_words(scale)}; the "
                f"graph keeps no node cover, so each node's cover is the count of the {reference.shape[0]} "
                f"reference rows reaching it{unseen}"
            ]
        mean = _reference_mean(explained.steps(reference))
        after = f" after its {', '.join(explained.steps.names)}" if explained.steps.steps else ""
        return ModelExplanation(method="linear", scale=scale, reference_mean=mean.tolist()), [
            f"reasons: exact linear contributions of the graph's {explained.what}{after}, adding up to "
            f"{_scale_words(scale)}: coefficient × (value − its mean on the {reference.shape[0]} reference rows)"
        ]
    except OnnxUnexplained as exc:
        return ModelExplanation(method="none", detail=str(exc)), []


def inference_onnx_contributions(
    model_path: Path, metadata: ModelMetadata, *, nthread: int = 0
) -> OnnxContributions | str:
    """The contributions of a registered ONNX version, from its graph and the explanation its metadata
    settled (checked again here: local accuracy on the load-time rows); or why its rows get no reasons."""
    import onnx

    explanation = metadata.explanation
    label = f"{metadata.name} {metadata.version}"
    if explanation is None or explanation.method == "none" or metadata.onnx_output is None:
        return f"model {label} is an ONNX graph whose metadata settles no reasons: its rows are scored with reasons off"
    unavailable = (
        f"model {label} is an ONNX graph whose {explanation.method} reasons, settled at "
        "registration, could not be rebuilt"
    )
    try:
        model = onnx.load(str(model_path))
        explained = inference_onnx_explained_node(model, metadata.onnx_output)
        sessions = _Sessions(model, explained, nthread=nthread)
        if explanation.method == "treeshap":
            if explained.trees is None:
                raise OnnxUnexplained(f"an ONNX graph whose {explained.op_type} node has no trees")
            trees, _ = inference_onnx_counted_trees(explained, cover=np.asarray(explanation.node_cover))
            choice = _checked_kernel(trees, sessions, label, nthread=nthread)
            source: TreeContributions | LinearContributions = TreeContributions(
                choice,
                None,
                nthread=nthread,
                framework_label=ONNX_RUNTIME_LABEL,
                output=sessions.raw_value,
            )
            return OnnxContributions(source, explained.steps)
        if explained.coefficients is None:
            raise OnnxUnexplained(f"an ONNX graph whose {explained.op_type} node has no coefficients")
        source = LinearContributions(
            explained.coefficients,
            np.asarray(explanation.reference_mean),
            explained.intercept,
            transform=explained.steps,
            output=sessions.raw_value,
        )
        return OnnxContributions(source, lambda rows: rows)
    except (OnnxUnexplained, TreeShapUnsupported, ValueError) as exc:
        log.warning("[INF] model_name=%s reasons off: %s: %s", metadata.name, unavailable, exc)
        return f"{unavailable} ({exc}): its rows are scored with reasons off"


class _Sessions:
    """ONNX Runtime sessions that give `z`: the explaining node alone on stepped rows (what the kernel's
    load-time check compares against) and the whole graph with the node's `post_transform` NONE on raw rows.
    Tree nodes hold their values as doubles here, so ONNX Runtime sums the trees as the kernel does."""

    def __init__(self, model: Any, explained: OnnxExplainedNode, *, nthread: int = 0) -> None:
        import onnxruntime as ort
        from onnx import helper

        original = model.graph.node[explained.node_index]
        nodes = _value_nodes(original, doubles=explained.trees is not None)
        node = nodes[-1]
        score = node.output[1] if node.op_type.endswith("Classifier") else node.output[0]
        width = int(explained.columns.size)
        opsets = _opsets(model, ml_at_least=3 if explained.trees is not None else 1)
        options = ort.SessionOptions()
        options.intra_op_num_threads = nthread
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        alone = helper.make_model(
            helper.make_graph(
                nodes,
                "explaining_node",
                [helper.make_tensor_value_info(original.input[0], _FLOAT, [None, explained.n_features])],
                [helper.make_tensor_value_info(score, _FLOAT, [None, width])],
            ),
            opset_imports=opsets,
            ir_version=model.ir_version,
        )
        whole = _copy_model(model)
        kept = [n for i, n in enumerate(whole.graph.node) if i != explained.node_index]
        del whole.graph.node[:]
        whole.graph.node.extend([*kept[: explained.node_index], *nodes, *kept[explained.node_index :]])
        del whole.opset_import[:]
        whole.opset_import.extend(opsets)
        del whole.graph.output[:]
        whole.graph.output.append(helper.make_tensor_value_info(score, _FLOAT, [None, width]))
        providers = ["CPUExecutionProvider"]
        try:
            self._alone = ort.InferenceSession(alone.SerializeToString(), sess_options=options, providers=providers)
            self._whole = ort.InferenceSession(whole.SerializeToString(), sess_options=options, providers=providers)
        except Exception as exc:  # noqa: BLE001  (ONNX Runtime raises its own exception classes)
            raise OnnxUnexplained(
                f"an ONNX graph whose {original.op_type} node ONNX Runtime does not run on its own ({_one_line(exc)})"
            ) from None
        self._op_type = original.op_type
        self._alone_input = original.input[0]
        self._whole_input = self._whole.get_inputs()[0].name
        self._columns = explained.columns

    def _z(self, session: Any, name: str, rows: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(rows, dtype=np.float32)
        try:
            scores = np.asarray(session.run(None, {name: x})[0], dtype=np.float64).reshape(x.shape[0], -1)
        except Exception as exc:  # noqa: BLE001  (ONNX Runtime raises its own exception classes)
            raise OnnxUnexplained(
                f"an ONNX graph whose {self._op_type} node fails on its own ({_one_line(exc)})"
            ) from None
        return scores @ self._columns

    def node_value(self, stepped_rows: np.ndarray) -> np.ndarray:
        """z of rows already through the column steps."""
        return self._z(self._alone, self._alone_input, stepped_rows)

    def raw_value(self, rows: np.ndarray) -> np.ndarray:
        """z of the model's raw input rows, the graph's own column steps included."""
        return self._z(self._whole, self._whole_input, rows)


def _checked_kernel(trees: TreeArrays, sessions: _Sessions, label: str, *, nthread: int = 0):  # noqa: ANN202  (a KernelChoice)
    try:
        return inference_output_checked_treeshap(
            trees, sessions.node_value, model_label=label, framework="onnx", nthread=nthread
        )
    except TreeShapUnsupported as exc:
        raise OnnxUnexplained(
            f"an ONNX graph whose tree ensemble the TreeSHAP table cannot explain exactly ({exc})"
        ) from None


def _check_semantics(
    model_path: Path, sessions: _Sessions, explained: OnnxExplainedNode, output: OnnxOutput, rows: np.ndarray
) -> None:
    """The scored output's event value must be link(z) on the hold-out: the reading of the node (which
    class, which sign, which link) is what ONNX Runtime computes, and nothing after the node changes it.
    The node alone on the column steps as read here must give the same z as the whole graph: exactly for
    trees, whose splits a rounding could flip."""
    import onnxruntime as ort

    from tasks.inference.onnx_outputs import inference_onnx_margins

    x = np.ascontiguousarray(rows, dtype=np.float32)
    if x.shape[0] == 0:
        return
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(model_path), sess_options=options, providers=["CPUExecutionProvider"])
    value = session.run([output.name], {session.get_inputs()[0].name: x})[0]
    margins = inference_onnx_margins(output, value, x.shape[0])
    z = sessions.raw_value(x)
    trees = explained.trees.node_start.size - 1 if explained.trees is not None else 0
    slack = SEMANTICS_TOLERANCE + trees * _FLOAT32_ROUNDING_PER_TREE
    if output.kind in ("margin", "exp"):
        ours, theirs, tolerance = z, margins, slack * np.maximum(1.0, np.abs(z))
    else:
        p = z if explained.link == "identity" else 1.0 / (1.0 + np.exp(-z))
        clip = output.clip or 0.0
        ours, theirs, tolerance = np.clip(p, clip, 1.0 - clip), 1.0 / (1.0 + np.exp(-margins)), slack
    off = ~(np.abs(ours - theirs) <= tolerance) & ~(np.isnan(ours) & np.isnan(theirs))
    if off.any():
        raise OnnxUnexplained(
            f"an ONNX graph whose output {output.name!r} is not its {explained.op_type} node's value as read "
            f"({int(off.sum())} of {x.shape[0]} hold-out rows differ, e.g. {float(theirs[off][0]):.6g} against "
            f"{float(ours[off][0]):.6g})"
        )
    if not explained.steps.steps:
        return
    stepped = sessions.node_value(explained.steps(x))
    same = (
        np.array_equal(z, stepped, equal_nan=True)
        if explained.trees is not None
        else bool(
            (
                (np.abs(z - stepped) <= SEMANTICS_TOLERANCE * np.maximum(1.0, np.abs(z)))
                | (np.isnan(z) & np.isnan(stepped))
            ).all()
        )
    )
    if not same:
        raise OnnxUnexplained(
            f"an ONNX graph whose {', '.join(explained.steps.names)} nodes ONNX Runtime computes "
            "differently from their attributes"
        )


def _tree_node(
    node: Any, index: int, attrs: dict[str, Any], steps: ColumnSteps, output: OnnxOutput, n_features: int
) -> OnnxExplainedNode:
    post = _text(attrs.get("post_transform", "NONE"))
    link: Literal["identity", "logistic"]
    if node.op_type == "TreeEnsembleClassifier":
        labels = _class_labels(attrs)
        if len(labels) != 2:
            raise OnnxUnexplained(f"an ONNX graph whose TreeEnsembleClassifier has {len(labels)} classes")
        event = _event_position(labels, output)
        tree_ids, node_ids = _ints(attrs, "class_treeids"), _ints(attrs, "class_nodeids")
        class_ids, weights = _ints(attrs, "class_ids"), _floats(attrs, "class_weights")
        base = _floats(attrs, "base_values")
        used = sorted(set(class_ids.tolist()))
        if len(used) == 1:
            # ONNX Runtime's binary case: the one class's sum s is class 1's score, and class 0's is 1 − s
            # (all weights ≥ 0, post_transform ignored) or −s (mixed signs; LOGISTIC then makes both probabilities).
            if base.size > 1:
                raise OnnxUnexplained(
                    "an ONNX graph whose TreeEnsembleClassifier has one class's weights but two base values"
                )
            positive = bool((weights >= 0).all())
            if post not in ("NONE", "LOGISTIC"):
                raise OnnxUnexplained(f"an ONNX graph whose TreeEnsembleClassifier has post_transform {post}")
            sign = 1.0 if event == 1 else -1.0
            offset = 1.0 if positive and event == 0 else 0.0
            link = "identity" if positive or post == "NONE" else "logistic"
            leaf = {k: sign * w for k, w in _leaf_sums(tree_ids, node_ids, weights, class_ids, used[0]).items()}
            bias = offset + sign * (float(base[0]) if base.size else 0.0)
            columns = _unit(2, event)
        else:
            if base.size > 1:
                # ONNX Runtime then adds class 0's sum to class 1's base value: a reading nothing here relies on.
                raise OnnxUnexplained(
                    "an ONNX graph whose TreeEnsembleClassifier has both classes' weights and two base values"
                )
            base_of = [float(base[0]) if base.size else 0.0, 0.0]
            other = 1 - event
            mine = _leaf_sums(tree_ids, node_ids, weights, class_ids, event)
            if post in ("NONE", "LOGISTIC"):
                leaf, bias, columns = mine, base_of[event], _unit(2, event)
                link = "identity" if post == "NONE" else "logistic"
            elif post == "SOFTMAX":
                theirs = _leaf_sums(tree_ids, node_ids, weights, class_ids, other)
                leaf = {k: mine.get(k, 0.0) - theirs.get(k, 0.0) for k in set(mine) | set(theirs)}
                bias, columns, link = base_of[event] - base_of[other], _unit(2, event) - _unit(2, other), "logistic"
            else:
                raise OnnxUnexplained(f"an ONNX graph whose TreeEnsembleClassifier has post_transform {post}")
        trees_n = len(set(_ints(attrs, "nodes_treeids").tolist()))
        what = f"TreeEnsembleClassifier ({trees_n} trees)"
    else:
        if int(attrs.get("n_targets", 1)) != 1:
            raise OnnxUnexplained(f"an ONNX graph whose TreeEnsembleRegressor has {attrs.get('n_targets')} targets")
        if post != "NONE":
            raise OnnxUnexplained(f"an ONNX graph whose TreeEnsembleRegressor has post_transform {post}")
        aggregate = _text(attrs.get("aggregate_function", "SUM"))
        if aggregate not in ("SUM", "AVERAGE"):
            raise OnnxUnexplained(f"an ONNX graph whose TreeEnsembleRegressor aggregates its trees by {aggregate}")
        tree_ids, node_ids = _ints(attrs, "target_treeids"), _ints(attrs, "target_nodeids")
        weights, target_ids = _floats(attrs, "target_weights"), _ints(attrs, "target_ids")
        base = _floats(attrs, "base_values")
        trees_n = len(set(_ints(attrs, "nodes_treeids").tolist()))
        divide = float(trees_n) if aggregate == "AVERAGE" else 1.0
        leaf = {k: w / divide for k, w in _leaf_sums(tree_ids, node_ids, weights, target_ids, 0).items()}
        bias, columns, link = (float(base[0]) if base.size else 0.0), _unit(1, 0), "identity"
        what = f"TreeEnsembleRegressor ({trees_n} trees)"
    trees = _tree_arrays(attrs, leaf, bias, n_features)
    return OnnxExplainedNode(node.op_type, index, steps, columns, link, n_features, trees=trees, what=what)


def _linear_node(
    node: Any, index: int, attrs: dict[str, Any], steps: ColumnSteps, output: OnnxOutput, n_features: int
) -> OnnxExplainedNode:
    post = _text(attrs.get("post_transform", "NONE"))
    coefficients = _floats(attrs, "coefficients")
    intercepts = _floats(attrs, "intercepts")
    if node.op_type == "LinearRegressor":
        if int(attrs.get("targets", 1)) != 1 or post != "NONE":
            raise OnnxUnexplained(
                f"an ONNX graph whose LinearRegressor has {attrs.get('targets', 1)} targets and post_transform {post}"
            )
        if coefficients.size != n_features:
            raise OnnxUnexplained(
                f"an ONNX graph whose LinearRegressor has {coefficients.size} coefficients for {n_features} features"
            )
        return OnnxExplainedNode(
            node.op_type,
            index,
            steps,
            _unit(1, 0),
            "identity",
            n_features,
            coefficients=coefficients,
            intercept=float(intercepts[0]) if intercepts.size else 0.0,
            what="LinearRegressor",
        )
    labels = _class_labels(attrs)
    if len(labels) != 2:
        raise OnnxUnexplained(f"an ONNX graph whose LinearClassifier has {len(labels)} classes")
    event = _event_position(labels, output)
    rows = max(intercepts.size, 1)
    if coefficients.size != rows * n_features:
        raise OnnxUnexplained(
            f"an ONNX graph whose LinearClassifier has {coefficients.size} coefficients for {n_features} features"
        )
    coef = coefficients.reshape(rows, n_features)
    icpt = intercepts if intercepts.size else np.zeros(rows)
    if rows == 1:
        # One score s for two labels: ONNX Runtime returns [1 − s, s], post_transform aside.
        if post == "PROBIT":
            raise OnnxUnexplained("an ONNX graph whose LinearClassifier has post_transform PROBIT")
        sign = 1.0 if event == 1 else -1.0
        return OnnxExplainedNode(
            node.op_type,
            index,
            steps,
            _unit(2, event),
            "identity",
            n_features,
            coefficients=sign * coef[0],
            intercept=(0.0 if event == 1 else 1.0) + sign * float(icpt[0]),
            what="LinearClassifier",
        )
    if rows != 2:
        raise OnnxUnexplained(f"an ONNX graph whose LinearClassifier scores {rows} classes")
    other = 1 - event
    if post in ("NONE", "LOGISTIC"):
        link: Literal["identity", "logistic"] = "identity" if post == "NONE" else "logistic"
        return OnnxExplainedNode(
            node.op_type,
            index,
            steps,
            _unit(2, event),
            link,
            n_features,
            coefficients=coef[event],
            intercept=float(icpt[event]),
            what="LinearClassifier",
        )
    if post == "SOFTMAX":
        return OnnxExplainedNode(
            node.op_type,
            index,
            steps,
            _unit(2, event) - _unit(2, other),
            "logistic",
            n_features,
            coefficients=coef[event] - coef[other],
            intercept=float(icpt[event] - icpt[other]),
            what="LinearClassifier",
        )
    raise OnnxUnexplained(f"an ONNX graph whose LinearClassifier has post_transform {post}")


def _tree_arrays(
    attrs: dict[str, Any], leaf_value: dict[tuple[int, int], float], bias: float, n_features: int
) -> TreeArrays:
    """The trees in the kernel's layout, without cover (counted or read later): ONNX's `x <= t` (BRANCH_LEQ) becomes
    the kernel's `x < t'`, BRANCH_LT is the kernel's own test, and NaN takes the true branch when the node tracks it."""
    tree_ids, node_ids = _ints(attrs, "nodes_treeids"), _ints(attrs, "nodes_nodeids")
    n = tree_ids.size
    features = _ints(attrs, "nodes_featureids")
    thresholds = _floats(attrs, "nodes_values")
    modes = [_text(m) for m in attrs.get("nodes_modes", [])]
    true_ids, false_ids = _ints(attrs, "nodes_truenodeids"), _ints(attrs, "nodes_falsenodeids")
    tracks = _ints(attrs, "nodes_missing_value_tracks_true")
    tracks = tracks if tracks.size else np.zeros(n, dtype=np.int64)
    if (
        not n
        or any(a.size != n for a in (node_ids, features, thresholds, true_ids, false_ids, tracks))
        or len(modes) != n
    ):
        raise OnnxUnexplained("an ONNX graph whose tree ensemble's node attributes differ in length")
    unread = sorted({m for m in modes if m not in ("LEAF", "BRANCH_LEQ", "BRANCH_LT")})
    if unread:
        raise OnnxUnexplained(
            f"an ONNX graph whose tree ensemble splits with {', '.join(unread)} (the TreeSHAP table reads "
            "BRANCH_LEQ and BRANCH_LT)"
        )
    order = np.lexsort((node_ids, tree_ids))
    tree_sorted = tree_ids[order]
    starts = np.flatnonzero(np.r_[True, tree_sorted[1:] != tree_sorted[:-1]])
    node_start = np.r_[starts, n].astype(np.int64)
    left = np.full(n, -1, dtype=np.int64)
    right = np.full(n, -1, dtype=np.int64)
    feature = np.zeros(n, dtype=np.int64)
    value = np.zeros(n, dtype=np.float64)
    default_left = np.zeros(n, dtype=np.uint8)
    exact_float = "nodes_values_as_tensor" not in attrs
    for t in range(starts.size):
        first, last = int(node_start[t]), int(node_start[t + 1])
        rows = order[first:last]
        local = {int(node_ids[r]): k for k, r in enumerate(rows)}
        if int(node_ids[rows[0]]) != 0:
            raise OnnxUnexplained(f"an ONNX graph whose tree {int(tree_sorted[first])} has no node 0")
        for k, r in enumerate(rows):
            g = first + k
            if modes[r] == "LEAF":
                value[g] = leaf_value.get((int(tree_ids[r]), int(node_ids[r])), 0.0)
                continue
            try:
                left[g], right[g] = local[int(true_ids[r])], local[int(false_ids[r])]
            except KeyError:
                raise OnnxUnexplained(
                    f"an ONNX graph whose tree {int(tree_ids[r])} points to a node it lacks"
                ) from None
            if not 0 <= int(features[r]) < n_features:
                raise OnnxUnexplained(f"an ONNX graph whose trees split on feature {int(features[r])} of {n_features}")
            feature[g] = int(features[r])
            t_value = float(thresholds[r])
            if not np.isfinite(t_value):
                # scikit-learn (≥ 1.3) trained on missing values splits "NaN apart" at +inf; skl2onnx 1.20 writes the
                # threshold but not the side the missing values took, so ONNX Runtime already
                # differs from the estimator.
                raise OnnxUnexplained(
                    f"an ONNX graph whose tree {int(tree_ids[r])} splits at {t_value} (what a scikit-learn tree "
                    "trained on missing values writes), which the TreeSHAP table does not read"
                )
            if modes[r] == "BRANCH_LEQ":
                value[g] = float(inference_leq_threshold(t_value))
            else:
                value[g] = float(_lt_threshold(t_value, exact_float))
            default_left[g] = 1 if tracks[r] else 0
    split_nodes = {(int(tree_ids[r]), int(node_ids[r])) for r in range(n) if modes[r] != "LEAF"}
    if split_nodes & set(leaf_value):
        raise OnnxUnexplained("an ONNX graph whose tree ensemble puts weights on split nodes")
    return TreeArrays(
        left=left,
        right=right,
        feature=feature,
        value=value,
        default_left=default_left,
        cover=np.zeros(n, dtype=np.float64),
        node_start=node_start,
        bias=bias,
        n_features=n_features,
    )


def _lt_threshold(t: float, exact_float: bool) -> np.float32:
    """The float32 t' with `x < t'` exactly when `x < t` for every float32 x: t itself when ONNX keeps it as
    a float, else the smallest float32 not below the double t."""
    low = np.float32(t)
    if exact_float or float(low) >= t:
        return low
    return np.nextafter(low, np.float32(np.inf))


def _leaf_sums(
    tree_ids: np.ndarray, node_ids: np.ndarray, weights: np.ndarray, class_ids: np.ndarray, wanted: int
) -> dict[tuple[int, int], float]:
    sums: dict[tuple[int, int], float] = {}
    for t, n, w, c in zip(tree_ids.tolist(), node_ids.tolist(), weights.tolist(), class_ids.tolist(), strict=True):
        if c == wanted:
            sums[(t, n)] = sums.get((t, n), 0.0) + w
    return sums


def _leaf_counts(trees: TreeArrays, rows: np.ndarray) -> np.ndarray:
    """How many of `rows` (through the column steps) end in each node, routed as the kernel routes them."""
    x = np.ascontiguousarray(rows, dtype=np.float32)
    counts = np.zeros(trees.left.size, dtype=np.float64)
    if x.shape[0] == 0:
        return counts
    threshold = trees.value.astype(np.float32)
    everyone = np.arange(x.shape[0])
    for t in range(trees.node_start.size - 1):
        first = int(trees.node_start[t])
        at = np.full(x.shape[0], first, dtype=np.int64)
        while True:
            split = trees.left[at] >= 0
            if not split.any():
                break
            nodes = at[split]
            values = x[everyone[split], trees.feature[nodes]]
            go_left = np.where(np.isnan(values), trees.default_left[nodes] == 1, values < threshold[nodes])
            at[split] = first + np.where(go_left, trees.left[nodes], trees.right[nodes])
        counts += np.bincount(at, minlength=counts.size)
    return counts


def _summed_cover(trees: TreeArrays, leaf_counts: np.ndarray) -> tuple[np.ndarray, int]:
    """Each node's cover: its leaves' counts (UNREACHED_LEAF_COVER for a leaf none reached), summed upwards."""
    n = trees.left.size
    owner = np.repeat(np.arange(trees.node_start.size - 1), np.diff(trees.node_start))
    first = trees.node_start[owner]
    split = trees.left >= 0
    depth = np.full(n, -1, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    level = trees.node_start[:-1].copy()
    d = 0
    while level.size:
        depth[level] = d
        inner = level[split[level]]
        children = np.concatenate([first[inner] + trees.left[inner], first[inner] + trees.right[inner]])
        parent[children] = np.concatenate([inner, inner])
        level = children[depth[children] < 0] if children.size else children
        d += 1
    reachable_leaf = ~split & (depth >= 0)
    unreached = reachable_leaf & (leaf_counts == 0)
    cover = np.where(reachable_leaf, np.where(unreached, UNREACHED_LEAF_COVER, leaf_counts), 0.0)
    for level_depth in range(int(depth.max()), 0, -1):
        nodes = np.flatnonzero(depth == level_depth)
        np.add.at(cover, parent[nodes], cover[nodes])
    return cover, int(unreached.sum())


def _with_cover(trees: TreeArrays, cover: np.ndarray) -> TreeArrays:
    return TreeArrays(
        left=trees.left,
        right=trees.right,
        feature=trees.feature,
        value=trees.value,
        default_left=trees.default_left,
        cover=np.asarray(cover, dtype=np.float64),
        node_start=trees.node_start,
        bias=trees.bias,
        n_features=trees.n_features,
    )


def _reference_mean(columns: np.ndarray) -> np.ndarray:
    x = np.asarray(columns, dtype=np.float64)
    if x.shape[0] == 0:
        return np.zeros(x.shape[1])
    seen = ~np.isnan(x)
    counts = seen.sum(axis=0)
    return np.where(counts > 0, np.where(seen, x, 0.0).sum(axis=0) / np.maximum(counts, 1), 0.0)


def _column_steps(graph: Any, producer: dict[str, int], node: Any, graph_input: str) -> ColumnSteps:
    """The column-wise nodes from the graph input to `node`'s input, first to last; raises
    OnnxUnexplained for any other."""
    steps: list[tuple[str, np.ndarray, np.ndarray]] = []
    name = node.input[0]
    while name != graph_input:
        index = producer.get(name)
        if index is None:
            raise OnnxUnexplained(f"an ONNX graph whose {node.op_type} node reads {name!r}, not the model's inputs")
        step = graph.node[index]
        attrs = _attributes(step)
        if step.op_type not in COLUMN_OPS:
            raise OnnxUnexplained(
                f"an ONNX graph whose {node.op_type} node reads the output of a {step.op_type} node, not the "
                "model's inputs column by column"
            )
        if step.op_type == "Imputer":
            if "imputed_value_floats" not in attrs:
                raise OnnxUnexplained(f"an ONNX graph whose {node.op_type} node reads an Imputer of integers")
            replaced = np.float32(attrs.get("replaced_value_float", 0.0))
            steps.append(
                (
                    "Imputer",
                    np.asarray(replaced, dtype=np.float32),
                    _floats(attrs, "imputed_value_floats").astype(np.float32),
                )
            )
        elif step.op_type == "Scaler":
            steps.append(
                ("Scaler", _floats(attrs, "offset").astype(np.float32), _floats(attrs, "scale").astype(np.float32))
            )
        elif step.op_type == "Cast" and int(attrs.get("to", _FLOAT)) != _FLOAT:
            raise OnnxUnexplained(
                f"an ONNX graph whose {node.op_type} node reads a Cast to type {attrs.get('to')}, not to float"
            )
        name = step.input[0]
    return ColumnSteps(tuple(reversed(steps)))


def _columns_of(value_info: Any) -> int:
    dims = value_info.type.tensor_type.shape.dim
    if len(dims) != 2 or not dims[1].HasField("dim_value"):
        raise OnnxUnexplained("an ONNX graph whose input is not rows × a known number of features")
    return int(dims[1].dim_value)


def _attributes(node: Any) -> dict[str, Any]:
    from onnx import helper, numpy_helper

    found: dict[str, Any] = {}
    for attribute in node.attribute:
        value = helper.get_attribute_value(attribute)
        if attribute.name.endswith("_as_tensor"):
            found[attribute.name.removesuffix("_as_tensor")] = numpy_helper.to_array(value).astype(np.float64)
            found[attribute.name] = True
        else:
            found[attribute.name] = value
    return found


def _ints(attrs: dict[str, Any], name: str) -> np.ndarray:
    return np.asarray(attrs.get(name, []), dtype=np.int64).reshape(-1)


def _floats(attrs: dict[str, Any], name: str) -> np.ndarray:
    return np.asarray(attrs.get(name, []), dtype=np.float64).reshape(-1)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _class_labels(attrs: dict[str, Any]) -> list[int | str]:
    for name in ("classlabels_int64s", "classlabels_ints"):
        if name in attrs:
            return [int(v) for v in attrs[name]]
    return [_text(v) for v in attrs.get("classlabels_strings", [])]


def _event_position(labels: list[int | str], output: OnnxOutput) -> int:
    """Which of the node's two classes is the event: the scored output's event label, else its column."""
    if output.event_label is not None:
        wanted = str(output.event_label)
        matches = [i for i, label in enumerate(labels) if str(label) == wanted]
        if len(matches) == 1:
            return matches[0]
    return int(output.event_index) if output.event_index is not None else 1


def _unit(width: int, index: int) -> np.ndarray:
    column = np.zeros(width, dtype=np.float64)
    column[index] = 1.0
    return column


def _copy_node(node: Any) -> Any:
    from onnx import NodeProto

    copy = NodeProto()
    copy.CopyFrom(node)
    return copy


def _copy_model(model: Any) -> Any:
    from onnx import ModelProto

    copy = ModelProto()
    copy.CopyFrom(model)
    return copy


def _value_nodes(node: Any, *, doubles: bool) -> list[Any]:
    """The explaining node as it gives its scores before `post_transform`; a tree node reads its input cast to
    double and holds its values as double tensors, so ONNX Runtime sums its trees in double as the kernel
    does (in float32, 500 trees round to ~1e-5 of the margin, the contributions' own tolerance). A float32
    row is exactly a double, and so is every float threshold: the rows take the same branches."""
    from onnx import helper, numpy_helper

    copy = _copy_node(node)
    kept = []
    for attribute in copy.attribute:
        if attribute.name == "post_transform":
            continue
        if doubles and attribute.name in _DOUBLE_ATTRIBUTES:
            values = np.asarray(helper.get_attribute_value(attribute), dtype=np.float64)
            kept.append(helper.make_attribute(f"{attribute.name}_as_tensor", numpy_helper.from_array(values)))
            continue
        kept.append(attribute)
    del copy.attribute[:]
    copy.attribute.extend([*kept, helper.make_attribute("post_transform", "NONE")])
    if not doubles:
        return [copy]
    doubled = f"{copy.input[0]}__as_double"
    cast = helper.make_node("Cast", [copy.input[0]], [doubled], to=_DOUBLE)
    copy.input[0] = doubled
    return [cast, copy]


def _opsets(model: Any, *, ml_at_least: int) -> list[Any]:
    from onnx import helper

    found = {o.domain: o.version for o in model.opset_import}
    found["ai.onnx.ml"] = max(found.get("ai.onnx.ml", 1), ml_at_least)
    return [helper.make_opsetid(domain, version) for domain, version in found.items()]


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def _scale_words(scale: str) -> str:
    return "the margin" if scale == "margin" else "the event's probability (the graph's own output), not its logit"
