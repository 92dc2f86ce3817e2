"""scikit-learn classifiers, regressors and pipelines saved with skops: scored by the estimator itself, explained
exactly where the mathematics allows.

Loading never unpickles: skops rebuilds the object from its schema and refuses any type outside its
defaults unless the registering user trusted it (`score register --trust TYPE`, recorded in the version's
`skops_trusted`; scoring loads with exactly that list). skops (0.16) does not trust scikit-learn's tree
storage by default, because a crafted file can hold node indices that scikit-learn follows without bounds
checks; every tree a loaded model holds is checked here before anything predicts with it.

The margin is the model's own `decision_function` where that is the log-odds it computes (logistic
regression, gradient boosting) or a linear score, else the logit of its event probability (forests,
single trees, other classifiers), clipped like an ONNX probability. A forecast job's regressor scores with its
own `predict` (the margin is the forecast: link identity), or, for a log-link regressor (Poisson, gamma and
Tweedie GLMs, HistGradientBoostingRegressor with loss poisson or gamma), with the log of the forecast it
computes `predict` from (its linear predictor or raw prediction: link log). Reasons: trees, forests and gradient
boosting go to the product's TreeSHAP table through `TreeArrays` (scikit-learn has no contributions of
its own, so the kernel is checked for local accuracy against the model's output); linear classifiers get
coefficient × (value − reference mean); the same after per-column transformers in a pipeline (scalers, an
imputer), on the transformed columns; anything else scores with reasons off.

A multiclass job takes a classifier of 3 or more classes with predict_proba, its classes_ the job's
target.classes in order (compared as text; whole-number codes are taken in their order, which the hold-out
checks). Its margins are its decision_function, one per class, where their softmax is its predict_proba
on the hold-out (multinomial logistic regression, gradient boosting), else the log of its predict_proba,
clipped (forests, one-vs-rest models). Reasons per class: the trees of each class (the TreeSHAP table),
each class's coefficients (coef_[k]), on the probability scale for a forest as for a binary job.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tasks.contracts import InferenceInput, InferenceOutput
from tasks.errors import DeviceUnavailable, ModelArtifactError
from tasks.inference.contributions import LinearContributions, TreeContributions, inference_output_checked_treeshap
from tasks.inference.engine import Device, ExplainingEngine, _logged_output
from tasks.inference.frameworks import RegistrationFields
from tasks.inference.kinds import (
    LINK_WORDS,
    inference_class_labels_problem,
    inference_kind_problem,
    inference_multiclass_kind_problem,
    inference_quantile_problem,
)
from tasks.inference.onnx_outputs import inference_probability_margins
from tasks.inference.registry import (
    PROBABILITY_CLIP,
    ModelArtifact,
    ModelExplanation,
    SklearnOutput,
    inference_reasons_unavailable,
)
from tasks.inference.treeshap import ContributionCounts, TreeArrays, TreeShapUnsupported, inference_leq_threshold

log = logging.getLogger("scoring.inference")

FRAMEWORK = "sklearn"
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_COLUMNWISE = ("StandardScaler", "MinMaxScaler", "MaxAbsScaler", "RobustScaler", "SimpleImputer")
"""Transformers whose output column j depends on input column j only: contributions on their
output are the features'."""
_LOG_ODDS = (
    "LogisticRegression",
    "LogisticRegressionCV",
    "GradientBoostingClassifier",
    "HistGradientBoostingClassifier",
)
"""Classifiers whose decision_function is the log-odds they compute their probabilities from."""
_FOREST_TREES = ("DecisionTreeClassifier", "ExtraTreeClassifier", "RandomForestClassifier", "ExtraTreesClassifier")
_FOREST_REGRESSORS = ("DecisionTreeRegressor", "ExtraTreeRegressor", "RandomForestRegressor", "ExtraTreesRegressor")
_TREES = (
    *_FOREST_TREES,
    "GradientBoostingClassifier",
    "HistGradientBoostingClassifier",
    *_FOREST_REGRESSORS,
    "GradientBoostingRegressor",
    "HistGradientBoostingRegressor",
)
_LOG_LINK_GLMS = ("PoissonRegressor", "GammaRegressor")
_CLASSIFIERS = "a classifier of classes 0 and 1"
_REGRESSORS = (
    "LinearRegression, Ridge, Lasso, ElasticNet, PoissonRegressor, GammaRegressor, TweedieRegressor, a tree, forest or "
    "gradient boosting regressor, or a Pipeline ending in one"
)

# Fitted on a DataFrame, an estimator warns on every call with an array; the names were checked at registration.
warnings.filterwarnings("ignore", message="X does not have valid feature names", category=UserWarning)


@dataclass(frozen=True)
class _Model:
    """A loaded estimator as the product reads it: the classifier, and the pipeline steps before it."""

    estimator: Any
    final: Any
    steps: Any | None
    """`pipeline[:-1]`, or None for a bare estimator (or a pipeline of one step)."""

    @property
    def name(self) -> str:
        return type(self.final).__name__

    @property
    def description(self) -> str:
        before = [
            type(step).__name__
            for _, step in (self.steps.steps if self.steps is not None else [])
            if step not in (None, "passthrough")
        ]
        return (
            f"a scikit-learn Pipeline of {', '.join(before)} and {self.name}"
            if before
            else f"a scikit-learn {self.name}"
        )

    def columnwise_problem(self) -> str | None:
        """Why the steps before the classifier do not map each feature to itself, or None when they do."""
        if self.steps is None:
            return None
        for label, step in self.steps.steps:
            if step in (None, "passthrough"):
                continue
            kind = type(step).__name__
            if kind not in _COLUMNWISE:
                return f"its step {label!r} ({kind}) does not map each feature to one column of its own"
            if kind == "SimpleImputer" and step.add_indicator:
                return f"its step {label!r} (SimpleImputer) adds indicator columns"
        return None


def _split(estimator: Any) -> _Model:
    from sklearn.pipeline import Pipeline

    if isinstance(estimator, Pipeline) and estimator.steps:
        final = estimator.steps[-1][1]
        return _Model(estimator, final, estimator[:-1] if len(estimator.steps) > 1 else None)
    return _Model(estimator, estimator, None)


def _untrusted_problem(model_path: Path, trusted: tuple[str, ...] | list[str]) -> str | None:
    import skops.io as sio

    try:
        untrusted = sio.get_untrusted_types(file=str(model_path))
    except Exception as exc:  # noqa: BLE001  (a zip, JSON or schema error: the file is not a skops dump)
        return f"could not be read by skops: {type(exc).__name__}: {_first_line(exc)}"
    missing = [t for t in untrusted if t not in set(trusted)]
    if not missing:
        return None
    return (
        f"holds types skops does not trust by default: {missing}; after reviewing where the file comes from, "
        f"register it with {' '.join(f'--trust {t}' for t in missing)}"
    )


def _tree_storage_problem(estimator: Any) -> str | None:
    """Why a tree the loaded object holds could send scikit-learn out of bounds, or None.

    skops checks types, not contents, and scikit-learn's prediction follows a Tree's or a TreePredictor's
    child and feature indices without bounds checks. Children must come after their parent (so every path
    ends), features within the inputs of the estimator holding the tree (an ensemble's members take its
    inputs; each pipeline step its own), and a Tree's values one per node.
    """
    from sklearn.base import BaseEstimator
    from sklearn.tree._tree import Tree

    seen: set[int] = set()

    def problem(obj: Any, width: int | None) -> str | None:
        if id(obj) in seen:
            return None
        seen.add(id(obj))
        if isinstance(obj, Tree):
            if obj.value.shape[0] != obj.node_count:
                return f"a scikit-learn tree in it has {obj.node_count} nodes but {obj.value.shape[0]} node values"
            bound = obj.n_features if width is None else min(width, obj.n_features)
            return _node_problem(obj.children_left, obj.children_right, obj.feature, bound, "a scikit-learn tree")
        if type(obj).__name__ == "TreePredictor" and hasattr(obj, "nodes"):
            nodes = obj.nodes
            leaf = nodes["is_leaf"].astype(bool)
            left, right, feature = (nodes[k].astype(np.int64) for k in ("left", "right", "feature_idx"))
            return _node_problem(
                np.where(leaf, -1, left),
                np.where(leaf, -1, right),
                np.where(leaf, -2, feature),
                np.iinfo(np.int64).max if width is None else width,
                "a histogram gradient boosting tree",
            )
        if isinstance(obj, BaseEstimator):
            own = getattr(obj, "n_features_in_", None) if not hasattr(obj, "steps") else None
            inner = own if width is None else (width if own is None else min(width, int(own)))
            return next(
                (p for v in vars(obj).values() if (p := problem(v, None if hasattr(obj, "steps") else inner))), None
            )
        if isinstance(obj, (list, tuple)):
            return next((p for v in obj if (p := problem(v, width))), None)
        if isinstance(obj, dict):
            return next((p for v in obj.values() if (p := problem(v, width))), None)
        if isinstance(obj, np.ndarray) and obj.dtype == object:
            return next((p for v in obj.ravel() if (p := problem(v, width))), None)
        return None

    return problem(estimator, None)


def _node_problem(left: np.ndarray, right: np.ndarray, feature: np.ndarray, n_features: int, what: str) -> str | None:
    left, right, feature = (np.asarray(a, dtype=np.int64) for a in (left, right, feature))
    n = left.size
    if right.size != n or feature.size != n or n == 0:
        return f"{what} in it has node arrays of different lengths"
    index = np.arange(n)
    leaf = left == -1
    bad = leaf != (right == -1)
    bad |= ~leaf & (
        (left <= index) | (left >= n) | (right <= index) | (right >= n) | (feature < 0) | (feature >= n_features)
    )
    if bad.any():
        node = int(np.flatnonzero(bad)[0])
        return (
            f"{what} in it has node {node} with children ({int(left[node])}, {int(right[node])}) and feature "
            f"{int(feature[node])} out of range, which scikit-learn's prediction would follow out of bounds"
        )
    return None


def _loaded(model_path: Path, trusted: tuple[str, ...] | list[str]) -> _Model:
    """The estimator in a skops file, loaded trusting skops' defaults and exactly `trusted` beyond them."""
    import skops.io as sio

    if problem := _untrusted_problem(model_path, trusted):
        raise ModelArtifactError(f"model file {model_path} {problem}")
    try:
        with warnings.catch_warnings():
            # A file saved by another scikit-learn version loads with a warning; registration checks what it computes.
            warnings.simplefilter("ignore")
            estimator = sio.load(str(model_path), trusted=list(trusted))
    except Exception as exc:  # noqa: BLE001  (skops raises whatever rebuilding the object raises)
        raise ModelArtifactError(
            f"model file {model_path} could not be loaded by skops: {type(exc).__name__}: {_first_line(exc)}"
        ) from None
    if problem := _tree_storage_problem(estimator):
        raise ModelArtifactError(f"model file {model_path} is refused: {problem}")
    return _split(estimator)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return " ".join(text.splitlines()[0].split()) if text else type(exc).__name__


def _classes(model: _Model) -> np.ndarray:
    return np.asarray(model.final.classes_)


def _event_index(classes: np.ndarray) -> int | None:
    """The column of the event class, when the classes are exactly the job's 0/1 outcome: 0 and 1 (or False and
    True, or 0.0 and 1.0) in scikit-learn's sorted order, so that decision_function scores the event."""
    if classes.dtype.kind not in "biuf" or classes.size != 2:
        return None
    return 1 if classes.astype(np.float64).tolist() == [0.0, 1.0] else None


def _fails_on(model: _Model, output: SklearnOutput, rows: np.ndarray) -> bool:
    try:
        inference_sklearn_margins(model, output, rows)
    except (ValueError, TypeError):
        return True
    return False


def _classifier_problem(model: _Model, features: tuple[str, ...]) -> str | None:
    from sklearn.base import is_classifier, is_clusterer, is_regressor

    estimator = model.estimator
    what = model.description
    if not is_classifier(estimator):
        if is_regressor(estimator):
            return inference_kind_problem(
                f"is {what}, a regressor", "binary", regressor=True, classifiers=_CLASSIFIERS, regressors=_REGRESSORS
            )
        if is_clusterer(estimator):
            return f"is {what}, a clusterer; a scoring model must be a binary classifier"
        return f"is {what}, which is not a classifier; a scoring model must be a binary classifier"
    if not hasattr(model.final, "classes_"):
        return f"is {what} that was never fitted (it has no classes_)"
    classes = model.final.classes_
    if isinstance(classes, list) or np.ndim(classes) != 1:
        return f"is {what} with several outputs; a scoring model gives one binary outcome"
    classes = np.asarray(classes)
    if classes.size != 2:
        return (
            f"is {what} with {classes.size} classes {classes.tolist()}; a scoring model must be a binary classifier"
            + (", or set target.kind: multiclass with its classes in the job spec" if classes.size > 2 else "")
        )
    if _event_index(classes) is None:
        return (
            f"is {what} with classes {classes.tolist()}; the job's outcome is 0/1, so its classes must be 0 and 1 "
            "(or False and True): refit it on the outcome column"
        )
    if (problem := _inputs_problem(estimator, features)) is not None:
        return problem
    if not hasattr(estimator, "predict_proba") and not hasattr(estimator, "decision_function"):
        return f"is {what} with neither predict_proba nor decision_function: it gives labels only"
    return None


_MULTICLASS_CLASSIFIERS = (
    "a classifier of the job's classes with predict_proba: LogisticRegression, a tree, forest or gradient boosting "
    "classifier, or a Pipeline ending in one"
)


def _multiclass_problem(model: _Model, features: tuple[str, ...], classes: tuple[str, ...]) -> str | None:
    """Why the estimator cannot classify the job's rows into `classes` in their order (another kind of model, two
    classes, classes_ in another order or others, no predict_proba), or None."""
    from sklearn.base import is_classifier

    estimator = model.estimator
    what = model.description
    if not is_classifier(estimator):
        return inference_multiclass_kind_problem(
            f"is {what}, not a classifier", "multiclass", multiclass=False, classifiers=_MULTICLASS_CLASSIFIERS
        )
    if not hasattr(model.final, "classes_"):
        return f"is {what} that was never fitted (it has no classes_)"
    labels = model.final.classes_
    if isinstance(labels, list) or np.ndim(labels) != 1:
        return f"is {what} with several outputs; a multiclass model gives one class per row"
    labels = np.asarray(labels)
    if labels.size < 3:
        return inference_multiclass_kind_problem(
            f"is {what} with {labels.size} classes {labels.tolist()}, a binary classifier",
            "multiclass",
            multiclass=False,
            classifiers=_MULTICLASS_CLASSIFIERS,
        )
    if (problem := inference_class_labels_problem(labels.tolist(), classes)) is not None:
        return f"is {what} that {problem}"
    if (problem := _inputs_problem(estimator, features)) is not None:
        return problem
    if not hasattr(estimator, "predict_proba"):
        return f"is {what} without predict_proba: it gives no probability of each class"
    return None


def _inputs_problem(estimator: Any, features: tuple[str, ...]) -> str | None:
    """Why the fitted estimator does not take the job's features (their count, their names where
    it kept them), or None."""
    n_inputs = getattr(estimator, "n_features_in_", None)
    if n_inputs is not None and int(n_inputs) != len(features):
        return f"takes {int(n_inputs)} inputs, but the job computes {len(features)} features {list(features)}"
    names = getattr(estimator, "feature_names_in_", None)
    if names is not None and tuple(str(n) for n in names) != features:
        names = [str(n) for n in names]
        if set(names) == set(features):
            return f"takes the job's features in another order: model {names}, job {list(features)}"
        return (
            f"was fitted on features the job does not compute: only in the model {sorted(set(names) - set(features))}, "
            f"only in the job {sorted(set(features) - set(names))}"
        )
    return None


def _quantile_loss(final: Any) -> bool:
    """Whether the regressor predicts a quantile: QuantileRegressor, a boosting loss `quantile`, a wrapped framework's
    quantile objective."""
    if type(final).__name__ == "QuantileRegressor":
        return True
    try:
        params = final.get_params(deep=False)
    except Exception:  # noqa: BLE001  (a foreign estimator's get_params may raise anything)
        return False
    return any("quantile" in str(params.get(key) or "").lower() for key in ("loss", "objective", "loss_function"))


def _regressor_problem(model: _Model, features: tuple[str, ...], kind: str) -> str | None:
    """Why the estimator cannot forecast the job's target from its features (a classifier, several
    outputs, a quantile), or None."""
    from sklearn.base import is_classifier, is_clusterer, is_regressor
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    estimator = model.estimator
    what = model.description
    if not is_regressor(estimator):
        if is_classifier(estimator):
            return inference_kind_problem(
                f"is {what}, a classifier", kind, regressor=False, classifiers=_CLASSIFIERS, regressors=_REGRESSORS
            )
        if is_clusterer(estimator):
            return f"is {what}, a clusterer; a forecast model must be a regressor ({_REGRESSORS})"
        return f"is {what}, which is not a regressor; a forecast model must be a regressor ({_REGRESSORS})"
    try:
        check_is_fitted(estimator)
    except NotFittedError:
        return f"is {what} that was never fitted"
    except TypeError:
        pass
    if _quantile_loss(model.final):
        return inference_quantile_problem(f"is {what}", _REGRESSORS)
    coef = getattr(model.final, "coef_", None)
    if int(getattr(model.final, "n_outputs_", 1)) != 1 or (
        coef is not None and np.ndim(coef) == 2 and np.shape(coef)[0] != 1
    ):
        return f"is {what} with several outputs; a forecast model gives one value per row"
    return _inputs_problem(estimator, features)


def inference_input_problem(
    model_path: Path,
    features: tuple[str, ...],
    *,
    trusted_types: tuple[str, ...] = (),
    kind: str = "binary",
    classes: tuple[str, ...] = (),
) -> str | None:
    """Why the skops file cannot score the job's features as a model of the job's kind (a binary classifier, a
    classifier of `classes` in their order for a multiclass job, or a regressor for `kind`
    regression or count), or None."""
    try:
        model = _loaded(model_path, trusted_types)
    except ModelArtifactError as exc:
        return str(exc).removeprefix(f"model file {model_path} ")
    if kind == "multiclass":
        return _multiclass_problem(model, features, classes)
    if kind != "binary" and (labels := getattr(model.final, "classes_", None)) is not None and np.size(labels) > 2:
        return inference_multiclass_kind_problem(
            f"is {model.description} with {np.size(labels)} classes",
            kind,
            multiclass=True,
            classifiers=_MULTICLASS_CLASSIFIERS,
        )
    return _classifier_problem(model, features) if kind == "binary" else _regressor_problem(model, features, kind)


def _regressor_link(model: _Model) -> str:
    """The link from the regressor's margin to its prediction: log for the log-link GLMs and histogram boosting with a
    Poisson or gamma loss, identity for every other regressor."""
    final, name = model.final, model.name
    if name in _LOG_LINK_GLMS:
        return "log"
    if name == "TweedieRegressor":
        link = getattr(final, "link", "auto")
        return ("identity" if final.power <= 0 else "log") if link == "auto" else str(link)
    if name == "HistGradientBoostingRegressor" and getattr(final, "loss", "") in ("poisson", "gamma"):
        return "log"
    return "identity"


def _regressor_output(model: _Model) -> tuple[SklearnOutput, str, str]:
    """How the regressor scores, the report's line on it, and its link."""
    link = _regressor_link(model)
    if link == "identity":
        return (
            SklearnOutput(method="predict"),
            f"scikit-learn {model.name}: the margin is its predict, {LINK_WORDS[link]}",
            link,
        )
    what = (
        "raw prediction"
        if model.name == "HistGradientBoostingRegressor"
        else "linear predictor (X @ coef_ + intercept_)"
    )
    return (
        SklearnOutput(method="raw_predict"),
        f"scikit-learn {model.name}: the margin is its {what}, {LINK_WORDS[link]}",
        link,
    )


def _output_choice(model: _Model) -> tuple[SklearnOutput, str]:
    from sklearn.linear_model._base import LinearClassifierMixin

    classes = _classes(model)
    event = _event_index(classes)
    assert event is not None, "the classes were checked by inference_input_problem"
    listed = classes.tolist()
    if model.name in _LOG_ODDS or isinstance(model.final, LinearClassifierMixin):
        if model.name == "GradientBoostingClassifier" and getattr(model.final, "loss", "log_loss") == "exponential":
            meaning = "half the log-odds it computes (exponential loss)"
        elif model.name in _LOG_ODDS or getattr(model.final, "loss", None) == "log_loss":
            meaning = "the log-odds it computes its probabilities from"
        else:
            meaning = "its linear score (not a log-odds), calibrated as it is"
        return (
            SklearnOutput(method="decision_function", event_index=event, classes=listed),
            f"scikit-learn {model.name}: the margin is its decision_function, {meaning}",
        )
    if hasattr(model.estimator, "predict_proba"):
        bound = np.log((1 - PROBABILITY_CLIP) / PROBABILITY_CLIP)
        return (
            SklearnOutput(method="predict_proba", event_index=event, classes=listed, clip=PROBABILITY_CLIP),
            f"scikit-learn {model.name}: the margin is logit(p) of its predict_proba for class {listed[event]!r}, "
            f"p clipped to [{PROBABILITY_CLIP:g}, 1 − {PROBABILITY_CLIP:g}] (±{bound:.1f})",
        )
    return (
        SklearnOutput(method="decision_function", event_index=event, classes=listed),
        f"scikit-learn {model.name}: the margin is its decision_function, a raw score (not a "
        "log-odds), calibrated as it is",
    )


SOFTMAX_TOLERANCE = 1e-6
"""How far the softmax of a multiclass decision_function may be from the model's predict_proba for the decision_function
to be the margins (float64 both; scikit-learn computes one from the other where they agree)."""


def _class_output_choice(model: _Model, holdout: np.ndarray) -> tuple[SklearnOutput, str]:
    """How a multiclass classifier scores: its decision_function where the softmax of it is its predict_proba on the
    hold-out's complete rows, else the clipped log of its predict_proba."""
    listed = np.asarray(model.final.classes_).tolist()
    rows = holdout[~np.isnan(holdout).any(axis=1)] if np.isnan(holdout).any() else holdout
    if hasattr(model.estimator, "decision_function") and rows.shape[0]:
        x = _model_rows(model, rows)
        scores: np.ndarray | None
        probability: np.ndarray | None
        try:
            scores = np.asarray(model.estimator.decision_function(x), dtype=np.float64)
            probability = np.asarray(model.estimator.predict_proba(x), dtype=np.float64)
        except (ValueError, TypeError, AttributeError):
            scores = probability = None
        if scores is not None and probability is not None and scores.shape == probability.shape:
            shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
            if float(np.abs(shifted / shifted.sum(axis=1, keepdims=True) - probability).max()) <= SOFTMAX_TOLERANCE:
                return (
                    SklearnOutput(method="decision_function", classes=listed),
                    f"scikit-learn {model.name} of classes {listed}: the margins are its decision_function, one "
                    "per class, whose softmax is its predict_proba (checked on the hold-out)",
                )
    return (
        SklearnOutput(method="predict_proba", classes=listed, clip=PROBABILITY_CLIP),
        f"scikit-learn {model.name} of classes {listed}: the margins are the log of its predict_proba, one per "
        f"class, p clipped below at {PROBABILITY_CLIP:g} (their softmax is its probabilities)",
    )


def _model_rows(model: _Model, rows: np.ndarray) -> np.ndarray:
    """The rows as the estimator is given them. scikit-learn keeps float32 through scalers and linear models (a
    LogisticRegression's decision_function of float32 rows is float32, off by 3e-5 at a margin of 350), so
    every model but the trees gets the float32 values as float64, exactly. Trees take float32 as the product's
    matrix holds it: they compare in float32 (histogram boosting in float64, from those same values), as the
    TreeSHAP table does, also after a pipeline's scaler."""
    return np.asarray(rows, dtype=np.float32 if model.name in _TREES else np.float64)


def _classifies(output: SklearnOutput) -> bool:
    """Whether the output is a multiclass classifier's: one margin per class (a binary one names its event's column)."""
    return (
        output.method in ("decision_function", "predict_proba")
        and output.event_index is None
        and len(output.classes) > 2
    )


def inference_sklearn_margins(model: _Model, output: SklearnOutput, rows: np.ndarray) -> np.ndarray:
    """The margins of `rows` (the job's features in order), float64. decision_function scores classes_[1],
    which registration made sure is the event; a multiclass model's margins are rows × classes."""
    x = _model_rows(model, rows)
    if _classifies(output):
        if output.method == "decision_function":
            return np.asarray(model.estimator.decision_function(x), dtype=np.float64)
        probability = np.asarray(model.estimator.predict_proba(x), dtype=np.float64)
        return np.log(np.clip(probability, output.clip or PROBABILITY_CLIP, 1.0))
    if output.method == "predict":
        return np.asarray(model.estimator.predict(x), dtype=np.float64).reshape(-1)
    if output.method == "raw_predict":
        stepped = x if model.steps is None else np.asarray(model.steps.transform(x))
        if model.name == "HistGradientBoostingRegressor":
            return np.asarray(model.final._raw_predict(stepped), dtype=np.float64).reshape(-1)
        return np.asarray(model.final._linear_predictor(stepped), dtype=np.float64).reshape(-1)
    if output.method == "decision_function":
        return np.asarray(model.estimator.decision_function(x), dtype=np.float64).reshape(-1)
    probability = np.asarray(model.estimator.predict_proba(x), dtype=np.float64)[:, output.event_index]
    return inference_probability_margins(probability, output.clip)


def _leq_thresholds(threshold: np.ndarray) -> np.ndarray:
    """`x <= t` as the kernel's float32 `x < t'`. scikit-learn writes +inf (a split sending only NaN right) and
    1e300 (histogram boosting's cap): every finite float32 goes left there, as it does below the float32 maximum;
    the guards let no infinite input through, so only the float32 maximum itself would be sent the other way."""
    t = np.asarray(threshold, dtype=np.float64)
    big = t >= _FLOAT32_MAX
    out = inference_leq_threshold(np.where(big, 0.0, t)).astype(np.float64)
    out[big] = _FLOAT32_MAX
    return out


def _sklearn_tree_arrays(
    trees: list[Any], leaf_values: list[np.ndarray], *, bias: float, n_features: int, nan_left: bool
) -> TreeArrays:
    """TreeArrays of scikit-learn `Tree`s, each with the value its leaves add (indexed by node)."""
    parts: list[tuple[np.ndarray, ...]] = []
    for tree, values in zip(trees, leaf_values, strict=True):
        left = tree.children_left.astype(np.int64)
        leaf = left < 0
        parts.append(
            (
                left,
                tree.children_right.astype(np.int64),
                np.where(leaf, 0, tree.feature).astype(np.int64),
                np.where(leaf, values, _leq_thresholds(tree.threshold)),
                (tree.missing_go_to_left.astype(np.uint8) if nan_left else np.zeros(left.size, dtype=np.uint8)),
                tree.weighted_n_node_samples.astype(np.float64),
            )
        )
    return _concatenated(parts, bias, n_features)


def _hist_tree_arrays(predictors: list[Any], *, bias: float, n_features: int) -> TreeArrays:
    parts: list[tuple[np.ndarray, ...]] = []
    for predictor in predictors:
        nodes = predictor.nodes
        if nodes["is_categorical"].any():
            raise TreeShapUnsupported("it splits on categories (categorical_features)")
        leaf = nodes["is_leaf"].astype(bool)
        # The node fields are unsigned: widen before writing -1 at the leaves.
        parts.append(
            (
                np.where(leaf, -1, nodes["left"].astype(np.int64)),
                np.where(leaf, -1, nodes["right"].astype(np.int64)),
                np.where(leaf, 0, nodes["feature_idx"].astype(np.int64)),
                np.where(leaf, nodes["value"].astype(np.float64), _leq_thresholds(nodes["num_threshold"])),
                nodes["missing_go_to_left"].astype(np.uint8),
                nodes["count"].astype(np.float64),
            )
        )
    return _concatenated(parts, bias, n_features)


def _concatenated(parts: list[tuple[np.ndarray, ...]], bias: float, n_features: int) -> TreeArrays:
    if not parts:
        raise TreeShapUnsupported("the model has no trees")
    sizes = np.array([p[0].size for p in parts], dtype=np.int64)
    left, right, feature, value, default_left, cover = (np.concatenate([p[i] for p in parts]) for i in range(6))
    return TreeArrays(
        left=left,
        right=right,
        feature=feature,
        value=value,
        default_left=default_left,
        cover=cover,
        node_start=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        bias=float(bias),
        n_features=n_features,
    )


@dataclass(frozen=True)
class _TreePlan:
    """The trees of a tree classifier, what they add up to and the classifier's own value of that sum."""

    trees: TreeArrays
    scale: Literal["margin", "probability"]
    output: Callable[[np.ndarray], np.ndarray]
    """Rows as the classifier sees them (after the pipeline's steps) → what the trees add up to."""
    output_label: str


def _tree_plan(
    model: _Model, output: SklearnOutput, n_features: int, class_index: int | None = None
) -> _TreePlan | None:
    """The estimator's trees, or None when it has none; raises TreeShapUnsupported for trees the kernel cannot take.
    `class_index`: a multiclass classifier's trees of that class (what adds up to its margin or probability)."""
    final, name, event = model.final, model.name, output.event_index if class_index is None else class_index
    if class_index is not None:
        return _class_tree_plan(model, n_features, class_index)
    if name in _FOREST_REGRESSORS:
        if getattr(final, "n_outputs_", 1) != 1:
            raise TreeShapUnsupported("it has several outputs")
        members = list(getattr(final, "estimators_", [final]))
        # A forest's forecast is the mean of its trees' leaf means.
        values = [m.tree_.value[:, 0, 0].astype(np.float64) / len(members) for m in members]
        return _TreePlan(
            _sklearn_tree_arrays([m.tree_ for m in members], values, bias=0.0, n_features=n_features, nan_left=True),
            "margin",
            lambda rows: np.asarray(final.predict(rows), dtype=np.float64).reshape(-1),
            "predict",
        )
    if name == "GradientBoostingRegressor":
        from sklearn.dummy import DummyRegressor

        init = final.init_
        if not (isinstance(init, str) and init == "zero") and not isinstance(init, DummyRegressor):
            raise TreeShapUnsupported(
                f"its init estimator ({type(init).__name__}) gives each row its own starting score"
            )
        members = [m.tree_ for m in final.estimators_[:, 0]]
        bias = float(final._raw_predict_init(np.zeros((1, n_features), dtype=np.float32))[0, 0])
        values = [final.learning_rate * tree.value[:, 0, 0].astype(np.float64) for tree in members]
        return _TreePlan(
            _sklearn_tree_arrays(members, values, bias=bias, n_features=n_features, nan_left=False),
            "margin",
            lambda rows: final._raw_predict(np.ascontiguousarray(rows, dtype=np.float32))[:, 0],
            "predict",
        )
    if name == "HistGradientBoostingRegressor":
        if getattr(final, "_preprocessor", None) is not None:
            raise TreeShapUnsupported("it encodes categorical columns itself (categorical_features)")
        trees = _hist_tree_arrays(
            [stage[0] for stage in final._predictors],
            bias=float(np.ravel(final._baseline_prediction)[0]),
            n_features=n_features,
        )
        return _TreePlan(
            trees,
            "margin",
            lambda rows: np.asarray(final._raw_predict(rows), dtype=np.float64).reshape(-1),
            "predict" if output.method == "predict" else "raw prediction",
        )
    if name in _FOREST_TREES:
        if getattr(final, "n_outputs_", 1) != 1:
            raise TreeShapUnsupported("it has several outputs")
        members = list(getattr(final, "estimators_", [final]))
        # A forest averages its trees' class proportions (tree_.value holds proportions since scikit-learn 1.4).
        values = [m.tree_.value[:, 0, event].astype(np.float64) / len(members) for m in members]
        return _TreePlan(
            _sklearn_tree_arrays([m.tree_ for m in members], values, bias=0.0, n_features=n_features, nan_left=True),
            "probability",
            lambda rows: final.predict_proba(rows)[:, event],
            "predict_proba",
        )
    if name == "GradientBoostingClassifier":
        from sklearn.dummy import DummyClassifier

        init = final.init_
        if not (isinstance(init, str) and init == "zero") and not (
            isinstance(init, DummyClassifier) and init.strategy == "prior"
        ):
            raise TreeShapUnsupported(
                f"its init estimator ({type(init).__name__}) gives each row its own starting score"
            )
        if final.estimators_.shape[1] != 1:
            raise TreeShapUnsupported("it has several trees per stage")
        members = [m.tree_ for m in final.estimators_[:, 0]]
        bias = float(final._raw_predict_init(np.zeros((1, n_features), dtype=np.float32))[0, 0])
        values = [final.learning_rate * tree.value[:, 0, 0].astype(np.float64) for tree in members]

        def raw(rows: np.ndarray) -> np.ndarray:
            # decision_function less its NaN check: the guard rows carry NaN, which the stages send right
            # (they compare `x <= threshold`, whatever missing_go_to_left says).
            return final._raw_predict(np.ascontiguousarray(rows, dtype=np.float32))[:, 0]

        return _TreePlan(
            _sklearn_tree_arrays(members, values, bias=bias, n_features=n_features, nan_left=False),
            "margin",
            raw,
            "decision_function",
        )
    if name == "HistGradientBoostingClassifier":
        if getattr(final, "_preprocessor", None) is not None:
            raise TreeShapUnsupported("it encodes categorical columns itself (categorical_features)")
        if final.n_trees_per_iteration_ != 1:
            raise TreeShapUnsupported("it has several trees per iteration")
        trees = _hist_tree_arrays(
            [stage[0] for stage in final._predictors],
            bias=float(np.ravel(final._baseline_prediction)[0]),
            n_features=n_features,
        )
        return _TreePlan(
            trees,
            "margin",
            lambda rows: np.asarray(final.decision_function(rows), dtype=np.float64),
            "decision_function",
        )
    return None


def _class_tree_plan(model: _Model, n_features: int, k: int) -> _TreePlan | None:
    """Class `k`'s trees of a multiclass tree classifier: a forest's class-k proportions (the probability scale),
    gradient boosting's class-k trees (adding up to its decision_function's column k)."""
    final, name = model.final, model.name
    if name in _FOREST_TREES:
        if getattr(final, "n_outputs_", 1) != 1:
            raise TreeShapUnsupported("it has several outputs")
        members = list(getattr(final, "estimators_", [final]))
        values = [m.tree_.value[:, 0, k].astype(np.float64) / len(members) for m in members]
        return _TreePlan(
            _sklearn_tree_arrays([m.tree_ for m in members], values, bias=0.0, n_features=n_features, nan_left=True),
            "probability",
            lambda rows: final.predict_proba(rows)[:, k],
            "predict_proba",
        )
    if name == "GradientBoostingClassifier":
        from sklearn.dummy import DummyClassifier

        init = final.init_
        if not (isinstance(init, str) and init == "zero") and not (
            isinstance(init, DummyClassifier) and init.strategy == "prior"
        ):
            raise TreeShapUnsupported(
                f"its init estimator ({type(init).__name__}) gives each row its own starting score"
            )
        members = [m.tree_ for m in final.estimators_[:, k]]
        bias = float(final._raw_predict_init(np.zeros((1, n_features), dtype=np.float32))[0, k])
        values = [final.learning_rate * tree.value[:, 0, 0].astype(np.float64) for tree in members]
        return _TreePlan(
            _sklearn_tree_arrays(members, values, bias=bias, n_features=n_features, nan_left=False),
            "margin",
            lambda rows: final._raw_predict(np.ascontiguousarray(rows, dtype=np.float32))[:, k],
            "decision_function",
        )
    if name == "HistGradientBoostingClassifier":
        if getattr(final, "_preprocessor", None) is not None:
            raise TreeShapUnsupported("it encodes categorical columns itself (categorical_features)")
        trees = _hist_tree_arrays(
            [stage[k] for stage in final._predictors],
            bias=float(np.ravel(final._baseline_prediction)[k]),
            n_features=n_features,
        )
        return _TreePlan(
            trees,
            "margin",
            lambda rows: np.asarray(final.decision_function(rows), dtype=np.float64)[:, k],
            "decision_function",
        )
    return None


@dataclass(frozen=True)
class _Explainer:
    """What gives a model's reasons: a tree plan, linear coefficients, or nothing (and why)."""

    method: str
    tree_plan: _TreePlan | None = None
    detail: str = ""


def _explainer(model: _Model, output: SklearnOutput, n_features: int) -> _Explainer:
    from sklearn.linear_model._base import LinearClassifierMixin

    if problem := model.columnwise_problem():
        return _Explainer("none", detail=f"{model.description} ({problem})")
    n_classes = len(output.classes) if _classifies(output) else 0
    try:
        plan = _tree_plan(model, output, n_features, 0 if n_classes else None)
        if plan is not None and n_classes and plan.scale == "margin" and output.method != "decision_function":
            raise TreeShapUnsupported("its trees add up to margins whose softmax is not its predict_proba")
    except TreeShapUnsupported as exc:
        return _Explainer("none", detail=f"{model.description} whose trees the TreeSHAP table cannot take ({exc})")
    if plan is not None:
        return _Explainer("treeshap", plan)
    coef = getattr(model.final, "coef_", None)
    if (
        isinstance(model.final, LinearClassifierMixin)
        and coef is not None
        and np.shape(coef) == (max(n_classes, 1), n_features)
        and output.method == "decision_function"
    ):
        return _Explainer("linear")
    if _linear_regressor(model, n_features) and output.method in ("predict", "raw_predict"):
        return _Explainer("linear")
    native = {
        "lightgbm": "its booster with model.booster_.save_model('model.txt')",
        "xgboost": "its booster with model.get_booster().save_model('model.ubj')",
        "catboost": "it with model.save_model('model.cbm')",
    }
    framework = type(model.final).__module__.split(".")[0]
    if framework in native:
        # A framework's own scikit-learn wrapper inside skops: its trees are not scikit-learn's to read.
        return _Explainer("none", detail=f"{model.description} (save {native[framework]} for exact reasons)")
    return _Explainer("none", detail=model.description)


def _linear_regressor(model: _Model, n_features: int) -> bool:
    """Whether the regressor's margin is coef_ · x + intercept_ on the columns it sees: scikit-learn's linear models and
    GLMs with one coefficient per feature (the registration checks it: contributions plus bias must give the margin)."""
    final = model.final
    coef, intercept = getattr(final, "coef_", None), getattr(final, "intercept_", None)
    return (
        type(final).__module__.startswith("sklearn.linear_model")
        and coef is not None
        and intercept is not None
        and np.size(coef) == n_features
        and np.size(intercept) == 1
    )


def _transform(model: _Model) -> Callable[[np.ndarray], np.ndarray] | None:
    """Raw rows → the columns the classifier sees, as the pipeline computes them when it scores;
    None: the rows themselves."""
    if model.steps is None:
        return None
    steps = model.steps
    return lambda rows: np.asarray(steps.transform(_model_rows(model, rows)))


def _checked_kernel(plan: _TreePlan, model_label: str, nthread: int = 0):  # noqa: ANN202  (a KernelChoice)
    return inference_output_checked_treeshap(
        plan.trees, plan.output, model_label=model_label, framework=FRAMEWORK, nthread=nthread
    )


def inference_registration_fields(
    model_path: Path,
    features: tuple[str, ...],
    holdout: np.ndarray,
    reference: np.ndarray,
    *,
    trusted_types: tuple[str, ...] = (),
    kind: str = "binary",
) -> RegistrationFields:
    """How the estimator scores (`sklearn_output`; for a forecast job's regressor also the `link` from its margin to
    its forecast), explains (`explanation`) and loads (`skops_trusted`); refuses an estimator that fails on the
    hold-out's or the reference's rows with one line."""
    import skops.io as sio

    model = _loaded(model_path, trusted_types)
    link = None
    if kind == "binary":
        output, output_note = _output_choice(model)
    elif kind == "multiclass":
        output, output_note = _class_output_choice(model, holdout)
    else:
        if (problem := _regressor_problem(model, features, kind)) is not None:
            raise ModelArtifactError(f"model file {model_path} {problem}")
        output, output_note, link = _regressor_output(model)
    notes = [output_note]
    needed = set(sio.get_untrusted_types(file=str(model_path)))
    trusted = sorted(t for t in trusted_types if t in needed)
    if unused := sorted(set(trusted_types) - needed):
        notes.append(f"--trust {', '.join(unused)}: the file holds no such type, so it is not recorded")
    for what, rows in (("hold-out", holdout), ("reference", reference)):
        try:
            given = inference_sklearn_margins(model, output, rows).shape[0]
        except (ValueError, TypeError) as exc:
            incomplete = np.isnan(rows).any(axis=1)
            missing = int(incomplete.sum())
            if missing and missing < rows.shape[0] and _fails_on(model, output, rows[~incomplete]):
                # The complete rows fail too: a step of the pipeline makes values the next one rejects (a log of a
                # negative number), whatever the inputs' own missing values.
                raise ModelArtifactError(
                    f"model file {model_path} ({model.description}) fails on the {what}'s rows, also on the "
                    f"{rows.shape[0] - missing:,} without missing inputs: {_first_line(exc)}"
                ) from None
            if missing:
                raise ModelArtifactError(
                    f"model file {model_path} is {model.description}, which rejects missing inputs "
                    f"({_first_line(exc)}), and {missing:,} of the {what}'s {rows.shape[0]:,} rows have missing inputs "
                    "(NaN); impute them in the pipeline (SimpleImputer) or fit an estimator that takes NaN ("
                    + (
                        "HistGradientBoostingClassifier, the tree classifiers)"
                        if kind == "binary"
                        else "HistGradientBoostingRegressor, the tree regressors)"
                    )
                ) from None
            raise ModelArtifactError(
                f"model file {model_path} ({model.description}) fails on the {what}'s rows: {_first_line(exc)}"
            ) from None
        if given != rows.shape[0]:
            raise ModelArtifactError(
                f"model file {model_path} ({model.description}) gives {given:,} values for the {what}'s "
                f"{rows.shape[0]:,} rows; a scoring model gives one per row"
            )
    n_features = len(features)
    explainer = _explainer(model, output, n_features)
    fields: dict[str, Any] = {"sklearn_output": output, "skops_trusted": trusted}
    if link is not None:
        fields["link"] = link
    n_classes = len(output.classes) if _classifies(output) else 0
    if explainer.method == "treeshap":
        plan = explainer.tree_plan
        assert plan is not None
        try:
            for k in range(n_classes or 1):
                # A multiclass model's trees of every class, each adding up to that class's own value.
                class_plan = _tree_plan(model, output, n_features, k) if n_classes else plan
                assert class_plan is not None, "a model with trees has them for every class"
                _checked_kernel(class_plan, str(model_path))
        except TreeShapUnsupported as exc:
            explainer = _Explainer(
                "none", detail=f"{model.description} whose trees the TreeSHAP table cannot take ({exc})"
            )
        else:
            fields["explanation"] = ModelExplanation(method="treeshap", scale=plan.scale)
            if n_classes:
                notes.append(
                    f"reasons: exact TreeSHAP of each class's trees of the {model.name}, adding up to that class's "
                    + (
                        "probability (a forest's proportions; the margin is its log)"
                        if plan.scale == "probability"
                        else f"{plan.output_label} column"
                    )
                )
            elif plan.scale == "probability":
                notes.append(
                    f"reasons: exact TreeSHAP of the {model.name}'s trees on the probability scale: a row's "
                    "contributions plus the forest's average probability add up to its event probability, not to its "
                    "margin (that probability's logit)"
                )
            else:
                notes.append(
                    f"reasons: exact TreeSHAP of the {model.name}'s trees, adding up to its {plan.output_label}"
                )
    if explainer.method == "linear":
        transform = _transform(model)
        columns = reference if transform is None else transform(reference)
        # A linear model rejects NaN, so the (transformed) reference rows that reached here have none.
        mean = np.asarray(columns, dtype=np.float64).mean(axis=0) if columns.shape[0] else np.zeros(n_features)
        fields["explanation"] = ModelExplanation(method="linear", reference_mean=[float(v) for v in mean])
        notes.append(
            f"reasons: exact linear contributions of the {model.name}, "
            f"{'each class' + chr(39) + 's coefficient' if n_classes else 'coefficient'} × (value − reference mean)"
            + (" on the pipeline's transformed columns" if transform is not None else "")
        )
    if explainer.method == "none":
        fields["explanation"] = ModelExplanation(method="none", detail=explainer.detail)
    return RegistrationFields(fields, notes)


class SklearnEngine(ExplainingEngine):
    """A scikit-learn classifier, regressor or pipeline from a skops file, on CPU: its own outputs as margins, reasons
    from its trees (the TreeSHAP table) or coefficients where it has them."""

    def __init__(
        self, artifact: ModelArtifact, *, device: Device = "cpu", nthread: int = 0, call_threads: int | None = None
    ) -> None:
        # scikit-learn's predict of a skops model runs in the calling thread: `call_threads` has nothing to size here.
        self.artifact = artifact
        self.metadata = meta = artifact.metadata
        self.model_path = artifact.model_path
        if device == "cuda":
            raise DeviceUnavailable(
                f"model {meta.name} {meta.version}: device 'cuda' was asked for, but "
                "scikit-learn models score on CPU only"
            )
        if device == "auto":
            log.info("[INF] model_name=%s device auto: scikit-learn scores on CPU", meta.name)
        if meta.sklearn_output is None:
            raise ModelArtifactError(
                f"model {meta.name} {meta.version}: its metadata.json has no sklearn_output; register the file again"
            )
        self.output = meta.sklearn_output
        self.model = _loaded(self.model_path, meta.skops_trusted)
        self.device_type = "cpu"
        self.providers = ("sklearn:cpu",)
        self.feature_names = tuple(meta.features)
        self._explained_transform: Callable[[np.ndarray], np.ndarray] | None = None
        method = meta.explanation.method if meta.explanation is not None else "none"
        label = f"{meta.name} {meta.version}"
        n_classes = len(self.output.classes) if _classifies(self.output) else 0
        if n_classes and method in ("treeshap", "linear"):
            self._class_sources(method, n_classes, label, nthread)
        elif method == "treeshap":
            plan = _tree_plan(self.model, self.output, len(self.feature_names))
            if plan is None:
                raise ModelArtifactError(
                    f"model {label}: its metadata says treeshap, but {self.model.description} has no trees"
                )
            try:
                choice = _checked_kernel(plan, label, nthread)
            except TreeShapUnsupported as exc:
                raise ModelArtifactError(
                    f"model {label}: its trees no longer pass the registration's check: {exc}"
                ) from None
            self._explained_transform = _transform(self.model)
            self.contributions_source = TreeContributions(
                choice,
                None,
                nthread=nthread,
                framework_label=f"scikit-learn {plan.output_label}",
                output=self._tree_output(plan),
            )
        elif method == "linear":
            assert meta.explanation is not None, "the method is the recorded explanation's"
            self.contributions_source = LinearContributions(
                np.asarray(self.model.final.coef_, dtype=np.float64).reshape(-1),
                np.asarray(meta.explanation.reference_mean),
                float(np.ravel(self.model.final.intercept_)[0]),
                transform=_transform(self.model),
                output=lambda rows: inference_sklearn_margins(self.model, self.output, rows),
            )
        self.reasons_unavailable = inference_reasons_unavailable(meta) if self.contributions_source is None else None
        if self.contributions_source is None and self.reasons_unavailable is None:
            self.reasons_unavailable = (
                f"model {label} is {self.model.description}, which has no exact feature contributions here"
            )

    def _class_sources(self, method: str, n_classes: int, label: str, nthread: int) -> None:
        """A multiclass model's contributions, one source per class: class k's trees or coefficients (coef_[k])."""
        counts = ContributionCounts()
        sources: list[TreeContributions | LinearContributions] = []
        transform = _transform(self.model)
        for k in range(n_classes):
            margin_k = lambda rows, k=k: inference_sklearn_margins(self.model, self.output, rows)[:, k]  # noqa: E731
            if method == "linear":
                assert self.metadata.explanation is not None, "the method is the recorded explanation's"
                source: TreeContributions | LinearContributions = LinearContributions(
                    np.asarray(self.model.final.coef_, dtype=np.float64)[k],
                    np.asarray(self.metadata.explanation.reference_mean),
                    float(np.ravel(self.model.final.intercept_)[k]),
                    transform=transform,
                    output=margin_k,
                )
            else:
                plan = _tree_plan(self.model, self.output, len(self.feature_names), k)
                if plan is None:
                    raise ModelArtifactError(
                        f"model {label}: its metadata says treeshap, but {self.model.description} has no trees"
                    )
                try:
                    choice = _checked_kernel(plan, f"{label} class {self.metadata.classes[k]!r}", nthread)
                except TreeShapUnsupported as exc:
                    raise ModelArtifactError(
                        f"model {label}: its trees no longer pass the registration's check: {exc}"
                    ) from None
                output = (
                    margin_k
                    if plan.scale == "margin"
                    else (
                        lambda rows, k=k: np.asarray(
                            self.model.estimator.predict_proba(_model_rows(self.model, rows)), dtype=np.float64
                        )[:, k]
                    )
                )
                source = TreeContributions(
                    choice, None, nthread=nthread, framework_label=f"scikit-learn {plan.output_label}", output=output
                )
                self._explained_transform = transform
            source.counts = counts
            sources.append(source)
        self.class_contributions = tuple(sources)
        self.contributions_source = sources[0]

    def _tree_output(self, plan: _TreePlan) -> Callable[[np.ndarray], np.ndarray]:
        """Raw rows → what the trees add up to, through the whole pipeline: the registration's local-accuracy check."""
        if plan.output_label == "predict_proba":
            return lambda rows: np.asarray(
                self.model.estimator.predict_proba(_model_rows(self.model, rows)),
                dtype=np.float64,
            )[:, self.output.event_index]
        return lambda rows: inference_sklearn_margins(self.model, self.output, rows)

    def _explained_rows(self, rows: np.ndarray) -> np.ndarray:
        return rows if self._explained_transform is None else self._explained_transform(rows)

    def inference_outputs(self, batch: InferenceInput) -> InferenceOutput:
        start = time.perf_counter()
        margins = inference_sklearn_margins(self.model, self.output, batch.features)
        latency_ms = (time.perf_counter() - start) * 1000.0
        return _logged_output(
            self.metadata, batch, margins, latency_ms, self.device_type, f" sklearn={self.output.method}"
        )


ENGINE = SklearnEngine
