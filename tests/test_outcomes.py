"""Realized outcomes: the `outcomes` flow on the demo, checked against an independent computation.

The module fixture runs the flow once over the monitored demo (six scored dates, two model
versions) and one labelled training day before it, which was never scored: all its labels are
for unknown entities. Tests that change labels or the spec work on their own copy.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import yaml
from matplotlib.image import imread
from monitoring_demo import JOB, MonitoredDemo, copied_demo, monitored_demo
from offline_browser import offline_page
from polars.testing import assert_frame_equal
from rich.console import Console
from scipy.stats import beta, mannwhitneyu

from tasks.catalog import OUTCOME_DATASETS, warehouse_dataset
from tasks.errors import LabelError, PartitionError
from tasks.jobspec import load_job_spec
from tasks.monitoring.history import monitoring_history, unmatched_label_counts
from tasks.monitoring.outcomes import (
    ANY_ACTION,
    ingested_outcomes,
    outcome_window,
    parquet_labels,
    partition_outcome_tables,
)
from tasks.reports.monitoring_page import realized_performance_rows, realized_performance_table, unmatched_labels_text
from tasks.runs.monitoring import outcomes_run_name, written_monitoring_page
from tasks.settings import PROJECT_ROOT, Settings
from tasks.sinks.duckdb_warehouse import DuckDBWarehouse

pytestmark = pytest.mark.usefixtures("prefect_harness")

OUTCOME_TABLES = tuple(d.table for d in OUTCOME_DATASETS)
SORT_KEYS = {d.table: [k for k in d.keys if k != "job"] for d in OUTCOME_DATASETS}
"""Each table's rows of the job in the order of their key (tasks/catalog.py)."""
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class OutcomesEnv:
    demo: MonitoredDemo
    data_dir: Path
    unscored_date: dt.date
    returned: list[dict]

    @property
    def settings(self) -> Settings:
        return Settings(data_dir=self.data_dir)


@pytest.fixture(scope="module")
def env(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OutcomesEnv]:
    from flows.outcomes import outcomes

    demo = monitored_demo(tmp_path_factory)
    data_dir = copied_demo(demo, tmp_path_factory.mktemp("outcomes") / "data")
    unscored = demo.dates[0] - dt.timedelta(days=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SCORING_DATA_DIR", str(data_dir))
        returned = outcomes(JOB, unscored, demo.dates[-1])
        yield OutcomesEnv(demo=demo, data_dir=data_dir, unscored_date=unscored, returned=returned)


def table(settings: Settings, name: str) -> pl.DataFrame:
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        frame = pl.from_arrow(con.sql(f"SELECT * FROM {name} WHERE job = ?", params=[JOB]).to_arrow_table())
    return frame.sort(SORT_KEYS[name])


def joined_by_hand(data_dir: Path, day: dt.date) -> pl.DataFrame:
    """Published predictions of the day joined to its labels file, read straight from Parquet."""
    folder = data_dir / "output" / JOB / "predictions" / f"date={day.isoformat()}"
    predictions = pl.concat([pl.read_parquet(p, hive_partitioning=False) for p in sorted(folder.glob("*.parquet"))])
    labels = pl.read_parquet(data_dir / "labels" / JOB / f"date={day.isoformat()}" / "labels.parquet")
    return predictions.join(labels.select("entity_id", pl.col("defaulted").alias("y")), on="entity_id", how="inner")


def independent_metrics(y: np.ndarray, p: np.ndarray, *, level: float = 0.95, bins: int = 10) -> dict[str, float]:
    n, k = y.size, int(y.sum())
    u = mannwhitneyu(p[y == 1], p[y == 0], alternative="two-sided").statistic
    which = np.clip(np.floor(p * bins).astype(int), 0, bins - 1)
    ece = sum(
        abs(p[which == b].mean() - y[which == b].mean()) * (which == b).sum() / n
        for b in range(bins)
        if (which == b).any()
    )
    alpha = 1 - level
    return {
        "labelled": n,
        "events": k,
        "observed_rate": k / n,
        "expected_rate": p.mean(),
        "observed_low": beta.ppf(alpha / 2, k, n - k + 1) if k else 0.0,
        "observed_high": beta.ppf(1 - alpha / 2, k + 1, n - k) if k < n else 1.0,
        "auc": u / (k * (n - k)),
        "brier": np.mean((p - y) ** 2),
        "ece": ece,
    }


# --- the flow on the demo -----------------------------------------------------------------------


def test_realized_metrics_per_model_version_match_an_independent_computation(env: OutcomesEnv) -> None:
    metrics = table(env.settings, "outcome_metrics")
    assert sorted(set(metrics["model_version"])) == sorted(set(env.demo.versions.values()))
    assert len(set(env.demo.versions.values())) == 2
    for day in env.demo.dates:
        joined = joined_by_hand(env.data_dir, day)
        for version, rows in joined.group_by("model_version"):
            (got,) = metrics.filter(
                (pl.col("partition_date") == day) & (pl.col("model_version") == version[0])
            ).to_dicts()
            assert version[0] == env.demo.versions[day]
            want = independent_metrics(rows["y"].to_numpy().astype(float), rows["probability"].to_numpy())
            for name, value in want.items():
                assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-12), (day, name)
            assert got["expected_within_interval"] == (
                got["observed_low"] <= got["expected_rate"] <= got["observed_high"]
            )
            assert got["scoring_run_id"] == env.demo.run_ids[day]


def test_precision_recall_and_calibration_bins_per_model_version(env: OutcomesEnv) -> None:
    decisions = table(env.settings, "outcome_decisions")
    calibration = table(env.settings, "outcome_calibration")
    spec = load_job_spec(JOB, env.settings)
    for day in env.demo.dates:
        joined = joined_by_hand(env.data_dir, day)
        y, decided = joined["y"].to_numpy(), joined["decision"].to_numpy()
        for decision in [*spec.action_decisions, ANY_ACTION]:
            hit = np.isin(decided, spec.action_decisions if decision == ANY_ACTION else [decision])
            (got,) = decisions.filter((pl.col("partition_date") == day) & (pl.col("decision") == decision)).to_dicts()
            assert got["rows"] == hit.sum() and got["events"] == y[hit].sum()
            assert got["recall"] == pytest.approx(y[hit].sum() / y.sum())
            if hit.any():
                assert got["precision"] == pytest.approx(y[hit].mean())
            else:
                assert np.isnan(got["precision"])
        bins = calibration.filter(pl.col("partition_date") == day)
        assert bins["rows"].sum() == joined.height and bins["events"].sum() == y.sum()
        assert bins["probability_sum"].sum() == pytest.approx(joined["probability"].sum())


def test_every_partition_and_every_label_is_accounted_for(env: OutcomesEnv) -> None:
    partitions = {r["partition_date"]: r for r in table(env.settings, "outcome_partitions").to_dicts()}
    assert set(partitions) == {env.unscored_date, *env.demo.dates}
    never_scored = partitions[env.unscored_date]
    label_rows = pl.read_parquet(env.data_dir / "labels" / JOB / f"date={env.unscored_date}" / "labels.parquet").height
    assert never_scored["status"] == "not scored" and never_scored["predictions"] == 0
    assert never_scored["labels"] == never_scored["labels_unknown_entity"] == label_rows > 0
    for day in env.demo.dates:
        row = partitions[day]
        assert row["status"] == "labelled"
        assert row["labels"] == row["labels_matched"] + row["labels_quarantined"] + row["labels_unknown_entity"]
        assert row["predictions_labelled"] == joined_by_hand(env.data_dir, day).height
    labels = table(env.settings, "outcome_labels")
    assert labels.filter(pl.col("entity_status") == "unknown").height == sum(
        r["labels_unknown_entity"] for r in partitions.values()
    )
    assert set(labels["entity_status"]) <= {"scored", "quarantined", "unknown"}
    returned = {r["date"]: r for r in env.returned}
    assert returned[env.unscored_date.isoformat()]["labels_unknown_entity"] == label_rows


def test_reingesting_the_same_labels_leaves_identical_tables(
    env: OutcomesEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.outcomes import outcomes

    data_dir = copied_demo(env.demo, tmp_path / "data")
    settings = Settings(data_dir=data_dir)
    shutil.copy2(env.settings.duckdb_path, settings.duckdb_path)
    before = {name: table(settings, name) for name in OUTCOME_TABLES}
    assert before["outcome_metrics"].height == len(env.demo.dates)
    monkeypatch.setenv("SCORING_DATA_DIR", str(data_dir))
    outcomes(JOB, env.unscored_date, env.demo.dates[-1])
    for name in OUTCOME_TABLES:
        assert_frame_equal(table(settings, name), before[name], check_exact=True)


def test_unknown_entities_and_duplicates_are_counted_kept_and_reported(
    env: OutcomesEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, FlowRunFilter, FlowRunFilterName
    from prefect.client.schemas.sorting import ArtifactSort

    from flows.outcomes import outcomes

    data_dir = copied_demo(env.demo, tmp_path / "data")
    day = env.demo.dates[2]
    folder = data_dir / "labels" / JOB / f"date={day}"
    known = pl.read_parquet(folder / "labels.parquet").row(0, named=True)
    late = pl.DataFrame(
        {
            "entity_id": ["APP-GHOST-1", "APP-GHOST-2", "APP-GHOST-3", known["entity_id"]],
            "defaulted": pl.Series([1, 0, 1, 1 - known["defaulted"]], dtype=pl.Int8),
            "observed_date": [known["observed_date"]] * 3 + [known["observed_date"] + dt.timedelta(days=30)],
        }
    )
    late.write_parquet(folder / "late.parquet")
    monkeypatch.setenv("SCORING_DATA_DIR", str(data_dir))
    (returned,) = outcomes(JOB, day, day)
    assert returned["labels_unknown_entity"] == 3

    settings = Settings(data_dir=data_dir)
    (partition,) = table(settings, "outcome_partitions").filter(pl.col("partition_date") == day).to_dicts()
    assert partition["labels_unknown_entity"] == 3 and partition["labels_duplicate"] == 1
    labels = table(settings, "outcome_labels").filter(pl.col("partition_date") == day)
    ghosts = labels.filter(pl.col("entity_status") == "unknown")
    assert ghosts["entity_id"].to_list() == ["APP-GHOST-1", "APP-GHOST-2", "APP-GHOST-3"]
    (kept,) = labels.filter(pl.col("entity_id") == known["entity_id"]).to_dicts()
    assert kept["outcome"] == 1 - known["defaulted"], "the later observation wins"
    (metrics,) = table(settings, "outcome_metrics").filter(pl.col("partition_date") == day).to_dicts()
    assert metrics["labelled"] == partition["labels_matched"] == partition["predictions_labelled"]

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["realized-performance-credit-risk"])),
            sort=ArtifactSort.CREATED_DESC,
            limit=1,
        )
        named = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[f"outcomes {JOB} {day}…{day}"]))
        )
    unmatched = partition["labels_unknown_entity"] + partition["labels_quarantined"]
    assert f"Labels that match no scored entity: {unmatched} — " in artifacts[0].description
    assert "unknown entity: 3 (labels of entities a scored day never read)" in artifacts[0].description
    assert artifacts[0].flow_run_id in {r.id for r in named}, "the run is named after its job and partitions"
    page = (data_dir / "output" / JOB / "reports" / "html" / "monitoring.html").read_text()
    assert page.count('<tr class="unknown">') == 2  # the performance row and the labels row of the day


def test_labels_from_a_warehouse_table_join_the_parquet_ones(env: OutcomesEnv, tmp_path: Path) -> None:
    data_dir = copied_demo(env.demo, tmp_path / "data")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    raw = yaml.safe_load((PROJECT_ROOT / "jobs" / f"{JOB}.yaml").read_text())
    raw["monitoring"]["labels"]["table"] = "loaded_labels"
    (jobs / f"{JOB}.yaml").write_text(yaml.safe_dump(raw))
    settings = Settings(data_dir=data_dir, jobs_dir=jobs)
    spec = load_job_spec(JOB, settings)
    warehouse = DuckDBWarehouse(settings.duckdb_path)
    day = env.demo.dates[1]
    labels_dir = settings.labels_partition_dir(JOB, day.isoformat())

    with pytest.raises(LabelError, match="labels table 'loaded_labels' does not exist"):
        ingested_outcomes(warehouse, spec, labels_dir=labels_dir, partition_date=day)

    known = pl.read_parquet(labels_dir / "labels.parquet").row(0, named=True)
    with warehouse.connect() as con:
        con.execute(
            "CREATE TABLE loaded_labels (job VARCHAR, partition_date DATE, entity_id VARCHAR, defaulted SMALLINT, observed_date DATE)"
        )
        con.execute(
            "INSERT INTO loaded_labels VALUES (?, ?, ?, ?, ?), (?, ?, ?, ?, ?), (?, ?, ?, ?, ?)",
            [
                JOB,
                day,
                "APP-FROM-TABLE",
                1,
                known["observed_date"],
                JOB,
                day,
                known["entity_id"],
                known["defaulted"],
                known["observed_date"],
                "gearbox",
                day,
                "T01-ELSEWHERE",
                1,
                known["observed_date"],
            ],
        )
    outcomes = ingested_outcomes(warehouse, spec, labels_dir=labels_dir, partition_date=day)
    partition = outcomes.partition_row()
    assert partition["labels_unknown_entity"] == 1 and partition["labels_duplicate"] == 1
    sources = pl.from_arrow(outcomes.tables["outcome_labels"]).filter(pl.col("entity_id") == "APP-FROM-TABLE")["source"]
    assert sources.to_list() == ["table loaded_labels"]


def test_bad_labels_are_refused_with_the_file_and_the_values(tmp_path: Path) -> None:
    spec = load_job_spec(JOB, Settings(data_dir=tmp_path))
    folder = tmp_path / "date=2026-03-01"
    folder.mkdir()
    pl.DataFrame(
        {"entity_id": ["a", "b", "c"], "defaulted": [0, 2, 7], "observed_date": [dt.date(2027, 3, 1)] * 3}
    ).write_parquet(folder / "x.parquet")
    with pytest.raises(
        LabelError,
        match=r"x\.parquet: outcome column 'defaulted' must be 1 \(the event\) or 0 \(or true/false\); 2 row\(s\) are not, e\.g\. \[2, 7\]",
    ):
        parquet_labels(folder, spec.monitoring.labels)
    pl.DataFrame({"entity_id": ["a"], "outcome": [1], "observed_date": [dt.date(2027, 3, 1)]}).write_parquet(
        folder / "x.parquet"
    )
    with pytest.raises(LabelError, match=r"x\.parquet lacks column\(s\) \['defaulted'\]"):
        parquet_labels(folder, spec.monitoring.labels)
    assert parquet_labels(tmp_path / "date=2026-03-02", spec.monitoring.labels).is_empty()


def test_a_partition_scored_by_two_versions_is_measured_per_version(tmp_path: Path) -> None:
    spec = load_job_spec(JOB, Settings(data_dir=tmp_path))
    rng = np.random.default_rng(3)
    n = 4000
    probability = rng.uniform(0.01, 0.6, n)
    y = (rng.random(n) < probability).astype(np.int16)
    version = np.where(rng.random(n) < 0.3, "fallback-3", "4")
    predictions = pl.DataFrame(
        {
            "run_id": "run-1",
            "entity_id": [f"E{i:05d}" for i in range(n)],
            "probability": probability,
            "score": pl.Series(np.round(probability * 100), dtype=pl.Int16),
            "decision": np.where(
                probability > 0.3, "decline", np.where(probability > 0.12, "manual_review", "approve")
            ),
            "model_version": version,
        }
    )
    labels = pl.DataFrame(
        {
            "entity_id": [f"E{i:05d}" for i in range(n)] + ["NOBODY", "QUARANTINED"],
            "outcome": pl.Series([*y, 1, 0], dtype=pl.Int16),
            "observed_date": [dt.date(2027, 1, 1)] * (n + 2),
            "source": "parquet",
        }
    )
    day = dt.date(2026, 3, 1)
    baseline = pa.table({"score": pa.array([], pa.int16()), "rows": pa.array([], pa.int64())})
    quarantined = pl.DataFrame({"entity_id": ["QUARANTINED"]})
    tables = partition_outcome_tables(
        predictions, labels, baseline, spec, partition_date=day, quarantined=quarantined
    ).tables
    for name, rows in tables.items():
        assert rows.schema.equals(warehouse_dataset(name).schema), name
    metrics = {r["model_version"]: r for r in tables["outcome_metrics"].to_pylist()}
    assert set(metrics) == {"4", "fallback-3"}
    for v, got in metrics.items():
        mask = version == v
        want = independent_metrics(y[mask].astype(float), probability[mask])
        for name, value in want.items():
            assert got[name] == pytest.approx(value, rel=1e-9), (v, name)
        assert np.isnan(got["psi_score"]) and got["psi_baseline_rows"] == 0
    (partition,) = tables["outcome_partitions"].to_pylist()
    assert (
        partition["labels_unknown_entity"] == 1
        and partition["labels_quarantined"] == 1
        and partition["labels_matched"] == n
    )
    statuses = dict(
        zip(*tables["outcome_labels"].select(["entity_id", "entity_status"]).to_pydict().values(), strict=True)
    )
    assert (
        statuses["NOBODY"] == "unknown" and statuses["QUARANTINED"] == "quarantined" and statuses["E00000"] == "scored"
    )


def test_the_default_window_and_a_reversed_range(env: OutcomesEnv) -> None:
    from flows.outcomes import outcomes

    spec = load_job_spec(JOB, env.settings)
    yesterday = dt.date(2026, 3, 10)
    assert outcome_window(spec, start_date=None, end_date=None, yesterday=yesterday) == (
        yesterday - dt.timedelta(days=spec.monitoring.lookback_days - 1),
        yesterday,
    )
    assert outcome_window(spec, start_date=dt.date(2026, 3, 1), end_date=None, yesterday=yesterday) == (
        dt.date(2026, 3, 1),
        yesterday,
    )
    with pytest.raises(PartitionError, match="end date 2026-03-01 is before start date 2026-03-05"):
        outcomes(JOB, dt.date(2026, 3, 5), dt.date(2026, 3, 1))


def test_the_realized_performance_table_for_the_terminal(env: OutcomesEnv) -> None:
    history = monitoring_history(
        DuckDBWarehouse(env.settings.duckdb_path), JOB, first_date=env.unscored_date, last_date=env.demo.dates[-1]
    )
    rows = realized_performance_rows(history)
    assert [r["date"] for r in rows] == [d.isoformat() for d in env.demo.dates], "scored days only"
    console = Console(record=True, width=240)
    console.print(realized_performance_table(JOB, rows))
    text = console.export_text()
    assert "realized performance" in text and "not scored" not in text and env.demo.dates[-1].isoformat() in text


def test_labels_matching_no_scored_entity_are_counted_per_reason(env: OutcomesEnv) -> None:
    labels = table(env.settings, "outcome_labels")
    never_scored = pl.read_parquet(
        env.data_dir / "labels" / JOB / f"date={env.unscored_date}" / "labels.parquet"
    ).height
    scored_days = labels.filter(pl.col("partition_date") != env.unscored_date)
    want = {
        "not scored": never_scored,
        "quarantined": scored_days.filter(pl.col("entity_status") == "quarantined").height,
        "unknown entity": scored_days.filter(pl.col("entity_status") == "unknown").height,
    }
    assert want["not scored"] > 0, want
    history = monitoring_history(
        DuckDBWarehouse(env.settings.duckdb_path), JOB, first_date=env.unscored_date, last_date=env.demo.dates[-1]
    )
    assert unmatched_label_counts(history) == want
    # Quarantined labels count as such, on a day never scored too (every row of it quarantined).
    quarantined = {env.unscored_date: 2, env.demo.dates[1]: 5}
    partitions = history.partitions.with_columns(
        pl.col("partition_date")
        .replace_strict(quarantined, default=0, return_dtype=pl.Int64)
        .alias("labels_quarantined")
    )
    assert unmatched_label_counts(dataclasses.replace(history, partitions=partitions)) == {
        **want,
        "quarantined": want["quarantined"] + 7,
    }
    sentence = unmatched_labels_text(want)
    assert sentence.startswith(
        f"Labels that match no scored entity: {sum(want.values())} — not scored: {never_scored} ("
    )
    assert unmatched_labels_text(dict.fromkeys(want, 0)) == "Every label matches a scored entity."

    _, (performance, report) = written_monitoring_page(
        DuckDBWarehouse(env.settings.duckdb_path), env.settings, JOB, env.unscored_date, env.demo.dates[-1]
    )
    assert {r["date"] for r in performance.table} == {d.isoformat() for d in env.demo.dates}
    assert performance.description.endswith(sentence) and report.markdown.endswith(sentence)


def test_the_outcomes_run_is_named_after_its_job_and_partitions(env: OutcomesEnv) -> None:
    spec = load_job_spec(JOB, env.settings)
    assert (
        outcomes_run_name(env.settings, JOB, "2026-03-01", dt.date(2026, 3, 5))
        == f"outcomes {JOB} 2026-03-01…2026-03-05"
    )
    assert outcomes_run_name(env.settings, JOB, None, "2026-03-10") == (
        f"outcomes {JOB} {dt.date(2026, 3, 10) - dt.timedelta(days=spec.monitoring.lookback_days - 1)}…2026-03-10"
    )
    # A value the run will refuse still names the run as it was asked for.
    assert outcomes_run_name(env.settings, "all", "2026-02-30", None) == "outcomes all 2026-02-30…yesterday"


# --- the deployment -----------------------------------------------------------------------------


def test_the_outcomes_deployment_runs_daily_and_on_demand_with_typed_parameters() -> None:
    from prefect.flows import Flow
    from prefect.utilities.callables import parameter_schema

    deployments = {d["name"]: d for d in yaml.safe_load((PROJECT_ROOT / "prefect.yaml").read_text())["deployments"]}
    assert {"nightly", "backfill", "single-partition", "outcomes"} <= set(deployments)
    deployment = deployments["outcomes"]
    assert deployment["entrypoint"] == "flows/outcomes.py:outcomes"
    path, name = deployment["entrypoint"].split(":")
    flow = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), name)
    assert isinstance(flow, Flow)
    (schedule,) = deployment["schedules"]
    assert schedule == {"cron": "0 6 * * *", "timezone": "Europe/Berlin", "active": True}
    schema = parameter_schema(flow).model_dump_for_openapi()
    props = schema["properties"]
    assert set(props) == {"job", "start_date", "end_date"} and not schema.get("required")
    # Typed like the backfill form: a select with `all` preselected and plain date pickers, no None toggles.
    assert '"null"' not in json.dumps(schema), schema
    assert schema["definitions"]["JobOrAll"]["enum"][:2] == ["all", "credit_risk"] and props["job"]["default"] == "all"
    for date_param in ("start_date", "end_date"):
        assert {props[date_param][k] for k in ("type", "format")} == {"string", "date"} and "leave it empty" in props[
            date_param
        ]["description"]
    # The form sends an empty date as null: only the flow, not the server's schema check, may read it.
    assert deployment["enforce_parameter_schema"] is False


# --- the page, in a real browser, offline -------------------------------------------------------


@pytest.mark.browser
def test_the_monitoring_page_renders_offline_with_its_plots(env: OutcomesEnv, tmp_path: Path) -> None:
    page_path = env.data_dir / "output" / JOB / "reports" / "html" / "monitoring.html"
    html = page_path.read_text()
    assert "http://" not in html and "https://" not in html and "<script" not in html.lower()
    for shifted in env.demo.shifted_dates:
        assert f"<td>{shifted.isoformat()}</td><td>decision_share</td>" in html
    with offline_page(page_path) as opened:
        page = opened.page
        page.wait_for_function(
            "() => Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)", timeout=15_000
        )
        plots = page.evaluate(
            "() => Array.from(document.querySelectorAll('figure.plot')).map(f => ({name: f.dataset.plot, "
            "w: f.querySelector('img').naturalWidth, h: f.querySelector('img').naturalHeight}))"
        )
        title = page.title()
        screenshot = tmp_path / "monitoring.png"
        page.screenshot(path=str(screenshot), full_page=True)

    assert opened.errors == [] and opened.fetched_elsewhere == []
    assert title == f"Prediction monitoring {JOB} {env.unscored_date}..{env.demo.dates[-1]}"
    versions = sorted(set(env.demo.versions.values()))
    assert [p["name"] for p in plots] == [
        "decision-mix",
        "event-rate",
        *(f"calibration-{v}" for v in versions),
        "estimated-event_rate",
        "estimated-auc",
        "attribution",
        "multivariate",
    ]
    assert all(p["w"] > 100 and p["h"] > 100 for p in plots), plots
    assert screenshot.read_bytes().startswith(PNG_SIGNATURE)
    shot = imread(str(screenshot))
    assert shot.shape[0] > 900 and float(shot.std()) > 0
