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
