"""Reason codes of a real run agree with XGBoost's own TreeSHAP ranking, computed here independently."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import polars as pl
import pytest
import xgboost as xgb

from tasks.features import load_feature_module
from tasks.guards import guarded_chunk, load_guard_suite
from tasks.inference.registry import inference_model_artifact
from tasks.jobspec import load_job_spec
from tasks.settings import Settings

from conftest import DEMO_JOB, DemoEnv

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_reason_codes_are_xgboosts_top_positive_contributions(demo_env: DemoEnv, fresh_data: Settings) -> None:
    from flows.score_partition import score_partition

    day = demo_env.plan.scoring_dates[1]
    score_partition(DEMO_JOB, day)
    with duckdb.connect(str(fresh_data.duckdb_path), read_only=True) as con:
        preds = pl.from_arrow(con.sql("SELECT * FROM predictions WHERE partition_date = ?", params=[day]).to_arrow_table())
        inference, rows_with_reasons = con.execute(
            "SELECT inference, rows_with_reasons FROM runs WHERE partition_date = ? AND status = 'succeeded'", [day]
        ).fetchone()
    spec = load_job_spec(DEMO_JOB, fresh_data)
    fm = load_feature_module(spec.feature_module)
    raw = pl.read_parquet(fresh_data.raw_partition_dir(DEMO_JOB, day.isoformat()) / "*.parquet")
    scorable = guarded_chunk(raw, load_guard_suite(fresh_data.expectations_dir / spec.expectation_suite), entity_column="entity_id").scorable
    meta = inference_model_artifact(fresh_data.model_registry_dir(DEMO_JOB), preds["model_version"][0])
    booster = xgb.Booster(model_file=str(meta.model_path))
    contribs = booster.predict(xgb.DMatrix(fm.feature_matrix(scorable), feature_names=list(fm.FEATURES)), pred_contribs=True)[:, :-1]
    position = {e: i for i, e in enumerate(scorable["entity_id"].to_list())}
    code_of = {f: spec.prediction.reasons.codes[f].code for f in fm.FEATURES}

    explained = preds.filter(pl.col("decision").is_in(spec.prediction.reasons.for_decisions))
    assert explained.height > 100
    k = spec.prediction.reasons.top_k
    for entity, codes in zip(explained["entity_id"], explained["reason_codes"], strict=True):
        row = contribs[position[entity]]
        order = np.argsort(-row, kind="stable")
        expected = [code_of[fm.FEATURES[j]] for j in order[:k] if row[j] > 0]
        assert codes.to_list() == (expected or [spec.prediction.reasons.no_adverse_code]), entity
    # The table kernel explained them all (checked against XGBoost at load), and the ledger says so.
    assert json.loads(inference)["reasons_explained_by"] == {"table_treeshap": rows_with_reasons}
    assert rows_with_reasons == explained.height
    # Reasons go only to the configured decisions.
    others = preds.filter(~pl.col("decision").is_in(spec.prediction.reasons.for_decisions))
    assert others.height > 0 and (others["reason_codes"].list.len() == 0).all()
