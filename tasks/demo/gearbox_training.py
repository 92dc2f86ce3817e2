"""Training of the gearbox demo models: an autoencoder of healthy spectra, then the fault classifier.

The autoencoder learns what healthy band energies look like; its reconstruction error becomes an
extra input of the XGBoost classifier. The two are fitted on disjoint rows, so the error the
classifier learns from, and is calibrated on, is an out-of-sample error, as it is at scoring time.
torch runs here only: the autoencoder is exported to ONNX, checked against torch, and the
classifier's error column comes from that ONNX file through the scoring engine itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import torch

from tasks.contracts import InferenceInput
from tasks.demo.training import registered_classifier
from tasks.errors import ModelArtifactError
from tasks.features import FeatureModule, feature_kinds
from tasks.guards import GuardSuite, guarded_chunk
from tasks.inference.engine import inference_engine
from tasks.inference.onnx_check import MODEL_FILE, REFERENCE_IO_FILE, inference_validate_onnx_model
from tasks.inference.registry import ModelMetadata, inference_model_artifact, inference_model_checksum
from tasks.jobs.registration import RegistrationReport
from tasks.quality.drift import reference_statistics

log = logging.getLogger("scoring.training")

LABEL_COLUMN = "outcome"
AUTOENCODER_SHARE = 0.4
"""Share of the labelled rows set aside for the autoencoder (its healthy ones); the rest train the classifier."""

AE_PARAMS: dict[str, Any] = {"hidden": 16, "code": 4, "epochs": 30, "batch": 512, "learning_rate": 5e-3}
REFERENCE_ROWS = 256
ONNX_OPSET = 18


class ReconstructionError(torch.nn.Module):
    """Autoencoder whose output is each row's mean squared reconstruction error.

    The standardisation is part of the module, so the exported graph takes the raw feature matrix
    and gives one value per row: exactly what a feature model must look like to the engine.
    """

    def __init__(self, mean: np.ndarray, scale: np.ndarray, *, hidden: int, code: int) -> None:
        super().__init__()
        width = mean.shape[0]
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
        self.register_buffer("scale", torch.as_tensor(scale, dtype=torch.float32))
        self.encoder = torch.nn.Sequential(
            torch.nn.Linear(width, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, code)
        )
        self.decoder = torch.nn.Sequential(
            torch.nn.Linear(code, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, width)
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        z = (features - self.mean) / self.scale
        return (self.decoder(self.encoder(z)) - z).pow(2).mean(dim=1)


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    """Run torch on one intra-op thread for the block, then restore the setting.

    The network is 18-16-4-16-18 wide: threads have nothing to split, and on a busy 2-core machine their
    hand-offs made a fit take 33 s instead of 1.2 s.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def fitted_autoencoder(healthy: np.ndarray, *, seed: int, params: dict[str, Any] = AE_PARAMS) -> ReconstructionError:
    """An autoencoder fitted to healthy feature rows, in eval mode; torch's global RNG is left as it was."""
    mean = healthy.mean(axis=0)
    scale = np.maximum(healthy.std(axis=0), 1e-6)
    with torch.random.fork_rng(), _one_torch_thread():
        torch.manual_seed(seed)
        model = ReconstructionError(mean, scale, hidden=params["hidden"], code=params["code"])
        optimiser = torch.optim.Adam(model.parameters(), lr=params["learning_rate"])
        data = torch.from_numpy(np.ascontiguousarray(healthy, dtype=np.float32))
        model.train()
        for _ in range(params["epochs"]):
            for rows in torch.randperm(data.shape[0]).split(params["batch"]):
                optimiser.zero_grad()
                model(data[rows]).mean().backward()
                optimiser.step()
    return model.eval()


def torch_outputs(model: ReconstructionError, features: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))).numpy()


def exported_autoencoder(model: ReconstructionError, path: Path, sample: np.ndarray) -> None:
    """Write the model as an ONNX graph with input `features` (batch, n) and output `reconstruction_error` (batch,).

    The TorchScript exporter is used on purpose: for this four-layer MLP it gives the same
    operators as the torch.export-based one, in about 2 s instead of 13 s cold on a 2-core
    machine, a third of the demo's time budget. torch is pinned (2.13), where it is deprecated
    but present.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export", category=DeprecationWarning)
        torch.onnx.export(
            model,
            (torch.from_numpy(np.ascontiguousarray(sample, dtype=np.float32)),),
            str(path),
            input_names=["features"],
            output_names=["reconstruction_error"],
            dynamic_axes={"features": {0: "batch"}, "reconstruction_error": {0: "batch"}},
            opset_version=ONNX_OPSET,
            dynamo=False,
        )


@dataclass(frozen=True)
class LabelledRows:
    entity_ids: pa.Array
    features: np.ndarray
    labels: np.ndarray
    rows_quarantined: int


def labelled_rows(
    raw_dirs: list[Path], labels_dirs: list[Path], *, suite: GuardSuite, features: FeatureModule, entity_column: str
) -> LabelledRows:
    """Guarded, labelled feature rows of the training window, one day at a time.

    A window is 8 KB of samples and its feature row 72 bytes: only the feature rows are kept.
    """
    ids, xs, ys, quarantined = [], [], [], 0
    for raw_dir, labels_dir in zip(raw_dirs, labels_dirs, strict=True):
        guarded = guarded_chunk(pl.read_parquet(raw_dir), suite, entity_column=entity_column)
        labels = pl.read_parquet(labels_dir).select(entity_column, LABEL_COLUMN)
        frame = guarded.scorable.join(labels, on=entity_column, how="inner", maintain_order="left")
        ids.append(frame[entity_column].to_arrow())
        xs.append(features.feature_matrix(frame))
        ys.append(frame[LABEL_COLUMN].to_numpy().astype(np.float32))
        quarantined += guarded.counts.rows_quarantined
    return LabelledRows(
        entity_ids=pa.concat_arrays([a.cast(pa.string()) for a in ids]),
        features=np.ascontiguousarray(np.concatenate(xs)),
        labels=np.concatenate(ys),
        rows_quarantined=quarantined,
    )


def registered_autoencoder(
    healthy: np.ndarray,
    *,
    features: FeatureModule,
    model_dir: Path,
    model_name: str,
    version: str,
    seed: int,
    training_window: tuple[dt.date, dt.date],
    extra_training_info: dict[str, Any] | None = None,
) -> ModelMetadata:
    """Fit, export, check and register the autoencoder; a failed ONNX check fails the training."""
    model = fitted_autoencoder(healthy, seed=seed)
    model_dir.mkdir(parents=True, exist_ok=True)
    model_path = model_dir / MODEL_FILE
    sample = healthy[:REFERENCE_ROWS]
    exported_autoencoder(model, model_path, sample)
    expected = torch_outputs(model, sample)
    np.savez(model_dir / REFERENCE_IO_FILE, inputs=sample, outputs=expected)
    report = inference_validate_onnx_model(model_path, sample, expected)
    if not report.ok:
        problems = "; ".join(f"{c.name} {c.status.value}: {c.details}" for c in report.checks)
        raise ModelArtifactError(f"exported autoencoder {model_path} fails the ONNX check: {problems}")
    errors = torch_outputs(model, healthy)
    names = list(features.FEATURES)
    metadata = ModelMetadata(
        name=model_name,
        version=version,
        framework="onnx",
        model_file=MODEL_FILE,
        sha256=inference_model_checksum(model_path),
        feature_version=features.FEATURE_VERSION,
        features=names,
        feature_dtypes={n: "float32" for n in names},
        reference=reference_statistics(healthy, features.FEATURES, feature_kinds(features)),
        training={
            "window_start": training_window[0].isoformat(),
            "window_end": training_window[1].isoformat(),
            "rows_train": int(healthy.shape[0]),
            "seed": seed,
            "params": AE_PARAMS,
            "reconstruction_error": {f"p{q}": float(np.percentile(errors, q)) for q in (50, 95, 99)},
            "onnx_check": {
                "max_abs_diff": report.max_abs_diff,
                "providers": list(report.providers),
                "opset": ONNX_OPSET,
            },
            **(extra_training_info or {}),
        },
    )
    (model_dir / "metadata.json").write_text(json.dumps(metadata.model_dump(mode="json"), indent=2))
    log.info(
        "trained %s %s on %d healthy rows: median reconstruction error %.3f",
        model_name,
        version,
        healthy.shape[0],
        np.median(errors),
    )
    return metadata


def train_gearbox_models(
    *,
    raw_dirs: list[Path],
    labels_dirs: list[Path],
    suite: GuardSuite,
    features: FeatureModule,
    entity_column: str,
    autoencoder_dir: Path,
    autoencoder_name: str,
    autoencoder_version: str,
    output_feature: str,
    model_dir: Path,
    seed: int,
    training_window: tuple[dt.date, dt.date],
    extra_training_info: dict[str, Any] | None = None,
) -> tuple[ModelMetadata, RegistrationReport]:
    """Register the autoencoder, then the classifier on the feature rows plus its ONNX error column.

    Returns the autoencoder's metadata and the classifier's registration. The classifier's training info names the
    autoencoder version it was fitted with: its inputs mean nothing with another one.
    """
    rows = labelled_rows(raw_dirs, labels_dirs, suite=suite, features=features, entity_column=entity_column)
    for_autoencoder = np.random.default_rng([seed, 1]).random(rows.labels.shape[0]) < AUTOENCODER_SHARE
    # A flat window has no kurtosis (NaN): the tree model copes, the autoencoder's scaling would not.
    healthy = rows.features[for_autoencoder & (rows.labels == 0) & np.isfinite(rows.features).all(axis=1)]
    autoencoder = registered_autoencoder(
        healthy,
        features=features,
        model_dir=autoencoder_dir,
        model_name=autoencoder_name,
        version=autoencoder_version,
        seed=seed,
        training_window=training_window,
        extra_training_info=extra_training_info,
    )
    keep = ~for_autoencoder
    x = np.ascontiguousarray(rows.features[keep])
    engine = inference_engine(inference_model_artifact(autoencoder_dir.parent, autoencoder_version))
    batch = InferenceInput(
        chunk_id=0,
        entity_ids=rows.entity_ids.filter(pa.array(keep)),
        features=x,
        feature_names=tuple(features.FEATURES),
    )
    error = engine.inference_outputs(batch).margins.astype(np.float32)
    classifier = registered_classifier(
        np.ascontiguousarray(np.column_stack([x, error])),
        rows.labels[keep],
        names=(*features.FEATURES, output_feature),
        feature_version=features.FEATURE_VERSION,
        model_dir=model_dir,
        seed=seed,
        training_window=training_window,
        rows_quarantined=rows.rows_quarantined,
        extra_training_info={**(extra_training_info or {}), "feature_models": {autoencoder_name: autoencoder_version}},
        kinds=feature_kinds(features),
    )
    return autoencoder, classifier
