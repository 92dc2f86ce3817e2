"""One rule decides whether an interval straddles a probability cut-off (`low < cut <= high`),
tasks/prediction/decisions.py `predict_straddling`, and it gives the same answer in the three
places that apply it: numpy (the rule table, `runs.rows_straddling`), polars (decision monitoring
of a frame) and SQL in the warehouse, on both backends (decision monitoring of a published partition)."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.catalog import PREDICTION_SCHEMA
from tasks.monitoring.decisions import prediction_groups
from tasks.prediction.decisions import predict_straddling
from tasks.settings import PROJECT_ROOT
from tasks.sinks.warehouse import Warehouse

CUTOFFS = [0.25, 0.55]
# (low, high, straddles): the ends of an interval on a cut-off, either side of it, and both cut-offs.
INTERVALS = [
    (0.10, 0.24, False),
    (0.10, 0.25, True),  # the upper end on the cut: contains it
    (0.25, 0.30, False),  # the lower end on the cut: lies above it
    (0.20, 0.30, True),
    (0.30, 0.50, False),
    (0.50, 0.60, True),
    (0.20, 0.60, True),
    (0.55, 0.55, False),
]
EXPECTED = [s for _, _, s in INTERVALS]


def test_numpy_and_polars_apply_the_same_rule() -> None:
    low, high = np.array([i[0] for i in INTERVALS]), np.array([i[1] for i in INTERVALS])
    assert predict_straddling(low, high, CUTOFFS, none=np.zeros(len(low), dtype=bool)).tolist() == EXPECTED
    assert predict_straddling(low, high, [], none=np.zeros(len(low), dtype=bool)).tolist() == [False] * len(low)
    frame = pl.DataFrame({"probability_low": low, "probability_high": high})
    expression = predict_straddling(pl.col("probability_low"), pl.col("probability_high"), CUTOFFS, none=pl.lit(False))
    assert frame.select(expression.alias("s"))["s"].to_list() == EXPECTED


def _predictions(day: dt.date) -> pa.Table:
    n = len(INTERVALS)
    values = {
        "run_id": ["run-1"] * n,
        "job": ["credit_risk"] * n,
        "partition_date": [day] * n,
        "entity_id": [f"E{i}" for i in range(n)],
        "probability": [(lo + hi) / 2 for lo, hi, _ in INTERVALS],
        "probability_low": [lo for lo, _, _ in INTERVALS],
        "probability_high": [hi for _, hi, _ in INTERVALS],
        "score": list(range(n)),
        "decision": ["review"] * n,
        "rule_id": ["R"] * n,
        "reason_codes": [[]] * n,
        "reason_texts": [[]] * n,
        "raw_margin": [0.0] * n,
        "model_name": ["m"] * n,
        "model_version": ["1"] * n,
        "feature_version": ["f"] * n,
    }
    return pa.table(values, schema=PREDICTION_SCHEMA)


def test_the_warehouse_applies_the_same_rule_in_sql(any_warehouse: Warehouse, tmp_path: Path) -> None:
    day = dt.date(2026, 3, 9)
    path = tmp_path / "predictions.parquet"
    pq.write_table(_predictions(day), path)
    any_warehouse.replace_partition(job="credit_risk", partition_date=day, files={"predictions": [path]})
    for cutoffs, expected in ((CUTOFFS, EXPECTED), ([], [False] * len(INTERVALS))):
        # One row per group: each interval has a score of its own.
        in_sql = any_warehouse.prediction_groups("credit_risk", day, cutoffs, straddling=predict_straddling)
        in_sql = in_sql.sort_by("score")
        assert in_sql["straddling"].to_pylist() == expected
        in_polars = prediction_groups(pl.from_arrow(_predictions(day)), cutoffs).sort("score")
        assert in_polars["straddling"].to_list() == expected


def test_the_warehouse_applies_the_rule_its_caller_passes_in(any_warehouse: Warehouse, tmp_path: Path) -> None:
    """The rule is the caller's, not one the warehouse imports: another rule written with the same operators
    (an interval whose lower end is on or above a cut-off) comes back as that rule's answer."""
    day = dt.date(2026, 3, 10)
    path = tmp_path / "predictions.parquet"
    pq.write_table(_predictions(day), path)
    any_warehouse.replace_partition(job="credit_risk", partition_date=day, files={"predictions": [path]})

    def low_at_or_above_a_cut(low, high, cutoffs, *, none):  # noqa: ANN001, ANN202, ARG001
        above = none
        for cut in cutoffs:
            above = above | (low >= cut)
        return above

    expected = [any(lo >= cut for cut in CUTOFFS) for lo, _, _ in INTERVALS]
    assert expected != EXPECTED and any(expected) and not all(expected)
    in_sql = any_warehouse.prediction_groups("credit_risk", day, CUTOFFS, straddling=low_at_or_above_a_cut)
    assert in_sql.sort_by("score")["straddling"].to_pylist() == expected


def test_the_warehouse_imports_no_prediction_rule() -> None:
    code = "import sys, tasks.sinks.warehouse\nprint([m for m in sys.modules if m.startswith('tasks.prediction')])"
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
