"""Engines: built once per worker, then a pure function of each chunk.

One interface (`InferenceEngine`), two runtimes: XGBoost native and ONNX Runtime. The device a
job asks for (`auto | cpu | cuda`) is resolved once, and what the runtime actually uses is read
back from it — XGBoost and ONNX Runtime both fall back to CPU silently when no GPU is usable, so
their own report is the only truth. `cuda` where none is usable is an error; `auto` says once
that it runs on CPU.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from tasks.contracts import FeatureContributions, InferenceInput, InferenceOutput
from tasks.errors import DeviceUnavailable, ModelArtifactError
from tasks.inference.contributions import LinearContributions, TreeContributions
from tasks.inference.error_model import ErrorModel
from tasks.inference.frameworks import inference_xgboost_module
from tasks.inference.onnx_outputs import inference_onnx_margins
from tasks.inference.registry import (
    ModelArtifact,
    ModelMetadata,
    inference_model_artifact,
    inference_model_checksum,
    inference_reasons_unavailable,
)
from tasks.inference.tree_margins import (
    MARGIN_KERNEL_NAME,
    ClassMarginKernels,
    TreeMarginKernel,
    inference_checked_tree_margins,
)
from tasks.inference.treeshap import (
    DEFAULT_MAX_PATH_FEATURES,
    XGBOOST_NAME,
    ContributionCounts,
    KernelChoice,
    TreeShapUnsupported,
    inference_checked_treeshap,
    inference_treeshap_kernel,
    inference_xgboost_class_tree_arrays,
)
from tasks.settings import usable_cores

log = logging.getLogger("scoring.inference")

Device = Literal["auto", "cpu", "cuda"]


def inference_cuda_device_present() -> bool:
    """Whether the kernel exposes an NVIDIA device; runtimes may still fail to use it."""
    return any(Path("/dev").glob("nvidia[0-9]*"))


class InferenceEngine(Protocol):
    artifact: ModelArtifact
    metadata: ModelMetadata
    device_type: str
    providers: tuple[str, ...]
    reasons_unavailable: str | None
    """Why the engine computes no contributions (the pass then never asks it for them); None when it does."""

    def inference_outputs(self, batch: InferenceInput) -> InferenceOutput: ...

    def inference_contributions(
        self, batch: InferenceInput, row_index: np.ndarray, *, top_k: int | None = None
    ) -> FeatureContributions: ...


def _logged_output(
    meta: ModelMetadata, batch: InferenceInput, raw: np.ndarray, latency_ms: float, device_type: str, note: str = ""
) -> InferenceOutput:
    """The chunk's raw outputs as the contract DTO, after its one `[INF]` line."""
    log.info(
        "[INF] model_name=%s model_version=%s input_shape=%s latency_ms=%.2f device_type=%s chunk=%d%s",
        meta.name,
        meta.version,
        batch.features.shape,
        latency_ms,
        device_type,
        batch.chunk_id,
        note,
    )
    margins = np.asarray(raw, dtype=np.float64)
    if meta.target == "multiclass":
        if margins.ndim != 2 or margins.shape[1] != len(meta.classes):
            raise ModelArtifactError(
                f"model {meta.name} {meta.version} returned outputs of shape {margins.shape} for "
                f"{batch.features.shape[0]} rows, not one per class of its {len(meta.classes)} classes"
            )
    else:
        margins = margins.reshape(-1)
    return InferenceOutput(
        chunk_id=batch.chunk_id,
        entity_ids=batch.entity_ids,
        margins=margins,
        model_name=meta.name,
        model_version=meta.version,
        device_type=device_type,
        latency_ms=latency_ms,
    )


def _xgboost_reason(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "its bytes are neither XGBoost JSON nor UBJSON"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    # "[12:45:58] /path/src/c_api/c_api.cc:1532: Check failed: …": the time and source position say nothing to a user.
    return re.sub(r"^\[[\d:]+\]\s+\S+:\d+:\s*", "", first)


class ExplainingEngine:
    """What every engine that explains rows shares: the source of its contributions and their one `[INF]` line."""

    metadata: ModelMetadata
    device_type: str
    feature_names: tuple[str, ...]
    contributions_source: TreeContributions | LinearContributions | None = None
    class_contributions: tuple[TreeContributions | LinearContributions, ...] | None = None
    """A multiclass model's contributions, one source per class (to that class's margin); `contributions_source`
    is then the first class's, which the reports read for the method and its check."""
    reasons_unavailable: str | None = None

    @property
    def contributions_kernel(self) -> str:
        return self.contributions_source.name if self.contributions_source is not None else "none"

    @property
    def contributions_kernel_reason(self) -> str | None:
        return self.contributions_source.reason if self.contributions_source is not None else None

    @property
    def contributions_kernel_load_s(self) -> float:
        return self.contributions_source.load_s if self.contributions_source is not None else 0.0

    @property
    def contributions_kernel_max_abs_diff(self) -> float | None:
        return self.contributions_source.max_abs_diff if self.contributions_source is not None else None

    @property
    def contributions_counts(self) -> ContributionCounts:
        return self.contributions_source.counts if self.contributions_source is not None else ContributionCounts()

    def _explained_rows(self, rows: np.ndarray) -> np.ndarray:
        """The rows as the contributions see them (a pipeline's transform first, for instance)."""
        return rows

    def inference_contributions(
        self,
        batch: InferenceInput,
        row_index: np.ndarray,
        *,
        top_k: int | None = None,
        classes: np.ndarray | None = None,
    ) -> FeatureContributions:
        """Exact contributions to the margin (or to what the model's trees add up to) for the given rows of the chunk
        only; for a multiclass model, each row's to the margin of its class in `classes` (one class
        index per explained row)."""
        if self.contributions_source is None:
            raise ModelArtifactError(f"{self.reasons_unavailable}; the scoring pass must not ask it for contributions")
        if (self.class_contributions is None) != (classes is None):
            raise ValueError(
                "a multiclass model's contributions are asked for one class per row, and only a multiclass model's"
            )
        rows = np.ascontiguousarray(batch.features[row_index])
        recomputed = 0
        if rows.shape[0] == 0:
            values = np.empty((0, len(self.feature_names)), dtype=np.float64)
        elif self.class_contributions is not None:
            assert classes is not None, "checked above: one class per row exactly when the model is multiclass"
            start = time.perf_counter()
            explained = self._explained_rows(rows)
            values = np.empty((rows.shape[0], len(self.feature_names)), dtype=np.float64)
            for k in np.unique(classes):
                of_class = classes == k
                values[of_class], tied = self.class_contributions[int(k)].values(explained[of_class], top_k)
                recomputed += tied
            log.info(
                "[INF] model_name=%s contributions rows=%d classes=%d latency_ms=%.2f device_type=%s chunk=%d "
                "kernel=%s tie_recomputed=%d",
                self.metadata.name,
                rows.shape[0],
                np.unique(classes).size,
                (time.perf_counter() - start) * 1000.0,
                self.device_type,
                batch.chunk_id,
                self.contributions_kernel,
                recomputed,
            )
        else:
            start = time.perf_counter()
            explained = self._explained_rows(rows)
            if isinstance(self.contributions_source, TreeContributions):
                # A forecast job's reasons rank by |contribution| (up and down): its near ties are there.
                values, recomputed = self.contributions_source.values(
                    explained, top_k, by_size=self.metadata.target != "binary"
                )
            else:
                values, recomputed = self.contributions_source.values(explained, top_k)
            log.info(
                "[INF] model_name=%s contributions rows=%d latency_ms=%.2f device_type=%s chunk=%d "
                "kernel=%s tie_recomputed=%d",
                self.metadata.name,
                rows.shape[0],
                (time.perf_counter() - start) * 1000.0,
                self.device_type,
                batch.chunk_id,
                self.contributions_kernel,
                recomputed,
            )
        return FeatureContributions(
            row_index=row_index,
            values=values,
            feature_names=self.feature_names,
            explained_by=self.contributions_kernel,
            tie_recomputed_rows=recomputed,
            feature_values=rows,
            explained_class=None if classes is None else np.asarray(classes, dtype=np.int64),
        )


class XGBoostEngine(ExplainingEngine):
    """XGBoost native inference: raw margins via `inplace_predict`, TreeSHAP on demand."""

    def __init__(
        self,
        artifact: ModelArtifact,
        *,
        device: Device = "cpu",
        nthread: int = 0,
        call_threads: int | None = None,
        max_path_features: int = DEFAULT_MAX_PATH_FEATURES,
    ) -> None:
        xgb = inference_xgboost_module()
        self._xgb = xgb
        self.artifact = artifact
        self.metadata = artifact.metadata
        self.model_path = artifact.model_path
        self.booster = xgb.Booster()
        try:
            self.booster.load_model(str(artifact.model_path))
        except (xgb.core.XGBoostError, UnicodeDecodeError, ValueError) as exc:
            # XGBoost decodes its own parse error as UTF-8, so bytes that are not a model can surface as a
            # UnicodeDecodeError; its message is C++ log context and a stack trace: keep the reason.
            raise ModelArtifactError(
                f"model file {artifact.model_path} could not be loaded: its sha256 matches, but it is not an XGBoost "
                f"model: {_xgboost_reason(exc)}"
            ) from exc
        wanted = "cuda" if device == "cuda" or (device == "auto" and inference_cuda_device_present()) else "cpu"
        with warnings.catch_warnings():
            # XGBoost warns and falls back to CPU when it sees no GPU; its config says what it will use.
            warnings.simplefilter("ignore", UserWarning)
            self.booster.set_param({"nthread": nthread if call_threads is None else call_threads, "device": wanted})
            self.device_type = json.loads(self.booster.save_config())["learner"]["generic_param"]["device"].split(":")[
                0
            ]
        if device == "cuda" and self.device_type != "cuda":
            raise DeviceUnavailable(
                f"model {self.metadata.name} {self.metadata.version}: device 'cuda' was asked for, "
                "but XGBoost sees no usable GPU"
            )
        if device == "auto" and self.device_type != "cuda":
            log.info("[INF] model_name=%s device auto: no usable GPU, scoring on CPU", self.metadata.name)
        self.providers: tuple[str, ...] = (f"xgboost:{self.device_type}",)
        self.reasons_unavailable = None
        self.feature_names = tuple(self.metadata.features)
        self._margin_threads = nthread if call_threads is None else call_threads
        self.margin_kernel: TreeMarginKernel | ClassMarginKernels | None = None
        model_json = self.booster.save_raw("json")
        if self.device_type == "cpu":
            self.margin_kernel = inference_checked_tree_margins(
                model_json,
                self._xgboost_margins,
                model_label=f"{self.metadata.name} {self.metadata.version}",
                multiclass=self.metadata.target == "multiclass",
                nthread=self._margin_threads,
            ).kernel
            if self.margin_kernel is not None:
                self.providers = (f"xgboost:{self.device_type}", MARGIN_KERNEL_NAME)
        if self.metadata.target == "multiclass":
            self._multiclass_contributions(len(self.metadata.classes), nthread, max_path_features)
            return
        if self.device_type == "cuda":
            choice = KernelChoice(None, "device cuda: XGBoost's GPU TreeSHAP", None, 0.0, XGBOOST_NAME)
        else:
            choice = inference_checked_treeshap(
                model_json,
                self._xgboost_contributions,
                model_label=f"{self.metadata.name} {self.metadata.version}",
                nthread=nthread,
                max_path_features=max_path_features,
            )
        self.contributions_source = TreeContributions(choice, self._xgboost_contributions, nthread=nthread)

    def _xgboost_margins(self, features: np.ndarray) -> np.ndarray:
        return self.booster.inplace_predict(features, predict_type="margin", validate_features=False)

    def inference_outputs(self, batch: InferenceInput) -> InferenceOutput:
        start = time.perf_counter()
        kernel = self.margin_kernel
        if kernel is not None and batch.features.ndim == 2 and batch.features.shape[1] == kernel.n_features:
            margins = kernel.margins(batch.features, nthread=self._margin_threads)
        else:
            margins = self._xgboost_margins(batch.features)
        latency_ms = (time.perf_counter() - start) * 1000.0
        return _logged_output(self.metadata, batch, margins, latency_ms, self.device_type)

    def _multiclass_contributions(self, n_classes: int, nthread: int, max_path_features: int) -> None:
        """One source per class: the table kernel of that class's trees, checked at load against XGBoost's own
        TreeSHAP of the class (`pred_contribs` gives every class's at once), which explains where the kernel cannot."""
        counts = ContributionCounts()
        try:
            arrays = (
                None
                if self.device_type == "cuda"
                else inference_xgboost_class_tree_arrays(self.booster.save_raw("json"))
            )
        except TreeShapUnsupported as exc:
            arrays, unsupported = None, str(exc)
        else:
            unsupported = "device cuda: XGBoost's GPU TreeSHAP"
        if arrays is not None:
            # A softmax model's base score is every class's margin alike: read it off XGBoost's bias column.
            probe = np.zeros((1, len(self.feature_names)), dtype=np.float32)
            framework_bias = self._xgboost_contributions(probe)[0, :, -1]
        sources = []
        for k in range(n_classes):

            def of_class(rows: np.ndarray, k: int = k) -> np.ndarray:
                return self._xgboost_contributions(rows)[:, k, :]

            if arrays is None:
                choice = KernelChoice(None, unsupported, None, 0.0, XGBOOST_NAME)
            else:
                unbiased = inference_treeshap_kernel(arrays[k], max_path_features=max_path_features).contributions(
                    probe
                )[0, -1]
                choice = inference_checked_treeshap(
                    dataclasses.replace(arrays[k], bias=float(framework_bias[k] - unbiased)),
                    of_class,
                    model_label=f"{self.metadata.name} {self.metadata.version} class {self.metadata.classes[k]!r}",
                    nthread=nthread,
                    max_path_features=max_path_features,
                )
            source = TreeContributions(choice, of_class, nthread=nthread)
            source.counts = counts
            sources.append(source)
        self.class_contributions = tuple(sources)
        self.contributions_source = sources[0]

    def _xgboost_contributions(self, rows: np.ndarray) -> np.ndarray:
        """XGBoost's own TreeSHAP: rows × (features + 1), the bias last (rows × classes × (features + 1)
        for a multiclass model)."""
        matrix = self._xgb.DMatrix(rows, missing=np.nan, feature_names=list(self.feature_names))
        return np.asarray(self.booster.predict(matrix, pred_contribs=True), dtype=np.float64)


class ONNXEngine(ExplainingEngine):
    """ONNX Runtime inference: one session per worker. The output registration chose (`metadata.onnx_output`:
    a probability tensor, a ZipMap or a raw score) becomes the margins; without that choice (feature models,
    versions registered before it) output 0, one value per row, is the raw output."""

    def __init__(
        self, artifact: ModelArtifact, *, device: Device = "cpu", nthread: int = 0, call_threads: int | None = None
    ) -> None:
        import onnxruntime as ort

        self.artifact = artifact
        self.metadata = artifact.metadata
        self.model_path = artifact.model_path
        options = ort.SessionOptions()
        options.intra_op_num_threads = nthread if call_threads is None else call_threads
        options.inter_op_num_threads = 1
        # Asking ONNX Runtime for CUDA on a machine without a GPU logs errors and runs on CPU anyway.
        try_cuda = device == "cuda" or (device == "auto" and inference_cuda_device_present())
        wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"] if try_cuda else ["CPUExecutionProvider"]
        try:
            self.session = ort.InferenceSession(str(artifact.model_path), sess_options=options, providers=wanted)
        except Exception as exc:
            raise ModelArtifactError(
                f"model file {artifact.model_path} could not be loaded by ONNX Runtime: {exc}"
            ) from exc
        self.providers = tuple(self.session.get_providers())
        self.device_type = "cuda" if "CUDAExecutionProvider" in self.providers else "cpu"
        if device == "cuda" and self.device_type != "cuda":
            raise DeviceUnavailable(
                f"model {self.metadata.name} {self.metadata.version}: device 'cuda' was asked for, but ONNX Runtime "
                f"could only use {list(self.providers)}"
            )
        if device == "auto" and self.device_type != "cuda":
            log.info(
                "[INF] model_name=%s device auto: no usable GPU, scoring on CPU (%s)",
                self.metadata.name,
                list(self.providers),
            )
        self.input_name = self.session.get_inputs()[0].name
        self.scored_output = self.metadata.onnx_output
        outputs = {o.name: o.type for o in self.session.get_outputs()}
        if self.scored_output is not None and self.scored_output.name not in outputs:
            raise ModelArtifactError(
                f"model file {self.model_path} has no output {self.scored_output.name!r}, which its metadata.json "
                f"names (onnx_output.name); its outputs: {list(outputs)}"
            )
        self.output_name = (
            self.scored_output.name if self.scored_output is not None else self.session.get_outputs()[0].name
        )
        # A ZipMap's maps live on the host: IO binding to the device is for tensors only.
        self._bind_on_device = self.device_type == "cuda" and outputs[self.output_name].startswith("tensor(")
        self.feature_names = tuple(self.metadata.features)
        self.reasons_unavailable = inference_reasons_unavailable(self.metadata)
        self._explained = None
        if self.reasons_unavailable is None and self.metadata.explanation is not None:
            # A tree-ensemble or linear node, read from the graph as registration settled
            # (tasks/inference/onnx_explained.py).
            from tasks.inference.onnx_explained import inference_onnx_contributions

            explained = inference_onnx_contributions(self.model_path, self.metadata, nthread=nthread)
            if isinstance(explained, str):
                self.reasons_unavailable = explained
            else:
                self.contributions_source, self._explained = explained.source, explained.explained_rows

    def _explained_rows(self, rows: np.ndarray) -> np.ndarray:
        return rows if self._explained is None else self._explained(rows)

    def _run(self, features: np.ndarray):  # noqa: ANN202  (an array, or a list of maps for a ZipMap)
        if not self._bind_on_device:
            return self.session.run([self.output_name], {self.input_name: features})[0]
        # On CUDA, bind the output on the device and copy once, instead of ORT's per-run staging.
        binding = self.session.io_binding()
        binding.bind_cpu_input(self.input_name, features)
        binding.bind_output(self.output_name, "cuda")
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()[0]

    def inference_outputs(self, batch: InferenceInput) -> InferenceOutput:
        start = time.perf_counter()
        raw = self._run(batch.features)
        rows = batch.features.shape[0]
        if self.scored_output is not None:
            try:
                margins = inference_onnx_margins(self.scored_output, raw, rows)
            except ModelArtifactError as exc:
                raise ModelArtifactError(f"model file {self.model_path}: {exc}") from None
        elif raw.shape[0] != rows or raw.size != raw.shape[0]:
            raise ModelArtifactError(
                f"model file {self.model_path} returned output shape {raw.shape} for input {batch.features.shape}; "
                "a scoring model must give one value per row"
            )
        else:
            margins = raw
        latency_ms = (time.perf_counter() - start) * 1000.0
        return _logged_output(
            self.metadata, batch, margins, latency_ms, self.device_type, f" providers={','.join(self.providers)}"
        )


_ENGINES = {"xgboost": XGBoostEngine, "onnx": ONNXEngine}


def inference_call_threads(nthread: int, concurrent_calls: int) -> int:
    """Threads of one framework call (XGBoost's and LightGBM's predict, ONNX Runtime's session, CatBoost's): the job's
    `nthread` when it sets one, else twice the cores' fair share among the `concurrent_calls` units scored at once, at
    most every core. Twice, because units rarely call the engine at the same moment (the rest of a unit's chunk is
    Python, polars and Parquet): on two cores, two workers ran the 1 M-row bench pass at 125-157 k rows/s with two
    threads a call and 101-121 k with one (`score run` of bench/_data.py's 1 M-row partition, SCORING_TASK_WORKERS=2, the
    job's `inference.nthread` 2 or 1); never every core a call, which on 16 cores would be
    256 threads. The table TreeSHAP kernel is not one of these calls: its launches take turns
    (treeshap._PARALLEL_LAUNCH), so each takes every core `nthread` allows."""
    cores = usable_cores()
    return nthread if nthread > 0 else min(cores, max(1, 2 * cores // max(1, concurrent_calls)))


def inference_engine(
    artifact: ModelArtifact, *, device: Device = "cpu", nthread: int = 0, concurrent_calls: int | None = None
) -> InferenceEngine:
    """The artifact's engine; `concurrent_calls` (units at once) sizes its calls' threads (`inference_call_threads`),
    None leaves them to `nthread` alone (0: the framework's own default, every core)."""
    framework = artifact.metadata.framework
    calls = None if concurrent_calls is None else inference_call_threads(nthread, concurrent_calls)
    if framework in _ENGINES:
        return _ENGINES[framework](artifact, device=device, nthread=nthread, call_threads=calls)
    from tasks.inference.frameworks import inference_engine_module

    engine_class = inference_engine_module(framework, artifact.model_path).ENGINE
    return engine_class(artifact, device=device, nthread=nthread, call_threads=calls)


@dataclass(frozen=True)
class LoadedModel:
    """The engine that will score, and why it is not the version the job asked for, if it is not; a
    forecast model's error model beside it."""

    engine: InferenceEngine
    fallback_reason: str | None = None
    error_model: ErrorModel | None = None

    def inference_outputs(self, batch: InferenceInput) -> InferenceOutput:
        """The engine's margins and, for a forecast model, each row's expected absolute error."""
        output = self.engine.inference_outputs(batch)
        if self.error_model is None:
            return output
        expected = self.error_model.inference_expected_error(batch.features, output.margins)
        return output.model_copy(
            update={"expected_error": expected, "latency_ms": output.latency_ms + self.error_model.latency_ms}
        )


def _loaded(engine: InferenceEngine, fallback_reason: str | None = None) -> LoadedModel:
    meta = engine.metadata
    if meta.error_model_file is None:
        return LoadedModel(engine, fallback_reason)
    path = engine.artifact.directory / meta.error_model_file
    if not path.is_file() or inference_model_checksum(path) != meta.error_model_sha256:
        raise ModelArtifactError(
            f"model {meta.name} {meta.version}: error model {path} is missing or does not match "
            "error_model_sha256 in its metadata.json"
        )
    return LoadedModel(engine, fallback_reason, ErrorModel(path))


_RUN_ENGINES: OrderedDict[tuple[str, Device, int, int | None], InferenceEngine] = OrderedDict()
_RUN_ENGINES_LOCK = threading.Lock()
_RUN_ENGINES_KEPT = 4
"""Engines kept per process; the least recently used is dropped first."""


def _run_engine(
    artifact: ModelArtifact, *, device: Device, nthread: int, concurrent_calls: int | None
) -> InferenceEngine:
    """The engine of a verified artifact, built once per process: the partitions of a backfill and
    the nights of a long-lived worker share it instead of paying the load and the TreeSHAP kernel's
    check again (~0.1 s a run). The key is the whole metadata and folder, so a re-registered or
    recalibrated version builds anew; the file itself was checked against its sha256 by the caller."""
    key = (artifact.model_dump_json(), device, nthread, concurrent_calls)
    with _RUN_ENGINES_LOCK:
        engine = _RUN_ENGINES.get(key)
        if engine is not None:
            _RUN_ENGINES.move_to_end(key)
            return engine
    engine = inference_engine(artifact, device=device, nthread=nthread, concurrent_calls=concurrent_calls)
    with _RUN_ENGINES_LOCK:
        _RUN_ENGINES[key] = engine
        while len(_RUN_ENGINES) > _RUN_ENGINES_KEPT:
            _RUN_ENGINES.popitem(last=False)
    return engine


def inference_loaded_model(
    registry_dir: Path,
    version: str,
    fallback_version: str | None,
    *,
    device: Device,
    nthread: int,
    concurrent_calls: int | None = None,
) -> LoadedModel:
    """Load the job's model; when it cannot be loaded and the job names a fallback, load that instead.
    `concurrent_calls`: units scored at once (see `inference_engine`).

    A device problem is a configuration error, not a broken model: it never triggers the fallback.
    """
    try:
        artifact = inference_model_artifact(registry_dir, version)
        return _loaded(_run_engine(artifact, device=device, nthread=nthread, concurrent_calls=concurrent_calls))
    except ModelArtifactError as exc:
        if fallback_version is None:
            raise
        reason = f"{registry_dir.name} {version} failed to load: {exc}"
    log.warning(
        "[INF] model_name=%s model_version=%s FAILED to load; scoring with fallback_version=%s — %s",
        registry_dir.name,
        version,
        fallback_version,
        reason,
    )
    engine = _run_engine(
        inference_model_artifact(registry_dir, fallback_version),
        device=device,
        nthread=nthread,
        concurrent_calls=concurrent_calls,
    )
    return _loaded(engine, fallback_reason=reason)
