"""Both jobs scored with `device: cpu` and `device: cuda`: providers actually used and rows/s, as JSON.

    .venv/bin/python bench/gpu_scoring.py --credit-rows 200000 --gearbox-windows 2000

Prepares the demo data and models in a temporary folder, writes copies of the job specs that
differ only in `inference.device`, and scores one partition of each job per device through the
domain pipeline (no Prefect). The providers come from the engines themselves (XGBoost's config,
ONNX Runtime's `get_providers()`), so a silent CPU fallback shows. Where no GPU is usable the cuda
line carries the `DeviceUnavailable` message instead of figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import tempfile
from pathlib import Path

import yaml

import tasks  # noqa: F401
from tasks.demo.credit_data import write_demo_partitions
from tasks.demo.setup import DEMO_JOB, GEARBOX_JOB, prepared_demo, prepared_gearbox_demo
from tasks.errors import DeviceUnavailable
from tasks.jobspec import loaded_yaml
from tasks.scoring.prepared import prepared_job
from tasks.scoring.summary import score_partition_chunks
from tasks.settings import PROJECT_ROOT, Settings
from tasks.sinks.parquet_store import discard_staged, output_dirs


def _jobs_with_device(folder: Path, device: str) -> Path:
    target = folder / f"jobs-{device}"
    target.mkdir()
    for job in (DEMO_JOB, GEARBOX_JOB):
        spec = loaded_yaml(PROJECT_ROOT / "jobs" / f"{job}.yaml")
        spec.setdefault("inference", {})["device"] = device
        (target / f"{job}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return target


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--credit-rows", type=int, default=200_000)
    parser.add_argument("--gearbox-windows", type=int, default=2_000, help="windows per turbine on the scored day")
    args = parser.parse_args()
    day = dt.date(2026, 1, 31)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        base = Settings(data_dir=tmp / "data")
        prepared_demo(base, days=1, rows_per_day=20_000, train_days=3, seed=7, end=day)
        write_demo_partitions(
            base.data_dir / "raw" / DEMO_JOB,
            base.data_dir / "labels" / DEMO_JOB,
            [day],
            rows_per_day=args.credit_rows,
            seed=7,
            shift_days=0,
        )
        prepared_gearbox_demo(base, days=1, windows_per_day=args.gearbox_windows, train_days=7, seed=7, end=day)
        for device in ("cpu", "cuda"):
            settings = Settings(data_dir=base.data_dir, jobs_dir=_jobs_with_device(tmp, device))
            for job in (DEMO_JOB, GEARBOX_JOB):
                line = {"bench": "gpu_scoring", "job": job, "device_asked": device}
                try:
                    prepared = prepared_job(job, day, settings)
                except DeviceUnavailable as exc:
                    print(json.dumps({**line, "error": str(exc)}))
                    continue
                dirs = output_dirs(settings, job)
                run_id = f"bench-{device}"
                summary = score_partition_chunks(
                    prepared, run_id=run_id, partition_date=day, chunk_rows=prepared.spec.chunk_rows, dirs=dirs
                )
                for folder in dirs.all():
                    discard_staged(folder, run_id)
                stats = summary.inference_stats()
                feature_models = {ref.name: list(m.engine.providers) for ref, m in prepared.feature_models}
                print(
                    json.dumps(
                        {
                            **line,
                            "rows": summary.rows_scored,
                            "providers": stats["providers"],
                            "feature_model_providers": feature_models,
                            "inference_rows_per_s": round(stats["inference_rows_per_s"] or 0),
                            "end_to_end_rows_per_s": round(stats["end_to_end_rows_per_s"] or 0),
                            "latency_ms_p50": round(stats["latency_ms_p50"], 2),
                            "latency_ms_p99": round(stats["latency_ms_p99"], 2),
                        }
                    )
                )
        shutil.rmtree(tmp / "data", ignore_errors=True)


if __name__ == "__main__":
    main()
