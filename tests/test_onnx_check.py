"""tasks/inference/onnx_check.py: the ONNX triple check (shapes, numerics, operators) and `score check-model`.

A small torch autoencoder (16 -> 8 -> 16) is exported once per module with torch's dynamo exporter;
the broken variants are edits of that file (a perturbed weight, a wrong declared output shape,
truncated bytes). GPU placement cannot run here: the log parser is tested on captured samples and
on the verbose log the installed ONNX Runtime really writes, and the CUDA branch through a
stand-in session that writes such a log to file descriptor 2 like ORT's C++ logger does.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from typer.testing import CliRunner

from cli.score import app
from tasks.errors import ModelArtifactError
from tasks.inference import onnx_check
from tasks.inference.onnx_check import (
    CPU_PROVIDER,
    MODEL_FILE,
    REFERENCE_IO_FILE,
    CheckStatus,
    inference_check_onnx_path,
    inference_node_placements,
    inference_validate_onnx_model,
)

CUDA = "CUDAExecutionProvider"
REAL_SESSION = ort.InferenceSession
WIDTH, HIDDEN = 16, 8


@dataclass(frozen=True)
class Exported:
    folder: Path  # a registry-like version folder: model.onnx + reference_io.npz
    inputs: np.ndarray
    outputs: np.ndarray  # what torch produced for `inputs`

    @property
    def model(self) -> Path:
        return self.folder / MODEL_FILE


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    torch = pytest.importorskip("torch")
    torch.manual_seed(7)
    autoencoder = torch.nn.Sequential(
        torch.nn.Linear(WIDTH, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, WIDTH)
    ).eval()
    folder = tmp_path_factory.mktemp("onnx-model")
    example = torch.randn(4, WIDTH)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.export's FutureWarnings about its own pytree internals
        torch.onnx.export(
            autoencoder,
            (example,),
            str(folder / MODEL_FILE),
            dynamo=True,
            external_data=False,  # else the weights go to model.onnx.data beside it
            input_names=["features"],
            output_names=["reconstruction"],
            dynamic_shapes=({0: torch.export.Dim("batch")},),
            verbose=False,
        )
    # The reference batch has another size than the export example: the batch axis must be dynamic.
    inputs = np.random.default_rng(7).standard_normal((32, WIDTH)).astype(np.float32)
    with torch.no_grad():
        outputs = autoencoder(torch.from_numpy(inputs)).numpy()
    np.savez(folder / REFERENCE_IO_FILE, inputs=inputs, outputs=outputs)
    return Exported(folder=folder, inputs=inputs, outputs=outputs)


def variant(exported: Exported, tmp_path: Path, edit) -> Path:  # noqa: ANN001
    """A copy of the exported version folder whose model.onnx went through `edit(model)`."""
    folder = tmp_path / "variant"
    folder.mkdir()
    shutil.copy(exported.folder / REFERENCE_IO_FILE, folder / REFERENCE_IO_FILE)
    model = onnx.load(str(exported.model))
    edit(model)
    onnx.save(model, str(folder / MODEL_FILE))
    return folder


def perturb_decoder_weight(model: onnx.ModelProto) -> None:
    (weight,) = [i for i in model.graph.initializer if tuple(i.dims) == (WIDTH, HIDDEN)]
    values = numpy_helper.to_array(weight).copy()
    values += 0.05
    weight.CopyFrom(numpy_helper.from_array(values, weight.name))


def declare_output_width_one(model: onnx.ModelProto) -> None:
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 1


# --- the three checks on real exports ------------------------------------------------------------


def test_the_export_has_a_symbolic_batch_dim(exported: Exported) -> None:
    model = onnx.load(str(exported.model))
    (features,) = model.graph.input
    batch, width = features.type.tensor_type.shape.dim
    assert batch.dim_param and not batch.HasField("dim_value")
    assert width.dim_value == WIDTH
    assert not list(exported.folder.glob("*.data"))  # one self-contained file


def test_a_good_export_passes_all_three_checks(exported: Exported) -> None:
    report = inference_validate_onnx_model(exported.model, exported.inputs, exported.outputs)
    assert [c.status for c in report.checks] == [CheckStatus.PASSED] * 3, report.checks
    assert report.ok
    assert report.max_abs_diff is not None and report.max_abs_diff < 1e-4
    assert report.providers == (CPU_PROVIDER,)
    assert report.cpu_fallback_nodes == ()
    assert "(32, 16)" in report.shapes.details and "reconstruction" in report.shapes.details


def test_the_reference_beside_the_model_is_used_without_an_expected_output(exported: Exported) -> None:
    report = inference_validate_onnx_model(exported.model, exported.inputs[:3])
    assert report.numerics.status is CheckStatus.PASSED, report.numerics
    assert report.reference == str(exported.folder / REFERENCE_IO_FILE)
    assert "32 rows" in report.numerics.details  # the reference's own inputs were run, not the sample
    assert report.ok


def test_without_any_reference_numerics_are_not_run_and_the_model_is_not_ok(exported: Exported, tmp_path: Path) -> None:
    lone = tmp_path / "lone.onnx"
    shutil.copy(exported.model, lone)
    report = inference_validate_onnx_model(lone, exported.inputs)
    assert report.numerics.status is CheckStatus.NOT_RUN
    assert REFERENCE_IO_FILE in report.numerics.details
    assert report.shapes.status is CheckStatus.PASSED and report.operators.status is CheckStatus.PASSED
    assert report.max_abs_diff is None
    assert not report.ok
    # The path entry point feeds a synthetic sample shaped like the declared input.
    by_path = inference_check_onnx_path(lone)
    assert by_path.shapes.status is CheckStatus.PASSED and "(8, 16)" in by_path.shapes.details
    assert not by_path.ok


def test_a_perturbed_weight_fails_the_numerical_check_with_its_diff(exported: Exported, tmp_path: Path) -> None:
    folder = variant(exported, tmp_path, perturb_decoder_weight)
    report = inference_validate_onnx_model(folder / MODEL_FILE, exported.inputs, exported.outputs)
    assert report.numerics.status is CheckStatus.FAILED
    assert report.shapes.status is CheckStatus.PASSED and report.operators.status is CheckStatus.PASSED
    assert not report.ok
    # The reported diff is the real one, computed independently here.
    session = ort.InferenceSession(str(folder / MODEL_FILE), providers=[CPU_PROVIDER])
    (perturbed,) = session.run(None, {"features": exported.inputs})
    true_diff = float(np.abs(perturbed.astype(np.float64) - exported.outputs).max())
    assert true_diff > 1e-3
    assert report.max_abs_diff == pytest.approx(true_diff, rel=1e-6)
    assert f"max abs diff {true_diff:.3g} > atol 0.0001" in report.numerics.details
    assert "'reconstruction'" in report.numerics.details
    # A tolerance above the diff lets the same model pass.
    assert inference_validate_onnx_model(folder / MODEL_FILE, exported.inputs, exported.outputs, atol=1.0).ok


def test_a_wrong_declared_output_shape_fails_the_shape_check_naming_the_tensor(
    exported: Exported, tmp_path: Path
) -> None:
    folder = variant(exported, tmp_path, declare_output_width_one)
    report = inference_validate_onnx_model(folder / MODEL_FILE, exported.inputs, exported.outputs)
    assert report.shapes.status is CheckStatus.FAILED
    details = report.shapes.details
    assert "output 'reconstruction': declared (batch, 1)" in details
    assert "shape inference gives (batch, 16)" in details
    assert "ONNX Runtime returns (32, 16)" in details
    assert report.numerics.status is CheckStatus.PASSED  # the values are right, the declaration is not
    assert not report.ok


def test_a_reference_of_another_shape_fails_the_numerical_check(exported: Exported) -> None:
    report = inference_validate_onnx_model(exported.model, exported.inputs, exported.outputs[:, :1])
    assert report.numerics.status is CheckStatus.FAILED
    assert "(32, 16)" in report.numerics.details and "(32, 1)" in report.numerics.details
    assert report.max_abs_diff is None and not report.ok


def test_a_sample_of_the_wrong_width_fails_clearly(exported: Exported) -> None:
    narrow = np.zeros((4, 12), dtype=np.float32)
    report = inference_validate_onnx_model(exported.model, narrow, np.zeros((4, WIDTH), np.float32))
    assert report.shapes.status is CheckStatus.FAILED
    assert "input 'features': declared (batch, 16)" in report.shapes.details
    assert "(4, 12)" in report.shapes.details and "dimension 1: 16 vs 12" in report.shapes.details
    assert report.numerics.status is CheckStatus.NOT_RUN
    assert not report.ok


def test_a_sample_of_the_wrong_dtype_fails_clearly(exported: Exported) -> None:
    report = inference_validate_onnx_model(exported.model, exported.inputs.astype(np.float64), exported.outputs)
    assert report.shapes.status is CheckStatus.FAILED
    assert "float32 vs float64" in report.shapes.details
    assert not report.ok


def test_a_truncated_file_raises_naming_the_file(exported: Exported, tmp_path: Path) -> None:
    broken = tmp_path / "truncated.onnx"
    data = exported.model.read_bytes()
    broken.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelArtifactError, match=re.escape(str(broken))):
        inference_validate_onnx_model(broken, exported.inputs)


def test_missing_files_raise_naming_them(tmp_path: Path) -> None:
    missing = tmp_path / "nope.onnx"
    with pytest.raises(ModelArtifactError, match=re.escape(str(missing))):
        inference_validate_onnx_model(missing, np.zeros((1, WIDTH), np.float32))
    with pytest.raises(ModelArtifactError, match=re.escape(f"{tmp_path} holds no {MODEL_FILE}")):
        inference_check_onnx_path(tmp_path)


def test_a_reference_file_without_its_arrays_raises_naming_it(exported: Exported, tmp_path: Path) -> None:
    folder = variant(exported, tmp_path, lambda model: None)
    np.savez(folder / REFERENCE_IO_FILE, x=exported.inputs)
    with pytest.raises(ModelArtifactError, match=re.escape(str(folder / REFERENCE_IO_FILE)) + ".*inputs, outputs"):
        inference_check_onnx_path(folder)


def test_cuda_on_a_machine_without_a_usable_gpu_is_reported_not_usable(exported: Exported) -> None:
    report = inference_validate_onnx_model(exported.model, exported.inputs, exported.outputs, provider=CUDA)
    if CUDA in report.providers:
        pytest.skip("CUDA is usable here: placement is checked for real")
    assert report.operators.status is CheckStatus.NOT_RUN
    assert report.operators.status is not CheckStatus.PASSED
    assert "CUDAExecutionProvider not usable here" in report.operators.details
    assert "operator placement unchecked" in report.operators.details
    assert report.providers == (CPU_PROVIDER,)
    assert report.numerics.status is CheckStatus.PASSED  # computed on the CPU, and said so in providers


def test_an_unknown_provider_name_is_refused(exported: Exported) -> None:
    with pytest.raises(ValueError, match="NoSuchExecutionProvider"):
        inference_validate_onnx_model(exported.model, exported.inputs, provider="NoSuchExecutionProvider")


# --- node placement: the log parser ---------------------------------------------------------------

_V = "2026-12-02 17:50:44.841598666 [V:onnxruntime:, session_state.cc:1581 VerifyEachNodeIsAssignedToAnEp]"
MIXED_PLACEMENT_LOG = f"""\
2026-12-02 17:50:44.839499525 [I:onnxruntime:, graph_partitioner.cc:2284 InlineFunctionsAOT] This model does not have any local functions defined. AOT Inlining is not performed
2026-12-02 17:50:44.840000001 [I:onnxruntime:, fallback_cpu_capability.cc:152 GetCpuPreferredNodes] ORT optimization- Force fallback to CPU execution for node: node_Shape_0 because the CPU execution path is deemed faster than overhead involved with execution on other EPs  capable of executing this node
2026-12-02 17:50:44.840000002 [I:onnxruntime:, cuda_execution_provider.cc:2590 GetCapability] CUDA kernel not found in registries for Op type: Einsum node name: node_Einsum_7
\x1b[0;93m2026-12-02 17:50:44.840000003 [W:onnxruntime:, session_state.cc:1166 VerifyEachNodeIsAssignedToAnEp] Some nodes were not assigned to the preferred execution providers which may or may not have an negative impact on performance. e.g. ORT explicitly assigns shape related ops to CPU to improve perf.\x1b[m
{_V} Node placements
{_V}  Node(s) placed on [CUDAExecutionProvider]. Number of nodes: 3
{_V}   MemcpyFromHost (Memcpy)
{_V}   Gemm (node_Gemm_1)
{_V}   Relu (node_Relu (2))
{_V}  Node(s) placed on [CPUExecutionProvider]. Number of nodes: 2
{_V}   Shape (node_Shape_0)
{_V}   Einsum (node_Einsum_7)
2026-12-02 17:50:44.841662796 [I:onnxruntime:, allocation_planner.cc:2719 CreateGraphPartitioner] Use DeviceBasedPartition as default
"""


def test_the_parser_reads_a_mixed_placement() -> None:
    placements = inference_node_placements(MIXED_PLACEMENT_LOG)
    assert dict(placements.nodes_per_provider) == {CUDA: 3, CPU_PROVIDER: 2}
    assert [str(n) for n in placements.nodes_on(CUDA)] == [
        "MemcpyFromHost (Memcpy)",
        "Gemm (node_Gemm_1)",
        "Relu (node_Relu (2))",
    ]
    shape, einsum = placements.nodes_on(CPU_PROVIDER)
    assert (shape.op_type, shape.node_name, shape.cpu_by_choice) == ("Shape", "node_Shape_0", True)
    assert (einsum.op_type, einsum.node_name, einsum.cpu_by_choice) == ("Einsum", "node_Einsum_7", False)
    assert placements.missing_kernels == {"node_Einsum_7": "Einsum"}
    # The line after the list (another log line) ends it: nothing more was taken as a node.
    assert len(placements.nodes) == 5


def test_the_parser_reads_all_nodes_on_one_provider_and_bare_lines() -> None:
    placements = inference_node_placements(
        "Node placements\n All nodes placed on [CUDAExecutionProvider]. Number of nodes: 12\n"
    )
    assert dict(placements.nodes_per_provider) == {CUDA: 12}
    assert placements.nodes == () and placements.found


def test_the_parser_reads_the_older_node_name_op_type_form() -> None:
    log = (
        "  Node(s) placed on [CPUExecutionProvider].    Number of nodes: 1\n"
        "    Node name: /decoder/Einsum Op type: Einsum\n"
        "  Node(s) placed on [CUDAExecutionProvider]. Number of nodes: 1\n"
        "    Node name: /decoder/Gemm Op type: Gemm\n"
    )
    placements = inference_node_placements(log)
    assert [(n.provider, n.op_type, n.node_name) for n in placements.nodes] == [
        (CPU_PROVIDER, "Einsum", "/decoder/Einsum"),
        (CUDA, "Gemm", "/decoder/Gemm"),
    ]


def test_the_parser_finds_nothing_in_an_unrelated_log() -> None:
    placements = inference_node_placements("some text\n  Gemm (node_Gemm_1)\n[W:onnxruntime:, x.cc:1 F] hello\n")
    assert not placements.found and placements.nodes == ()


def test_the_parser_reads_what_the_installed_onnxruntime_really_logs(exported: Exported) -> None:
    """Format drift guard: the capture of fd 2 and the parser, on this ORT version's own verbose log."""
    options = ort.SessionOptions()
    options.log_severity_level = 0
    captured = onnx_check._CapturedText()
    with onnx_check._captured_fd2(captured):
        ort.InferenceSession(str(exported.model), sess_options=options, providers=[CPU_PROVIDER])
    assert "VerifyEachNodeIsAssignedToAnEp" in captured.text, captured.text[-2000:]
    placements = inference_node_placements(captured.text)
    assert list(placements.nodes_per_provider) == [CPU_PROVIDER]
    assert placements.nodes_per_provider[CPU_PROVIDER] >= 1


# --- node placement: the CUDA branch through a stand-in session ----------------------------------


def fake_cuda_session(log: str):  # noqa: ANN201
    """An ORT session class that says it runs on CUDA and logs `log` to fd 2 while being created."""

    class CudaSession:
        def __init__(self, path: str, sess_options=None, providers=None) -> None:  # noqa: ANN001
            assert providers == [CUDA, CPU_PROVIDER]
            assert sess_options.log_severity_level == 0
            os.write(2, log.encode())
            self._session = REAL_SESSION(path, providers=[CPU_PROVIDER])

        def get_providers(self) -> list[str]:
            return [CUDA, CPU_PROVIDER]

        def __getattr__(self, name: str):  # noqa: ANN204
            return getattr(self._session, name)

    return CudaSession


def test_a_node_without_a_cuda_kernel_fails_the_operator_check(
    exported: Exported, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(ort, "InferenceSession", fake_cuda_session(MIXED_PLACEMENT_LOG))
    report = inference_validate_onnx_model(exported.model, exported.inputs, exported.outputs, provider=CUDA)
    assert report.providers == (CUDA, CPU_PROVIDER)
    assert report.operators.status is CheckStatus.FAILED
    assert "fell back to the CPU: Einsum (node_Einsum_7) [no kernel]" in report.operators.details
    assert "by ONNX Runtime's choice (cheaper there): Shape (node_Shape_0)" in report.operators.details
    assert [n.node_name for n in report.cpu_fallback_nodes] == ["node_Shape_0", "node_Einsum_7"]
    assert not report.ok
    # The log went to the capture, not to the terminal.
    assert "Node placements" not in capfd.readouterr().err


def test_shape_nodes_on_the_cpu_by_choice_still_pass(exported: Exported, monkeypatch: pytest.MonkeyPatch) -> None:
    log = MIXED_PLACEMENT_LOG.replace("Number of nodes: 2", "Number of nodes: 1").replace(
        f"{_V}   Einsum (node_Einsum_7)\n", ""
    )
    monkeypatch.setattr(ort, "InferenceSession", fake_cuda_session(log))
    report = inference_validate_onnx_model(exported.model, exported.inputs, exported.outputs, provider=CUDA)
    assert report.operators.status is CheckStatus.PASSED, report.operators.details
    assert [str(n) for n in report.cpu_fallback_nodes] == ["Shape (node_Shape_0)"]
    assert report.ok


def test_everything_on_the_cpu_under_cuda_fails(exported: Exported, monkeypatch: pytest.MonkeyPatch) -> None:
    log = f"{_V} Node placements\n{_V}  All nodes placed on [CPUExecutionProvider]. Number of nodes: 2\n"
    monkeypatch.setattr(ort, "InferenceSession", fake_cuda_session(log))
    report = inference_validate_onnx_model(exported.model, exported.inputs, exported.outputs, provider=CUDA)
    assert report.operators.status is CheckStatus.FAILED
    assert "none on CUDAExecutionProvider" in report.operators.details


def test_all_nodes_on_cuda_pass_and_a_silent_log_is_not_a_pass(
    exported: Exported, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = f"{_V} Node placements\n{_V}  All nodes placed on [CUDAExecutionProvider]. Number of nodes: 2\n"
    monkeypatch.setattr(ort, "InferenceSession", fake_cuda_session(log))
    report = inference_validate_onnx_model(exported.model, exported.inputs, exported.outputs, provider=CUDA)
    assert report.operators.status is CheckStatus.PASSED and report.cpu_fallback_nodes == ()
    monkeypatch.setattr(ort, "InferenceSession", fake_cuda_session("nothing about placement\n"))
    report = inference_validate_onnx_model(exported.model, exported.inputs, exported.outputs, provider=CUDA)
    assert report.operators.status is CheckStatus.NOT_RUN
    assert "operator placement unchecked" in report.operators.details


# --- the CLI ---------------------------------------------------------------------------------------


@pytest.fixture
def check_model(prefect_logging: None):  # noqa: ANN201
    runner = CliRunner()

    def invoke(*args: str):  # noqa: ANN202
        return runner.invoke(app, ["check-model", *args], catch_exceptions=True)

    return invoke


def test_cli_passes_a_good_version_folder(exported: Exported, check_model) -> None:  # noqa: ANN001
    result = check_model(str(exported.folder))
    assert result.exit_code == 0, (result.output, result.exception)
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in result.output.splitlines()
        if line.count("│") >= 3
    }
    assert {rows.get(name) for name in ("shapes", "numerics", "operators")} == {"passed"}, result.output
    assert result.output.rstrip().splitlines()[-1] == "ok"


def test_cli_fails_a_perturbed_model_with_exit_1(exported: Exported, check_model, tmp_path: Path) -> None:  # noqa: ANN001
    folder = variant(exported, tmp_path, perturb_decoder_weight)
    result = check_model(str(folder / MODEL_FILE), "--atol", "1e-4")
    assert result.exit_code == 1, (result.output, result.exception)
    assert "max abs diff" in result.output and "failed" in result.output
    assert "not ok (numerics failed)" in result.output


def test_cli_missing_path_is_one_error_line_with_exit_2(check_model, tmp_path: Path) -> None:  # noqa: ANN001
    missing = tmp_path / "no-such-model.onnx"
    result = check_model(str(missing))
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and str(missing) in lines[0], result.output


def test_cli_refuses_an_unknown_provider_choice(exported: Exported, check_model) -> None:  # noqa: ANN001
    result = check_model(str(exported.folder), "--provider", "tpu")
    assert result.exit_code == 2
