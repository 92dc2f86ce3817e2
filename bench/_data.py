"""Bench data shared by limit.py, e2e.py, memory.py and profile_e2e.py: prepared once, then reused.

    .venv/bin/python bench/_data.py --rows 1000000          # prepare (or find) the data, print its manifest

Layout under `--data-dir` (default /tmp/scoring-bench):

    credit-n<rows>-s<seed>/        a SCORING_DATA_DIR of its own: the demo credit model (trained on
                                   two small demo days), one raw partition of <rows> rows for
                                   BENCH_DATE, outputs and warehouse of the runs benched on it
        bench_data.json            the manifest, written last: a prepared dir is reused only when
                                   its manifest matches rows, seed, row groups and generator
    prefect-home/                  PREFECT_HOME of every benched child (its own SQLite API database,
                                   created once, so no run pays the migrations and no other
                                   process's ~/.prefect is touched)

The partition is generated in batches with the demo generator (`generate_day`, one seed per
batch) and written through one ParquetWriter with row groups of `--row-group-rows` (≤ the job's
chunk size, since a row group is read whole): 10 M rows never sit in memory at once.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

# The project's modules, polars and pyarrow are imported where used: bench/limit.py's timed child
# imports this module for its arguments and must not pay for the demo generator and trainer.

DEFAULT_BASE = Path("/tmp/scoring-bench")
BENCH_DATE = dt.date(2026, 1, 31)
GENERATOR = "credit_data.generate_day/batched-v1"
MAX_ROWS = 10_000_000
"""The suite quarantines entity ids that are not `APP-YYYYMMDD-ddddddd`: seven digits per day."""
TRAIN_ROWS_PER_DAY = 20_000
TRAIN_DAYS = 2
REPO_ROOT = Path(__file__).resolve().parents[1]
DEMO_JOB = "credit_risk"


@dataclass(frozen=True)
class BenchData:
    data_dir: Path
    prefect_home: Path
    raw_dir: Path
    date: str
    rows: int
    seed: int
    row_group_rows: int
    model_version: str
    model_path: Path

    def manifest(self) -> dict:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}


def add_data_arguments(parser: argparse.ArgumentParser, *, rows: int | None) -> None:
    """The data options every bench script shares; `rows=None` leaves out --rows (memory.py has --sizes)."""
    if rows is not None:
        parser.add_argument(
            "--rows", type=int, default=rows, help=f"rows of the raw partition (default {rows:,}, at most {MAX_ROWS:,})"
        )
    parser.add_argument("--seed", type=int, default=7, help="seed of the demo generator and the model (default 7)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_BASE, help=f"bench data root (default {DEFAULT_BASE})")
    parser.add_argument(
        "--row-group-rows",
        type=int,
        default=50_000,
        help="Parquet row group size of the raw partition; keep it ≤ the chunk size (default 50,000)",
    )
    parser.add_argument(
        "--gen-batch-rows",
        type=int,
        default=250_000,
        help="rows generated per batch while writing the partition (default 250,000)",
    )


def _entity_ids_from(offset: int, date: dt.date):  # noqa: ANN202
    import polars as pl

    # generate_day numbers every batch from 0; renumber so ids stay unique over the partition.
    # Blank ids are the generator's dirt and stay blank.
    number = (pl.int_range(pl.len(), dtype=pl.Int64) + offset).cast(pl.String).str.zfill(7)
    return (
        pl.when(pl.col("entity_id") == "")
        .then(pl.lit(""))
        .otherwise(pl.concat_str([pl.lit(f"APP-{date:%Y%m%d}-"), number]))
        .alias("entity_id")
    )


def write_partition(
    raw_dir: Path, *, rows: int, seed: int, date: dt.date, row_group_rows: int, batch_rows: int
) -> None:
    """Replace `raw_dir` with one Parquet file of `rows` demo rows, generated and written batch by batch."""
    import pyarrow.parquet as pq

    from tasks.demo.credit_data import DayPlan, generate_day

    raw_dir.mkdir(parents=True, exist_ok=True)
    for old in raw_dir.glob("*.parquet"):
        old.unlink()
    target = raw_dir / "part-0.parquet"
    partial = raw_dir / "part-0.parquet.partial"
    writer = None
    try:
        for index, offset in enumerate(range(0, rows, batch_rows)):
            n = min(batch_rows, rows - offset)
            raw, _labels = generate_day(DayPlan(date=date, rows=n, shifted=False), seed=seed * 100_003 + index)
            table = raw.with_columns(_entity_ids_from(offset, date)).to_arrow()
            if writer is None:
                writer = pq.ParquetWriter(partial, table.schema)
            writer.write_table(table.cast(writer.schema), row_group_size=row_group_rows)
    finally:
        if writer is not None:
            writer.close()
    partial.rename(target)


def warmup_flow(env: dict[str, str], where: str) -> None:
    """Run one empty flow with `env` (its PREFECT_HOME or PREFECT_API_URL), so that the API's database has its first
    flow run before anything is timed; `where` names that API in the error."""
    code = "import tasks\nfrom prefect import flow\n@flow\ndef bench_warmup():\n    return 1\nbench_warmup()\n"
    warmup = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    if warmup.returncode != 0:
        raise RuntimeError(f"the warm-up flow {where} failed:\n{(warmup.stdout + warmup.stderr)[-3000:]}")


def _warm_prefect_home(prefect_home: Path) -> None:
    """Run one empty flow so that the API database exists before anything is timed."""
    marker = prefect_home / ".bench-warm"
    if marker.exists():
        return
    prefect_home.mkdir(parents=True, exist_ok=True)
    from tasks import TELEMETRY_OFF

    warmup_flow({**os.environ, "PREFECT_HOME": str(prefect_home), **TELEMETRY_OFF}, f"in PREFECT_HOME={prefect_home}")
    marker.write_text("ok\n")


def _has_health(manifest: dict) -> bool:
    metadata = Path(manifest["model_path"]).parent / "metadata.json"
    return metadata.exists() and bool(json.loads(metadata.read_text()).get("health"))


def prepared_bench_data(
    *,
    rows: int,
    seed: int = 7,
    base: Path = DEFAULT_BASE,
    row_group_rows: int = 50_000,
    gen_batch_rows: int = 250_000,
    log=print,  # noqa: ANN001
) -> BenchData:
    """The bench data dir for (rows, seed, row groups): reused when its manifest matches, else prepared."""
    import tasks  # noqa: F401  (telemetry off before Prefect loads)
    from tasks.settings import Settings

    if not 1 <= rows <= MAX_ROWS:
        raise SystemExit(f"error: --rows must be within 1..{MAX_ROWS:,} (entity ids have seven digits per day)")
    if row_group_rows < 1 or gen_batch_rows < 1:
        raise SystemExit("error: --row-group-rows and --gen-batch-rows must be positive")
    base = base.resolve()
    data_dir = base / f"credit-n{rows}-s{seed}"
    prefect_home = base / "prefect-home"
    manifest_path = data_dir / "bench_data.json"
    settings = Settings(data_dir=data_dir)
    raw_dir = settings.raw_partition_dir(DEMO_JOB, BENCH_DATE.isoformat())
    wanted = {
        "rows": rows,
        "seed": seed,
        "row_group_rows": row_group_rows,
        "date": BENCH_DATE.isoformat(),
        "generator": GENERATOR,
    }
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        # A model registered before model health has no `health` reference: its runs would skip attribution and PCA.
        if (
            {k: manifest.get(k) for k in wanted} == wanted
            and (raw_dir / "part-0.parquet").exists()
            and _has_health(manifest)
        ):
            _warm_prefect_home(prefect_home)
            return BenchData(
                data_dir=data_dir,
                prefect_home=prefect_home,
                raw_dir=raw_dir,
                date=BENCH_DATE.isoformat(),
                rows=rows,
                seed=seed,
                row_group_rows=row_group_rows,
                model_version=manifest["model_version"],
                model_path=Path(manifest["model_path"]),
            )
        manifest_path.unlink()
    start = time.perf_counter()
    log(
        f"preparing bench data in {data_dir}: demo model on {TRAIN_DAYS}×{TRAIN_ROWS_PER_DAY:,} rows, "
        f"then {rows:,} raw rows for {BENCH_DATE}"
    )
    # The demo set-up keeps a registered model: one from before model health must be trained again.
    for stale in ("raw", "models", "output", "warehouse.duckdb"):
        if (data_dir / stale).is_dir():
            shutil.rmtree(data_dir / stale)
        elif (data_dir / stale).exists():
            (data_dir / stale).unlink()
    from tasks.demo.setup import prepared_demo
    from tasks.inference.registry import inference_model_artifact

    plan = prepared_demo(
        settings, days=1, rows_per_day=TRAIN_ROWS_PER_DAY, train_days=TRAIN_DAYS, seed=seed, end=BENCH_DATE
    )
    write_partition(
        raw_dir, rows=rows, seed=seed, date=BENCH_DATE, row_group_rows=row_group_rows, batch_rows=gen_batch_rows
    )
    artifact = inference_model_artifact(settings.model_registry_dir(DEMO_JOB), plan.model_version)
    _warm_prefect_home(prefect_home)
    data = BenchData(
        data_dir=data_dir,
        prefect_home=prefect_home,
        raw_dir=raw_dir,
        date=BENCH_DATE.isoformat(),
        rows=rows,
        seed=seed,
        row_group_rows=row_group_rows,
        model_version=plan.model_version,
        model_path=artifact.model_path,
    )
    manifest_path.write_text(
        json.dumps(
            {**data.manifest(), "generator": GENERATOR, "prepared_s": round(time.perf_counter() - start, 1)}, indent=2
        )
        + "\n"
    )
    log(f"prepared in {time.perf_counter() - start:.1f} s")
    return data


def data_from_args(args: argparse.Namespace) -> BenchData:
    return prepared_bench_data(
        rows=args.rows,
        seed=args.seed,
        base=args.data_dir,
        row_group_rows=args.row_group_rows,
        gen_batch_rows=args.gen_batch_rows,
        log=lambda m: print(m, file=sys.stderr, flush=True),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Prepare (or reuse) the bench data dir and print its manifest as JSON."
    )
    add_data_arguments(parser, rows=1_000_000)
    args = parser.parse_args()
    data = data_from_args(args)
    print(
        json.dumps(
            {
                "bench": "data",
                **data.manifest(),
                "raw_bytes": sum(p.stat().st_size for p in data.raw_dir.glob("*.parquet")),
            }
        )
    )


if __name__ == "__main__":
    main()
