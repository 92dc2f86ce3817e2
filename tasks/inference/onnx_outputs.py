"""Which output of an ONNX graph scores a row, and how its value becomes a margin.

Converters disagree on what a binary classifier's graph returns. skl2onnx writes the predicted
label first and the probabilities second as a ZipMap (a sequence of {class: probability} maps,
which ONNX Runtime returns as a Python list of dicts); with `zipmap: False` a label and an N×2
probability tensor; torch whatever the module returns (a logit, or a sigmoid's probability); a
hand-made graph a raw score. Registration reads the graph's outputs and their values on the
hold-out, picks the one that carries the event's probability or score (`inference_onnx_output_choice`)
and records it in the version's metadata (`ModelMetadata.onnx_output`); scoring turns exactly that
output into margins (`inference_onnx_margins`). A probability becomes the margin logit(p), p
clipped to [PROBABILITY_CLIP, 1 − PROBABILITY_CLIP], so the calibration fits on log-odds as it
does for XGBoost's margins.

A label-only graph, and a multiclass one on a binary job, are refused naming the output, its shape and
what it holds. A multiclass job takes the graph's class probabilities (a ZipMap, read in its class order,
or an N×K tensor whose rows sum to 1): the margins are their logs, p clipped below at PROBABILITY_CLIP, whose
softmax is the graph's probabilities; the graph's class labels, where it declares them, must be the job's
target.classes in order (compared as text; whole-number codes are taken in their order).

A forecast job (target.kind regression or count) takes a regressor's graph: the first float output
with one value per row is the forecast (skl2onnx's regressors and onnxmltools' LightGBM regressor
name it `variable`, N×1). It is the margin as it is (link identity), unless an `Exp` node computes
it (a Poisson, gamma or Tweedie regressor: onnxmltools' LightGBM export, skl2onnx's GLMs), whose
input, the log of the forecast, is then the margin (link log). A classifier's graph is refused on a
forecast job, and a regressor's on a binary job (`inference_onnx_kind_problem`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tasks.errors import ModelArtifactError
from tasks.inference.kinds import (
    inference_class_labels_problem,
    inference_kind_problem,
    inference_multiclass_kind_problem,
)
from tasks.inference.registry import PROBABILITY_CLIP, OnnxOutput

EVENT_LABEL = 1
"""The hold-out's event label: registration requires the outcome column to be 0 or 1."""
_SUM_TOLERANCE = 1e-3
"""How far from 1 a row of float32 class probabilities may sum (a Normalizer's rounding)."""
_CLASS_LABEL_ATTRIBUTES = ("classlabels_ints", "classlabels_int64s", "classlabels_strings")
"""The attributes ONNX-ML classifier and ZipMap nodes declare their class labels in."""
CLASSIFIER_OPS = ("TreeEnsembleClassifier", "LinearClassifier", "SVMClassifier", "ZipMap")
REGRESSOR_OPS = ("TreeEnsembleRegressor", "LinearRegressor", "SVMRegressor")
_SHAPE_OPS = ("Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze")
"""Nodes that pass every value through unchanged: what converters put between a model node and the graph output."""
_ONNX_CLASSIFIERS = "its class probabilities or one score per row"
_ONNX_REGRESSORS = "one value per row: skl2onnx's regressors, onnxmltools' LightGBM or XGBoost regressor"


@dataclass(frozen=True)
class OnnxOutputChoice:
    """The output that scores, and one sentence for the registration report on what was taken and why."""

    output: OnnxOutput
    description: str


@dataclass(frozen=True)
class _Output:
    name: str
    type: str
    """ONNX Runtime's type string: `tensor(float)`, `seq(map(int64,tensor(float)))`, …"""
    value: Any


def inference_registered_onnx_output(model_path: Path, rows: np.ndarray, *, kind: str = "binary") -> OnnxOutputChoice:
    """The output of the graph in `model_path` that scores `rows` (the hold-out, in the model's input order) for a
    job of `kind`.

    Raises ModelArtifactError naming the output, its shape and what it holds when no output gives
    the event's probability or score (a binary job), or the forecast (a regression or count job).
    """
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    # onnxmltools declares its LightGBM export's label output (1,): ONNX Runtime warns on every run of all outputs.
    options.log_severity_level = 3
    session = ort.InferenceSession(str(model_path), sess_options=options, providers=["CPUExecutionProvider"])
    features = np.ascontiguousarray(rows, dtype=np.float32)
    try:
        values = session.run(None, {session.get_inputs()[0].name: features})
    except Exception as exc:  # noqa: BLE001  (ONNX Runtime raises its own exception classes)
        raise ModelArtifactError(
            f"model file {model_path} fails on the hold-out in ONNX Runtime: {' '.join(str(exc).split())}"
        ) from None
    outputs = {meta.name: (meta.type, value) for meta, value in zip(session.get_outputs(), values, strict=True)}
    try:
        if kind == "multiclass":
            return inference_onnx_class_choice(onnx.load(str(model_path)), outputs, rows=features.shape[0])
        if kind != "binary":
            return inference_onnx_forecast_choice(
                onnx.load(str(model_path)), outputs, rows=features.shape[0], kind=kind
            )
        return inference_onnx_output_choice(onnx.load(str(model_path)), outputs, rows=features.shape[0])
    except ModelArtifactError as exc:
        raise ModelArtifactError(f"model file {model_path} {exc}") from None


def inference_onnx_output_choice(
    model: Any, outputs: Mapping[str, tuple[str, Any]], *, rows: int, event_label: int = EVENT_LABEL
) -> OnnxOutputChoice:
    """The output among `outputs` (name → (ONNX Runtime's type string, its value on `rows` rows), in the
    graph's order) that gives the event's probability or score; `model` is the onnx.ModelProto, read for
    the class labels it declares and the node that produces each output.

    In order of preference: a probability tensor (N×2, classes matched to `event_label`), a ZipMap,
    then one float per row (a probability when a Sigmoid produces it or every value lies in [0, 1],
    otherwise a raw score taken as it is). Raises ModelArtifactError (its message starts with the
    words after "model file X") for a label-only graph, a multiclass one, and class labels that do
    not include `event_label`.
    """
    listed = [_Output(name, kind, value) for name, (kind, value) in outputs.items()]
    producers = {out: node.op_type for node in model.graph.node for out in node.output}
    declared = _declared_class_labels(model)
    single = []
    for output in listed:
        if output.type.startswith("seq(map("):
            return _zipmap_choice(output, rows, event_label)
        array = np.asarray(output.value) if output.type.startswith("tensor(") else None
        if array is None or array.dtype.kind != "f" or array.ndim == 0 or array.shape[0] != rows:
            continue
        width = int(np.prod(array.shape[1:], dtype=np.int64))
        if array.ndim == 2 and width >= 2 and _sums_to_one(array):
            classes = next((labels for labels in declared if len(labels) == width), None)
            return _probability_choice(output, array, classes, event_label)
        if width == 1:
            single.append((output, array))
    for output, array in single:
        finite = array[np.isfinite(array)]
        if finite.size and np.isin(finite, (0.0, 1.0)).all():
            continue
        index = 0 if array.ndim == 2 else None
        if producers.get(output.name) == "Sigmoid" or (finite.size and finite.min() >= 0.0 and finite.max() <= 1.0):
            why = (
                "a Sigmoid node produces it"
                if producers.get(output.name) == "Sigmoid"
                else (
                    "every hold-out value lies in [0, 1]; no Sigmoid produces it, so a chunk whose value leaves [0, 1] fails "
                    "rather than being clipped"
                )
            )
            return OnnxOutputChoice(
                OnnxOutput(name=output.name, kind="probability", event_index=index, clip=PROBABILITY_CLIP),
                f"ONNX output {output.name!r} {_shape(output)}: the event's probability ({why}); {_logit_words()}",
            )
        return OnnxOutputChoice(
            OnnxOutput(name=output.name, kind="margin"),
            f"ONNX output {output.name!r} {_shape(output)}: a raw score per row (values outside [0, 1]), calibrated as it is",
        )
    raise ModelArtifactError(
        "gives no probability or score per row: "
        + "; ".join(f"output {o.name!r} {_shape(o)} {_holds(o, rows)}" for o in listed)
        + "; export the class probabilities (skl2onnx writes them by default) or one score per row"
    )


_ONNX_MULTICLASS = (
    "its class probabilities: skl2onnx's classifiers, onnxmltools' LightGBM or XGBoost multiclass classifier"
)


def inference_onnx_kind_problem(model: Any, kind: str, classes: tuple[str, ...] | list[str] = ()) -> str | None:
    """Why the graph (an onnx.ModelProto) does not fit a job of `kind`, read from its ONNX-ML nodes: a classifier's
    graph on a forecast job, a regressor's on a binary or multiclass one, a multiclass job's graph whose declared
    class labels are not `classes` in order; None when it fits or its nodes do not say (a torch export)."""
    ml_ops = [node.op_type for node in model.graph.node if node.domain == "ai.onnx.ml"]
    classifier = next((op for op in ml_ops if op in CLASSIFIER_OPS), None)
    if classifier is None and any(o.type.HasField("sequence_type") for o in model.graph.output):
        classifier = "ZipMap"
    regressor = next((op for op in ml_ops if op in REGRESSOR_OPS), None) if classifier is None else None
    if kind == "multiclass":
        if regressor is not None:
            return inference_multiclass_kind_problem(
                f"is an ONNX regressor's graph (a {regressor} node computes its output)",
                kind,
                multiclass=False,
                classifiers=_ONNX_MULTICLASS,
            )
        declared = _declared_class_labels(model)
        labels = next((found for found in declared if len(found) > 2), declared[0] if declared else None)
        if labels is not None and len(labels) == 2:
            return inference_multiclass_kind_problem(
                f"is an ONNX graph of 2 classes {labels}, a binary classifier",
                kind,
                multiclass=False,
                classifiers=_ONNX_MULTICLASS,
            )
        if labels is not None and (problem := inference_class_labels_problem(list(labels), classes)) is not None:
            return f"is an ONNX graph that {problem}"
        return None
    if kind == "binary" and regressor is not None:
        return inference_kind_problem(
            f"is an ONNX regressor's graph (a {regressor} node computes its output)",
            kind,
            regressor=True,
            classifiers=_ONNX_CLASSIFIERS,
            regressors=_ONNX_REGRESSORS,
        )
    if kind != "binary" and classifier is not None:
        return inference_kind_problem(
            f"is an ONNX classifier's graph (it has a {classifier} node)",
            kind,
            regressor=False,
            classifiers=_ONNX_CLASSIFIERS,
            regressors=_ONNX_REGRESSORS,
        )
    return None


def inference_onnx_class_choice(model: Any, outputs: Mapping[str, tuple[str, Any]], *, rows: int) -> OnnxOutputChoice:
    """The output among `outputs` (as for `inference_onnx_output_choice`) that gives a multiclass job's probability vector:
    a ZipMap of 3 or more classes, or a float tensor of 3 or more columns whose rows sum to 1. Raises ModelArtifactError
    for a binary graph, a label-only one, and one without class probabilities."""
    listed = [_Output(name, kind_, value) for name, (kind_, value) in outputs.items()]
    declared = _declared_class_labels(model)
    for output in listed:
        if output.type.startswith("seq(map("):
            maps = output.value
            if not isinstance(maps, list) or len(maps) != rows or not all(isinstance(m, dict) for m in maps[:1]):
                raise ModelArtifactError(
                    f"output {output.name!r} is typed {output.type} but returned {_shape_of(maps)} for {rows} rows"
                )
            classes = list(maps[0]) if maps else []
            if len(classes) < 3:
                break
            return OnnxOutputChoice(
                OnnxOutput(name=output.name, kind="class_zipmap", classes=classes, clip=PROBABILITY_CLIP),
                f"ONNX output {output.name!r} {_shape(output)}: the probabilities of classes {classes}; {_log_words()}",
            )
        array = np.asarray(output.value) if output.type.startswith("tensor(") else None
        if array is None or array.dtype.kind != "f" or array.ndim != 2 or array.shape[0] != rows or array.shape[1] < 3:
            continue
        if _sums_to_one(array):
            classes = next(
                (labels for labels in declared if len(labels) == array.shape[1]), list(range(array.shape[1]))
            )
            return OnnxOutputChoice(
                OnnxOutput(name=output.name, kind="class_probabilities", classes=classes, clip=PROBABILITY_CLIP),
                f"ONNX output {output.name!r} {_shape(output)}: the probabilities of classes {classes}; {_log_words()}",
            )
    if (labels := next((found for found in declared if len(found) == 2), None)) is not None or any(
        isinstance(o.value, list) and o.value and len(o.value[0]) == 2 for o in listed
    ):
        raise ModelArtifactError(
            inference_multiclass_kind_problem(
                f"is an ONNX graph of 2 classes{f' {labels}' if labels else ''}, a binary classifier",
                "multiclass",
                multiclass=False,
                classifiers=_ONNX_MULTICLASS,
            )
        )
    raise ModelArtifactError(
        "gives no class probabilities: "
        + "; ".join(f"output {o.name!r} {_shape(o)} {_holds(o, rows)}" for o in listed)
        + "; export the class probabilities (skl2onnx writes them by default)"
    )


def inference_onnx_forecast_choice(
    model: Any, outputs: Mapping[str, tuple[str, Any]], *, rows: int, kind: str
) -> OnnxOutputChoice:
    """The output among `outputs` (as for `inference_onnx_output_choice`) that gives a forecast job's forecast: the first
    float tensor with one value per row, `exp` when an Exp node computes it (through nodes that only reshape). Raises
    ModelArtifactError for a graph that gives class probabilities, or no value per row."""
    if (problem := inference_onnx_kind_problem(model, kind)) is not None:
        raise ModelArtifactError(problem)
    listed = [_Output(name, kind_, value) for name, (kind_, value) in outputs.items()]
    producers = {out: node for node in model.graph.node for out in node.output}
    for output in listed:
        array = np.asarray(output.value) if output.type.startswith(("tensor(float", "tensor(double")) else None
        if array is None or array.ndim == 0 or array.shape[0] != rows:
            continue
        width = int(np.prod(array.shape[1:], dtype=np.int64))
        if array.ndim == 2 and width >= 2 and _sums_to_one(array):
            raise ModelArtifactError(
                inference_kind_problem(
                    f"gives class probabilities (output {output.name!r} {_shape(output)}: each row sums to 1)",
                    kind,
                    regressor=False,
                    classifiers=_ONNX_CLASSIFIERS,
                    regressors=_ONNX_REGRESSORS,
                )
            )
        if width != 1:
            continue
        node = producers.get(output.name)
        while node is not None and node.op_type in _SHAPE_OPS and node.input:
            node = producers.get(node.input[0])
        if node is not None and node.op_type == "Exp":
            return OnnxOutputChoice(
                OnnxOutput(name=output.name, kind="exp"),
                f"ONNX output {output.name!r} {_shape(output)}: the forecast, which an Exp node computes; the margin is its log "
                "(the Exp node's input), the link log",
            )
        return OnnxOutputChoice(
            OnnxOutput(name=output.name, kind="margin"),
            f"ONNX output {output.name!r} {_shape(output)}: the forecast, one value per row, taken as the margin (link identity)",
        )
    raise ModelArtifactError(
        "gives no forecast per row: "
        + "; ".join(f"output {o.name!r} {_shape(o)} {_holds(o, rows)}" for o in listed)
        + "; export a regressor (skl2onnx and onnxmltools write one float per row)"
    )


def inference_onnx_margins(output: OnnxOutput, value: Any, rows: int) -> np.ndarray:
    """The margins of `rows` rows from the value ONNX Runtime returned for the chosen output (rows × classes for a
    multiclass job's class probabilities)."""
    if output.kind in ("class_zipmap", "class_probabilities"):
        return _class_margins(output, value, rows)
    if output.kind == "zipmap":
        if not isinstance(value, list) or len(value) != rows:
            raise ModelArtifactError(
                f"ONNX output {output.name!r} returned {_shape_of(value)} for {rows} rows; it was registered as a sequence of maps"
            )
        try:
            probability = np.fromiter((row[output.event_label] for row in value), dtype=np.float64, count=rows)
        except KeyError:
            raise ModelArtifactError(
                f"ONNX output {output.name!r} has no class {output.event_label!r}, the event's"
            ) from None
        return inference_probability_margins(_checked_probability(output, probability), output.clip)
    array = np.asarray(value)
    if array.ndim == 0 or array.shape[0] != rows:
        raise ModelArtifactError(
            f"ONNX output {output.name!r} returned {_shape_of(value)} for {rows} rows; a scoring model gives one row each"
        )
    if output.kind in ("margin", "exp"):
        if array.size != rows:
            raise ModelArtifactError(
                f"ONNX output {output.name!r} returned shape {array.shape} for {rows} rows; a scoring model must give one value per row"
            )
        values = np.asarray(array, dtype=np.float64).reshape(-1)
        if output.kind == "margin":
            return values
        # An Exp node's output is positive; a 0 (float32 underflow) gives a margin of −inf, which the output contract refuses.
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(values)
    column = array.reshape(rows, -1)[:, output.event_index or 0]
    return inference_probability_margins(
        _checked_probability(output, np.asarray(column, dtype=np.float64)), output.clip
    )


def _class_margins(output: OnnxOutput, value: Any, rows: int) -> np.ndarray:
    """log(p) of every class, p clipped below at the output's clip: rows × classes, in the registered class order."""
    if output.kind == "class_zipmap":
        if not isinstance(value, list) or len(value) != rows:
            raise ModelArtifactError(
                f"ONNX output {output.name!r} returned {_shape_of(value)} for {rows} rows; it was registered as a sequence of maps"
            )
        try:
            probability = np.array([[row[c] for c in output.classes] for row in value], dtype=np.float64).reshape(
                rows, len(output.classes)
            )
        except KeyError as exc:
            raise ModelArtifactError(
                f"ONNX output {output.name!r} has no class {exc.args[0]!r}, one of its registered classes"
            ) from None
    else:
        probability = np.asarray(value, dtype=np.float64)
        if probability.ndim != 2 or probability.shape != (rows, len(output.classes)):
            raise ModelArtifactError(
                f"ONNX output {output.name!r} returned {_shape_of(value)} for {rows} rows; it was registered as {len(output.classes)} "
                "class probabilities per row"
            )
    outside = (probability < -PROBABILITY_SLACK) | (probability > 1.0 + PROBABILITY_SLACK)
    if outside.any():
        raise ModelArtifactError(
            f"ONNX output {output.name!r} was registered as class probabilities, but gives {float(probability[outside][0])!r} on "
            f"{int(outside.any(axis=1).sum())} of {rows} rows, outside [0, 1]"
        )
    return np.log(np.clip(probability, output.clip or PROBABILITY_CLIP, 1.0))


def _log_words() -> str:
    return f"the margins are log(p) of each class, p clipped below at {PROBABILITY_CLIP:g} (their softmax is the graph's probabilities)"


PROBABILITY_SLACK = 1e-6
"""How far outside [0, 1] a float32 probability may round (a softmax's or sigmoid's last bit)."""


def _checked_probability(output: OnnxOutput, probability: np.ndarray) -> np.ndarray:
    """The probabilities, refused when one lies outside [0, 1]: clipping it would publish a made-up margin (a raw
    score registered as a probability because every hold-out value happened to lie in [0, 1])."""
    outside = (probability < -PROBABILITY_SLACK) | (probability > 1.0 + PROBABILITY_SLACK)
    if outside.any():
        first = float(probability[np.flatnonzero(outside)[0]])
        raise ModelArtifactError(
            f"ONNX output {output.name!r} was registered as the event's probability, but gives {first!r} on {int(outside.sum())} "
            f"of {probability.size} rows, outside [0, 1]: it is not a probability; register the model again (a raw score is then "
            "calibrated as it is)"
        )
    return probability


def inference_probability_margins(probability: np.ndarray, clip: float | None) -> np.ndarray:
    """logit(p) with p clipped to [clip, 1 − clip]; NaN stays NaN (the output contract refuses it, naming the rows)."""
    eps = PROBABILITY_CLIP if clip is None else clip
    p = np.clip(probability, eps, 1.0 - eps)
    return np.log(p) - np.log1p(-p)


def inference_onnx_output_array(value: Any) -> np.ndarray:
    """An output's value as an array: a ZipMap's maps as rows × classes in the graph's class order."""
    if isinstance(value, list):
        if not value:
            return np.empty((0, 0), dtype=np.float32)
        keys = list(value[0])
        return np.array([[row[k] for k in keys] for row in value], dtype=np.float32)
    return np.asarray(value)


def _zipmap_choice(output: _Output, rows: int, event_label: int) -> OnnxOutputChoice:
    maps = output.value
    if not isinstance(maps, list) or len(maps) != rows or not all(isinstance(m, dict) for m in maps[:1]):
        raise ModelArtifactError(
            f"output {output.name!r} is typed {output.type} but returned {_shape_of(maps)} for {rows} rows"
        )
    classes = list(maps[0]) if maps else []
    if len(classes) != 2:
        raise ModelArtifactError(_multiclass(output, classes))
    event = _event_label(output, classes, event_label)
    return OnnxOutputChoice(
        OnnxOutput(name=output.name, kind="zipmap", event_label=event, classes=classes, clip=PROBABILITY_CLIP),
        f"ONNX output {output.name!r} {_shape(output)}: the probability of class {event!r} of {classes}; {_logit_words()}",
    )


def _probability_choice(
    output: _Output, array: np.ndarray, classes: list[int | str] | None, event_label: int
) -> OnnxOutputChoice:
    width = array.shape[1]
    if width != 2:
        raise ModelArtifactError(_multiclass(output, classes or list(range(width))))
    if classes is None:
        return OnnxOutputChoice(
            OnnxOutput(name=output.name, kind="probability", event_index=1, clip=PROBABILITY_CLIP),
            f"ONNX output {output.name!r} {_shape(output)}: probabilities of two classes; the graph declares no class labels, "
            f"so column 1 is taken as the event's (scikit-learn, torch and XGBoost order the classes 0, 1); {_logit_words()}",
        )
    event = _event_label(output, classes, event_label)
    index = classes.index(event)
    return OnnxOutputChoice(
        OnnxOutput(
            name=output.name,
            kind="probability",
            event_index=index,
            event_label=event,
            classes=classes,
            clip=PROBABILITY_CLIP,
        ),
        f"ONNX output {output.name!r} {_shape(output)}: column {index}, the probability of class {event!r} of {classes}; {_logit_words()}",
    )


def _event_label(output: _Output, classes: Sequence[int | str], event_label: int) -> int | str:
    """The declared label that means the hold-out's event; the other must mean its non-event."""

    def meaning(label: int | str) -> int | None:
        if isinstance(label, (bool, np.bool_)):
            return int(label)
        if isinstance(label, (int, np.integer)):
            return int(label) if label in (0, 1) else None
        text = str(label).strip().lower()
        return {"0": 0, "1": 1, "false": 0, "true": 1}.get(text)

    meanings = [meaning(label) for label in classes]
    if sorted(m for m in meanings if m is not None) != [0, 1]:
        raise ModelArtifactError(
            f"output {output.name!r} {_shape(output)} holds the probabilities of classes {list(classes)}; none of them is the hold-out's "
            f"event label {event_label} beside its non-event 0: train on the job's 0/1 outcome column"
        )
    return classes[meanings.index(event_label)]


def _declared_class_labels(model: Any) -> list[list[int | str]]:
    """Every list of class labels the graph declares: ONNX-ML classifier and ZipMap attributes, then the
    int64 or string constants an ArrayFeatureExtractor maps an ArgMax onto labels with (skl2onnx's MLP)."""
    from onnx import helper, numpy_helper

    found: list[list[int | str]] = []
    for node in model.graph.node:
        for attribute in node.attribute:
            if attribute.name in _CLASS_LABEL_ATTRIBUTES:
                labels = helper.get_attribute_value(attribute)
                found.append([v.decode() if isinstance(v, bytes) else int(v) for v in labels])
    constants = {init.name: init for init in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "ArrayFeatureExtractor" and node.input and node.input[0] in constants:
            values = numpy_helper.to_array(constants[node.input[0]]).reshape(-1)
            if values.dtype.kind in "iu":
                found.append([int(v) for v in values])
            elif values.dtype.kind in "OSU":
                found.append([v.decode() if isinstance(v, bytes) else str(v) for v in values])
    return found


def _sums_to_one(array: np.ndarray) -> bool:
    finite = array[np.isfinite(array).all(axis=1)]
    return (
        bool(finite.size)
        and finite.min() >= 0.0
        and finite.max() <= 1.0
        and bool((np.abs(finite.sum(axis=1) - 1.0) <= _SUM_TOLERANCE).all())
    )


def _multiclass(output: _Output, classes: Sequence[int | str]) -> str:
    return (
        f"output {output.name!r} {_shape(output)} holds the probabilities of {len(classes)} classes {list(classes)}; "
        "the job scores a binary outcome (0/1): register a binary classifier"
    )


def _holds(output: _Output, rows: int) -> str:
    """What an output that does not score holds, in words."""
    if output.type.startswith("tensor(") and not output.type.startswith(("tensor(float", "tensor(double")):
        return "holds predicted class labels only"
    array = np.asarray(output.value) if output.type.startswith("tensor(") else None
    if array is None:
        return f"is a {output.type}"
    if array.ndim == 0 or array.shape[0] != rows:
        return f"does not give one row per input row ({rows} rows in)"
    finite = array[np.isfinite(array)]
    width = int(np.prod(array.shape[1:], dtype=np.int64))
    if width == 1 and finite.size and np.isin(finite, (0.0, 1.0)).all():
        return "holds only the values 0 and 1: a predicted label, not a probability or score"
    return f"holds {width} values per row that are not class probabilities (a row does not sum to 1)"


def _shape(output: _Output) -> str:
    return f"({_shape_of(output.value)}, {output.type})"


def _shape_of(value: Any) -> str:
    if isinstance(value, list):
        return f"a sequence of {len(value)} maps, one per row"
    shape = np.shape(value)
    return "shape (" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _logit_words() -> str:
    bound = np.log((1 - PROBABILITY_CLIP) / PROBABILITY_CLIP)
    return f"margin = logit(p) with p clipped to [{PROBABILITY_CLIP:g}, 1 − {PROBABILITY_CLIP:g}] (±{bound:.1f})"
