"""A scoring install has no torch and no onnxscript (the `demo` extra has them): every module but the
gearbox demo's training imports without them, and `score run` scores a night. They are made unimportable
in a child process by stand-in packages first on its path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.settings import PROJECT_ROOT, Settings
from tests.conftest import DEMO_JOB, DemoEnv

SCORE = str(Path(sys.executable).with_name("score"))
DEMO_ONLY = ("torch", "onnxscript")


def _without_demo_extra(tmp_path: Path) -> dict[str, str]:
    for name in DEMO_ONLY:
        (tmp_path / "absent" / name).mkdir(parents=True, exist_ok=True)
        (tmp_path / "absent" / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError('{name} is not installed (a scoring install)', name='{name}')\n"
        )
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "absent"), str(PROJECT_ROOT)])}


def test_every_scoring_module_imports_without_the_demo_extra(tmp_path: Path) -> None:
    modules = sorted(
        ".".join(p.relative_to(PROJECT_ROOT).with_suffix("").parts).removesuffix(".__init__")
        for package in ("tasks", "flows", "cli")
        for p in (PROJECT_ROOT / package).rglob("*.py")
    )
    scoring = [m for m in modules if m != "tasks.demo.gearbox_training"]
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\nprint('ok', len(sys.argv) - 1)\n"
    done = subprocess.run(
        [sys.executable, "-c", code, *scoring],
        env=_without_demo_extra(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and done.stdout.strip() == f"ok {len(scoring)}", done.stderr[-3000:]
    # The stand-ins work: the gearbox demo's training does need torch.
    done = subprocess.run(
        [sys.executable, "-c", "import tasks.demo.gearbox_training"],
        env=_without_demo_extra(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode != 0 and "torch is not installed" in done.stderr


@pytest.mark.usefixtures("prefect_harness")
def test_a_night_is_scored_without_the_demo_extra(demo_env: DemoEnv, fresh_data: Settings, tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    env = {**_without_demo_extra(tmp_path), "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    day = demo_env.plan.scoring_dates[-1].isoformat()
    done = subprocess.run(
        [SCORE, "run", DEMO_JOB, "--date", day], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "succeeded" in done.stdout
