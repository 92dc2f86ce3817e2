"""The benchmark scripts' job variants are specs the product accepts: a variant it refuses measured nothing for a
whole release (bench/e2e.py wrote `monitoring.adverse_decisions` beside `decisions.<d>.action`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tasks.jobspec import load_job_spec
from tasks.settings import PROJECT_ROOT, Settings

sys.path.insert(0, str(PROJECT_ROOT / "bench"))
from e2e import VARIANTS, variant_jobs_dir  # noqa: E402


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_e2e_variant_is_a_spec_the_product_loads_with_the_reasons_it_names(
    variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = load_job_spec("credit_risk", Settings())
    jobs_dir, wanted = variant_jobs_dir(tmp_path, variant)
    monkeypatch.setenv("SCORING_JOBS_DIR", str(jobs_dir))
    spec = load_job_spec("credit_risk", Settings())
    assert list(spec.prediction.reasons.for_decisions) == wanted
    # Only the reasons change: outcome monitoring still acts on the decisions the shipped spec marks.
    assert spec.monitoring.model_dump() == shipped.monitoring.model_dump()
    assert spec.prediction.decisions == shipped.prediction.decisions


def test_the_domain_pipeline_bench_scores_and_publishes_a_partition(tmp_path: Path) -> None:
    """bench/spine_throughput.py calls the publish directly, not through a flow: when the publish's signature or its
    ledger rule changed, it died before printing a figure and nothing noticed for several sessions."""
    import json
    import subprocess

    run = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "bench" / "spine_throughput.py"), "--rows", "3000", "--chunk-rows", "1000"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    figures = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert [f["scenario"] for f in figures] == ["reasons_non_approved", "reasons_off"]
    assert all(f["rows"] == 3000 and f["rows_per_s"] > 0 for f in figures)
    assert figures[0]["rows_with_reasons"] > 0 == figures[1]["rows_with_reasons"]
