"""Reason codes of a real run agree with XGBoost's own TreeSHAP ranking, computed here independently."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import polars as pl
import pytest
import xgboost as xgb
from conftest import DEMO_JOB, DemoEnv

from tasks.features import load_feature_module
from tasks.guards import guarded_chunk, load_guard_suite
from tasks.inference.registry import inference_model_artifact
from tasks.jobspec import load_job_spec
from tasks.prediction.config import ReasonCode
from tasks.settings import Settings

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _spec_text(reason: ReasonCode, raw: object, median: np.float32) -> str:
    """The text the spec gives a raw input value: read off the spec, on the raw column (category
    names, not codes), at the model input's float32 precision."""
    if raw is None:
        return reason.text
    if reason.by_value is not None:
        return reason.by_value.get(str(raw) if isinstance(raw, str) else f"{raw:g}", reason.text)
    value = np.float32(raw)
    if reason.by_band is not None:
        return reason.by_band.low if value <= median else reason.by_band.high
    if reason.by_cut is not None:
        return reason.by_cut.texts[sum(value >= np.float32(c) for c in reason.by_cut.cuts)]
    return reason.text


def test_reason_codes_are_xgboosts_top_positive_contributions(demo_env: DemoEnv, fresh_data: Settings) -> None:
    from flows.score_partition import score_partition

    day = demo_env.plan.scoring_dates[1]
    score_partition(DEMO_JOB, day)
    with duckdb.connect(str(fresh_data.duckdb_path), read_only=True) as con:
        preds = pl.from_arrow(
            con.sql("SELECT * FROM predictions WHERE partition_date = ?", params=[day]).to_arrow_table()
        )
        inference, rows_with_reasons, warnings = con.execute(
            "SELECT inference, rows_with_reasons, warnings FROM runs WHERE partition_date = ? AND status = 'succeeded'",
            [day],
        ).fetchall()[0]
        drift = pl.from_arrow(con.sql("SELECT * FROM drift_report WHERE baseline = 'reference'").to_arrow_table())
    # The run page (categorical features drawn as bars) rendered, and the categorical features were binned by value.
    assert json.loads(warnings) == []
    kinds = dict(zip(drift["feature"], drift["kind"], strict=True))
    assert kinds["home_ownership"] == kinds["loan_purpose"] == "categorical" and kinds["annual_income"] == "numeric"
    spec = load_job_spec(DEMO_JOB, fresh_data)
    fm = load_feature_module(spec.feature_module)
    raw = pl.read_parquet(fresh_data.raw_partition_dir(DEMO_JOB, day.isoformat()) / "*.parquet")
    scorable = guarded_chunk(
        raw, load_guard_suite(fresh_data.expectations_dir / spec.expectation_suite), entity_column="entity_id"
    ).scorable
    meta = inference_model_artifact(fresh_data.model_registry_dir(DEMO_JOB), preds["model_version"][0])
    booster = xgb.Booster(model_file=str(meta.model_path))
    contribs = booster.predict(
        xgb.DMatrix(fm.feature_matrix(scorable), feature_names=list(fm.FEATURES)), pred_contribs=True
    )[:, :-1]
    position = {e: i for i, e in enumerate(scorable["entity_id"].to_list())}
    code_of = {f: spec.prediction.reasons.codes[f].code for f in fm.FEATURES}

    explained = preds.filter(pl.col("decision").is_in(spec.prediction.reasons.for_decisions))
    assert explained.height > 100
    k = spec.prediction.reasons.top_k
    feature_of = {code: f for f, code in code_of.items()}
    medians = {f: np.float32(stats.quantiles["p50"]) for f, stats in meta.metadata.reference.items()}
    raw_rows = scorable.rows(named=True)
    texts_seen: set[str] = set()
    for entity, codes, texts in zip(
        explained["entity_id"], explained["reason_codes"], explained["reason_texts"], strict=True
    ):
        row = contribs[position[entity]]
        order = np.argsort(-row, kind="stable")
        expected = [code_of[fm.FEATURES[j]] for j in order[:k] if row[j] > 0]
        assert codes.to_list() == (expected or [spec.prediction.reasons.no_reason_code]), entity
        raw = raw_rows[position[entity]]
        wanted = [
            _spec_text(spec.prediction.reasons.codes[feature_of[c]], raw[feature_of[c]], medians[feature_of[c]])
            for c in expected
        ] or [spec.prediction.reasons.no_reason_text]
        assert texts.to_list() == wanted, (entity, {feature_of[c]: raw[feature_of[c]] for c in expected})
        texts_seen.update(wanted)
    # The by_value texts of both categorical features, and both sides of a band, were given.
    by_value = {
        t for f in ("home_ownership", "loan_purpose") for t in spec.prediction.reasons.codes[f].by_value.values()
    }
    income = spec.prediction.reasons.codes["annual_income"].by_band
    assert texts_seen & by_value and {income.low, income.high} & texts_seen
    # The table kernel explained them all (checked against XGBoost at load), and the ledger says so.
    assert json.loads(inference)["reasons_explained_by"] == {"table_treeshap": rows_with_reasons}
    assert rows_with_reasons == explained.height
    # Reasons go only to the configured decisions.
    others = preds.filter(~pl.col("decision").is_in(spec.prediction.reasons.for_decisions))
    assert others.height > 0 and (others["reason_codes"].list.len() == 0).all()
