"""One pass per chunk: a run loads each model once, decides each chunk once, and the prediction side
of a unit cut in two (inference on workers of its own) builds no inference engine."""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter

import polars as pl
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

import tasks.inference.engine as engine_module
import tasks.scoring.unit_pass as unit_pass
from tasks.monitoring.decisions import merged_prediction_groups
from tasks.scoring.prepared import prepared_job
from tasks.scoring.units import planned_work_units
from tasks.settings import Settings
from tasks.sinks.parquet_store import output_dirs, staging_dir
from tests.conftest import DEMO_JOB, DemoEnv


@pytest.fixture
def day(demo_env: DemoEnv) -> dt.date:
    return demo_env.plan.scoring_dates[-1]


def _counted_engines(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, str]]:
    """Every inference engine built from now on, counted by (model, version); the real engines are built."""
    built: Counter[tuple[str, str]] = Counter()
    real = engine_module.inference_engine

    def counted(artifact, **kwargs):
        built[(artifact.metadata.name, artifact.metadata.version)] += 1
        return real(artifact, **kwargs)

    monkeypatch.setattr(engine_module, "inference_engine", counted)
    return built


def _counted_decisions(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    decided: Counter[int] = Counter()
    real = unit_pass.predict_decided_chunk

    def counted(output, *args, **kwargs):
        decided[output.chunk_id] += 1
        return real(output, *args, **kwargs)

    monkeypatch.setattr(unit_pass, "predict_decided_chunk", counted)
    return decided


@pytest.mark.usefixtures("prefect_harness")
def test_score_run_loads_each_model_once_and_decides_each_chunk_once(
    fresh_data: Settings, prefect_logging: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli.score import app

    built, decided = _counted_engines(monkeypatch), _counted_decisions(monkeypatch)
    day = "2026-03-10"
    result = CliRunner().invoke(app, ["run", DEMO_JOB, "--date", day, "--chunk-rows", "700"])
    assert result.exit_code == 0, (result.output, result.exception)
    # The command line's check of the job and the flow's run share one load of the model.
    assert built and set(built.values()) == {1}, built
    files = sorted((fresh_data.data_dir / "output" / DEMO_JOB / "predictions" / f"date={day}").glob("*.parquet"))
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    assert sum(decided.values()) == len(decided) >= rows // 700, decided


def test_prediction_side_builds_no_engine_and_matches_the_one_pass(
    demo_env: DemoEnv, fresh_data: Settings, day: dt.date, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unit cut in two at the layer boundary stages the same predictions as its one pass; the
    prediction half runs from the plan alone, with every engine build made to fail."""
    prepared = prepared_job(DEMO_JOB, day, fresh_data)
    dirs = output_dirs(fresh_data, DEMO_JOB)
    args = {"partition_date": day, "dirs": dirs}
    one_pass = [
        unit_pass.scored_unit(prepared, unit, run_id="one-pass", chunk_rows=400, **args)
        for unit in planned_work_units(prepared, run_id="one-pass", chunk_rows=400, dirs=dirs)
    ]
    inferred = [
        unit_pass.inferred_unit(prepared, unit, run_id="two-halves", chunk_rows=400, **args)
        for unit in planned_work_units(prepared, run_id="two-halves", chunk_rows=400, dirs=dirs)
    ]
    handoffs = sorted(staging_dir(dirs.inference_handoff, "two-halves").glob("chunk-*.arrow"))
    assert len(handoffs) == sum(len(u.chunk_ids) for u in inferred) > 1

    def no_engine(*_args, **_kwargs):
        raise AssertionError("the prediction side built an inference engine")

    monkeypatch.setattr(engine_module, "inference_engine", no_engine)
    decided = _counted_decisions(monkeypatch)
    predicted = [unit_pass.predicted_unit(prepared.prediction_plan, u, run_id="two-halves", **args) for u in inferred]
    assert not decided, "the prediction half decided a chunk again"
    assert not list(staging_dir(dirs.inference_handoff, "two-halves").glob("chunk-*.arrow"))

    def staged(run_id: str) -> pl.DataFrame:
        frame = pl.read_parquet(staging_dir(dirs.predictions, run_id) / "*.parquet")
        return frame.drop("run_id").sort("entity_id")

    assert_frame_equal(staged("two-halves"), staged("one-pass"))
    for whole, half in zip(one_pass, predicted, strict=True):
        assert (half.rows_scored, half.rows_with_reasons, half.decisions, half.rules) == (
            whole.prediction.rows_scored,
            whole.prediction.rows_with_reasons,
            whole.prediction.decisions,
            whole.prediction.rules,
        )
        assert_frame_equal(
            merged_prediction_groups(half.decision_groups).drop("run_id"),
            merged_prediction_groups(whole.prediction.decision_groups).drop("run_id"),
        )


def test_units_planned_for_the_workers_score_the_rows_of_one_chunk_units(fresh_data: Settings, day: dt.date) -> None:
    """Planned for two workers, the partition is cut into at most UNITS_PER_WORKER units a worker, of whole row
    groups in partition order; their chunks have the ids and rows of one-chunk units', and the staged predictions
    and decision counts are the same."""
    from tasks.scoring.units import UNITS_PER_WORKER, unit_chunks

    raw = fresh_data.raw_partition_dir(DEMO_JOB, day.isoformat())
    (path,) = sorted(raw.glob("*.parquet"))
    pq.write_table(pq.read_table(path), path, row_group_size=100)
    groups = pq.read_metadata(path).num_row_groups
    prepared = prepared_job(DEMO_JOB, day, fresh_data)
    dirs = output_dirs(fresh_data, DEMO_JOB)
    many = planned_work_units(prepared, run_id="many", chunk_rows=100, dirs=dirs)
    few = planned_work_units(prepared, run_id="few", chunk_rows=100, dirs=dirs, workers=2)
    assert len(many) == groups > 2 * UNITS_PER_WORKER
    rows = sum(unit.rows for unit in many)
    per_unit = math.ceil(math.ceil(rows / (2 * UNITS_PER_WORKER)) / 100)  # whole 100-row groups of >= rows / 8
    assert [unit.rows for unit in few[:-1]] == [per_unit * 100] * (len(few) - 1) and len(few) <= 2 * UNITS_PER_WORKER
    assert [g for unit in few for g in unit.row_groups] == [g for unit in many for g in unit.row_groups]
    assert [unit.first_row for unit in few] == [sum(unit.rows for unit in few[:i]) for i in range(len(few))]

    def chunks(units: list) -> list[tuple[int, list]]:
        return [(i, t.column(0).to_pylist()) for unit in units for i, t in unit_chunks(unit, 100)]

    assert chunks(few) == chunks(many)
    args = {"partition_date": day, "chunk_rows": 100, "dirs": dirs}
    scored = {
        run_id: [unit_pass.scored_unit(prepared, unit, run_id=run_id, **args) for unit in units]
        for run_id, units in (("many", many), ("few", few))
    }

    def staged(run_id: str) -> pl.DataFrame:
        return pl.read_parquet(staging_dir(dirs.predictions, run_id) / "*.parquet").drop("run_id").sort("entity_id")

    assert_frame_equal(staged("few"), staged("many"))
    decisions = {run_id: sum((u.prediction.decisions for u in units), Counter()) for run_id, units in scored.items()}
    assert decisions["few"] == decisions["many"] and sum(decisions["few"].values()) > 0
