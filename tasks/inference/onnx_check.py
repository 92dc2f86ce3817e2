"""The ONNX triple check of an exported model: shapes, numerics, operator placement.

1. **Shapes**: `onnx.checker`, strict shape inference, and the declared graph input/output shapes
   (symbolic batch dims allowed) against the inferred ones, the sample input's and the ones ONNX
   Runtime actually returns.
2. **Numerics**: ONNX Runtime's output for a sample against what the source model (torch, say)
   produced for it, within `atol` (the first output shaped like the reference: a classifier's
   probabilities, not the label skl2onnx writes first). The reference is the `expected_output` argument, else a
   `reference_io.npz` (`inputs`, `outputs`) beside the model; without either the check is not run.
3. **Operators**: which execution provider ONNX Runtime really uses (`session.get_providers()`:
   onnxruntime-gpu lists CUDA as available on machines without a GPU and then silently runs on CPU)
   and, on a GPU provider, which nodes it placed on the CPU, read from its verbose node-placement log.

Nothing here imports Prefect; public functions are named `inference_*` (house rule).
"""

from __future__ import annotations

import contextlib
import copy
import enum
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tasks.errors import ModelArtifactError
from tasks.inference.onnx_outputs import OnnxOutputChoice, inference_onnx_output_array, inference_onnx_output_choice

MODEL_FILE = "model.onnx"
REFERENCE_IO_FILE = "reference_io.npz"
CPU_PROVIDER = "CPUExecutionProvider"
# ONNX Runtime's own default severity (WARNING); restored after a verbose session creation.
_ORT_DEFAULT_LOG_SEVERITY = 2


class CheckStatus(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_RUN = "not_run"


@dataclass(frozen=True)
class CheckResult:
    """One of the three checks: its status and a one-paragraph explanation."""

    name: str
    status: CheckStatus
    details: str


@dataclass(frozen=True)
class NodePlacement:
    """One node of ONNX Runtime's (optimised) graph and the execution provider it was placed on."""

    provider: str
    op_type: str
    node_name: str
    # ORT put it on the CPU by its own choice (small shape ops, cheaper there), not for lack of a kernel.
    cpu_by_choice: bool = False

    def __str__(self) -> str:
        return f"{self.op_type} ({self.node_name})"


@dataclass(frozen=True)
class NodePlacementLog:
    """What ONNX Runtime's verbose log says about node placement, parsed."""

    nodes_per_provider: Mapping[str, int]
    # Nodes listed one by one (ORT lists them only when they are spread over several providers).
    nodes: tuple[NodePlacement, ...]
    # Nodes ORT moved to the CPU because it deems that faster ("Force fallback to CPU execution for node").
    cpu_by_choice: frozenset[str]
    # node name -> op type, from "<EP> kernel not found in registries for Op type: X node name: Y".
    missing_kernels: Mapping[str, str]

    @property
    def found(self) -> bool:
        return bool(self.nodes_per_provider)

    def nodes_on(self, provider: str) -> tuple[NodePlacement, ...]:
        return tuple(node for node in self.nodes if node.provider == provider)


@dataclass(frozen=True)
class OnnxCheckReport:
    """The result of `inference_validate_onnx_model`."""

    model_path: Path
    target_provider: str
    # What `session.get_providers()` said: the providers the session really runs on, in priority order.
    providers: tuple[str, ...]
    shapes: CheckResult
    numerics: CheckResult
    operators: CheckResult
    max_abs_diff: float | None = None
    # Nodes ONNX Runtime placed on the CPU although the target is another provider (empty for CPU).
    cpu_fallback_nodes: tuple[NodePlacement, ...] = ()
    reference: str | None = None  # where the expected output came from

    @property
    def checks(self) -> tuple[CheckResult, CheckResult, CheckResult]:
        return (self.shapes, self.numerics, self.operators)

    @property
    def ok(self) -> bool:
        """No check failed and the numerical check ran (and so passed)."""
        return self.numerics.status is CheckStatus.PASSED and all(
            check.status is not CheckStatus.FAILED for check in self.checks
        )


def inference_validate_onnx_model(
    model_path: Path,
    sample_input: np.ndarray,
    expected_output: np.ndarray | None = None,
    *,
    provider: str = CPU_PROVIDER,
    atol: float = 1e-4,
) -> OnnxCheckReport:
    """Run the triple check on one `.onnx` file with a single input tensor.

    `expected_output` is what the source model produced for `sample_input`, compared with the
    first output whose value has its shape (a ZipMap's maps as rows × classes), else output 0.
    Without it, a `reference_io.npz` beside the model (keys `inputs` and `outputs`) is the
    reference; without either the numerical check is `not_run` and the report is not `ok`.
    Raises `ModelArtifactError` for a missing, unreadable or invalid model file and a
    `reference_io.npz` without its two arrays; every other finding is in the report.
    """
    import onnxruntime as ort

    model_path = Path(model_path)
    if provider not in ort.get_all_providers():
        raise ValueError(f"unknown ONNX Runtime execution provider {provider!r}")
    if not atol >= 0:
        raise ValueError(f"atol must be >= 0, got {atol}")
    model = _load_model(model_path)
    sample = np.asarray(sample_input)

    graph_inputs = _graph_inputs(model)
    # (name, declared shape or None when the file declares none)
    declared_outputs = [(o.name, _declared_shape(o) if _has_shape(o) else None) for o in model.graph.output]
    issues: list[str] = []
    fits = True
    bindings: dict[str, int]
    if len(graph_inputs) != 1:
        issues.append(
            f"the model has {len(graph_inputs)} inputs ({', '.join(i.name for i in graph_inputs) or 'none'}); "
            "this check feeds one array"
        )
        fits = False
        input_name, bindings = None, {}
    else:
        input_name = graph_inputs[0].name
        problem, bindings = _fit_input(graph_inputs[0], sample, what="sample input")
        if problem:
            issues.append(problem)
            fits = False

    inferred, inference_problem = _inferred_output_shapes(model)
    if inference_problem:
        issues.append(inference_problem)
    # (output name, what is wrong with its shape): failures, except on an output beside the one that scores.
    output_issues: list[tuple[str, str]] = []
    for name, declared in declared_outputs:
        if declared is not None and name in inferred and (mismatch := _static_mismatch(declared, inferred[name])):
            output_issues.append(
                (
                    name,
                    f"output {name!r}: declared {_fmt(declared)}, shape inference gives "
                    f"{_fmt(inferred[name])} ({mismatch})",
                )
            )

    session, used, operators, cpu_nodes = _session_and_operators(model_path, provider)

    # An output's value: an array, or for a ZipMap (skl2onnx's default) a list of {class: probability} maps.
    actual_outputs: dict[str, object] = {}
    if session is not None and fits and input_name is not None:
        try:
            results = session.run(None, {input_name: sample})
        except Exception as error:  # noqa: BLE001  (ORT raises its own exception types)
            issues.append(f"ONNX Runtime failed on the sample input: {_one_line(error)}")
        else:
            actual_outputs = {meta.name: value for meta, value in zip(session.get_outputs(), results, strict=True)}
    for name, declared in declared_outputs:
        value = actual_outputs.get(name)
        if not isinstance(value, np.ndarray):
            continue
        actual = tuple(value.shape)
        mismatch = _runtime_mismatch(declared, actual, bindings) if declared is not None else None
        if mismatch:
            output_issues.append(
                (name, f"output {name!r}: declared {_fmt(declared)}, ONNX Runtime returns {_fmt(actual)} ({mismatch})")
            )
        elif name in inferred and (mismatch := _runtime_mismatch(inferred[name], actual, dict(bindings))):
            output_issues.append(
                (
                    name,
                    f"output {name!r}: shape inference gives {_fmt(inferred[name])}, ONNX Runtime returns "
                    f"{_fmt(actual)} ({mismatch})",
                )
            )
    # onnxmltools declares its LightGBM export's label output (1,) and ONNX Runtime returns one label per row: a
    # declaration nothing reads when registration scores another output. It is said, and fails nothing.
    choice = _scored_choice(model, session, actual_outputs, sample) if fits else None
    aside = [why for name, why in output_issues if choice is not None and name != choice.output.name]
    issues += [why for name, why in output_issues if choice is None or name == choice.output.name]

    if issues:
        shapes = CheckResult("shapes", CheckStatus.FAILED, "; ".join(issues))
    else:
        parts = [f"input {input_name!r} {_fmt(_declared_shape(graph_inputs[0]))} fed {_fmt(sample.shape)}"]
        for name, declared in declared_outputs:
            if declared is None and name in actual_outputs and not isinstance(actual_outputs[name], np.ndarray):
                typed = next(meta.type for meta in session.get_outputs() if meta.name == name)
                parts.append(
                    f"output {name!r} typed {typed}, ONNX Runtime returns {_value_words(actual_outputs[name])}"
                )
                continue
            guess = _fmt(inferred[name]) if name in inferred else "(not inferred)"
            got = f", ONNX Runtime {_fmt(np.asarray(actual_outputs[name]).shape)}" if name in actual_outputs else ""
            parts.append(f"output {name!r} declared {_fmt(declared)}, inferred {guess}{got}")
        scored = [f"score register takes {choice.description.removeprefix('ONNX ')}"] if choice is not None else []
        unread = [f"not scored, so not failed: {why}" for why in aside]
        shapes = CheckResult("shapes", CheckStatus.PASSED, "; ".join(parts + scored + unread))

    numerics, max_abs_diff, reference = _numerics(
        model_path,
        session,
        graph_inputs[0] if len(graph_inputs) == 1 else None,
        [name for name, _ in declared_outputs],
        (sample, fits, actual_outputs),
        expected_output,
        atol,
    )
    return OnnxCheckReport(
        model_path=model_path,
        target_provider=provider,
        providers=used,
        shapes=shapes,
        numerics=numerics,
        operators=operators,
        max_abs_diff=max_abs_diff,
        cpu_fallback_nodes=cpu_nodes,
        reference=reference,
    )


def inference_check_onnx_path(path: Path, *, provider: str = CPU_PROVIDER, atol: float = 1e-4) -> OnnxCheckReport:
    """The triple check of a `.onnx` file or a registry version folder holding `model.onnx`.

    The sample is the `inputs` of `reference_io.npz` beside the model when there is one (and its
    `outputs` the reference); otherwise 8 seeded standard-normal rows shaped like the declared
    input, and the numerical check is not run.
    """
    path = Path(path)
    model_path = path / MODEL_FILE if path.is_dir() else path
    if not model_path.is_file():
        where = f"{path} holds no {MODEL_FILE}" if path.is_dir() else f"ONNX model file not found: {path}"
        raise ModelArtifactError(where)
    reference = _reference_io(model_path)
    if reference is not None:
        inputs, _ = reference
        return inference_validate_onnx_model(model_path, inputs, None, provider=provider, atol=atol)
    model = _load_model(model_path)
    graph_inputs = _graph_inputs(model)
    sample = _synthetic_input(graph_inputs[0]) if len(graph_inputs) == 1 else np.zeros((8, 1), np.float32)
    return inference_validate_onnx_model(model_path, sample, None, provider=provider, atol=atol)


def inference_node_placements(log_text: str) -> NodePlacementLog:
    """Parse ONNX Runtime's verbose session-creation log (what it writes to stderr).

    Understands, with or without the `<time> [V:onnxruntime:, file:line Function]` prefix and
    colour codes:
      ` All nodes placed on [CUDAExecutionProvider]. Number of nodes: 12`
      ` Node(s) placed on [CPUExecutionProvider]. Number of nodes: 2` followed by `  Shape (node_Shape_3)`
      lines (and the older `Node name: X Op type: Y` form),
      `Force fallback to CPU execution for node: X because ...`,
      `CUDA kernel not found in registries for Op type: X node name: Y`.
    """
    per_provider: dict[str, int] = {}
    listed: list[tuple[str, str, str]] = []
    by_choice: set[str] = set()
    missing: dict[str, str] = {}
    current: str | None = None
    for raw in log_text.splitlines():
        message = _log_message(raw)
        if match := _ALL_PLACED.search(message):
            per_provider[match["provider"]] = per_provider.get(match["provider"], 0) + int(match["count"])
            current = None
        elif match := _SOME_PLACED.search(message):
            current = match["provider"]
            per_provider[current] = per_provider.get(current, 0) + int(match["count"])
        elif match := _FORCED_CPU.search(message):
            by_choice.add(match["name"].strip())
            current = None
        elif match := _NO_KERNEL.search(message):
            missing[match["name"].strip()] = match["op"]
            current = None
        elif current is not None and (match := _NODE_NAME_OP_TYPE.search(message)):
            listed.append((current, match["op"], match["name"].strip()))
        elif current is not None and (match := _OP_AND_NAME.match(message)):
            listed.append((current, match["op"], match["name"]))
        elif message.strip():
            current = None
    nodes = tuple(
        NodePlacement(provider, op, name, cpu_by_choice=provider == CPU_PROVIDER and name in by_choice)
        for provider, op, name in listed
    )
    return NodePlacementLog(
        nodes_per_provider=per_provider, nodes=nodes, cpu_by_choice=frozenset(by_choice), missing_kernels=missing
    )


def _load_model(model_path: Path):  # noqa: ANN202  (onnx.ModelProto)
    import onnx

    if not model_path.is_file():
        raise ModelArtifactError(f"ONNX model file not found: {model_path}")
    try:
        model = onnx.load(str(model_path))
    except Exception as error:  # noqa: BLE001  (protobuf DecodeError, OSError, external data errors)
        raise ModelArtifactError(f"{model_path} is not a readable ONNX model: {_one_line(error)}") from None
    try:
        onnx.checker.check_model(str(model_path))
    except Exception as error:  # noqa: BLE001  (onnx.checker.ValidationError and friends)
        raise ModelArtifactError(f"{model_path} is not a valid ONNX model: {_one_line(error)}") from None
    return model


def _reference_io(model_path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    path = model_path.parent / REFERENCE_IO_FILE
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = sorted({"inputs", "outputs"} - set(data.files))
            if missing:
                raise ModelArtifactError(
                    f"{path} lacks {', '.join(missing)} (it holds {', '.join(data.files) or 'nothing'})"
                )
            return np.asarray(data["inputs"]), np.asarray(data["outputs"])
    except ModelArtifactError:
        raise
    except Exception as error:  # noqa: BLE001  (zipfile / pickle refusal / OSError)
        raise ModelArtifactError(f"{path} is not a readable reference_io.npz: {_one_line(error)}") from None


Dim = int | str | None  # a fixed size, a symbolic name, or unknown
Shape = tuple[Dim, ...]


def _graph_inputs(model) -> list:  # noqa: ANN001
    initializers = {init.name for init in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def _declared_shape(value_info) -> Shape:  # noqa: ANN001
    tensor = value_info.type.tensor_type
    if not tensor.HasField("shape"):
        return ()
    return tuple(
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None) if d.HasField("dim_param") else None
        for d in tensor.shape.dim
    )


def _has_shape(value_info) -> bool:  # noqa: ANN001
    return value_info.type.tensor_type.HasField("shape")


def _elem_type(value_info) -> np.dtype | None:  # noqa: ANN001
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type))
    except Exception:  # noqa: BLE001  (undefined / non-numpy element types)
        return None


def _fmt(shape: Sequence[Dim] | None) -> str:
    if shape is None:
        return "(undeclared)"
    dims = ["?" if d is None else str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _fit_input(value_info, array: np.ndarray, *, what: str) -> tuple[str | None, dict[str, int]]:  # noqa: ANN001
    """Why `array` cannot be fed to the declared input (None if it can), and the symbolic dims it binds."""
    declared = _declared_shape(value_info)
    dtype = _elem_type(value_info)
    problems = []
    if dtype is not None and array.dtype != dtype:
        problems.append(f"element type {dtype} vs {array.dtype}")
    bindings: dict[str, int] = {}
    if _has_shape(value_info) and (mismatch := _runtime_mismatch(declared, tuple(array.shape), bindings)):
        problems.append(mismatch)
    if problems:
        why = (
            f"input {value_info.name!r}: declared {_fmt(declared)} {dtype or ''}, {what} is "
            f"{_fmt(array.shape)} {array.dtype} ({'; '.join(problems)})"
        )
        return why, bindings
    return None, bindings


def _runtime_mismatch(declared: Shape, actual: tuple[int, ...], bindings: dict[str, int]) -> str | None:
    """Where a concrete shape breaks a declared one; symbolic dims bind to one size across tensors."""
    if len(declared) != len(actual):
        return f"rank {len(declared)} vs {len(actual)}"
    for axis, (want, got) in enumerate(zip(declared, actual, strict=True)):
        if isinstance(want, int) and want != got:
            return f"dimension {axis}: {want} vs {got}"
        if isinstance(want, str):
            bound = bindings.setdefault(want, got)
            if bound != got:
                return f"dimension {axis} ({want}): {bound} elsewhere vs {got}"
    return None


def _static_mismatch(declared: Shape, inferred: Shape) -> str | None:
    """Where two static shapes contradict each other (symbolic or unknown dims match anything)."""
    if len(declared) != len(inferred):
        return f"rank {len(declared)} vs {len(inferred)}"
    for axis, (a, b) in enumerate(zip(declared, inferred, strict=True)):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            return f"dimension {axis}: {a} vs {b}"
    return None


def _inferred_output_shapes(model) -> tuple[dict[str, Shape], str | None]:  # noqa: ANN001
    """Output shapes from strict shape inference alone: the declared output shapes are set aside first."""
    import onnx

    bare = copy.deepcopy(model)
    for output in bare.graph.output:
        # Touching `tensor_type` of a sequence output (a ZipMap's) would turn its type into a tensor.
        if output.type.WhichOneof("value") == "tensor_type":
            output.type.tensor_type.ClearField("shape")
    del bare.graph.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(bare, check_type=True, strict_mode=True, data_prop=True)
    except Exception as error:  # noqa: BLE001  (onnx.shape_inference.InferenceError)
        return {}, f"strict shape inference failed: {_one_line(error)}"
    return {o.name: _declared_shape(o) for o in inferred.graph.output if _has_shape(o)}, None


def _synthetic_input(value_info, rows: int = 8, seed: int = 0) -> np.ndarray:  # noqa: ANN001
    shape = tuple(d if isinstance(d, int) and d > 0 else rows for d in _declared_shape(value_info))
    dtype = _elem_type(value_info) or np.dtype(np.float32)
    values = np.random.default_rng(seed).standard_normal(shape)
    return np.ascontiguousarray(values.astype(dtype) if dtype.kind == "f" else np.zeros(shape, dtype))


def _numerics(
    model_path: Path,
    session,  # noqa: ANN001  (onnxruntime.InferenceSession | None)
    graph_input,  # noqa: ANN001  (onnx.ValueInfoProto | None)
    output_names: list[str],
    sample: tuple[np.ndarray, bool, Mapping[str, object]],
    expected_output: np.ndarray | None,
    atol: float,
) -> tuple[CheckResult, float | None, str | None]:
    """Compare ORT's output with the reference; `sample` is (array, fits the input, ORT's outputs by name).

    The output compared is the first whose value (a ZipMap's maps as rows × classes) has the reference's
    shape, else the first output: a classifier's reference is usually its probabilities, which skl2onnx
    writes second, after the label."""
    if expected_output is not None:
        reference = "the expected_output argument"
        inputs, fits, outputs = sample
        expected = np.asarray(expected_output)
    else:
        io = _reference_io(model_path)
        if io is None:
            why = f"no expected output given and no {REFERENCE_IO_FILE} beside {model_path.name}"
            return CheckResult("numerics", CheckStatus.NOT_RUN, why), None, None
        reference = str(model_path.parent / REFERENCE_IO_FILE)
        inputs, expected = io
        outputs = {}
        if graph_input is not None:
            problem, _ = _fit_input(graph_input, inputs, what=f"{REFERENCE_IO_FILE} inputs")
            if problem:
                return CheckResult("numerics", CheckStatus.FAILED, problem), None, reference
        fits = True
        if session is not None and graph_input is not None and output_names:
            try:
                outputs = dict(zip(output_names, session.run(output_names, {graph_input.name: inputs}), strict=True))
            except Exception as error:  # noqa: BLE001  (ORT raises its own exception types)
                why = f"ONNX Runtime failed on the inputs of {REFERENCE_IO_FILE}: {_one_line(error)}"
                return CheckResult("numerics", CheckStatus.FAILED, why), None, reference
    if session is None or graph_input is None or not output_names:
        why = "no ONNX Runtime session with one input and an output to compare (see shapes and operators)"
        return CheckResult("numerics", CheckStatus.NOT_RUN, why), None, reference
    arrays = {name: inference_onnx_output_array(outputs[name]) for name in output_names if name in outputs}
    if not arrays:
        why = "the sample input does not fit the model (see shapes)" if not fits else "ONNX Runtime produced no output"
        return CheckResult("numerics", CheckStatus.NOT_RUN, why), None, reference
    compared = next((name for name in arrays if arrays[name].shape == expected.shape), next(iter(arrays)))
    actual = arrays[compared]
    if actual.shape != expected.shape:
        why = (
            f"output {compared!r} has shape {_fmt(actual.shape)}, the reference ({reference}) "
            f"{_fmt(expected.shape)}: cannot compare"
        )
        return CheckResult("numerics", CheckStatus.FAILED, why), None, reference
    diff = _abs_diff(actual, expected)
    max_diff = float(diff.max()) if diff.size else 0.0
    off = int((diff > atol).sum())
    rows = f"{inputs.shape[0]} rows" if inputs.ndim else "1 value"
    if off == 0:
        why = f"max abs diff {max_diff:.3g} <= atol {atol:g} over {diff.size} values ({rows}) of {compared!r}"
        return CheckResult("numerics", CheckStatus.PASSED, why), max_diff, reference
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
    why = (
        f"max abs diff {max_diff:.3g} > atol {atol:g}: {off} of {diff.size} values of {compared!r} off; "
        f"worst at {where}: ONNX {actual[where].item()!r} vs reference {expected[where].item()!r} ({reference})"
    )
    return CheckResult("numerics", CheckStatus.FAILED, why), max_diff, reference


def _scored_choice(model, session, outputs: Mapping[str, object], sample: np.ndarray) -> OnnxOutputChoice | None:  # noqa: ANN001
    """What `score register` would score with, judged on the sample; None when it would refuse the graph
    (a feature model, say an autoencoder's reconstruction, need not hold a probability)."""
    if session is None or not outputs:
        return None
    types = {meta.name: meta.type for meta in session.get_outputs()}
    try:
        choice = inference_onnx_output_choice(
            model,
            {name: (types[name], value) for name, value in outputs.items()},
            rows=int(sample.shape[0]) if sample.ndim else 1,
        )
    except ModelArtifactError:
        return None
    return choice


def _value_words(value: object) -> str:
    if isinstance(value, list):
        classes = list(value[0]) if value and isinstance(value[0], dict) else []
        return f"{len(value)} maps" + (f" over classes {classes}" if classes else "")
    return type(value).__name__


def _abs_diff(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """|actual - expected| in float64; equal values (infinities, NaN with NaN) count 0, a lone NaN inf."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - e)
    diff[(a == e) | (np.isnan(a) & np.isnan(e))] = 0.0
    diff[np.isnan(diff)] = np.inf
    return diff


def _session_and_operators(model_path: Path, provider: str):  # noqa: ANN202
    """The ORT session on `[provider, CPU]`, the providers it really uses, the operators check, CPU nodes."""
    import onnxruntime as ort

    providers = [provider] if provider == CPU_PROVIDER else [provider, CPU_PROVIDER]
    options = ort.SessionOptions()
    captured = _CapturedText()
    try:
        if provider == CPU_PROVIDER:
            options.log_severity_level = 3  # ERROR: the shapes check reports what ORT would warn about
            session = ort.InferenceSession(str(model_path), sess_options=options, providers=providers)
        else:
            options.log_severity_level = 0  # VERBOSE: the node placement lines
            ort.set_default_logger_severity(1)  # INFO: "Force fallback to CPU execution for node" lines
            try:
                with _captured_fd2(captured):
                    session = ort.InferenceSession(str(model_path), sess_options=options, providers=providers)
            finally:
                ort.set_default_logger_severity(_ORT_DEFAULT_LOG_SEVERITY)
    except Exception as error:  # noqa: BLE001  (ORT's Fail / NotImplemented / InvalidGraph)
        why = f"ONNX Runtime cannot build a session on {providers}: {_one_line(error)}"
        return None, (), CheckResult("operators", CheckStatus.FAILED, why), ()
    log = captured.text
    used = tuple(session.get_providers())
    if provider == CPU_PROVIDER:
        why = f"session runs on {', '.join(used)}: every operator has a CPU kernel"
        return session, used, CheckResult("operators", CheckStatus.PASSED, why), ()
    if provider not in used:
        reason = _provider_failure(log, provider)
        why = (
            f"{provider} not usable here{f' ({reason})' if reason else ''}; the session runs on "
            f"{', '.join(used)}; operator placement unchecked"
        )
        return session, used, CheckResult("operators", CheckStatus.NOT_RUN, why), ()
    return (session, used, *_placement_result(inference_node_placements(log), provider))


def _placement_result(placements: NodePlacementLog, provider: str) -> tuple[CheckResult, tuple[NodePlacement, ...]]:
    if not placements.found:
        why = f"{provider} is in use but ONNX Runtime logged no node placement; operator placement unchecked"
        return CheckResult("operators", CheckStatus.NOT_RUN, why), ()
    counts = ", ".join(f"{n} on {p}" for p, n in placements.nodes_per_provider.items())
    on_cpu = placements.nodes_on(CPU_PROVIDER)
    cpu_count = placements.nodes_per_provider.get(CPU_PROVIDER, 0)
    if cpu_count == 0:
        return CheckResult("operators", CheckStatus.PASSED, f"nodes: {counts}"), ()
    if not on_cpu:  # "All nodes placed on [CPUExecutionProvider]": nothing ran on the target
        why = f"every node ({cpu_count}) was placed on {CPU_PROVIDER}, none on {provider}"
        return CheckResult("operators", CheckStatus.FAILED, why), ()
    missing = [n for n in on_cpu if not n.cpu_by_choice]
    chosen = [n for n in on_cpu if n.cpu_by_choice]
    chosen_text = (
        f"; on the CPU by ONNX Runtime's choice (cheaper there): {', '.join(map(str, chosen))}" if chosen else ""
    )
    if missing:
        listed = ", ".join(f"{n}{' [no kernel]' if n.node_name in placements.missing_kernels else ''}" for n in missing)
        why = f"nodes: {counts}; fell back to the CPU: {listed}{chosen_text}"
        return CheckResult("operators", CheckStatus.FAILED, why), on_cpu
    return CheckResult("operators", CheckStatus.PASSED, f"nodes: {counts}{chosen_text}"), on_cpu


def _provider_failure(log: str, provider: str) -> str | None:
    """ONNX Runtime's reason for not using `provider`, from the captured log (first error line)."""
    for raw in log.splitlines():
        line = _ANSI.sub("", raw)
        if "[E:" in line or (provider in line and "Failed to create" in line):
            message = _log_message(line).strip()
            if match := re.search(r"with error: (.*)$", message):
                return match.group(1).strip()
            return message[:300]
    return None


class _CapturedText:
    text = ""


@contextlib.contextmanager
def _captured_fd2(captured: _CapturedText) -> Iterator[None]:
    """Send file descriptor 2 (where ORT's C++ logger writes) to a temp file for the block.

    Process-wide: anything another thread writes to stderr meanwhile lands in the capture too.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.text = sink.read().decode("utf-8", "replace")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LOG_PREFIX = re.compile(r"\[[VIWEF]:[^\]]*\]\s?")
_ALL_PLACED = re.compile(r"All nodes placed on \[(?P<provider>[^\]]+)\]\.?\s*Number of nodes:\s*(?P<count>\d+)")
_SOME_PLACED = re.compile(r"Node\(s\) placed on \[(?P<provider>[^\]]+)\]\.?\s*Number of nodes:\s*(?P<count>\d+)")
_FORCED_CPU = re.compile(r"Force fallback to CPU execution for node:\s*(?P<name>.+?)(?:\s+because\b.*)?$")
_NO_KERNEL = re.compile(r"kernel not found in registries for Op type:\s*(?P<op>\S+)\s+node name:\s*(?P<name>.*)$")
_NODE_NAME_OP_TYPE = re.compile(r"Node name:\s*(?P<name>.*?)\s+Op type:\s*(?P<op>\S+)")
_OP_AND_NAME = re.compile(r"^\s+(?P<op>[A-Za-z_][\w.:]*) \((?P<name>.*)\)\s*$")


def _log_message(line: str) -> str:
    """The message of one ORT log line: colour codes and the `<time> [X:logger, file:line Fn]` prefix removed."""
    line = _ANSI.sub("", line).rstrip("\r\n")
    match = _LOG_PREFIX.search(line)
    return line[match.end() :] if match else line


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
