"""Drift of boolean and categorical features: one bin per training value, unseen values apart,
PSI/JS on those bins; the numeric "outside p1–p99" share without the 0/1 overflow artefact; the
run page's categorical bars; and warehouses written before these columns."""

from __future__ import annotations

import datetime as dt
import html
import re
import typing
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from test_warehouse_backends import DAY, JOB, NEXT_DAY, staged_run

from tasks.catalog import DRIFT_REPORT
from tasks.contracts import FeatureKind
from tasks.inference.registry import ReferenceKind, ReferenceStats
from tasks.quality.drift import (
    KS_BOUND_SHOWN_WITHIN,
    DriftAccumulator,
    Histogram,
    drift_bin_labels,
    drift_report_rows,
    reference_statistics,
)
from tasks.reports.html_report import histogram_svg, run_report_html
from tasks.sinks.warehouse import Warehouse

THRESHOLDS = {"psi_warn": 0.1, "psi_alert": 0.25, "ks_warn": 0.1, "ks_alert": 0.2}
NAMES = ("income", "flag", "housing")
KINDS: dict[str, FeatureKind] = {"flag": "boolean", "housing": "categorical"}
HOUSING = ("RENT", "MORTGAGE", "OWN", "OTHER")


def _matrix(rng: np.random.Generator, n: int, *, ones: float, housing: list[float]) -> np.ndarray:
    return np.column_stack(
        [
            rng.lognormal(11, 0.4, n),
            (rng.random(n) < ones).astype(float),
            rng.choice(4, n, p=housing).astype(float),
        ]
    ).astype(np.float32)


def _report(reference: np.ndarray, current: np.ndarray, kinds: dict[str, FeatureKind] = KINDS) -> tuple[dict, dict]:
    stats = reference_statistics(reference, NAMES, kinds)
    ref = {n: Histogram.of_reference(s) for n, s in stats.items()}
    acc = DriftAccumulator(
        edges={n: h.edges for n, h in ref.items()},
        psi_edges={n: h.psi_edges for n, h in ref.items()},
        kinds={n: h.kind for n, h in ref.items()},
    )
    for part in np.array_split(current, 5):
        acc.add_matrix(NAMES, part)
    rows = {r["feature"]: r for r in drift_report_rows(acc, {"reference": ref}, THRESHOLDS)}
    return rows, {"stats": stats, "acc": acc}


def _psi_js(p_counts: np.ndarray, q_counts: np.ndarray) -> tuple[float, float]:
    """PSI (shares floored at 1e-4) and base-2 Jensen–Shannon divergence, written out."""
    p, q = p_counts / p_counts.sum(), q_counts / q_counts.sum()
    pf, qf = np.maximum(p, 1e-4), np.maximum(q, 1e-4)
    psi = float(np.sum((qf - pf) * np.log(qf / pf)))
    m = (p + q) / 2

    def kl(a: np.ndarray) -> float:
        nz = a > 0
        return float(np.sum(a[nz] * np.log2(a[nz] / m[nz])))

    return psi, (kl(p) + kl(q)) / 2


def test_categorical_shares_unseen_values_and_psi_js_match_a_direct_count() -> None:
    rng = np.random.default_rng(11)
    reference = _matrix(rng, 20_000, ones=0.3, housing=[0.42, 0.40, 0.16, 0.02])
    # The scoring side never had OTHER (code 3) removed, but gets codes 7 and 2.5 the reference never had, and nulls.
    current = _matrix(rng, 6_000, ones=0.3, housing=[0.20, 0.50, 0.25, 0.05])
    current[:240, 2] = 7.0
    current[240:300, 2] = 2.5
    current[300:450, 2] = np.nan
    rows, parts = _report(reference, current)
    row = rows["housing"]
    stats = parts["stats"]["housing"]
    assert stats.kind == "categorical" and stats.categories == [0.0, 1.0, 2.0, 3.0]
    present = current[~np.isnan(current[:, 2]), 2]
    assert row["unseen_share"] == pytest.approx(300 / present.size)
    assert row["outside_p1_p99_share"] is None and row["null_share"] == pytest.approx(150 / current.shape[0])
    # Each category's bin holds exactly its own values: 2.5 was not put into the bin of 2 or 3.
    hist = parts["acc"].histograms["housing"]
    assert hist.counts.tolist() == [int(np.sum(present == v)) for v in range(4)] + [300]
    ref_counts = np.array([np.sum(reference[:, 2] == v) for v in range(4)] + [0])
    psi, js = _psi_js(ref_counts.astype(float), hist.counts.astype(float))
    assert row["psi"] == pytest.approx(psi, rel=1e-9) and row["js"] == pytest.approx(js, rel=1e-9)
    assert row["ks"] is None and row["ks_upper"] is None and row["wasserstein"] is None
    assert row["flag"] == "alert" and row["kind"] == "categorical"
    assert drift_bin_labels(hist, HOUSING) == [*HOUSING, "unseen"]
    flag = Histogram(edges=np.array([0.0, 1.0]), counts=np.array([5, 3, 0]), kind="boolean")
    assert drift_bin_labels(flag) == ["0 (false)", "1 (true)", "unseen"]


def test_a_boolean_has_no_overflow_artefact_and_an_exact_ks() -> None:
    rng = np.random.default_rng(5)
    reference = _matrix(rng, 20_000, ones=0.3, housing=[0.25] * 4)
    current = _matrix(rng, 5_000, ones=0.36, housing=[0.25] * 4)
    rows, parts = _report(reference, current)
    flag = rows["flag"]
    assert flag["unseen_share"] == 0.0 and flag["outside_p1_p99_share"] is None
    change = abs(reference[:, 1].astype(np.float64).mean() - current[:, 1].astype(np.float64).mean())
    assert flag["ks"] == pytest.approx(change, abs=1e-9) and flag["ks_upper"] == flag["ks"]
    assert flag["wasserstein"] == pytest.approx(change, abs=1e-6)
    ref_counts = np.array([np.sum(reference[:, 1] == 0), np.sum(reference[:, 1] == 1), 0], dtype=float)
    cur_counts = np.array([np.sum(current[:, 1] == 0), np.sum(current[:, 1] == 1), 0], dtype=float)
    psi, js = _psi_js(ref_counts, cur_counts)
    assert flag["psi"] == pytest.approx(psi, rel=1e-9) and flag["js"] == pytest.approx(js, rel=1e-9)
    # The same 0/1 column declared numeric: its p99 is 1, yet no 1 counts as outside p1–p99.
    as_numeric, _ = _report(reference, current, kinds={})
    assert as_numeric["flag"]["outside_p1_p99_share"] == 0.0 and as_numeric["flag"]["unseen_share"] is None
    # …and its loose KS bracket (one bin holds 70 % of the rows) is not reported.
    assert as_numeric["flag"]["ks_upper"] is None and as_numeric["flag"]["ks"] is not None


def test_numeric_outside_share_counts_below_p1_and_above_p99_only() -> None:
    rng = np.random.default_rng(8)
    reference = _matrix(rng, 20_000, ones=0.5, housing=[0.25] * 4)
    current = _matrix(rng, 4_000, ones=0.5, housing=[0.25] * 4)
    p1, p99 = np.quantile(reference[:, 0].astype(np.float64), [0.01, 0.99])
    current[:50, 0] = p99  # exactly on p99: inside
    rows, _ = _report(reference, current)
    values = current[:, 0].astype(np.float64)
    assert rows["income"]["outside_p1_p99_share"] == pytest.approx(np.mean((values < p1) | (values > p99)))
    assert (
        rows["income"]["ks_upper"] is not None
        and rows["income"]["ks_upper"] - rows["income"]["ks"] <= KS_BOUND_SHOWN_WITHIN
    )


def test_reference_stats_without_kind_read_as_numeric_and_category_bins_are_checked() -> None:
    assert set(typing.get_args(ReferenceKind)) == set(typing.get_args(FeatureKind))
    old = {
        "count": 10,
        "null_count": 0,
        "mean": 1.0,
        "std": 0.1,
        "min": 0.0,
        "max": 2.0,
        "drift_edges": [0.5, 1.5],
        "drift_counts": [2, 6, 2],
        "psi_edges": [0.5],
    }
    assert ReferenceStats.model_validate(old).kind == "numeric"
    categorical = {**old, "kind": "categorical", "drift_edges": [], "psi_edges": [], "categories": [0.0, 1.0, 2.0]}
    with pytest.raises(ValidationError, match="3 categories"):
        ReferenceStats.model_validate({**categorical, "drift_counts": [2, 6, 2]})
    with pytest.raises(ValidationError, match="drift_edges and psi_edges must be empty"):
        ReferenceStats.model_validate({**categorical, "drift_edges": [0.5], "drift_counts": [2, 6, 2, 0]})
    assert ReferenceStats.model_validate({**categorical, "drift_counts": [2, 6, 2, 0]}).categories == [0.0, 1.0, 2.0]


# --- the run page ------------------------------------------------------------------------------


def _bar_heights(svg: str, series: str) -> list[float]:
    """Heights of one series' bars, left to right."""
    bars = [r for r in ET.fromstring(svg).iter("rect") if r.get("class") == series]
    return [float(r.get("height")) for r in sorted(bars, key=lambda r: float(r.get("x")))]


def test_the_page_draws_one_bar_per_category_and_names_the_renamed_columns() -> None:
    edges = np.array([0.0, 1.0, 2.0, 3.0])
    reference, current = np.array([420, 400, 160, 20, 0]), np.array([200, 500, 250, 40, 10])
    svg = histogram_svg("housing", edges, current, reference, labels=[*HOUSING, "unseen"])
    drawn, drawn_reference = np.array(_bar_heights(svg, "current")), np.array(_bar_heights(svg, "reference"))
    assert len(drawn) == len(drawn_reference) == 5
    scale = drawn.max() / (current.max() / current.sum())  # current holds the tallest share
    np.testing.assert_allclose(drawn, current / current.sum() * scale, atol=0.1)
    np.testing.assert_allclose(drawn_reference, reference / reference.sum() * scale, atol=0.1)
    labels = [t.text for t in ET.fromstring(svg).iter("text")]
    assert all(name in labels for name in [*HOUSING, "unseen"])
    row = {
        "feature": "housing",
        "kind": "categorical",
        "baseline": "reference",
        "psi": 0.3,
        "ks": None,
        "ks_upper": None,
        "wasserstein": None,
        "js": 0.03,
        "flag": "alert",
        "rows": 1000,
        "null_share": 0.0,
        "baseline_null_share": 0.0,
        "outside_p1_p99_share": None,
        "unseen_share": 0.01,
    }
    numeric = {
        **row,
        "feature": "income",
        "kind": "numeric",
        "ks": 0.04,
        "ks_upper": 0.05,
        "wasserstein": 0.1,
        "outside_p1_p99_share": 0.031,
        "unseen_share": None,
        "psi": 0.01,
        "flag": "ok",
    }
    loose = {**numeric, "feature": "count", "ks": 0.02, "ks_upper": None}
    page = run_report_html(
        job="j",
        partition_date="2026-03-10",
        run_id="r",
        summary={},
        fallback_rows=[],
        drift_rows=[row, numeric, loose],
        histograms={
            "housing": (edges, current, reference),
            "income": (np.linspace(0, 1, 9), np.ones(10), np.ones(10)),
            "count": (np.linspace(0, 1, 9), np.ones(10), np.ones(10)),
        },
        bin_labels={"housing": [*HOUSING, "unseen"]},
    )
    table = page.split("<h2>Drift</h2>")[1].split("<h2>")[0]
    header = re.findall(r"<th[^>]*>([^<]*)</th>", table)
    assert "outside training p1–p99" in [html.unescape(h) for h in header] and "unseen values" in header
    assert "out of range" not in page
    cells = {re.search(r"<td>([^<]*)</td>", r).group(1): r for r in table.split("<tr")[2:]}
    assert "1.00%" in cells["housing"] and "3.10%" in cells["income"]
    assert "0.04 (≤ 0.05)" in cells["income"] and "≤" not in cells["count"]


# --- warehouses written before the rename -------------------------------------------------------

_OLD_DRIFT_REPORT = (
    "CREATE TABLE drift_report (run_id TEXT, job TEXT, partition_date DATE, feature TEXT, baseline TEXT, "
    "psi DOUBLE PRECISION, ks DOUBLE PRECISION, ks_upper DOUBLE PRECISION, wasserstein DOUBLE PRECISION, "
    "js DOUBLE PRECISION, flag TEXT, rows BIGINT, null_share DOUBLE PRECISION, baseline_null_share DOUBLE PRECISION, "
    "out_of_range_share DOUBLE PRECISION)"
)
_OLD_DRIFT_HISTOGRAMS = (
    "CREATE TABLE drift_histograms (run_id TEXT, job TEXT, partition_date DATE, feature TEXT, "
    "edges DOUBLE PRECISION[], counts BIGINT[], nulls BIGINT)"
)


def test_an_old_drift_report_table_is_migrated_in_place(any_warehouse: Warehouse, tmp_path: Path) -> None:
    with any_warehouse._session(write=False) as session:
        session.execute(_OLD_DRIFT_REPORT)
        session.execute(_OLD_DRIFT_HISTOGRAMS)
        session.execute(
            "INSERT INTO drift_report VALUES ('old-run', $job, $day, 'income', 'reference', 0.01, 0.02, 0.03, 0.1, 0.001, "
            "'ok', 100, 0.0, 0.0, 0.125)",
            {"job": JOB, "day": DAY},
        )
        session.execute(
            "INSERT INTO drift_histograms VALUES ('old-run', $job, $day, 'income', ARRAY[1.0, 2.0], ARRAY[1, 2, 3], 0)",
            {"job": JOB, "day": DAY},
        )
    # Reading before any write sees the old table as it is: every feature numeric.
    assert any_warehouse.previous_drift_histograms(JOB, NEXT_DAY) == [
        {"feature": "income", "edges": [1.0, 2.0], "counts": [1, 2, 3], "nulls": 0, "kind": None}
    ]
    counts = any_warehouse.replace_partition(
        job=JOB, partition_date=NEXT_DAY, files=staged_run(tmp_path, "run-new", rows=3, day=NEXT_DAY)
    )
    assert counts["drift_report"] == 3 and counts["drift_histograms"] == 3
    with any_warehouse._session(write=False) as session:
        columns = {
            r["column_name"]
            for r in session.rows(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'drift_report' AND table_schema = current_schema()"
            )
        }
        old = session.rows("SELECT outside_p1_p99_share, kind, unseen_share FROM drift_report WHERE run_id = 'old-run'")
        new = session.rows("SELECT kind FROM drift_report WHERE run_id = 'run-new' ORDER BY kind")
    assert columns == set(DRIFT_REPORT.schema.names)
    assert old == [{"outside_p1_p99_share": 0.125, "kind": None, "unseen_share": None}]
    assert [r["kind"] for r in new] == ["kind-0", "kind-1", "kind-2"]
    # A second writer finds nothing left to migrate.
    any_warehouse.replace_partition(
        job=JOB, partition_date=NEXT_DAY, files=staged_run(tmp_path, "run-again", rows=2, day=NEXT_DAY)
    )
    assert [h["kind"] for h in any_warehouse.previous_drift_histograms(JOB, NEXT_DAY + dt.timedelta(days=1))] == [
        "kind-0",
        "kind-1",
    ]
