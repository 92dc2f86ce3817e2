"""What a model must be for a job's kind, in the words every framework's refusal uses: a binary classifier for a
binary job, a regressor of a point forecast for a regression or count job (`target.kind`), and what the margin
of a forecast model is by its link. No framework is imported here: each engine and the ONNX reader use it.
"""

from __future__ import annotations

LINK_WORDS = {
    "identity": "the forecast itself",
    "log": "the log of the forecast (the model's own prediction is exp of it)",
}
"""What a forecast model's margin is, by its link, for the registration report."""


def inference_kind_problem(what: str, kind: str, *, regressor: bool, classifiers: str, regressors: str) -> str | None:
    """Why a model that is `what` ("has objective 'regression'", "is a scikit-learn Ridge, a regressor") does not fit a
    job of `kind`: a regressor on a binary job or a classifier on a forecast job; None when it fits. The words
    follow XGBoost's refusal (tasks/jobs/registration.py), naming what the job takes instead."""
    if kind == "binary" and regressor:
        return (
            f"{what}, but the job is binary (target.kind): register a binary classifier ({classifiers}), or set target.kind: "
            "regression or count in the job spec"
        )
    if kind != "binary" and not regressor:
        return f"{what}, but the job forecasts a {kind} target (target.kind): register a regressor ({regressors})"
    return None


def inference_quantile_problem(what: str, regressors: str) -> str:
    """The refusal of a quantile regressor on a forecast job: its prediction is a quantile, not a point forecast."""
    return (
        f"{what}: a quantile regressor predicts a quantile of the target, not the point forecast the job's interval is fitted "
        f"around (the interval comes from the hold-out); register a point forecast ({regressors})"
    )


def inference_model_kind_words(kind: str) -> str:
    """What a model registered for a job of `kind` is, in words: "a binary classifier", "a count forecast model", ..."""
    if kind == "binary":
        return "a binary classifier"
    if kind == "multiclass":
        return "a multiclass classifier"
    return f"a {kind} forecast model"


def inference_job_kind_words(kind: str) -> str:
    """What a job of `kind` is, in words: "binary", "a count forecast job", "a multiclass job"."""
    if kind == "binary":
        return "binary"
    if kind == "multiclass":
        return "a multiclass job"
    return f"a {kind} forecast job"


def inference_same_kind(model_kind: str, job_kind: str) -> bool:
    """Whether a model registered for `model_kind` can score a job of `job_kind`: a regression and a count forecast
    model score each other's jobs (the interval and the clipping are the job's), the other kinds only their own."""
    forecast = ("regression", "count")
    return model_kind == job_kind or (model_kind in forecast and job_kind in forecast)


def inference_multiclass_kind_problem(what: str, kind: str, *, multiclass: bool, classifiers: str) -> str | None:
    """Why a model that is `what` ("has objective 'binary'", "is a scikit-learn LogisticRegression with 2 classes") does
    not fit a job of `kind` for want of, or by having, several classes: another model on a multiclass job, a multiclass
    model on a binary or forecast job; None when the number of classes is not what refuses it. `classifiers`: what a
    multiclass job takes of this framework."""
    if kind == "multiclass" and not multiclass:
        return f"{what}, but the job is multiclass (target.kind): register a multiclass classifier ({classifiers})"
    if kind != "multiclass" and multiclass:
        return (
            f"{what}, a multiclass classifier, but the job is {inference_job_kind_words(kind)} (target.kind): register a model of "
            "the job's kind, or set target.kind: multiclass with its classes in the job spec"
        )
    return None


def inference_class_label_text(label: object) -> str:
    """A model's class label as the text a class name is compared with (tasks/prediction/class_labels.py reads the
    job's labels the same way): whole numbers without a decimal point, booleans as true/false, text as it is."""
    if isinstance(label, bytes):
        label = label.decode()
    if isinstance(label, str):
        return label
    if type(label).__name__ in ("bool", "bool_"):
        return str(bool(label)).lower()
    try:
        number = float(label)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(label)
    return str(int(number)) if number.is_integer() else str(label)


def inference_class_labels_problem(labels: list[object], classes: list[str] | tuple[str, ...]) -> str | None:
    """Why a model whose outputs are `labels` (its own class labels, in its output order) cannot be the job's
    `classes` (target.classes) in the job's order, or None.

    Labels are compared as text. The same names in another order, or names the job does not list, are refused
    naming both orders. Labels that are whole numbers other than the job's names are codes the user encoded the
    classes with: their order is the model's, and the hold-out's likelihood checks it at registration."""
    if not classes:
        return None
    texts = [inference_class_label_text(label) for label in labels]
    if len(texts) != len(classes):
        return f"has {len(texts)} classes {texts}, but target.classes names {len(classes)}: {list(classes)}"
    if texts == list(classes):
        return None
    if sorted(texts) == sorted(classes):
        return (
            f"gives its classes in the order {texts}, but target.classes lists {list(classes)}: list target.classes in the "
            "model's order"
        )
    if all(text.lstrip("-").isdigit() for text in texts):
        return None
    return (
        f"was trained on classes {texts}, which are not target.classes {list(classes)}: train on the job's outcome column, "
        "or list the model's classes in target.classes"
    )
