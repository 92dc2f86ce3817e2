"""Importing the command line or the scoring flow loads no heavy library, so `score --help` is instant.

Great Expectations, matplotlib, numba, scipy.stats and the ML runtimes are imported where they are
used (reading a GX suite, drawing a page, building a TreeSHAP kernel, measuring drift, building an
engine). Each check runs in a fresh interpreter: this test session has long imported all of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.settings import PROJECT_ROOT

HEAVY = (
    "great_expectations",
    "matplotlib",
    "numba",
    "scipy.stats",
    "xgboost",
    "lightgbm",
    "catboost",
    "sklearn",
    "skops",
    "onnxruntime",
    "torch",
)
SCORE = Path(sys.executable).parent / "score"

_REPORT = f"import json, sys\nheavy = {HEAVY!r}\nprint(json.dumps([h for h in heavy if h in sys.modules]))\n"


def heavy_modules_after(code: str) -> list[str]:
    """The modules of HEAVY loaded once `code` ran in a fresh interpreter (a submodule loads its package)."""
    result = subprocess.run(
        [sys.executable, "-c", code + "\n" + _REPORT],
        cwd=PROJECT_ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["cli.score", "flows.score_partition"])
def test_importing_loads_no_heavy_library(module: str) -> None:
    loaded = heavy_modules_after(f"import {module}")
    assert loaded == [], (
        f"`import {module}` loads {loaded}; `python -X importtime -c 'import {module}'` shows through what"
    )


def test_help_runs_without_a_heavy_library() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['score', '--help']\n"
        "from cli.score import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n"
    )
    assert heavy_modules_after(code) == []


def test_score_help_exits_0() -> None:
    command = [str(SCORE)] if SCORE.is_file() else [sys.executable, "-c", "from cli.score import main; main()"]
    result = subprocess.run(
        [*command, "--help"], cwd=PROJECT_ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Usage" in result.stdout and "run" in result.stdout


def test_the_probe_sees_a_heavy_import() -> None:
    # The TreeSHAP kernels module is where numba loads; the probe must notice it.
    assert "numba" in heavy_modules_after("import tasks.inference.treeshap_kernels")


def test_a_runs_calibration_and_drift_load_no_scipy_stats_and_arrow_gives_memory_back(demo_env) -> None:
    """The prepared job's probability map (Beta quantiles) and the drift measures of a chunk use
    scipy.special only: scipy.stats and scipy.spatial cost a run ~45 MB and ~1 s. Arrow allocates
    from the C library's malloc, which returns freed chunks, not from its caching default."""
    from conftest import DEMO_JOB

    day = demo_env.plan.scoring_dates[-1]
    code = (
        # XGBoost imports scikit-learn whenever it is installed (its sklearn wrapper), and scikit-learn
        # loads scipy.stats and scipy.spatial: XGBoost's cost of the `sklearn` extra (docs/guides/onnx.md,
        # "Which ONNX output scores"), not the product's. Hidden here, so the test keeps measuring the product's paths.
        "import sys; sys.modules['sklearn'] = None\n"
        "import datetime as dt, numpy as np, pyarrow as pa\n"
        "from tasks.scoring.prepared import prepared_job\n"
        "from tasks.quality.drift import drift_metrics\n"
        "from tasks.settings import current_settings\n"
        f"job = prepared_job({DEMO_JOB!r}, dt.date.fromisoformat({day.isoformat()!r}), current_settings())\n"
        "job.prediction_plan.estimate_map.predict_calibrated_probability(np.linspace(-6, 3, 50))\n"
        "metrics = [drift_metrics(h, h) for h in job.drift_baselines['reference'].values()]\n"
        "assert metrics and all(m['psi'] == 0.0 for m in metrics), metrics\n"
        "assert pa.default_memory_pool().backend_name == 'system', pa.default_memory_pool().backend_name\n"
        "import sys\n"
        "assert 'scipy.spatial' not in sys.modules\n"
    )
    assert "scipy.stats" not in heavy_modules_after(code)
