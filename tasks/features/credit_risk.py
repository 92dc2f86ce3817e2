"""Features of the credit-risk job, shared by the demo model's training and by scoring."""

from __future__ import annotations

import numpy as np
import polars as pl

FEATURE_VERSION = "1.0.0"

HOME_OWNERSHIP = ("RENT", "MORTGAGE", "OWN", "OTHER")
LOAN_PURPOSE = ("debt_consolidation", "credit_card", "home_improvement", "car", "small_business", "other")

FEATURES: tuple[str, ...] = (
    "annual_income",
    "debt_to_income",
    "credit_utilization",
    "delinquencies_2y",
    "months_since_last_delinquency",
    "credit_history_months",
    "open_accounts",
    "recent_inquiries_6m",
    "loan_amount",
    "loan_term_months",
    "employment_years",
    "home_ownership",
    "revolving_balance",
    "loan_purpose",
)
FEATURE_KINDS = {"home_ownership": "categorical", "loan_purpose": "categorical"}
CATEGORIES = {"home_ownership": HOME_OWNERSHIP, "loan_purpose": LOAN_PURPOSE}


def _category_code(column: str, categories: tuple[str, ...]) -> pl.Expr:
    # A fixed code per category keeps one model column per business feature, so a contribution
    # maps to exactly one reason code; an unseen category becomes missing, never a wrong code.
    return pl.col(column).replace_strict(categories, list(range(len(categories))), default=None)


def feature_matrix(frame: pl.DataFrame) -> np.ndarray:
    """The model input: rows × FEATURES as a C-contiguous float32 array, NaN where missing.

    `months_since_last_delinquency` is null for applicants who were never delinquent; that is
    information, not dirt, and the model learns it as a missing value.
    """
    encoded = frame.select(
        *[
            _category_code(name, HOME_OWNERSHIP)
            if name == "home_ownership"
            else _category_code(name, LOAN_PURPOSE)
            if name == "loan_purpose"
            else pl.col(name)
            for name in FEATURES
        ]
    ).cast(pl.Float32)
    matrix = encoded.to_numpy(order="c")
    return np.ascontiguousarray(matrix, dtype=np.float32)
