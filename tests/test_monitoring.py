"""Decision monitoring (no labels): the measures of a partition, the trailing-window flags, the table.

The demo injects a shift in the credit applications of its last two dates: the decision-share
flags must move on exactly those dates, and nowhere else.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import yaml
from monitoring_demo import JOB, MonitoredDemo, copied_demo, monitored_demo

from tasks.catalog import DECISION_MONITORING
from tasks.errors import JobSpecError
from tasks.jobspec import DecisionTolerance, load_job_spec
from tasks.monitoring.decisions import decision_measures, measures_against_baseline, monitored_decisions
from tasks.prediction.decisions import predict_probability_cutoffs
from tasks.settings import PROJECT_ROOT, Settings
from tasks.sinks.duckdb_warehouse import DuckDBWarehouse

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.fixture(scope="module")
def demo(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> MonitoredDemo:
    return monitored_demo(tmp_path_factory)


def _settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir)


def _monitoring(data_dir: Path) -> pl.DataFrame:
    with duckdb.connect(str(_settings(data_dir).duckdb_path), read_only=True) as con:
        return pl.from_arrow(
            con.sql(
                "SELECT * FROM decision_monitoring WHERE job = ? ORDER BY partition_date, measure, item", params=[JOB]
            ).to_arrow_table()
        )


def _parquet_predictions(data_dir: Path, day: dt.date) -> pl.DataFrame:
    folder = data_dir / "output" / JOB / "predictions" / f"date={day.isoformat()}"
    return pl.concat([pl.read_parquet(p, hive_partitioning=False) for p in sorted(folder.glob("*.parquet"))])


# --- measures of one partition ------------------------------------------------------------------


SMALL = pl.DataFrame(
    {
        "entity_id": ["a", "b", "c", "d", "e"],
        "decision": ["approve", "approve", "review", "decline", "approve"],
        "rule_id": ["OK", "OK", "MID", "HIGH", "OK"],
        "probability": [0.05, 0.10, 0.20, 0.60, 0.05],
        "probability_low": [0.01, 0.05, 0.12, 0.45, 0.02],
        "probability_high": [0.09, 0.25, 0.30, 0.70, 0.10],
        "score": pl.Series([30, 40, 55, 80, 31], dtype=pl.Int16),
    }
)


def test_measures_of_a_small_partition() -> None:
    measures = decision_measures(
        SMALL,
        decisions=["approve", "review", "decline", "refer"],
        rule_ids=["OK", "MID", "HIGH", "SPARE"],
        cutoffs=[0.25],
    )
    got = {(m, i): v for m, i, v in measures.iter_rows()}
    assert got[("rows", "all")] == 5
    assert got[("decision_share", "approve")] == pytest.approx(0.6)
    assert got[("decision_share", "refer")] == 0.0  # a decision of the rule table that nobody got
    assert got[("rule_share", "SPARE")] == 0.0 and got[("rule_share", "MID")] == pytest.approx(0.2)
    # b (0.05 < 0.25 <= 0.25) and c (0.12 < 0.25 <= 0.30) straddle; d's interval lies above the cut.
    assert got[("straddling_share", "all")] == pytest.approx(0.4)
    scores = SMALL["score"].to_numpy().astype(float)
    for q in (10, 50, 90):
        assert got[(f"score_p{q}", "all")] == pytest.approx(np.percentile(scores, q))
    assert got[("score_mean", "all")] == pytest.approx(scores.mean())
    assert got[("expected_event_rate", "all")] == pytest.approx(0.2)
    assert got[("expected_events", "all")] == pytest.approx(1.0)


def test_an_unknown_decision_is_measured_too_and_an_empty_partition_gives_nan() -> None:
    measures = decision_measures(SMALL, decisions=["approve"], rule_ids=["OK"], cutoffs=[])
    items = set(measures.filter(pl.col("measure") == "decision_share")["item"])
    assert items == {"approve", "review", "decline"}
    empty = decision_measures(SMALL.clear(), decisions=["approve"], rule_ids=["OK"], cutoffs=[0.25])
    values = {(m, i): v for m, i, v in empty.iter_rows()}
    assert values[("rows", "all")] == 0 and np.isnan(values[("decision_share", "approve")])


def test_flags_against_the_trailing_window() -> None:
    measures = pl.DataFrame(
        {
            "measure": ["decision_share", "decision_share", "decision_share", "score_p50", "rule_share"],
            "item": ["approve", "review", "new", "all", "OK"],
            "value": [0.70, 0.24, 0.06, 50.0, float("nan")],
        }
    )
    history = pl.DataFrame(
        {
            "partition_date": [
                dt.date(2026, 3, 1),
                dt.date(2026, 3, 2),
                dt.date(2026, 3, 1),
                dt.date(2026, 3, 1),
                dt.date(2026, 3, 1),
            ],
            "measure": ["decision_share", "decision_share", "decision_share", "score_p50", "rule_share"],
            "item": ["approve", "approve", "review", "all", "OK"],
            "value": [0.80, 0.82, 0.20, 45.0, 0.5],
        }
    )
    out = {
        r["item"]: r
        for r in measures_against_baseline(measures, history, DecisionTolerance(decision_share=0.05)).iter_rows(
            named=True
        )
    }
    assert out["approve"]["baseline"] == pytest.approx(0.81) and out["approve"]["baseline_partitions"] == 2
    assert out["approve"]["delta"] == pytest.approx(-0.11) and out["approve"]["flag"] == "shift"
    assert out["review"]["flag"] == "ok" and out["review"]["tolerance"] == 0.05
    assert out["new"]["flag"] == "no_baseline" and out["new"]["baseline_partitions"] == 0
    assert out["all"]["flag"] is None and out["all"]["tolerance"] is None and out["all"]["delta"] == pytest.approx(5.0)
    assert out["OK"]["flag"] == "no_data"


# --- on the demo --------------------------------------------------------------------------------


def test_the_injected_shift_moves_the_decision_flags_on_exactly_those_days(demo: MonitoredDemo) -> None:
    rows = _monitoring(demo.data_dir)
    shares = rows.filter(pl.col("measure") == "decision_share")
    flags_per_day = {day: set(shares.filter(pl.col("partition_date") == day)["flag"].to_list()) for day in demo.dates}
    assert flags_per_day[demo.dates[0]] == {"no_baseline"}
    shifted_days = {day for day, flags in flags_per_day.items() if "shift" in flags}
    assert shifted_days == set(demo.shifted_dates), flags_per_day
    for day in demo.dates[1:]:
        if day not in demo.shifted_dates:
            assert flags_per_day[day] == {"ok"}, (day, shares.filter(pl.col("partition_date") == day))
    # The shift raises risk: fewer approvals than the trailing mean on the shifted days.
    approve = shares.filter((pl.col("item") == "approve") & pl.col("partition_date").is_in(demo.shifted_dates))
    assert (approve["delta"] < -0.05).all()


def test_measures_match_the_published_partition(demo: MonitoredDemo) -> None:
    spec = load_job_spec(JOB, _settings(demo.data_dir))
    rows = _monitoring(demo.data_dir)
    cutoffs = predict_probability_cutoffs(spec.prediction.rules)
    for day in demo.dates:
        predictions = _parquet_predictions(demo.data_dir, day)
        got = {(r["measure"], r["item"]): r for r in rows.filter(pl.col("partition_date") == day).iter_rows(named=True)}
        n = predictions.height
        assert got[("rows", "all")]["value"] == n
        for decision in {r.decision for r in spec.prediction.rules}:
            assert got[("decision_share", decision)]["value"] == pytest.approx(
                (predictions["decision"] == decision).sum() / n
            )
        for rule in spec.prediction.rules:
            assert got[("rule_share", rule.id)]["value"] == pytest.approx((predictions["rule_id"] == rule.id).sum() / n)
        low, high = predictions["probability_low"].to_numpy(), predictions["probability_high"].to_numpy()
        straddling = np.zeros(n, dtype=bool)
        for cut in cutoffs:
            straddling |= (low < cut) & (high >= cut)
        assert got[("straddling_share", "all")]["value"] == pytest.approx(straddling.mean())
        scores = predictions["score"].to_numpy().astype(float)
        assert got[("score_p90", "all")]["value"] == pytest.approx(np.percentile(scores, 90))
        assert got[("expected_events", "all")]["value"] == pytest.approx(predictions["probability"].sum())
        assert {r["run_id"] for r in got.values()} == {demo.run_ids[day]}
        assert {r["model_version"] for r in got.values()} == {demo.versions[day]}
    # The baseline of a day is the mean of the days before it (the window spans all of them here).
    share = rows.filter((pl.col("measure") == "decision_share") & (pl.col("item") == "approve")).sort("partition_date")
    values = share["value"].to_list()
    for i in range(1, len(values)):
        assert share["baseline"][i] == pytest.approx(np.mean(values[:i]))
        assert share["baseline_partitions"][i] == i


def test_a_rerun_replaces_the_partition_and_a_foreign_run_is_refused(demo: MonitoredDemo, tmp_path: Path) -> None:
    data_dir = copied_demo(demo, tmp_path / "data")
    settings = _settings(data_dir)
    spec = load_job_spec(JOB, settings)
    warehouse = DuckDBWarehouse(settings.duckdb_path)
    day = demo.dates[-1]
    before = _monitoring(data_dir)
    again, _ = monitored_decisions(warehouse, spec, partition_date=day, run_id=demo.run_ids[day])
    after = _monitoring(data_dir)
    assert after.equals(before)
    assert again.num_rows == before.filter(pl.col("partition_date") == day).height
    with pytest.raises(
        ValueError, match=rf"published by run\(s\) \['{demo.run_ids[day]}'\], not by run 'someone-else'"
    ):
        monitored_decisions(warehouse, spec, partition_date=day, run_id="someone-else")
    assert _monitoring(data_dir).equals(before)


def test_replacing_refuses_rows_of_another_partition_or_schema(tmp_path: Path) -> None:
    warehouse = DuckDBWarehouse(tmp_path / "w.duckdb")
    schema = DECISION_MONITORING.schema
    row = {
        "job": JOB,
        "partition_date": dt.date(2026, 3, 1),
        "run_id": "r",
        "model_version": "1",
        "measure": "rows",
        "item": "all",
        "value": 1.0,
        "baseline": None,
        "baseline_partitions": 0,
        "delta": None,
        "tolerance": None,
        "flag": None,
    }
    table = pa.Table.from_pylist([row], schema=schema)
    with pytest.raises(ValueError, match="belong to other partitions"):
        warehouse.replace_monitoring_partition(
            job=JOB, partition_date=dt.date(2026, 3, 2), tables={"decision_monitoring": table}
        )
    with pytest.raises(ValueError, match="do not match its schema"):
        warehouse.replace_monitoring_partition(
            job=JOB, partition_date=dt.date(2026, 3, 1), tables={"decision_monitoring": table.drop(["flag"])}
        )
    with pytest.raises(ValueError, match="not a monitoring table: 'runs'"):
        warehouse.replace_monitoring_partition(job=JOB, partition_date=dt.date(2026, 3, 1), tables={"runs": table})
    assert warehouse.replace_monitoring_partition(
        job=JOB, partition_date=dt.date(2026, 3, 1), tables={"decision_monitoring": table}
    ) == {"decision_monitoring": 1}


# --- the job spec -------------------------------------------------------------------------------


def _spec_dir(tmp_path: Path, job: str, change: dict | None) -> Settings:
    jobs = tmp_path / "jobs"
    jobs.mkdir(exist_ok=True)
    raw = yaml.safe_load((PROJECT_ROOT / "jobs" / f"{job}.yaml").read_text())
    raw.pop("monitoring", None)
    if change is not None:
        raw["monitoring"] = change
    (jobs / f"{job}.yaml").write_text(yaml.safe_dump(raw))
    return Settings(data_dir=tmp_path / "data", jobs_dir=jobs)


def test_a_spec_without_monitoring_gets_the_defaults(tmp_path: Path) -> None:
    spec = load_job_spec("gearbox", _spec_dir(tmp_path, "gearbox", None))
    assert spec.monitoring.window_days == 28 and spec.monitoring.tolerance.decision_share == 0.05
    assert spec.monitoring.labels.outcome_column == "outcome" and spec.monitoring.labels.table is None
    assert spec.action_decisions == ["alarm", "inspect"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"adverse_decisions": ["refuse"]}, "monitoring.action_decisions names decisions no rule makes: ['refuse']"),
        ({"window_days": 0}, "monitoring.window_days"),
        ({"tolerance": {"decision_share": 2}}, "monitoring.tolerance.decision_share"),
        ({"labels": {"table": 'x"; DROP TABLE runs; --'}}, "monitoring.labels.table"),
        ({"tolerance": {"decision_shares": 0.1}}, "decision_shares"),
    ],
)
def test_bad_monitoring_settings_are_refused_by_name(tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(JobSpecError, match="credit_risk.yaml is invalid") as error:
        load_job_spec(JOB, _spec_dir(tmp_path, JOB, change))
    assert message in str(error.value)
