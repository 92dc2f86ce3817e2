"""CatBoost models saved with `model.save_model("model.cbm")`: raw margins from CatBoost itself, reasons from
the table TreeSHAP on the model's trees, checked against CatBoost's own `ShapValues`.

The margin is CatBoost's RawFormulaVal: the log-odds of a binary classifier (Logloss, CrossEntropy); for a
multiclass job's MultiClass model one value per class, whose softmax is CatBoost's predict_proba (each tree holds
a leaf value per class, explained class by class; MultiClassOneVsAll is refused: its classes' sigmoids are no
probability vector); for a forecast job's regressor the forecast itself (RMSE, MAE, Huber, MAPE, LogCosh, Lq) or its
log (Poisson, Tweedie, whose CatBoostRegressor.predict is exp of it).

What CatBoost does that the conversion follows:

- A split sends a row to bit 1 when `value > border` (float32), so `value <= border` goes left in the one
  tree layout. An oblivious tree of depth d splits on `splits[d - 1]` at its root (the leaf index's highest
  bit) down to `splits[0]` above the leaves; it is expanded to a full binary tree in that order, the order
  CatBoost's own TreeSHAP walks it in (another order gives other, equally "exact" values). The expanded trees
  are explained by the oblivious-tree kernel (tasks/inference/oblivious_treeshap.py): one table row per leaf
  index, each the table kernel's contributions of that tree for a row reaching the leaf.
- A missing value follows each feature's `nan_value_treatment`: `AsFalse` (nan_mode Min, and Forbidden, where
  NaN compares false) goes to bit 0, `AsTrue` (nan_mode Max) to bit 1. nan_mode Min also adds a border at
  -FLT_MAX, Max one at +FLT_MAX (`x <= FLT_MAX` becomes a split at +inf).
- The cover is the training rows' weight in each leaf (`leaf_weights`). CatBoost's TreeSHAP never enters a
  branch of zero weight, not even the one the row takes, so a leaf no training row reached adds nothing to
  any row's contributions (and CatBoost's contributions of a row that lands there add up to the tree's
  average instead of the row's margin). Such a leaf holds 0 in a trained model; here it gets value 0 and a
  negligible cover, which is exactly that.
- CatBoost refuses ShapValues when `scale_and_bias` scales the trees; when a leaf of zero weight holds a
  non-zero value it re-weighs the leaves by the rows it is asked to explain, so its answer for a row depends
  on the rows beside it; and for non-symmetric trees (grow_policy Depthwise, Lossguide) its ShapValues do not
  add up to the raw value (off by up to 1.5 on the margin on a 40-tree Lossguide model), so they are not
  TreeSHAP. For those models the kernel (exact TreeSHAP on the trees as CatBoost evaluates them) is checked
  against the model's own raw values (local accuracy) instead, and CatBoost is never asked.
"""

from __future__ import annotations

import json
import logging
import math
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tasks.contracts import InferenceInput, InferenceOutput
from tasks.errors import DeviceUnavailable, ModelArtifactError
from tasks.inference.contributions import TreeContributions, inference_output_checked_treeshap
from tasks.inference.engine import ExplainingEngine, _logged_output
from tasks.inference.frameworks import RegistrationFields
from tasks.inference.kinds import (
    LINK_WORDS,
    inference_class_labels_problem,
    inference_kind_problem,
    inference_multiclass_kind_problem,
    inference_quantile_problem,
)
from tasks.inference.oblivious_treeshap import inference_oblivious_treeshap_kernel
from tasks.inference.registry import ModelArtifact, ModelExplanation
from tasks.inference.treeshap import (
    ContributionCounts,
    KernelChoice,
    TreeArrays,
    TreeShapUnsupported,
    inference_checked_treeshap,
    inference_leq_threshold,
)

log = logging.getLogger("scoring.inference")

CATBOOST_NAME = "catboost"
SHAP_LABEL = "CatBoost ShapValues"
BINARY_LOSSES = ("Logloss", "CrossEntropy")
"""Losses whose RawFormulaVal is the log-odds of the second class: a margin the calibration can map."""
FORECAST_LOSSES = {
    "RMSE": "identity",
    "MAE": "identity",
    "Huber": "identity",
    "MAPE": "identity",
    "LogCosh": "identity",
    "Lq": "identity",
    "Poisson": "log",
    "Tweedie": "log",
}
"""Losses a forecast job takes, with the link from RawFormulaVal to CatBoost's own prediction."""
_QUANTILE_LOSSES = ("Quantile", "Expectile", "LogLinQuantile", "MultiQuantile")
MULTICLASS_LOSS = "MultiClass"
"""The loss a multiclass job takes: softmax over one RawFormulaVal per class."""
_MULTICLASS_LOSSES = (MULTICLASS_LOSS, "MultiClassOneVsAll")
_MULTILABEL_LOSSES = ("MultiLogloss", "MultiCrossEntropy")
_RANKING_MARKS = ("Query", "Pair", "YetiRank", "StochasticRank", "LambdaMart", "NDCG", "PFound")
_ZERO_WEIGHT = 1e-13
"""CatBoost's FuzzyEquals(1 + weight, 1): a branch this light is skipped by its TreeSHAP."""
_EMPTY_LEAF_COVER = 1e-15
"""The cover of a leaf no training row reached, relative to its tree's weight: enough to keep TreeSHAP's
ratios finite, too little to move any other leaf's share (below 1e-13 of the contributions)."""
_NEGATIVE = (0, False, "0", "false")
_POSITIVE = (1, True, "1", "true")
_NAN_MODES = {
    "Min": "a missing value is below every border",
    "Max": "a missing value is above every border",
    "Forbidden": "the model was trained without missing values; a missing one compares below every border",
}


def _catboost_reason(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    # "catboost/libs/model/model.cpp:1234: Incorrect model file descriptor": the source position says nothing to a user.
    return re.sub(r"^\S+\.(?:cpp|h|pyx):\d+:\s*", "", first)


def inference_catboost_model(model_path: Path):  # noqa: ANN201  (a catboost.CatBoost)
    """The model in a .cbm file; ModelArtifactError (one line) when CatBoost cannot read it."""
    import catboost

    model = catboost.CatBoost()
    try:
        model.load_model(str(model_path), format="cbm")
    except (catboost.CatBoostError, OSError, ValueError) as exc:
        raise ModelArtifactError(
            f"model file {model_path} could not be loaded by CatBoost: {_catboost_reason(exc)}"
        ) from None
    return model


@dataclass(frozen=True)
class CatBoostFacts:
    """What the file says about how it scores: read once, for the refusals, the note and the engine."""

    loss: str
    class_names: list[Any]
    nan_mode: str
    tree_count: int
    grow_policy: str
    feature_names: list[str]
    categorical: list[str]
    dimensions: int


def _class_names(model) -> list[Any]:  # noqa: ANN001
    params = (model.get_metadata() or {}).get("class_params") if hasattr(model, "get_metadata") else None
    if params:
        return list(json.loads(params).get("class_names") or [])
    return [c.item() if hasattr(c, "item") else c for c in getattr(model, "classes_", [])]


def inference_catboost_model_json(model) -> dict:  # noqa: ANN001
    """The model as CatBoost exports it to JSON (trees, borders, leaf weights, scale and bias)."""
    with tempfile.TemporaryDirectory(prefix="catboost-json-") as folder:
        path = Path(folder) / "model.json"
        model.save_model(str(path), format="json")
        return json.loads(path.read_text(encoding="utf-8"))


def inference_catboost_facts(model) -> CatBoostFacts:  # noqa: ANN001
    import catboost

    try:
        params = model.get_all_params() or {}
    except catboost.CatBoostError:
        params = {}
    loss = str(params.get("loss_function") or model.get_params().get("loss_function") or "").split(":")[0]
    bias = model.get_scale_and_bias()[1]
    names = [str(n) for n in (model.feature_names_ or [])]
    categorical = [
        names[i] if i < len(names) else str(i)
        for i in (
            *model.get_cat_feature_indices(),
            *model.get_text_feature_indices(),
            *model.get_embedding_feature_indices(),
        )
    ]
    return CatBoostFacts(
        loss=loss,
        class_names=_class_names(model),
        nan_mode=str(params.get("nan_mode") or "Min"),
        tree_count=int(model.tree_count_ or 0),
        grow_policy=str(params.get("grow_policy") or "SymmetricTree"),
        feature_names=names,
        categorical=categorical,
        dimensions=len(bias) if isinstance(bias, list) else 1,
    )


def _is_label(value: Any, labels: tuple) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in labels
    if isinstance(value, bool | int | float) and not (isinstance(value, float) and math.isnan(value)):
        return any(value == label for label in labels if not isinstance(label, str))
    return False


def _what_it_is(loss: str, facts: CatBoostFacts) -> str:
    if loss in BINARY_LOSSES:
        return "a binary classifier"
    if loss in _MULTICLASS_LOSSES:
        classes = f" ({len(facts.class_names)} classes {facts.class_names})" if facts.class_names else ""
        return f"a multiclass model{classes}"
    if loss in _MULTILABEL_LOSSES:
        return "a multi-label model"
    if loss.startswith("Multi"):
        return "a multi-target regression model"
    if any(mark in loss for mark in _RANKING_MARKS):
        return "a ranking model"
    return "a regression model"


def _kind_problem(facts: CatBoostFacts, kind: str) -> str | None:
    """Why the model's loss does not fit a job of `kind` (a binary classifier, a MultiClass classifier, or a regressor
    of the forecast), or None."""
    loss = facts.loss
    classifiers, regressors = f"loss {' or '.join(BINARY_LOSSES)}", f"loss {', '.join(FORECAST_LOSSES)}"
    if not loss:
        wanted = {
            "binary": f"a binary classifier ({classifiers})",
            "multiclass": f"a multiclass classifier (loss {MULTICLASS_LOSS})",
        }.get(kind, f"a regressor ({regressors})")
        return (
            "records no loss function; a "
            f"{'scoring' if kind == 'binary' else kind if kind == 'multiclass' else 'forecast'} model must be {wanted}"
        )
    what = f"is {_what_it_is(loss, facts)} (loss {loss})"
    if kind == "multiclass":
        if loss == MULTICLASS_LOSS:
            return None
        if loss == "MultiClassOneVsAll":
            return (
                f"{what}: one-vs-all, each class's probability is its own sigmoid and they do not sum to 1, so the "
                f"model has no probability vector of its own to calibrate; train with loss {MULTICLASS_LOSS} (softmax)"
            )
        return inference_multiclass_kind_problem(what, kind, multiclass=False, classifiers=f"loss {MULTICLASS_LOSS}")
    if kind == "binary":
        if loss in BINARY_LOSSES:
            return None
        if loss in FORECAST_LOSSES or loss in _QUANTILE_LOSSES:
            return inference_kind_problem(what, kind, regressor=True, classifiers=classifiers, regressors=regressors)
        multiclass = (
            ", or set target.kind: multiclass with its classes in the job spec" if loss in _MULTICLASS_LOSSES else ""
        )
        return f"{what}; a scoring model must be a binary classifier ({classifiers}){multiclass}"
    if loss in FORECAST_LOSSES:
        return None
    if loss in _QUANTILE_LOSSES:
        return inference_quantile_problem(what, regressors)
    if loss in BINARY_LOSSES or loss in _MULTICLASS_LOSSES or loss in _MULTILABEL_LOSSES:
        return inference_kind_problem(what, kind, regressor=False, classifiers=classifiers, regressors=regressors)
    return f"{what}, not one of the regressions a forecast job takes ({regressors})"


def inference_catboost_problem(
    facts: CatBoostFacts,
    features: tuple[str, ...],
    kind: str = "binary",
    classes: tuple[str, ...] = (),
) -> str | None:
    """Why the model cannot score the job's features as a model of the job's kind (a binary classifier, a
    multiclass classifier of `classes` in their order, or a regressor for `kind` regression or count), or None."""
    if (problem := _kind_problem(facts, kind)) is not None:
        return problem
    if kind == "multiclass":
        if classes and facts.dimensions != len(classes):
            return (
                f"gives {facts.dimensions} raw values per row (one per class), but target.classes names "
                f"{len(classes)}: {list(classes)}"
            )
        if facts.class_names and (problem := inference_class_labels_problem(facts.class_names, classes)) is not None:
            return problem
    elif facts.dimensions != 1:
        one = "the log-odds of the event" if kind == "binary" else "the forecast or its log"
        return f"gives {facts.dimensions} raw values per row; a scoring model gives one ({one})"
    if facts.categorical:
        return (
            f"has categorical, text or embedding features {facts.categorical}, which CatBoost encodes itself; the "
            "job's model inputs are numeric float32 columns: encode them in the job's features and train on those"
        )
    trained = facts.class_names
    if (
        kind == "binary"
        and trained
        and (len(trained) != 2 or not _is_label(trained[0], _NEGATIVE) or not _is_label(trained[1], _POSITIVE))
    ):
        return (
            f"was trained on classes {trained}; its raw value is the log-odds of class {trained[-1]!r}, "
            "which is not the job's event outcome 1 against 0: train on 0/1 outcomes (or False/True, '0'/'1')"
        )
    names = facts.feature_names
    if len(names) != len(features):
        return f"takes {len(names)} inputs, but the job computes {len(features)} features {list(features)}"
    # CatBoost names the columns "0", "1", … when it was trained on an unnamed matrix: the order is all it knows.
    if names != [str(i) for i in range(len(names))] and tuple(names) != features:
        if set(names) == set(features):
            return f"takes the job's features in another order: model {names}, job {list(features)}"
        return (
            "was trained on features the job does not compute: only in the model "
            f"{sorted(set(names) - set(features))}, only in the job {sorted(set(features) - set(names))}"
        )
    if facts.tree_count == 0:
        return "has no trees"
    return None


def inference_input_problem(
    model_path: Path,
    features: tuple[str, ...],
    *,
    kind: str = "binary",
    classes: tuple[str, ...] = (),
) -> str | None:
    """Why the .cbm file cannot score the job's features as a model of the job's kind, or None."""
    try:
        model = inference_catboost_model(model_path)
    except ModelArtifactError as exc:
        return str(exc).removeprefix(f"model file {model_path} ")
    return inference_catboost_problem(inference_catboost_facts(model), features, kind, classes)


def inference_registration_fields(
    model_path: Path,
    features: tuple[str, ...],
    holdout: np.ndarray,
    reference: np.ndarray,
    *,
    kind: str = "binary",
) -> RegistrationFields:
    """Reasons by TreeSHAP (checked at registration against CatBoost's ShapValues), for a forecast job the `link`
    from RawFormulaVal to the forecast, and a line saying what scores."""
    model = inference_catboost_model(model_path)
    facts = inference_catboost_facts(model)
    if problem := inference_catboost_problem(facts, features, kind):
        raise ModelArtifactError(f"model file {model_path} {problem}")
    fields: dict[str, Any] = {"explanation": ModelExplanation(method="treeshap")}
    if kind == "multiclass":
        _softmax_check(model, holdout, model_path)
        meaning = (
            f"one value per class of its {facts.dimensions}{f' {facts.class_names}' if facts.class_names else ''}, "
            "whose softmax is CatBoost's predict_proba (checked on the hold-out)"
        )
    elif kind == "binary":
        event = (
            f"class {facts.class_names[1]!r} of {facts.class_names}" if facts.class_names else "the event (target 1)"
        )
        meaning = f"the log-odds of {event}"
    else:
        fields["link"] = FORECAST_LOSSES[facts.loss]
        meaning = LINK_WORDS[fields["link"]]
    note = (
        f"CatBoost model: {facts.tree_count} trees ({facts.grow_policy}), loss {facts.loss}; "
        f"the margin is CatBoost's RawFormulaVal, {meaning}; nan_mode {facts.nan_mode}: "
        f"{_NAN_MODES.get(facts.nan_mode, 'as CatBoost treats it')}; scored on the job's device: CPU, or the GPU where "
        "CatBoost can evaluate there (read back at load)"
    )
    return RegistrationFields(fields, [note])


SOFTMAX_TOLERANCE = 1e-6
"""How far the softmax of RawFormulaVal may be from CatBoost's own Probability (float64 both, from the same sums)."""


def _softmax_check(model, holdout: np.ndarray, model_path: Path) -> None:  # noqa: ANN001  (a catboost.CatBoost)
    """Refuses a multiclass model whose RawFormulaVal's softmax is not CatBoost's own probability
    vector on the hold-out."""
    if holdout.shape[0] == 0:
        return
    rows = np.ascontiguousarray(holdout, dtype=np.float32)
    raw = np.asarray(model.predict(rows, prediction_type="RawFormulaVal"), dtype=np.float64)
    shifted = np.exp(raw - raw.max(axis=1, keepdims=True))
    own = np.asarray(model.predict(rows, prediction_type="Probability"), dtype=np.float64)
    diff = float(np.abs(shifted / shifted.sum(axis=1, keepdims=True) - own).max())
    if not diff <= SOFTMAX_TOLERANCE:
        raise ModelArtifactError(
            f"model file {model_path}: the softmax of its RawFormulaVal differs from CatBoost's own probabilities by "
            f"up to {diff:.3g} on the {holdout.shape[0]} hold-out rows; its margins would not be the model's"
        )


@dataclass(frozen=True)
class CatBoostTrees:
    """The model's trees in the one layout, and why CatBoost's own ShapValues cannot be the reference, if so."""

    arrays: TreeArrays
    own_shap_unusable: str | None
    oblivious: bool
    """Symmetric trees, each expanded level by level: the oblivious-tree kernel explains them."""


def _nan_goes_left(treatment: str) -> int:
    return 0 if treatment == "AsTrue" else 1


def _thresholds(borders: list[float]) -> np.ndarray:
    # A border at ±FLT_MAX (nan_mode's missing-value border) steps past float32 on the way; the result is exact.
    with np.errstate(over="ignore"):
        return inference_leq_threshold(np.asarray(borders, dtype=np.float64)).astype(np.float64)


class _TreeBuilder:
    """Nodes of one tree (heap order for an oblivious tree, preorder for a non-symmetric one); children
    are indices within it."""

    def __init__(self) -> None:
        self.left: list[int] = []
        self.right: list[int] = []
        self.feature: list[int] = []
        self.value: list[float] = []
        self.default_left: list[int] = []
        self.cover: list[float] = []

    def node(self, feature: int, value: float, default_left: int, cover: float) -> int:
        self.left.append(-1)
        self.right.append(-1)
        self.feature.append(feature)
        self.value.append(value)
        self.default_left.append(default_left)
        self.cover.append(cover)
        return len(self.left) - 1


def _leaf_covers(weights: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, bool]:
    """(covers, whether a zero-weight leaf holds a non-zero value) of one tree's leaves. A zero-weight leaf holding 0
    adds 0 to every row's contributions, as CatBoost skipping it does; its cover only has to keep the ratios finite."""
    empty = weights <= _ZERO_WEIGHT
    tiny = _EMPTY_LEAF_COVER * max(float(weights[~empty].sum()), 1.0)
    return np.where(empty, tiny, weights), bool(np.any(values[empty] != 0.0))


def inference_catboost_tree_arrays(
    model_json: dict, n_features: int, output: int = 0, outputs: int = 1
) -> CatBoostTrees:
    """The trees of CatBoost's JSON export in the one layout, adding up to raw value `output` of the model's `outputs`
    (a multiclass model's leaves hold one value per class, leaf by leaf); raises TreeShapUnsupported for what it
    cannot represent."""
    floats = {int(f["feature_index"]): f for f in model_json.get("features_info", {}).get("float_features", [])}
    scale, bias = model_json.get("scale_and_bias") or [1.0, [0.0] * outputs]
    bias = float(bias[output] if isinstance(bias, list) else bias)
    scale = float(scale)
    unusable: list[str] = []
    if scale != 1.0:
        unusable.append(f"scale_and_bias scales the trees by {scale:g}, for which CatBoost computes no ShapValues")
    nodes: list[_TreeBuilder] = []

    def split(s: dict) -> tuple[int, float, int]:
        if s.get("split_type") != "FloatFeature":
            raise TreeShapUnsupported(f"a split of type {s.get('split_type')!r}: only float-feature splits are read")
        feature = floats.get(int(s["float_feature_index"]))
        if feature is None:
            raise TreeShapUnsupported(
                f"a split on float feature {s['float_feature_index']} that the model does not describe"
            )
        return (
            int(feature["flat_feature_index"]),
            float(_thresholds([s["border"]])[0]),
            _nan_goes_left(feature.get("nan_value_treatment", "AsFalse")),
        )

    nonzero_empty = False
    if "oblivious_trees" in model_json:
        for tree in model_json["oblivious_trees"]:
            splits = tree["splits"]
            depth = len(splits)
            values = np.asarray(tree["leaf_values"], dtype=np.float64) * scale
            if outputs > 1:
                values = values[output::outputs]
            weights = np.asarray(tree.get("leaf_weights") or [], dtype=np.float64)
            if values.size != 2**depth or weights.size != values.size:
                raise TreeShapUnsupported(
                    "the model keeps no leaf weights, so CatBoost weighs its trees by the rows it explains"
                    if weights.size == 0
                    else f"a tree of depth {depth} has {values.size} leaf values and {weights.size} leaf weights"
                )
            covers, empty_nonzero = _leaf_covers(weights, values)
            nonzero_empty |= empty_nonzero
            builder = _TreeBuilder()
            # Heap order: level k splits on splits[depth - 1 - k]; the node at position i of level k holds the
            # leaves whose top k index bits are i, and going right sets the next bit.
            for level in range(depth):
                feature, threshold, default_left = split(splits[depth - 1 - level])
                for block in covers.reshape(2**level, -1).sum(axis=1):
                    node = builder.node(feature, threshold, default_left, float(block))
                    builder.left[node], builder.right[node] = 2 * node + 1, 2 * node + 2
            for leaf in range(2**depth):
                builder.node(0, float(values[leaf]), 0, float(covers[leaf]))
            nodes.append(builder)
    elif "trees" in model_json:
        unusable.append(
            "its trees are non-symmetric (grow_policy Depthwise or Lossguide), for which CatBoost's ShapValues do not "
            "add up to the model's raw values"
        )

        def walk(node: dict, builder: _TreeBuilder, leaves: list[tuple[int, float, float]]) -> int:
            if "split" not in node:
                value = node["value"]
                index = builder.node(0, 0.0, 0, 0.0)
                leaves.append(
                    (
                        index,
                        float(value[output] if isinstance(value, list) else value) * scale,
                        float(node.get("weight", 0.0)),
                    )
                )
                return index
            feature, threshold, default_left = split(node["split"])
            index = builder.node(feature, threshold, default_left, 0.0)
            builder.left[index] = walk(node["left"], builder, leaves)
            builder.right[index] = walk(node["right"], builder, leaves)
            return index

        for tree in model_json["trees"]:
            builder = _TreeBuilder()
            leaves: list[tuple[int, float, float]] = []
            walk(tree, builder, leaves)
            values = np.array([leaf[1] for leaf in leaves])
            covers, empty_nonzero = _leaf_covers(np.array([leaf[2] for leaf in leaves]), values)
            nonzero_empty |= empty_nonzero
            for (index, _, _), cover, value in zip(leaves, covers, values, strict=True):
                builder.cover[index], builder.value[index] = float(cover), float(value)
            # Children come after their parent in `walk`, so one backward pass sums every subtree's cover.
            for index in range(len(builder.left) - 1, -1, -1):
                if builder.left[index] >= 0:
                    builder.cover[index] = builder.cover[builder.left[index]] + builder.cover[builder.right[index]]
            nodes.append(builder)
    else:
        raise TreeShapUnsupported("the model's JSON export has neither oblivious_trees nor trees")
    if nonzero_empty:
        unusable.append(
            "a leaf no training row reached holds a non-zero value, for which CatBoost's ShapValues re-weigh the "
            "leaves by the rows explained together"
        )
    if not nodes:
        raise TreeShapUnsupported("the model has no trees")
    sizes = np.array([len(b.left) for b in nodes], dtype=np.int64)

    def concatenated(name: str, dtype: type) -> np.ndarray:
        return np.concatenate([np.asarray(getattr(b, name), dtype=dtype) for b in nodes])

    arrays = TreeArrays(
        left=concatenated("left", np.int64),
        right=concatenated("right", np.int64),
        feature=concatenated("feature", np.int64),
        value=concatenated("value", np.float64),
        default_left=concatenated("default_left", np.uint8),
        cover=concatenated("cover", np.float64),
        node_start=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        bias=bias,
        n_features=n_features,
    )
    return CatBoostTrees(arrays, "; ".join(unusable) or None, "oblivious_trees" in model_json)


class CatBoostEngine(ExplainingEngine):
    """CatBoost inference: RawFormulaVal margins (on the GPU where CatBoost can evaluate there), reasons by the
    table TreeSHAP checked against ShapValues."""

    def __init__(
        self, artifact: ModelArtifact, *, device: str = "cpu", nthread: int = 0, call_threads: int | None = None
    ) -> None:
        from tasks.inference.engine import inference_cuda_device_present

        self.artifact = artifact
        self.metadata = artifact.metadata
        self.model_path = artifact.model_path
        self.model = inference_catboost_model(artifact.model_path)
        threads = nthread if call_threads is None else call_threads
        self._threads = -1 if threads <= 0 else threads
        self._task_type = "CPU"
        gpu_problem: str | None = "no NVIDIA device is present"
        if device == "cuda" or (device == "auto" and inference_cuda_device_present()):
            gpu_problem = self._gpu_problem()
            if gpu_problem is None:
                self._task_type = "GPU"
        self.device_type = "cuda" if self._task_type == "GPU" else "cpu"
        if device == "cuda" and self.device_type != "cuda":
            raise DeviceUnavailable(
                f"model {self.metadata.name} {self.metadata.version}: device 'cuda' was asked for, but CatBoost cannot "
                f"evaluate on a GPU here ({gpu_problem}); set device: cpu or auto"
            )
        if device == "auto" and self.device_type != "cuda":
            log.info("[INF] model_name=%s device auto: %s, scoring on CPU", self.metadata.name, gpu_problem)
        self.providers = (f"catboost:{self.device_type}",)
        self.feature_names = tuple(self.metadata.features)
        self.reasons_unavailable = None
        self._classes = len(self.metadata.classes) if self.metadata.target == "multiclass" else 0
        if not self._classes:
            self.contributions_source = self._explanation(nthread)
            return
        # One source per class, each the trees' values of that class; the first one unavailable makes reasons off.
        model_json = inference_catboost_model_json(self.model)
        sources = []
        counts = ContributionCounts()
        for k in range(self._classes):
            source = self._explanation(nthread, k, model_json)
            if source is None:
                return
            source.counts = counts
            sources.append(source)
        self.class_contributions = tuple(sources)
        self.contributions_source = sources[0]

    def _explanation(
        self, nthread: int, output: int | None = None, model_json: dict | None = None
    ) -> TreeContributions | None:
        """The contributions' source of the model's raw value, or of class `output`'s raw value
        of a multiclass model."""
        label = f"{self.metadata.name} {self.metadata.version}"
        start = time.perf_counter()
        own: Callable[[np.ndarray], np.ndarray] = self._catboost_contributions
        raw_values: Callable[[np.ndarray], np.ndarray] = self._raw_values
        if output is not None:
            label = f"{label} class {self.metadata.classes[output]!r}"
            own = lambda rows: self._catboost_contributions(rows)[:, output, :]  # noqa: E731
            raw_values = lambda rows: self._raw_values(rows)[:, output]  # noqa: E731
        try:
            trees = inference_catboost_tree_arrays(
                model_json if model_json is not None else inference_catboost_model_json(self.model),
                len(self.feature_names),
                output or 0,
                max(self._classes, 1),
            )
        except TreeShapUnsupported as exc:
            scale = float(self.model.get_scale_and_bias()[0])
            if scale != 1.0:
                self.reasons_unavailable = (
                    f"model {label} is a CatBoost model whose trees the product cannot read ({exc}) and which scales "
                    f"them by {scale:g}, for which CatBoost computes no ShapValues: its rows "
                    "are scored with reasons off"
                )
                return None
            log.info("[INF] model_name=%s contributions by %s: %s", label, SHAP_LABEL, exc)
            choice = KernelChoice(None, str(exc), None, time.perf_counter() - start, CATBOOST_NAME)
            return TreeContributions(choice, own, nthread=nthread, framework_label=SHAP_LABEL)
        # A symmetric tree's contributions depend only on the leaf a row reaches: one table row per leaf.
        kernel_of = inference_oblivious_treeshap_kernel if trees.oblivious else None
        if trees.own_shap_unusable is None:
            choice = inference_checked_treeshap(
                trees.arrays,
                own,
                model_label=label,
                framework=CATBOOST_NAME,
                reference_name=SHAP_LABEL,
                nthread=nthread,
                kernel_of=kernel_of,
            )
            return TreeContributions(choice, own, nthread=nthread, framework_label=SHAP_LABEL)
        log.info(
            "[INF] model_name=%s contributions checked against the model's own raw values: %s",
            label,
            trees.own_shap_unusable,
        )
        try:
            choice = inference_output_checked_treeshap(
                trees.arrays,
                raw_values,
                model_label=label,
                framework=CATBOOST_NAME,
                nthread=nthread,
                kernel_of=kernel_of,
            )
        except TreeShapUnsupported as exc:
            self.reasons_unavailable = (
                f"model {label} is a CatBoost model whose reasons cannot be exact here ({trees.own_shap_unusable}; "
                f"{exc}): its rows are scored with reasons off"
            )
            return None
        return TreeContributions(choice, None, nthread=nthread, framework_label=SHAP_LABEL, output=raw_values)

    def _gpu_problem(self) -> str | None:
        """Why CatBoost cannot evaluate this model on the GPU (its CPU-only build, no usable device), or None:
        CatBoost's own attempt is the only truth, so one row is evaluated there and compared with the CPU."""
        row = np.zeros((1, len(self.metadata.features)), dtype=np.float32)
        try:
            on_gpu = self.model.predict(row, prediction_type="RawFormulaVal", task_type="GPU")
        except Exception as exc:  # noqa: BLE001  (CatBoostError, or a CUDA runtime error surfacing as another type)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            # "library/cpp/cuda/wrappers/cuda_vec.h:86: CUDA error 35: …": the source position says nothing to a user.
            return "CatBoost: " + re.sub(r"^\S+:\d+:\s*", "", first)
        on_cpu = self.model.predict(row, prediction_type="RawFormulaVal")
        if not np.allclose(
            np.asarray(on_gpu, dtype=np.float64), np.asarray(on_cpu, dtype=np.float64), rtol=1e-5, atol=1e-6
        ):
            return (
                f"CatBoost's GPU evaluation gives {float(np.ravel(on_gpu)[0])!r} where its CPU gives "
                f"{float(np.ravel(on_cpu)[0])!r}"
            )
        return None

    def _raw_values(self, rows: np.ndarray) -> np.ndarray:
        """RawFormulaVal: one per row, or rows × classes for a multiclass model."""
        values = np.asarray(
            self.model.predict(
                np.ascontiguousarray(rows, dtype=np.float32),
                prediction_type="RawFormulaVal",
                thread_count=self._threads,
                task_type=self._task_type,
            ),
            dtype=np.float64,
        )
        return values.reshape(rows.shape[0], self._classes) if self._classes else values.reshape(-1)

    def _catboost_contributions(self, rows: np.ndarray) -> np.ndarray:
        """CatBoost's own TreeSHAP: rows × (features + 1), the expected value last (rows × classes × (features + 1) for
        a multiclass model)."""
        from catboost import Pool

        pool = Pool(np.ascontiguousarray(rows, dtype=np.float32))
        return np.asarray(
            self.model.get_feature_importance(data=pool, type="ShapValues", thread_count=self._threads),
            dtype=np.float64,
        )

    def inference_outputs(self, batch: InferenceInput) -> InferenceOutput:
        start = time.perf_counter()
        margins = self._raw_values(batch.features)
        latency_ms = (time.perf_counter() - start) * 1000.0
        return _logged_output(self.metadata, batch, margins, latency_ms, self.device_type)


ENGINE = CatBoostEngine
