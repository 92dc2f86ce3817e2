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
