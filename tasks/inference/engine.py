"""Engines: built once per worker, then a pure function of each chunk."""

from __future__ import annotations

import logging
import time

import numpy as np
import xgboost as xgb

from tasks.contracts import FeatureContributions, InferenceInput, InferenceOutput
from tasks.errors import ModelArtifactError
from tasks.inference.registry import ModelArtifact

log = logging.getLogger("scoring.inference")


class XGBoostEngine:
    """XGBoost native inference: raw margins via `inplace_predict`, TreeSHAP on demand."""

    def __init__(self, artifact: ModelArtifact, *, device: str = "cpu", nthread: int = 0) -> None:
        if device == "cuda":
            raise ModelArtifactError("device 'cuda' was asked for, but the XGBoost CUDA path is not available here")
        self.artifact = artifact
        self.device_type = "cpu"
        self.booster = xgb.Booster()
        try:
            self.booster.load_model(str(artifact.model_path))
        except xgb.core.XGBoostError as exc:
            raise ModelArtifactError(f"model file {artifact.model_path} could not be loaded: {exc}") from exc
        self.booster.set_param({"nthread": nthread, "device": "cpu"})
        self.feature_names = tuple(artifact.metadata.features)

    def inference_margins(self, batch: InferenceInput) -> InferenceOutput:
        start = time.perf_counter()
        margins = self.booster.inplace_predict(batch.features, predict_type="margin", validate_features=False)
        latency_ms = (time.perf_counter() - start) * 1000.0
        meta = self.artifact.metadata
        log.info(
            "[INF] model_name=%s model_version=%s input_shape=%s latency_ms=%.2f device_type=%s chunk=%d",
            meta.name, meta.version, batch.features.shape, latency_ms, self.device_type, batch.chunk_id,
        )
        return InferenceOutput(
            chunk_id=batch.chunk_id,
            entity_ids=batch.entity_ids,
            margins=np.asarray(margins, dtype=np.float64).reshape(-1),
            model_name=meta.name,
            model_version=meta.version,
            device_type=self.device_type,
            latency_ms=latency_ms,
        )

    def inference_contributions(self, batch: InferenceInput, row_index: np.ndarray) -> FeatureContributions:
        """Exact TreeSHAP contributions to the margin for the given rows of the chunk only."""
        rows = np.ascontiguousarray(batch.features[row_index])
        if rows.shape[0] == 0:
            values = np.empty((0, len(self.feature_names)), dtype=np.float64)
        else:
            start = time.perf_counter()
            contribs = self.booster.predict(xgb.DMatrix(rows, missing=np.nan, feature_names=list(self.feature_names)), pred_contribs=True)
            values = np.asarray(contribs, dtype=np.float64)[:, :-1]
            log.info(
                "[INF] model_name=%s contributions rows=%d latency_ms=%.2f device_type=%s chunk=%d",
                self.artifact.metadata.name, rows.shape[0], (time.perf_counter() - start) * 1000.0,
                self.device_type, batch.chunk_id,
            )
        return FeatureContributions(row_index=row_index, values=values, feature_names=self.feature_names)
