"""LightGBM binary classifiers, multiclass classifiers and regressors saved with `Booster.save_model` (model
text): raw-score margins, TreeSHAP reasons.

The margin is LightGBM's own raw score (`predict(raw_score=True)`): the log-odds for objectives `binary`
and `cross_entropy`; for a multiclass job's `multiclass` (softmax) objective one raw score per class, whose
softmax is LightGBM's probability vector (tree t of the model is class t mod num_class's); for a forecast
job's regressor the forecast itself (`regression`, `regression_l1`, `huber`, `fair`, `mape`) or its log
(`poisson`, `tweedie`, `gamma`, whose `predict` is exp of the raw score). `multiclassova` is refused: its
classes' probabilities are separate sigmoids, which no softmax of margins reproduces. In random-forest mode
the raw score sums the trees: the margin is their mean. Reasons come from the table TreeSHAP on the trees of
`dump_model()` (one kernel per class for a multiclass model), kept only after they match LightGBM's
`pred_contrib` on the load-time guard rows; a model the kernel cannot represent is explained by
`pred_contrib` itself.

How LightGBM routes a value (`Tree::NumericalDecision`), and how the kernel's layout (a row goes left
when `value < threshold`, NaN left iff `default_left`) says the same:

- a dense row keeps only values with |x| > 1e-35 (and NaN); anything smaller reaches the trees as 0;
- missing type `NaN`: NaN takes the default branch, everything else `x <= threshold`: exact as it is;
- missing type `None`: NaN is read as 0, so NaN goes left iff `0 <= threshold`: that is its `default_left`;
- missing type `Zero` (trained with `zero_as_missing`): 0 and NaN both take the default branch; the kernel
  sees such a feature's zeros as NaN (`_explained_rows`), which is only sound when every split on the
  feature has missing type `Zero`.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from tasks.contracts import InferenceInput, InferenceOutput
from tasks.errors import DeviceUnavailable, ModelArtifactError
from tasks.inference.contributions import TreeContributions
from tasks.inference.engine import Device, ExplainingEngine, _logged_output
from tasks.inference.frameworks import RegistrationFields
from tasks.inference.kinds import (
    LINK_WORDS,
    inference_kind_problem,
    inference_multiclass_kind_problem,
    inference_quantile_problem,
)
from tasks.inference.registry import ModelArtifact, ModelExplanation, inference_framework_module
from tasks.inference.treeshap import (
    DEFAULT_MAX_PATH_FEATURES,
    ContributionCounts,
    KernelChoice,
    TreeArrays,
    TreeShapUnsupported,
    inference_checked_treeshap,
    inference_leq_threshold,
)

log = logging.getLogger("scoring.inference")

LIGHTGBM_NAME = "lightgbm"
REFERENCE_NAME = "LightGBM pred_contrib"
LOGIT_OBJECTIVES = ("binary", "cross_entropy")
"""Objectives whose raw score is the log-odds of the event: `binary` (times its `sigmoid`, 1 by default) and
`cross_entropy` (xentropy: p = 1 / (1 + exp(−f)) of the boosted f). `cross_entropy_lambda` links differently."""
FORECAST_OBJECTIVES = {
    "regression": "identity",
    "regression_l1": "identity",
    "huber": "identity",
    "fair": "identity",
    "mape": "identity",
    "poisson": "log",
    "tweedie": "log",
    "gamma": "log",
}
"""Objectives a forecast job takes, with the link from the raw score to LightGBM's own prediction."""
MULTICLASS_OBJECTIVE = "multiclass"
"""The objective a multiclass job takes: softmax over one raw score per class (`softmax` is LightGBM's alias)."""
OVA_OBJECTIVE = "multiclassova"
ZERO_THRESHOLD = float(np.float32(1e-35))
"""LightGBM's kZeroThreshold (a float, compared as a double): values within it are zero to LightGBM."""
_MISSING_TYPES = ("None", "Zero", "NaN")


def _lightgbm(model_path: Path | None = None):  # noqa: ANN202  (the lightgbm module)
    return inference_framework_module(LIGHTGBM_NAME, model_path)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _model_text_problem(text: bytes) -> str | None:
    """Why LightGBM's loader would read past the end of this model text, or None.

    LightGBM 4.7 crashes the process (a segmentation fault, not an exception) on a file cut short (a failed
    copy, a partial download) inside its trees or its parameters section, or with a tree edited by hand: it
    jumps to each tree at the offsets its `tree_sizes=` line adds up, and reads parameters up to a `]`, without
    bounds checks. These are the checks it skips."""
    first = text.find(b"\nTree=")
    end_of_trees = text.find(b"\nend of trees", max(first, 0))
    if first < 0 or end_of_trees < 0:
        return "is cut short: its trees do not end with LightGBM's `end of trees` line"
    # A parameters section cut inside a `[key: value]` line crashes the loader too.
    parameters = text.find(b"\nparameters:", end_of_trees)
    if parameters >= 0 and text.find(b"\nend of parameters", parameters) < 0:
        return "is cut short: its parameters section does not end with LightGBM's `end of parameters` line"
    header = text[:first]
    found = re.search(rb"^tree_sizes=([0-9 ]*)\r?$", header, re.MULTILINE)
    if found is None:
        return None
    sizes = [int(size) for size in found.group(1).split()]
    offset = first + 1
    for i, size in enumerate(sizes):
        if not text.startswith(b"Tree=", offset):
            return (
                f"does not hold tree {i} where its tree_sizes line puts it: the file was cut or edited after save_model"
            )
        offset += size
    if offset > len(text):
        return "is cut short: its tree_sizes line says the trees take more bytes than the file has"
    return None


def inference_lightgbm_booster(model_path: Path):  # noqa: ANN201  (a lightgbm.Booster)
    """The model file as a LightGBM Booster; raises ModelArtifactError with LightGBM's reason in one line."""
    lgb = _lightgbm(model_path)
    try:
        problem = _model_text_problem(model_path.read_bytes())
    except OSError as exc:
        raise ModelArtifactError(f"model file {model_path} could not be read: {exc}") from None
    if problem:
        raise ModelArtifactError(f"model file {model_path} {problem}")
    try:
        return lgb.Booster(model_file=str(model_path))
    except Exception as exc:  # noqa: BLE001  (LightGBMError, and whatever a mangled file makes the parser raise)
        raise ModelArtifactError(
            f"model file {model_path} could not be loaded by LightGBM: {_first_line(exc)}"
        ) from None


def _objective(model: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The objective's name and its `key:value` settings, from the model's `objective=` line ("binary sigmoid:1")."""
    name, *settings = str(model.get("objective", "")).split() or [""]
    return name, dict(s.split(":", 1) for s in settings if ":" in s)


def _has_linear_leaves(model: dict[str, Any]) -> bool:
    return any(
        "leaf_coeff" in entry["node"] for tree in model["tree_info"] for entry in _tree_nodes(tree["tree_structure"])
    )


def _categorical_features(booster, model: dict[str, Any]) -> list[str]:  # noqa: ANN001  (a lightgbm.Booster)
    """The features the model treats as categories (their values are codes, not numbers)."""
    names = list(model.get("feature_names") or [])
    infos = model.get("feature_infos") or {}
    found = [name for name in names if (infos.get(name) or {}).get("values")]
    declared = booster.params.get("categorical_feature") or []
    for entry in declared if isinstance(declared, list) else str(declared).split(","):
        entry = str(entry).strip().removeprefix("name:")
        name = names[int(entry)] if entry.isdigit() and int(entry) < len(names) else entry
        if name and name not in found:
            found.append(name)
    return found


def _unnamed(names: list[str]) -> bool:
    """LightGBM's own names for the columns of an array it was trained on: Column_0, Column_1, ..."""
    return all(name == f"Column_{i}" for i, name in enumerate(names))


def _kind_problem(model: dict[str, Any], kind: str) -> str | None:
    """Why the model's objective does not fit a job of `kind` (a binary classifier, a softmax multiclass classifier,
    or a regressor of the forecast), or None."""
    objective, _ = _objective(model)
    named = str(model.get("objective", ""))
    what = (
        f"has objective {named!r}"
        if named and named != "custom"
        else "has a custom objective (no objective in the file)"
    )
    single = int(model.get("num_class", 1)) == 1 and int(model.get("num_tree_per_iteration", 1)) == 1
    binary = objective in LOGIT_OBJECTIVES and single
    regressor = objective in FORECAST_OBJECTIVES or objective == "quantile"
    classifiers, regressors = " or ".join(LOGIT_OBJECTIVES), ", ".join(FORECAST_OBJECTIVES)
    if kind == "multiclass":
        if objective == MULTICLASS_OBJECTIVE:
            return None
        if objective == OVA_OBJECTIVE:
            return (
                f"{what}, one-vs-all: each class's probability is its own sigmoid and they do not sum to 1, so the model has no "
                f"probability vector of its own to calibrate; train with objective {MULTICLASS_OBJECTIVE!r} (softmax)"
            )
        is_what = (
            "a binary classifier"
            if objective in LOGIT_OBJECTIVES
            else "a regression objective"
            if regressor
            else "not a multiclass objective"
        )
        return inference_multiclass_kind_problem(
            f"{what}, {is_what}",
            kind,
            multiclass=False,
            classifiers=f"objective {MULTICLASS_OBJECTIVE!r}",
        )
    if kind == "binary":
        if binary:
            return None
        if regressor:
            return inference_kind_problem(
                f"{what}, a regression objective", kind, regressor=True, classifiers=classifiers, regressors=regressors
            )
        multiclass = (
            ", or set target.kind: multiclass with its classes in the job spec"
            if objective.startswith("multiclass")
            else ""
        )
        return f"{what}; a scoring model must be a binary classifier ({classifiers}){multiclass}"
    if objective == "quantile":
        return inference_quantile_problem(f"{what}", regressors)
    if objective in FORECAST_OBJECTIVES and single:
        if "sqrt" in named.split()[1:]:
            # LightGBM then predicts sign(f)·f² of the raw score f: neither the raw score nor its exp.
            return (
                f"{what}: it was trained with reg_sqrt, so LightGBM's prediction is the square of its raw score, which is neither the "
                "forecast nor its log; retrain without reg_sqrt"
            )
        return None
    if objective in LOGIT_OBJECTIVES or objective.startswith("multiclass") or objective == "cross_entropy_lambda":
        return inference_kind_problem(
            f"{what}, a classifier", kind, regressor=False, classifiers=classifiers, regressors=regressors
        )
    return f"{what}, not a regression objective; a forecast model must be a regressor ({regressors})"


def inference_input_problem(
    model_path: Path,
    features: tuple[str, ...],
    *,
    kind: str = "binary",
    classes: tuple[str, ...] = (),
) -> str | None:
    """Why the LightGBM model file cannot score the job's features as a model of the job's kind (a binary
    classifier, a multiclass classifier of as many classes as `classes`, or a regressor for `kind` regression or
    count), or None. LightGBM keeps no class names: their order is checked on the hold-out at registration."""
    try:
        booster = inference_lightgbm_booster(model_path)
    except ModelArtifactError as exc:
        return str(exc).removeprefix(f"model file {model_path} ")
    model = booster.dump_model()
    if (problem := _kind_problem(model, kind)) is not None:
        return problem
    if kind == "multiclass" and classes and int(model.get("num_class", 1)) != len(classes):
        return (
            f"gives {int(model.get('num_class', 1))} classes, but target.classes names {len(classes)}: {list(classes)}"
        )
    if booster.params.get("linear_tree") or _has_linear_leaves(model):
        return (
            "was trained with linear_tree: its leaves are linear models, which LightGBM's TreeSHAP (pred_contrib) does not "
            "explain; retrain without linear_tree"
        )
    categorical = _categorical_features(booster, model)
    # A DataFrame without category columns leaves `pandas_categorical: []`.
    if categorical or booster.pandas_categorical or any(int(t.get("num_cat", 0)) for t in model["tree_info"]):
        return (
            f"treats features {categorical or '(from a pandas category dtype)'} as categorical: the job's model inputs are "
            "numbers; retrain with them as numeric columns (the spec's categorical features reach the model as codes)"
        )
    if booster.num_feature() != len(features):
        return f"takes {booster.num_feature()} inputs, but the job computes {len(features)} features {list(features)}"
    names = list(booster.feature_name())
    if not _unnamed(names) and tuple(names) != features:
        if set(names) == set(features):
            return f"takes the job's features in another order: model {names}, job {list(features)}"
        return (
            f"was trained on features the job does not compute: only in the model {sorted(set(names) - set(features))}, "
            f"only in the job {sorted(set(features) - set(names))}"
        )
    return None


def _tree_nodes(root: dict[str, Any]) -> list[dict[str, Any]]:
    """The tree's nodes in preorder, children as indices into that list, -1 at a leaf."""
    nodes: list[dict[str, Any]] = []
    stack: list[tuple[dict[str, Any], int, str]] = [(root, -1, "")]
    while stack:
        node, parent, side = stack.pop()
        index = len(nodes)
        nodes.append({"node": node, "left": -1, "right": -1})
        if parent >= 0:
            nodes[parent][side] = index
        if "leaf_value" not in node:
            stack.append((node["right_child"], index, "right"))
            stack.append((node["left_child"], index, "left"))
    return nodes


def inference_lightgbm_margin_scale(model: dict[str, Any]) -> float:
    """What turns LightGBM's raw score into the margin: 1, or 1 / iterations in random-forest mode (`average_output`),
    where the raw score is the trees' sum and LightGBM's own prediction the link of their mean (the sigmoid of it, for
    a classifier; the softmax of each class's mean for a multiclass one)."""
    per_iteration = int(model.get("num_tree_per_iteration", 1))
    return per_iteration / len(model["tree_info"]) if model.get("average_output") and model["tree_info"] else 1.0


def inference_lightgbm_tree_arrays(model: dict[str, Any], output: int | None = None) -> tuple[TreeArrays, np.ndarray]:
    """The trees of `Booster.dump_model()` in the kernel's layout, their leaves on the margin's scale, and which
    features have missing type `Zero` (their zeros must reach the kernel as NaN). Raises TreeShapUnsupported for
    what the layout cannot say. `output`: only the trees that add up to that raw score (class `output` of a
    multiclass model, whose tree t is class t mod num_tree_per_iteration's); None: all of them."""
    n_features = int(model["max_feature_idx"]) + 1
    per_iteration = int(model.get("num_tree_per_iteration", 1))
    trees = [tree for tree in model["tree_info"] if output is None or int(tree["tree_index"]) % per_iteration == output]
    if not trees:
        raise TreeShapUnsupported("the model has no trees")
    scale = inference_lightgbm_margin_scale(model)
    missing_of = np.full(n_features, -1, dtype=np.int64)
    left, right, feature, value, default_left, cover, sizes = [], [], [], [], [], [], []
    for tree in trees:
        nodes = _tree_nodes(tree["tree_structure"])
        sizes.append(len(nodes))
        for entry in nodes:
            node = entry["node"]
            left.append(entry["left"])
            right.append(entry["right"])
            if "leaf_value" in node:
                feature.append(0)
                value.append(float(node["leaf_value"]) * scale)
                default_left.append(0)
                # A single-leaf tree has no split to weigh; its count only needs to be positive.
                cover.append(float(node.get("leaf_count", 1)))
                continue
            if node["decision_type"] != "<=":
                raise TreeShapUnsupported(
                    f"tree {tree['tree_index']} has a categorical split ({node['decision_type']})"
                )
            missing = node["missing_type"]
            if missing not in _MISSING_TYPES:
                raise TreeShapUnsupported(f"tree {tree['tree_index']} has missing type {missing!r}")
            f = int(node["split_feature"])
            zero = missing == "Zero"
            if missing_of[f] >= 0 and bool(missing_of[f]) != zero:
                raise TreeShapUnsupported(
                    f"feature {f} is split with missing type Zero in some trees and not in others"
                )
            missing_of[f] = int(zero)
            threshold = float(node["threshold"])
            feature.append(f)
            value.append(float(inference_leq_threshold(threshold)))
            default_left.append(int(0.0 <= threshold) if missing == "None" else int(bool(node["default_left"])))
            cover.append(float(node["internal_count"]))
    arrays = TreeArrays(
        left=np.asarray(left, dtype=np.int64),
        right=np.asarray(right, dtype=np.int64),
        feature=np.asarray(feature, dtype=np.int64),
        value=np.asarray(value, dtype=np.float64),
        default_left=np.asarray(default_left, dtype=np.uint8),
        cover=np.asarray(cover, dtype=np.float64),
        node_start=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        # LightGBM folds its initial score (boost_from_average) into the first tree's leaves.
        bias=0.0,
        n_features=n_features,
    )
    return arrays, missing_of == 1


def inference_registration_fields(
    model_path: Path,
    features: tuple[str, ...],
    holdout: np.ndarray,
    reference: np.ndarray,
    *,
    kind: str = "binary",
) -> RegistrationFields:
    """A LightGBM model's metadata fields (reasons by TreeSHAP; for a forecast job the `link` from its raw score to
    its forecast) and what the registration report says of them."""
    model = inference_lightgbm_booster(model_path).dump_model()
    if (problem := _kind_problem(model, kind)) is not None:
        raise ModelArtifactError(f"model file {model_path} {problem}")
    objective, settings = _objective(model)
    sigmoid = float(settings.get("sigmoid", 1.0))
    fields: dict[str, Any] = {"explanation": ModelExplanation(method="treeshap")}
    if kind == "multiclass":
        _softmax_check(inference_lightgbm_booster(model_path), model, holdout, model_path)
        meaning = f", one per class of its {int(model['num_class'])}, whose softmax is LightGBM's probability vector (checked on the hold-out)"
    elif kind == "binary":
        meaning = ", the log-odds" if sigmoid == 1.0 else ""
    else:
        fields["link"] = FORECAST_OBJECTIVES[objective]
        meaning = f", {LINK_WORDS[fields['link']]}"
    notes = [
        f"LightGBM model, objective {objective}, {len(model['tree_info'])} trees: the margin is LightGBM's raw score "
        f"(predict(raw_score=True)){meaning}; reasons are exact TreeSHAP, checked against LightGBM's pred_contrib"
    ]
    if (scale := inference_lightgbm_margin_scale(model)) != 1.0:
        what = {
            "binary": "probability the sigmoid of their mean",
            "identity": "prediction their mean",
            "log": "prediction exp of their mean",
            "multiclass": "probabilities the softmax of each class's mean",
        }[fields.get("link", "multiclass" if kind == "multiclass" else "binary")]
        notes.append(
            f"random-forest mode: LightGBM's raw score is the sum of the {round(1 / scale)} iterations' trees and its {what}; the "
            "margin is that mean (raw score / iterations), and the reasons are on the same scale"
        )
    if _unnamed(list(model.get("feature_names") or [])):
        notes.append(
            "the model carries no feature names (it was trained on an array: Column_0, Column_1, …), so only the count of its "
            "inputs was checked, not their names or order; train with feature_name= the job's features to have them checked"
        )
    if objective == "binary" and sigmoid != 1.0:
        notes.append(
            f"trained with sigmoid {sigmoid:g}: LightGBM's probability is 1 / (1 + exp(−{sigmoid:g} × raw score)); the calibration "
            "maps the raw score as it is"
        )
    return RegistrationFields(fields, notes)


SOFTMAX_TOLERANCE = 1e-6
"""How far the softmax of the margins may be from LightGBM's own probabilities (both float64 from the same raw scores)."""


def _softmax_check(booster, model: dict[str, Any], holdout: np.ndarray, model_path: Path) -> None:  # noqa: ANN001  (a lightgbm.Booster)
    """Refuses a multiclass model whose margins' softmax is not LightGBM's own probability vector on the hold-out."""
    if holdout.shape[0] == 0:
        return
    margins = np.asarray(booster.predict(holdout, raw_score=True), dtype=np.float64) * inference_lightgbm_margin_scale(
        model
    )
    shifted = np.exp(margins - margins.max(axis=1, keepdims=True))
    diff = float(
        np.abs(
            shifted / shifted.sum(axis=1, keepdims=True) - np.asarray(booster.predict(holdout), dtype=np.float64)
        ).max()
    )
    if not diff <= SOFTMAX_TOLERANCE:
        raise ModelArtifactError(
            f"model file {model_path}: the softmax of its raw scores differs from LightGBM's own probabilities by up to {diff:.3g} "
            f"on the {holdout.shape[0]} hold-out rows; its margins would not be the model's"
        )


class LightGBMEngine(ExplainingEngine):
    """LightGBM inference on CPU: raw-score margins by `Booster.predict`, TreeSHAP contributions on demand."""

    def __init__(
        self,
        artifact: ModelArtifact,
        *,
        device: Device = "cpu",
        nthread: int = 0,
        call_threads: int | None = None,
        max_path_features: int = DEFAULT_MAX_PATH_FEATURES,
    ) -> None:
        self.artifact = artifact
        self.metadata = artifact.metadata
        self.model_path = artifact.model_path
        self.booster = inference_lightgbm_booster(artifact.model_path)
        # LightGBM's CUDA builds train on the GPU; Booster.predict and pred_contrib run on the CPU in every build.
        if device == "cuda":
            raise DeviceUnavailable(
                f"model {self.metadata.name} {self.metadata.version}: device 'cuda' was asked for, but LightGBM predicts "
                "on CPU only; use device cpu or auto"
            )
        if device == "auto":
            log.info("[INF] model_name=%s device auto: LightGBM predicts on CPU", self.metadata.name)
        self.device_type = "cpu"
        self.providers = ("lightgbm:cpu",)
        self.reasons_unavailable = None
        self.feature_names = tuple(self.metadata.features)
        threads = nthread if call_threads is None else call_threads
        self._predict_params = {"num_threads": threads} if threads > 0 else {}
        self._zero_missing = np.zeros(len(self.feature_names), dtype=bool)
        label = f"{self.metadata.name} {self.metadata.version}"
        start = time.perf_counter()
        model = self.booster.dump_model()
        self._scale = inference_lightgbm_margin_scale(model)
        self._classes = len(self.metadata.classes) if self.metadata.target == "multiclass" else 0
        sources = []
        counts = ContributionCounts()
        try:
            # Every tree is read first: a feature's zeros reach all the kernels alike (as NaN or as 0).
            _, self._zero_missing = inference_lightgbm_tree_arrays(model)
            unsupported = None
        except TreeShapUnsupported as exc:
            unsupported = exc
        for output in range(max(self._classes, 1)):
            own = (
                self._lightgbm_contributions
                if not self._classes
                else (lambda rows, k=output: self._lightgbm_contributions(rows)[:, k, :])
            )
            try:
                if unsupported is not None:
                    raise unsupported
                trees, _ = inference_lightgbm_tree_arrays(model, output if self._classes else None)
            except TreeShapUnsupported as exc:
                log.info("[INF] model_name=%s contributions by %s: %s", label, REFERENCE_NAME, exc)
                choice = KernelChoice(None, str(exc), None, time.perf_counter() - start, LIGHTGBM_NAME)
            else:
                choice = inference_checked_treeshap(
                    trees,
                    own,
                    model_label=label if not self._classes else f"{label} class {self.metadata.classes[output]!r}",
                    framework=LIGHTGBM_NAME,
                    reference_name=REFERENCE_NAME,
                    nthread=nthread,
                    max_path_features=max_path_features,
                    rows_as_seen=self._explained_rows,
                )
            source = TreeContributions(choice, own, nthread=nthread, framework_label=REFERENCE_NAME)
            source.counts = counts
            sources.append(source)
        self.contributions_source = sources[0]
        if self._classes:
            # One source per class: each class's trees, checked against that class's slice of pred_contrib.
            self.class_contributions = tuple(sources)

    def inference_outputs(self, batch: InferenceInput) -> InferenceOutput:
        start = time.perf_counter()
        if batch.features.shape[0] == 0:
            margins = np.empty((0, self._classes) if self._classes else 0, dtype=np.float64)
        else:
            margins = self.booster.predict(batch.features, raw_score=True, **self._predict_params)
            if self._scale != 1.0:
                margins = margins * self._scale
        latency_ms = (time.perf_counter() - start) * 1000.0
        return _logged_output(self.metadata, batch, margins, latency_ms, self.device_type)

    def _explained_rows(self, rows: np.ndarray) -> np.ndarray:
        """The rows as LightGBM's trees see them: values within ±1e-35 are 0, and 0 is NaN (missing) on the
        features trained with `zero_as_missing`. LightGBM gives the same answer for these rows as for the raw ones."""
        tiny = np.abs(rows) <= ZERO_THRESHOLD
        if not tiny.any():
            return rows
        out = np.where(tiny, np.float32(0.0), rows).astype(rows.dtype, copy=False)
        if self._zero_missing.any():
            out[:, self._zero_missing] = np.where(
                tiny[:, self._zero_missing], np.float32(np.nan), out[:, self._zero_missing]
            )
        return out

    def _lightgbm_contributions(self, rows: np.ndarray) -> np.ndarray:
        """LightGBM's own TreeSHAP on the margin's scale: rows × (features + 1), the bias last; for a multiclass model
        rows × classes × (features + 1) (LightGBM gives each row's classes side by side)."""
        width = len(self.feature_names) + 1
        shape = (rows.shape[0], self._classes, width) if self._classes else (rows.shape[0], width)
        if rows.shape[0] == 0:
            return np.zeros(shape, dtype=np.float64)
        values = (
            np.asarray(self.booster.predict(rows, pred_contrib=True, **self._predict_params), dtype=np.float64)
            * self._scale
        )
        return values.reshape(shape)


ENGINE = LightGBMEngine
