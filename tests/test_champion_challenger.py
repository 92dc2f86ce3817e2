"""Champion and challenger: promotion by alias with its ledger, shadow scoring in the same pass and the
same atomic commit, the decision-flip report against an independent recomputation, and a champion
whose outputs do not change because a challenger watched.

The user-facing paths run the `score` command (forked from a process that imported it once,
scripts/forked_score.py) against the session's Prefect server; the
warehouse is the run's own DuckDB file (and PostgreSQL where the backend matters)."""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from tasks.demo.challenger import challenger_jobs_dir, registered_demo_challenger
from tasks.inference.aliases import ALIASES_FILE, inference_model_aliases
from tasks.settings import PROJECT_ROOT, Settings
from tests.conftest import DEMO_JOB, DemoEnv

sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
from forked_score import completed  # noqa: E402


@dataclass(frozen=True)
class Project:
    root: Path
    env: dict[str, str]
    settings: Settings

    def score(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
        done = completed(list(args), env=self.env, cwd=self.root, timeout=600)
        if ok:
            assert done.returncode == 0, (args, done.returncode, done.stdout[-3000:], done.stderr[-3000:])
        assert "Traceback" not in done.stdout + done.stderr, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    def table(self, sql: str) -> pl.DataFrame:
        with duckdb.connect(str(self.settings.duckdb_path), read_only=True) as con:
            return pl.from_arrow(con.sql(sql).to_arrow_table())


def _project(
    demo_env: DemoEnv, root: Path, *, champion: str, challenger: str | None, failure: str = "count"
) -> Project:
    from prefect.settings import PREFECT_API_URL

    data = root / "data"
    for part in ("raw", "labels", "models"):
        shutil.copytree(demo_env.data_dir / part, data / part, dirs_exist_ok=True)
    settings = Settings(data_dir=data)
    jobs = challenger_jobs_dir(settings, root / "jobs", champion=champion, challenger=challenger, failure=failure)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SCORING_")},
        "SCORING_DATA_DIR": str(data),
        "SCORING_JOBS_DIR": str(jobs),
        "PREFECT_API_URL": str(PREFECT_API_URL.value()),
    }
    return Project(root=root, env=env, settings=Settings(data_dir=data, jobs_dir=jobs))


@pytest.fixture(scope="module")
def shadowed(
    demo_env: DemoEnv, prefect_harness: None, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Project, Project, str, dt.date]:
    """Two copies of the demo scored on the same day: one shadowed by a challenger named by alias
    (its champion named by alias too), one without a challenger."""
    day = demo_env.plan.scoring_dates[-1]
    champion = demo_env.plan.model_version
    with_challenger = _project(
        demo_env, tmp_path_factory.mktemp("shadowed"), champion="champion", challenger="challenger"
    )
    version = registered_demo_challenger(with_challenger.settings, champion=champion)
    with_challenger.score("promote", DEMO_JOB, champion)
    with_challenger.score("promote", DEMO_JOB, version, "--alias", "challenger")
    with_challenger.score("run", DEMO_JOB, "--date", day.isoformat())
    alone = _project(demo_env, tmp_path_factory.mktemp("alone"), champion=champion, challenger=None)
    alone.score("run", DEMO_JOB, "--date", day.isoformat())
    return with_challenger, alone, version, day


def test_the_flip_report_equals_an_independent_recomputation_from_both_prediction_tables(shadowed) -> None:
    project, _, challenger, day = shadowed
    mine = project.table(f"SELECT * FROM predictions WHERE partition_date = DATE '{day}'")
    theirs = project.table(f"SELECT * FROM shadow_predictions WHERE partition_date = DATE '{day}'")
    assert mine.height > 1000 and theirs.height == mine.height
    assert set(theirs["model_version"]) == {challenger} and set(theirs["alias"]) == {"challenger"}
    assert set(theirs["run_id"]) == set(mine["run_id"]) and len(set(mine["run_id"])) == 1
    both = mine.join(theirs, on="entity_id", how="inner", suffix="_c")
    assert both.height == mine.height
    flipped = both.filter(pl.col("decision") != pl.col("decision_c"))
    assert 0 < flipped.height < mine.height

    flips = project.table(f"SELECT * FROM decision_flips WHERE partition_date = DATE '{day}'")
    expected = flipped.select(
        "entity_id",
        pl.col("decision").alias("champion_decision"),
        pl.col("decision_c").alias("challenger_decision"),
        pl.col("score").alias("champion_score"),
        pl.col("score_c").alias("challenger_score"),
        pl.col("reason_codes").alias("champion_reason_codes"),
        pl.col("reason_codes_c").alias("challenger_reason_codes"),
    ).sort("entity_id")
    assert_frame_equal(flips.select(expected.columns).sort("entity_id"), expected)
    # A flipped row into an adverse decision carries the challenger's own reasons.
    adverse = flips.filter(pl.col("challenger_decision") == "decline")
    assert adverse.height == 0 or adverse["challenger_reason_codes"].list.len().min() > 0

    comparison = project.table(f"SELECT * FROM shadow_comparison WHERE partition_date = DATE '{day}'")
    crosstab = (
        comparison.filter(pl.col("section") == "crosstab")
        .select("champion_item", "challenger_item", "rows")
        .sort(pl.all())
    )
    counted = (
        both.group_by(pl.col("decision").alias("champion_item"), pl.col("decision_c").alias("challenger_item"))
        .agg(pl.len().cast(pl.Int64).alias("rows"))
        .sort(pl.all())
    )
    assert_frame_equal(crosstab, counted)
    summary = {r["champion_item"]: r for r in comparison.filter(pl.col("section") == "summary").to_dicts()}
    assert summary["rows_flipped"]["rows"] == flipped.height and summary["rows_compared"]["rows"] == mine.height
    assert summary["rows_failed"]["rows"] == 0
    rates = {r["champion_item"]: r for r in comparison.filter(pl.col("section") == "expected_event_rate").to_dicts()}
    for decision in set(mine["decision"]):
        assert rates[decision]["champion_value"] == pytest.approx(
            mine.filter(pl.col("decision") == decision)["probability"].mean()
        )
        own = theirs.filter(pl.col("decision") == decision)
        if own.height:
            assert rates[decision]["challenger_value"] == pytest.approx(own["probability"].mean())
    delta = (both["score_c"].cast(pl.Int64) - both["score"].cast(pl.Int64)).to_numpy()
    quantiles = {
        r["champion_item"]: r["challenger_value"]
        for r in comparison.filter(pl.col("section") == "score_delta").to_dicts()
    }
    for q in (1, 5, 25, 50, 75, 95, 99):
        assert quantiles[f"p{q:02d}"] == np.quantile(delta, q / 100, method="inverted_cdf"), q
    assert quantiles["mean"] == pytest.approx(delta.mean()) and quantiles["mean_abs"] == pytest.approx(
        np.abs(delta).mean()
    )

    # The Parquet store holds the same rows as the warehouse, in the run's one version folder.
    out = project.settings.output_dir(DEMO_JOB)
    parquet = pl.from_arrow(pq.read_table(os.path.realpath(out / "shadow_predictions" / f"date={day}")))
    assert sorted(parquet["entity_id"]) == sorted(theirs["entity_id"])
    assert (
        pl.from_arrow(pq.read_table(os.path.realpath(out / "reports/decision_flips" / f"date={day}"))).height
        == flipped.height
    )


def test_the_champion_outputs_are_identical_with_and_without_a_challenger(shadowed) -> None:
    project, alone, _, day = shadowed
    for table, _key in (
        ("predictions", "entity_id"),
        ("quarantine", "entity_id"),
        ("guard_actions", "entity_id"),
        ("drift_report", "feature"),
        ("model_health", "measure"),
        ("guard_summary", "expectation"),
    ):
        sql = f"SELECT * EXCLUDE (run_id) FROM {table} WHERE partition_date = DATE '{day}'"
        a, b = project.table(sql), alone.table(sql)
        assert a.height > 0, table
        assert_frame_equal(a.sort(pl.all()), b.sort(pl.all()), check_exact=True, check_dtypes=True)
    sql = f"SELECT * EXCLUDE (run_id) FROM fallback_report WHERE partition_date = DATE '{day}' AND kind <> 'challenger_failed'"
    assert_frame_equal(project.table(sql).sort(pl.all()), alone.table(sql).sort(pl.all()))
    assert alone.table("SELECT count(*) AS n FROM shadow_predictions")["n"][0] == 0
    challenger_row = project.table("SELECT * FROM fallback_report WHERE kind = 'challenger_failed'")
    assert challenger_row["rows"].to_list() == [0]


def test_the_run_page_and_the_terminal_show_the_comparison(shadowed) -> None:
    project, alone, challenger, day = shadowed
    flipped = project.table("SELECT count(*) AS n FROM decision_flips")["n"][0]
    page = (project.settings.output_dir(DEMO_JOB) / "reports" / "html" / f"date={day}.html").read_text()
    assert "Champion and challenger" in page and f"would flip <b>{flipped}</b> decisions" in page
    assert (
        "Champion and challenger"
        not in (alone.settings.output_dir(DEMO_JOB) / "reports" / "html" / f"date={day}.html").read_text()
    )
    aliases = project.score("aliases", DEMO_JOB).stdout
    assert "shadowed by challenger" in aliases and "model_aliases ledger" in aliases
    project.score("card", DEMO_JOB)
    card = (project.settings.output_dir(DEMO_JOB) / "model_card.md").read_text()
    assert "shadowed by challenger challenger" in card and f"challenger → {challenger}" in card


def test_when_labels_land_both_models_are_compared_on_the_same_rows(shadowed) -> None:
    from scipy.stats import mannwhitneyu

    project, _, challenger, day = shadowed
    done = project.score("outcomes", DEMO_JOB, "--start", day.isoformat(), "--end", day.isoformat())
    line = next(x for x in done.stdout.splitlines() if x.startswith(f"challenger: {day}: champion"))
    assert "keep the champion" in line or "promote the challenger" in line or "mixed" in line
    rows = {r["measure"]: r for r in project.table("SELECT * FROM shadow_outcomes").to_dicts()}
    assert set(rows) == {"auc", "brier", "ece"}
    labels = pl.read_parquet(project.settings.labels_partition_dir(DEMO_JOB, day.isoformat()) / "*.parquet")
    outcome = "defaulted"  # jobs/credit_risk.yaml monitoring.labels.outcome_column
    mine = project.table(f"SELECT entity_id, probability FROM predictions WHERE partition_date = DATE '{day}'")
    theirs = project.table(
        f"SELECT entity_id, probability AS challenger FROM shadow_predictions WHERE partition_date = DATE '{day}'"
    )
    joined = mine.join(theirs, on="entity_id").join(
        labels.select(pl.col("entity_id"), pl.col(outcome).alias("y")), on="entity_id"
    )
    y = joined["y"].to_numpy()
    for column, side in (("probability", "champion"), ("challenger", "challenger")):
        p = joined[column].to_numpy()
        u = mannwhitneyu(p[y == 1], p[y == 0]).statistic
        assert rows["auc"][side] == pytest.approx(u / ((y == 1).sum() * (y == 0).sum()), abs=1e-12), side
        assert rows["brier"][side] == pytest.approx(float(np.mean((p - y) ** 2)), abs=1e-12), side
    assert rows["auc"]["rows"] == joined.height and rows["auc"]["events"] == int(y.sum())
    assert rows["auc"]["delta_low"] <= rows["auc"]["delta"] <= rows["auc"]["delta_high"]
    assert rows["auc"]["challenger_version"] == challenger and rows["auc"]["recommendation"]
    # Recomputed from the same rows, the comparison is the same (its bootstrap is seeded).
    project.score("outcomes", DEMO_JOB, "--start", day.isoformat(), "--end", day.isoformat())
    assert {r["measure"]: r for r in project.table("SELECT * FROM shadow_outcomes").to_dicts()} == rows
    page = (project.settings.output_dir(DEMO_JOB) / "reports" / "html" / "monitoring.html").read_text()
    assert "Champion and challenger on labels" in page and f"pooled {day}..{day}" in page
    # Beyond its cap the pooled comparison reads a sample of entities by the md5 of their id: the same rows every time.
    import hashlib

    from tasks.sinks.duckdb_warehouse import DuckDBWarehouse

    warehouse = DuckDBWarehouse(project.settings.duckdb_path)
    everything, total = warehouse.labelled_shadow_rows(DEMO_JOB, first_date=day, last_date=day)
    assert total == everything.num_rows == joined.height
    sample, counted = warehouse.labelled_shadow_rows(DEMO_JOB, first_date=day, last_date=day, max_rows=total // 4)
    cut = f"{65_536 * (total // 4) // total:04x}"
    expected = sorted(i for i in joined["entity_id"] if hashlib.md5(i.encode()).hexdigest()[:4] < cut)
    assert counted == total and sample.column("entity_id").to_pylist() == expected and 0 < len(expected) < total / 2
    # Pooled over the range (one partition here), the comparison is the partition's own.
    pooled = next(x for x in done.stdout.splitlines() if x.startswith("challenger: pooled over 1 partition(s)"))
    assert line.split(" labelled rows: ", 1)[1] == pooled.split(" labelled rows: ", 1)[1]


def test_promote_rollback_and_refusals_are_recorded_in_the_alias_ledger(shadowed) -> None:
    project, _, challenger, day = shadowed
    registry = project.settings.model_registry_dir(DEMO_JOB)
    champion = inference_model_aliases(registry)["champion"]
    moved = project.score("promote", DEMO_JOB, "challenger", "--by", "ana", "--note", "beat the champion for 30 nights")
    assert f"alias champion {champion} → {challenger}" in moved.stdout
    assert inference_model_aliases(registry) == {"champion": challenger, "challenger": challenger}
    back = project.score("promote", DEMO_JOB, "--rollback", "--by", "ben")
    assert f"alias champion {challenger} → {champion}" in back.stdout
    ledger = project.table("SELECT * FROM model_aliases WHERE alias = 'champion' ORDER BY changed_at")
    assert ledger.select("from_version", "to_version", "changed_by").rows()[-2:] == [
        (champion, challenger, "ana"),
        (challenger, champion, "ben"),
    ]
    assert (
        ledger["note"][-2] == "beat the champion for 30 nights"
        and ledger["note"][-1] == f"rolled back from {challenger}"
    )
    assert (ledger["job"] == DEMO_JOB).all()

    # Refused: a version without a registration report, a version the job does not validate with, a bad alias name.
    shutil.copytree(registry / challenger, registry / "77")
    (registry / "77" / "registration.json").unlink()
    refused = project.score("promote", DEMO_JOB, "77", ok=False)
    assert refused.returncode == 2 and "error:" in refused.stdout and "no registration report" in refused.stdout
    meta = registry / "77" / "metadata.json"
    shutil.copy(registry / challenger / "registration.json", registry / "77" / "registration.json")
    meta.write_text(
        meta.read_text()
        .replace('"version": "' + challenger + '"', '"version": "77"')
        .replace('"feature_version": "', '"feature_version": "other-', 1)
    )
    refused = project.score("promote", DEMO_JOB, "77", ok=False)
    assert refused.returncode == 2 and "feature_version" in refused.stdout, refused.stdout
    for bad in ("latest", champion, "Champion"):
        refused = project.score("promote", DEMO_JOB, challenger, "--alias", bad, ok=False)
        assert refused.returncode == 2 and "alias" in refused.stdout, (bad, refused.stdout)
    unchanged = project.score("promote", DEMO_JOB, champion, ok=False)
    assert unchanged.returncode == 2 and "already points at" in unchanged.stdout
    assert inference_model_aliases(registry)["champion"] == champion
    assert (
        project.table("SELECT count(*) AS n FROM model_aliases")["n"][0] == ledger.height + 1
    )  # + the challenger's creation
    shutil.rmtree(registry / "77")
    neither = project.score("promote", DEMO_JOB, ok=False)
    assert neither.returncode == 2 and neither.stdout.startswith("error: give a VERSION")

    # Promoting the challenger makes both aliases one version: said at once. Removing an alias the spec names is too.
    same = project.score("promote", DEMO_JOB, "challenger")
    assert "are both version" in same.stdout
    project.score("promote", DEMO_JOB, "--rollback")
    moved = project.score("aliases", DEMO_JOB, "--remove", "challenger", "--by", "cy")
    assert "alias challenger" in moved.stdout and "(removed)" in moved.stdout
    assert "model.challenger names 'challenger', which is neither a version nor an alias" in moved.stdout
    assert project.table(
        "SELECT to_version, changed_by FROM model_aliases ORDER BY changed_at DESC LIMIT 1"
    ).rows() == [(None, "cy")]
    project.score("promote", DEMO_JOB, challenger, "--alias", "challenger")
    assert inference_model_aliases(registry) == {"champion": champion, "challenger": challenger}


def test_a_night_scored_by_the_wrong_champion_is_rescored_by_backfill_with_the_alias_in_force(shadowed) -> None:
    project, _, challenger, day = shadowed
    registry = project.settings.model_registry_dir(DEMO_JOB)
    champion = inference_model_aliases(registry)["champion"]
    project.score("promote", DEMO_JOB, challenger, "--by", "ops")
    project.score("backfill", DEMO_JOB, "--start", day.isoformat(), "--end", day.isoformat())
    assert set(
        project.table(f"SELECT model_version FROM predictions WHERE partition_date = DATE '{day}'")["model_version"]
    ) == {challenger}
    project.score("promote", DEMO_JOB, "--rollback")
    project.score("backfill", DEMO_JOB, "--start", day.isoformat(), "--end", day.isoformat())
    scored = project.table(f"SELECT model_version, run_id FROM predictions WHERE partition_date = DATE '{day}'")
    assert set(scored["model_version"]) == {champion}
    runs = project.table(
        f"SELECT run_id, model_version, status FROM runs WHERE partition_date = DATE '{day}' ORDER BY started_at"
    )
    assert runs.filter(pl.col("status") == "succeeded")["model_version"].to_list()[-2:] == [challenger, champion]
    assert set(
        project.table(f"SELECT run_id FROM shadow_predictions WHERE partition_date = DATE '{day}'")["run_id"]
    ) == set(scored["run_id"])


def test_a_challenger_that_cannot_load_is_counted_or_fails_the_run_when_the_spec_says_so(
    demo_env: DemoEnv, prefect_harness: None, tmp_path: Path
) -> None:
    day = demo_env.plan.scoring_dates[-1]
    counted = _project(demo_env, tmp_path / "count", champion=demo_env.plan.model_version, challenger="missing")
    checked = counted.score("validate", DEMO_JOB)
    assert "challenger missing cannot shadow the run" in checked.stdout
    done = counted.score("run", DEMO_JOB, "--date", day.isoformat())
    # No "0 of 0 decisions would flip", which reads as agreement: the line says nothing was compared, and how many rows.
    scored_rows = counted.table("SELECT count(*) AS n FROM predictions")["n"][0]
    assert f"challenger not loaded: it could score none of {scored_rows:,} rows, so nothing was compared" in " ".join(
        done.stdout.split()
    )
    assert "would flip" not in done.stdout
    fallback = counted.table("SELECT * FROM fallback_report WHERE kind = 'challenger_failed'").to_dicts()
    scored = counted.table("SELECT count(*) AS n FROM predictions")["n"][0]
    assert [r["rows"] for r in fallback] == [scored] and "missing" in fallback[0]["detail"]
    assert counted.table("SELECT count(*) AS n FROM shadow_predictions")["n"][0] == 0

    failing = _project(
        demo_env, tmp_path / "fail", champion=demo_env.plan.model_version, challenger="missing", failure="fail"
    )
    refused = failing.score("run", DEMO_JOB, "--date", day.isoformat(), ok=False)
    assert refused.returncode == 2 and "model.challenger" in refused.stdout
    assert not failing.settings.duckdb_path.exists() or failing.table("SELECT count(*) AS n FROM runs")["n"][0] == 0
    assert not (failing.settings.output_dir(DEMO_JOB) / "predictions").exists()


def test_an_alias_resolves_to_its_version_and_its_file_stays_whole(tmp_path: Path) -> None:
    from tasks.errors import ModelArtifactError
    from tasks.inference.aliases import inference_alias_history, inference_moved_alias
    from tasks.inference.registry import inference_resolved_version

    registry = tmp_path / "credit_risk"
    for v in ("1", "2", "10"):
        (registry / v).mkdir(parents=True)
        (registry / v / "metadata.json").write_text("{}")
    versions = ["1", "2", "10"]
    assert inference_resolved_version(registry, "latest") == "10"
    inference_moved_alias(registry, "champion", "2", versions=versions, changed_by="a")
    inference_moved_alias(registry, "champion", "10", versions=versions, changed_by="b")
    assert inference_resolved_version(registry, "champion") == "10" and inference_resolved_version(registry, "2") == "2"
    assert [(h["from_version"], h["to_version"], h["changed_by"]) for h in inference_alias_history(registry)] == [
        (None, "2", "a"),
        ("2", "10", "b"),
    ]
    with pytest.raises(ModelArtifactError, match="no version '3'"):
        inference_moved_alias(registry, "champion", "3", versions=versions, changed_by="c")
    # Nothing but the one file: the temporary file of the atomic write is gone.
    assert sorted(p.name for p in registry.iterdir() if p.is_file()) == [ALIASES_FILE]
    (registry / ALIASES_FILE).write_text("{not json")
    with pytest.raises(ModelArtifactError, match="is not JSON"):
        inference_resolved_version(registry, "champion")


def test_the_alias_ledger_on_both_warehouses(any_warehouse) -> None:
    moved = dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.UTC)
    any_warehouse.record_alias_change(
        {
            "model_name": "credit_risk",
            "alias": "champion",
            "from_version": None,
            "to_version": "1",
            "changed_by": "a",
            "changed_at": moved,
            "job": "credit_risk",
            "note": "",
        }
    )
    any_warehouse.record_alias_change(
        {
            "model_name": "credit_risk",
            "alias": "champion",
            "from_version": "1",
            "to_version": "2",
            "changed_by": "b",
            "changed_at": moved + dt.timedelta(hours=1),
            "job": "credit_risk",
            "note": "better AUC",
        }
    )
    rows = any_warehouse.alias_changes("credit_risk")
    assert [(r["from_version"], r["to_version"], r["changed_by"], r["note"]) for r in rows] == [
        (None, "1", "a", ""),
        ("1", "2", "b", "better AUC"),
    ]
    assert rows[0]["changed_at"] == moved
    assert any_warehouse.alias_changes("other") == []


def _subset_challenger(settings: Settings, champion: str) -> tuple[str, tuple[str, ...]]:
    """A challenger trained on the champion's hold-out rows' inputs without two features, in reversed order."""
    import json

    from tasks.demo.training import fitted_booster
    from tasks.jobs.registration import job_model_inputs, registered_model_version

    registry = settings.model_registry_dir(DEMO_JOB)
    meta = json.loads((registry / champion / "metadata.json").read_text())
    first = dt.date.fromisoformat(meta["training"]["window_start"])
    raw = pl.read_parquet(settings.raw_partition_dir(DEMO_JOB, first.isoformat()) / "*.parquet")
    labels = pl.read_parquet(settings.labels_partition_dir(DEMO_JOB, first.isoformat()) / "*.parquet")
    inputs = job_model_inputs(
        DEMO_JOB, raw.join(labels.select("entity_id", "defaulted"), on="entity_id"), settings=settings, labelled=True
    )
    frame = inputs.frame()
    names = tuple(reversed(meta["features"][2:]))
    x, y = frame.select(names).to_numpy().astype(np.float32), frame["outcome"].to_numpy().astype(np.float32)
    booster = fitted_booster(x[::2], y[::2], names=names, seed=3)
    model = settings.data_dir / "subset.ubj"
    booster.save_model(str(model))
    report = registered_model_version(
        model,
        registry_dir=registry,
        version="50",
        feature_version=meta["feature_version"],
        features=names,
        holdout_features=x[1::2],
        holdout_outcomes=y[1::2],
    )
    return report.version, names


def test_the_split_pass_and_a_subset_challenger_stage_what_the_one_pass_does(demo_env: DemoEnv, tmp_path: Path) -> None:
    """A challenger taking a subset of the job's inputs in its own order is handed its columns; a unit cut
    in two at the layer boundary stages the same shadow predictions and flips as its one pass."""
    import tasks.scoring.unit_pass as unit_pass
    from tasks.scoring.prepared import prepared_job
    from tasks.scoring.units import planned_work_units
    from tasks.sinks.parquet_store import output_dirs, staging_dir

    day = demo_env.plan.scoring_dates[-1]
    project = _project(demo_env, tmp_path, champion=demo_env.plan.model_version, challenger=None)
    version, names = _subset_challenger(project.settings, demo_env.plan.model_version)
    project = _project(demo_env, tmp_path, champion=demo_env.plan.model_version, challenger=version)
    prepared = prepared_job(DEMO_JOB, day, project.settings)
    assert prepared.challenger is not None and prepared.challenger_error is None
    assert [prepared.model_features[i] for i in prepared.challenger_columns] == list(names)
    dirs = output_dirs(project.settings, DEMO_JOB)
    args = {"partition_date": day, "dirs": dirs}
    one = [
        unit_pass.scored_unit(prepared, u, run_id="one", chunk_rows=500, **args)
        for u in planned_work_units(prepared, run_id="one", chunk_rows=500, dirs=dirs)
    ]
    inferred = [
        unit_pass.inferred_unit(prepared, u, run_id="two", chunk_rows=500, **args)
        for u in planned_work_units(prepared, run_id="two", chunk_rows=500, dirs=dirs)
    ]
    assert sorted(staging_dir(dirs.inference_handoff, "two").glob("chunk-*-shadow.arrow"))
    two = [unit_pass.predicted_unit(prepared.prediction_plan, u, run_id="two", **args) for u in inferred]
    assert not list(staging_dir(dirs.inference_handoff, "two").glob("*.arrow"))
    for dataset in ("shadow_predictions", "decision_flips"):
        a, b = (
            pl.read_parquet(staging_dir(getattr(dirs, dataset), run) / "*.parquet").drop("run_id").sort("entity_id")
            for run in ("one", "two")
        )
        assert a.height > 0, dataset
        assert_frame_equal(a, b)
    shadow = pl.read_parquet(staging_dir(dirs.shadow_predictions, "one") / "*.parquet")
    assert set(shadow["model_version"]) == {version} and set(shadow["alias"]) == {version}
    assert (
        sum(int(u.prediction.shadow.rows.sum()) for u in one)
        == sum(int(u.shadow.rows.sum()) for u in two)
        == shadow.height
    )

    # A worker that resolved an alias after it moved refuses to score the run's units with other models.
    from tasks.errors import ModelArtifactError
    from tasks.runs.ticket import pinned_versions, run_ticket

    ticket = run_ticket(prepared, run_id="one", partition_date=day, chunk_rows=500)
    assert ticket.challenger_version == version
    pinned_versions(prepared, ticket)
    with pytest.raises(ModelArtifactError, match="an alias moved during the run"):
        pinned_versions(prepared, ticket.model_copy(update={"challenger_version": "1"}))


def test_a_challenger_failing_on_a_chunk_is_counted_and_the_champion_scores_it(
    demo_env: DemoEnv, tmp_path: Path, monkeypatch
) -> None:
    from tasks.errors import InferenceFailure
    from tasks.scoring.prepared import prepared_job
    from tasks.scoring.summary import score_partition_chunks
    from tasks.sinks.parquet_store import output_dirs, staging_dir

    day = demo_env.plan.scoring_dates[-1]
    project = _project(demo_env, tmp_path / "p", champion=demo_env.plan.model_version, challenger=None)
    version = registered_demo_challenger(project.settings, champion=demo_env.plan.model_version)
    results = {}
    for failure in ("count", "fail"):
        project = _project(
            demo_env, tmp_path / "p", champion=demo_env.plan.model_version, challenger=version, failure=failure
        )
        prepared = prepared_job(DEMO_JOB, day, project.settings)
        real = prepared.challenger.engine.inference_outputs

        def broken(batch, real=real):
            if batch.chunk_id == 1:
                raise RuntimeError("the challenger's device fell over")
            return real(batch)

        monkeypatch.setattr(prepared.challenger.engine, "inference_outputs", broken)
        dirs = output_dirs(project.settings, DEMO_JOB)
        if failure == "fail":
            with pytest.raises(
                InferenceFailure,
                match=f"challenger {version} .* failed on chunk 1 .*RuntimeError: the challenger's device fell over",
            ):
                score_partition_chunks(prepared, run_id="fail", partition_date=day, chunk_rows=1000, dirs=dirs)
            continue
        summary = score_partition_chunks(prepared, run_id="count", partition_date=day, chunk_rows=1000, dirs=dirs)
        results[failure] = summary
    summary = results["count"]
    row = next(r for r in summary.fallback_report if r["kind"] == "challenger_failed")
    shadowed = pl.read_parquet(staging_dir(dirs.shadow_predictions, "count") / "*.parquet").height
    assert (
        row["rows"] == summary.rows_scored - shadowed > 0
        and "chunk 1" in row["detail"]
        and "fell over" in row["detail"]
    )
    assert pl.read_parquet(staging_dir(dirs.predictions, "count") / "*.parquet").height == summary.rows_scored
    failed = next(r for r in summary.shadow_comparison if r["champion_item"] == "rows_failed")
    assert failed["rows"] == row["rows"]


def _fixed_batch_onnx_challenger(settings: Settings, champion: str, version: str, batch: int) -> None:
    """A challenger version exported with a fixed batch size (a common export mistake: no dynamic
    axis): ONNX Runtime refuses every chunk of another row count. Metadata as the champion's."""
    import hashlib
    import json

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    registry = settings.model_registry_dir(DEMO_JOB)
    metadata = json.loads((registry / champion / "metadata.json").read_text())
    n = len(metadata["features"])
    weights = numpy_helper.from_array(np.full((n, 1), 0.01, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["margin"])],
        "fixed_batch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, n])],
        [helper.make_tensor_value_info("margin", TensorProto.FLOAT, [batch, 1])],
        initializer=[weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    target = registry / version
    target.mkdir()
    (target / "model.onnx").write_bytes(model.SerializeToString())
    metadata.update(
        version=version,
        framework="onnx",
        model_file="model.onnx",
        sha256=hashlib.sha256((target / "model.onnx").read_bytes()).hexdigest(),
    )
    (target / "metadata.json").write_text(json.dumps(metadata))


def test_a_challenger_failing_on_a_chunk_fails_the_run_with_one_line_when_the_spec_says_so(
    demo_env: DemoEnv, prefect_harness: None, tmp_path: Path
) -> None:
    """`challenger_failure: fail` and an ONNX challenger that ONNX Runtime refuses on a chunk: exit 2 (the
    challenger model is the broken input), one line naming it and the chunk, the ledger row failed with
    it, and the partition's previous outputs (scored with `count`, the same challenger counted) untouched."""
    day = demo_env.plan.scoring_dates[-1]
    champion = demo_env.plan.model_version
    counted = _project(demo_env, tmp_path, champion=champion, challenger="onnx-fixed", failure="count")
    _fixed_batch_onnx_challenger(counted.settings, champion, "onnx-fixed", batch=1)
    done = counted.score("run", DEMO_JOB, "--date", day.isoformat())
    assert "challenger onnx-fixed: 0 of 0 decisions would flip" in done.stdout and "it failed on" in done.stdout, (
        done.stdout
    )
    output = counted.settings.output_dir(DEMO_JOB)
    before = {p: p.read_bytes() for p in sorted(output.rglob("*.parquet"))}
    published = counted.table("SELECT count(*) AS n FROM predictions")["n"][0]
    assert published > 0 and before

    failing = _project(demo_env, tmp_path, champion=champion, challenger="onnx-fixed", failure="fail")
    refused = failing.score("run", DEMO_JOB, "--date", day.isoformat(), ok=False)
    output_text = refused.stdout + refused.stderr
    assert refused.returncode == 2, output_text[-3000:]
    errors = [line for line in output_text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output_text[-3000:]
    assert re.search(
        r"challenger onnx-fixed \(model credit_risk onnx-fixed\) failed on chunk \d+ of credit_risk", errors[0]
    ), errors[0]
    assert "INVALID_ARGUMENT" in errors[0] and "model.challenger_failure is fail" in errors[0], errors[0]
    runs = failing.table("SELECT status, error FROM runs ORDER BY started_at").to_dicts()
    assert [r["status"] for r in runs] == ["succeeded", "failed"], runs
    assert runs[-1]["error"] == "InferenceFailure: " + errors[0].removeprefix("error: "), (runs[-1]["error"], errors[0])
    assert {p: p.read_bytes() for p in sorted(output.rglob("*.parquet"))} == before
    assert failing.table("SELECT count(*) AS n FROM predictions")["n"][0] == published
