"""Throughput of one partition through the domain pipeline (no Prefect), as JSON lines.

    .venv/bin/python bench/spine_throughput.py --rows 200000 --chunk-rows 50000

Generates a demo day of `--rows` rows into a temporary data dir, trains the demo model on two
smaller days, then scores the day twice: with reasons for non-approved rows (the job's default)
and with reasons off, printing rows/s and the run's inference latency figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import tasks  # noqa: F401
from tasks.demo.credit_data import write_demo_partitions
from tasks.demo.setup import prepared_demo
from tasks.runs.lease import started_run
from tasks.runs.ticket import run_ticket
from tasks.scoring.prepared import prepared_job
from tasks.scoring.summary import score_partition_chunks
from tasks.settings import Settings
from tasks.sinks.duckdb_warehouse import DuckDBWarehouse
from tasks.sinks.parquet_store import output_dirs
from tasks.sinks.publish import published_partition


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp))
        day = dt.date(2026, 1, 31)
        prepared_demo(settings, days=1, rows_per_day=20_000, train_days=2, seed=7, end=day)
        write_demo_partitions(
            settings.data_dir / "raw" / "credit_risk",
            settings.data_dir / "labels" / "credit_risk",
            [day],
            rows_per_day=args.rows,
            seed=7,
            shift_days=0,
        )
        prepared = prepared_job("credit_risk", day, settings)
        no_reasons = replace(
            prepared,
            spec=prepared.spec.model_copy(
                update={
                    "prediction": prepared.spec.prediction.model_copy(
                        update={"reasons": prepared.spec.prediction.reasons.model_copy(update={"for_decisions": []})}
                    )
                }
            ),
        )
        for label, job in (("reasons_non_approved", prepared), ("reasons_off", no_reasons)):
            run_id = f"bench-{label}"
            warehouse = DuckDBWarehouse(settings.duckdb_path)
            # Opened in the ledger as a run opens itself under its lease: the publish commits only an open run.
            started_run(warehouse, settings, run_ticket(job, run_id=run_id, partition_date=day, chunk_rows=None))
            start = time.perf_counter()
            summary = score_partition_chunks(
                job,
                run_id=run_id,
                partition_date=day,
                chunk_rows=args.chunk_rows,
                dirs=output_dirs(settings, "credit_risk"),
            )
            published_partition(
                warehouse,
                output_dirs(settings, "credit_risk"),
                job="credit_risk",
                partition_date=day,
                run_id=run_id,
                counts=summary.ledger_counts(),
                page_html=None,
                warnings=[],
                ended_at=dt.datetime.now(dt.UTC),
            )
            wall = time.perf_counter() - start
            print(
                json.dumps(
                    {
                        "bench": "spine_throughput",
                        "scenario": label,
                        "rows": summary.rows_read,
                        "chunk_rows": args.chunk_rows,
                        "wall_s": round(wall, 3),
                        "rows_per_s": round(summary.rows_read / wall),
                        "rows_with_reasons": summary.rows_with_reasons,
                        **summary.inference_stats(),
                    }
                )
            )


if __name__ == "__main__":
    main()
