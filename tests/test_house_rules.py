"""House rules of the code base, checked on the source itself (AST) and with import-linter.

- nothing is named bare `predict` or `inference`;
- public module-level functions are `predict_*` in tasks/prediction/ and `inference_*` in
  tasks/inference/ (classes and their methods, and `_private` functions, are exempt);
- tasks/prediction imports no ML runtime and nothing from tasks.inference;
- tasks/inference imports nothing from tasks.prediction.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tasks.settings import PROJECT_ROOT

ML_RUNTIMES = ("xgboost", "onnxruntime", "torch")
FORBIDDEN_IMPORTS = {
    "prediction": (*ML_RUNTIMES, "tasks.inference"),
    "inference": ("tasks.prediction",),
}
PUBLIC_PREFIX = {"prediction": "predict_", "inference": "inference_"}
BARE_NAMES = {"predict", "inference"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PROJECT_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str | None:
    """`prediction` / `inference` for modules of those packages, else None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "tasks" and parts[1] in PUBLIC_PREFIX else None


def imported_modules(tree: ast.Module, module: str, is_package: bool) -> list[tuple[int, str]]:
    """Every module an import statement (or a literal import_module call) may load, with its line."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.append((node.lineno, base))
            # `from tasks import inference` loads the submodule tasks.inference.
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name != "*"]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
                if isinstance(node.args[0].value, str):
                    found.append((node.lineno, node.args[0].value))
    return found


def rule_violations(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """House-rule violations of one module's source, as `module:line: message`."""
    tree = ast.parse(source)
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in BARE_NAMES:
            out.append(f"{module}:{node.lineno}: function named bare {node.name!r}")
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in BARE_NAMES and isinstance(node.value, ast.Lambda):
                    out.append(f"{module}:{node.lineno}: lambda bound to bare {target.id!r}")
    layer = layer_of(module)
    if layer is None:
        return out
    prefix = PUBLIC_PREFIX[layer]
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not node.name.startswith("_") and not node.name.startswith(prefix):
                out.append(f"{module}:{node.lineno}: public function {node.name!r} is not named {prefix}*")
    for line, imported in imported_modules(tree, module, is_package):
        for forbidden in FORBIDDEN_IMPORTS[layer]:
            if imported == forbidden or imported.startswith(forbidden + "."):
                out.append(f"{module}:{line}: {layer} imports {imported}")
    return out


SOURCES = sorted(p for top in ("tasks", "flows") for p in (PROJECT_ROOT / top).rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PROJECT_ROOT).as_posix())
def test_module_keeps_the_house_rules(path: Path) -> None:
    module = module_name(path)
    assert rule_violations(path.read_text(), module, is_package=path.name == "__init__.py") == []


def test_the_scan_covers_both_layers() -> None:
    layers = {layer_of(module_name(p)) for p in SOURCES}
    assert {"prediction", "inference"} <= layers
    assert any(module_name(p) == "flows.score_partition" for p in SOURCES)
    assert len(SOURCES) >= 25


# --- the scanner itself can fail ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("tasks.scoring.unit_pass", "def predict(x):\n    return x\n", "bare 'predict'"),
        ("flows.people", "class Runner:\n    def inference(self):\n        pass\n", "bare 'inference'"),
        ("flows.steps.partition", "inference = lambda x: x\n", "bare 'inference'"),
        ("tasks.prediction.scores", "def risk_score(p):\n    return p\n", "'risk_score' is not named predict_*"),
        ("tasks.inference.engine", "async def margins(x):\n    return x\n", "'margins' is not named inference_*"),
        ("tasks.prediction.outputs", "import xgboost as xgb\n", "imports xgboost"),
        ("tasks.prediction.outputs", "def predict_x():\n    import torch.nn\n", "imports torch.nn"),
        ("tasks.prediction.outputs", "from onnxruntime import InferenceSession\n", "imports onnxruntime"),
        ("tasks.prediction.outputs", "from tasks.inference.engine import XGBoostEngine\n", "imports tasks.inference"),
        ("tasks.prediction.outputs", "from ..inference import registry\n", "imports tasks.inference"),
        ("tasks.prediction.outputs", "from tasks import inference\n", "imports tasks.inference"),
        ("tasks.prediction.outputs", "import importlib\nimportlib.import_module('xgboost')\n", "imports xgboost"),
        ("tasks.inference.engine", "from tasks.prediction.scores import predict_score\n", "imports tasks.prediction"),
        ("tasks.inference.engine", "from ..prediction import calibration\n", "imports tasks.prediction"),
    ],
)
def test_scanner_flags_a_bad_sample(module: str, source: str, expected: str) -> None:
    found = rule_violations(source, module)
    assert any(expected in v for v in found), found


def test_scanner_accepts_a_good_sample() -> None:
    source = (
        "from __future__ import annotations\n"
        "import numpy as np\n"
        "from tasks.contracts import InferenceOutput\n"
        "from . import scores\n"
        "def predict_thing(x):\n    return x\n"
        "def _helper():\n    pass\n"
        "class Calibrator:\n    def fit(self):\n        pass\n"
    )
    assert rule_violations(source, "tasks.prediction.new_module") == []
    assert rule_violations("import xgboost\ndef inference_margins():\n    pass\n", "tasks.inference.new") == []
    assert rule_violations("import xgboost\ndef train():\n    pass\n", "tasks.demo.training") == []


def test_relative_imports_resolve_from_a_package_init() -> None:
    tree = ast.parse("from .calibration import ProbabilityMap\nfrom ..inference import engine\n")
    modules = {m for _, m in imported_modules(tree, "tasks.prediction", is_package=True)}
    assert "tasks.prediction.calibration" in modules and "tasks.inference" in modules


# --- import-linter -------------------------------------------------------------------------------


def test_import_linter_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    assert lint_imports.is_file(), f"{lint_imports} missing: install the `test` extra"
    result = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    contracts = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert output.count(" KEPT") == len(contracts) >= 3, output
    assert "BROKEN" not in output


# --- flows are wiring ----------------------------------------------------------------------------

FLOW_FILES = sorted(p for p in (PROJECT_ROOT / "flows").glob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", FLOW_FILES, ids=lambda p: p.name)
def test_flow_files_are_short_wiring(path: Path) -> None:
    """A flow module holds flows and their wiring; Prefect tasks live in flows/steps/, logic in tasks/."""
    source = path.read_text()
    lines = [line for line in source.splitlines() if line.strip()]
    assert len(lines) <= 60, f"{path.name}: {len(lines)} non-blank lines"
    tree = ast.parse(source)
    decorated = {
        ast.unparse(d.func if isinstance(d, ast.Call) else d)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        for d in node.decorator_list
    }
    assert "task" not in decorated, f"{path.name} defines a Prefect task: it belongs in flows/steps/"


def test_prefect_is_imported_only_under_flows() -> None:
    """Outside flows/ nothing imports Prefect, not even inside a function (the contracts see those too,
    this names the line)."""
    offenders = []
    for path in sorted(p for top in ("tasks", "cli") for p in (PROJECT_ROOT / top).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            offenders += [
                f"{path.relative_to(PROJECT_ROOT)}:{node.lineno} {n}"
                for n in names
                if n.split(".")[0] in ("prefect", "prefect_dask")
            ]
    assert offenders == []
