"""The S3 source against the local folder: the same partition, read and scored both ways. JSON lines.

    .venv/bin/python bench/s3_source.py --rows 1000000 --repeat 3

The bench starts an S3-compatible server (moto, on 127.0.0.1: no network, so the ratio says what
the object-store path costs in requests and copies, not what a real bucket's latency adds) and
uploads the bench partition's file byte for byte. Each round measures, in this order:

    read local / read s3    the raw read alone, in this process: the work units cut from the
                            footers, then every unit's chunks (`unit_chunks`), as scoring reads them
    e2e local / e2e s3      `score run credit_risk --date D` as a child process, the shipped job
                            and a copy of it whose `source.parquet.url` names the bucket

`ratio` = s3 / local of the medians. Before the rows are trusted, the two runs' predictions are
compared row for row.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from _data import DEMO_JOB, BenchData, add_data_arguments, data_from_args
from _harness import SCORE, add_repeat_argument, checked, child_env, emit, measured_child, median, print_table

BUCKET = "bench"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def started_s3(log_path: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    moto = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log_file:
        server = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)], stdout=log_file, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"error: moto_server did not start on {endpoint}; see {log_path}") from None
            time.sleep(0.2)
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench-secret",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    return server, env


def uploaded_partition(data: BenchData, env: dict[str, str]) -> str:
    """The bench partition's files under s3://bench/raw/credit_risk/date=D/; the spec's url template."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket=BUCKET)
    for path in sorted(data.raw_dir.glob("*.parquet")):
        client.upload_file(str(path), BUCKET, f"raw/{DEMO_JOB}/date={data.date}/{path.name}")
    return f"s3://{BUCKET}/raw/{DEMO_JOB}/date={{date}}/"


def s3_jobs_dir(base: Path, url: str) -> Path:
    import yaml

    import tasks  # noqa: F401
    from tasks.jobspec import loaded_yaml
    from tasks.settings import current_settings

    target = base / "jobs-variants" / "s3-source"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(current_settings().jobs_dir, target)
    spec_path = target / f"{DEMO_JOB}.yaml"
    spec = loaded_yaml(spec_path)
    spec["source"] = {"parquet": {"url": url}}
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return target


def measured_read(location: str, chunk_rows: int) -> dict:
    from tasks.scoring.units import partition_work_units, unit_chunks
    from tasks.sources import ParquetPartition

    start = time.perf_counter()
    rows = 0
    for unit in partition_work_units(ParquetPartition(location), chunk_rows):
        for _, table in unit_chunks(unit, chunk_rows):
            rows += table.num_rows
    return {"wall_s": round(time.perf_counter() - start, 3), "rows": rows}


def predictions(data: BenchData):  # noqa: ANN201
    import polars as pl

    folder = data.data_dir / "output" / DEMO_JOB / "predictions" / f"date={data.date}"
    return pl.read_parquet(sorted(folder.glob("*.parquet"))).drop("run_id").sort("entity_id")


def measured_e2e(data: BenchData, env: dict[str, str], what: str, run_index: int) -> dict:
    log = data.data_dir / "bench-logs" / f"s3-source-{what}-{run_index}.log"
    run = checked(
        measured_child([SCORE, "run", DEMO_JOB, "--date", data.date], env=env, log_path=log), f"score run ({what})"
    )
    return {"wall_s": round(run.wall_s, 3), "maxrss_mb": round(run.maxrss_mb, 1), "log": str(log)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    add_data_arguments(parser, rows=1_000_000)
    add_repeat_argument(parser)
    parser.add_argument(
        "--chunk-rows", type=int, default=50_000, help="rows per chunk of the read figures (the job's default)"
    )
    args = parser.parse_args()
    data = data_from_args(args)
    server, s3_env = started_s3(data.data_dir / "bench-logs" / "moto.log")
    try:
        url = uploaded_partition(data, s3_env)
        os.environ.update(s3_env)
        remote = url.format(date=data.date).rstrip("/")
        jobs = s3_jobs_dir(args.data_dir.resolve(), url)
        local_env = child_env(data)
        remote_env = {**child_env(data, jobs_dir=jobs), **s3_env}
        reads: dict[str, list[float]] = {"local": [], "s3": []}
        e2e: dict[str, list[dict]] = {"local": [], "s3": []}
        for i in range(args.repeat):
            for what, location in (("local", str(data.raw_dir)), ("s3", remote)):
                got = measured_read(location, args.chunk_rows)
                if got["rows"] != data.rows:
                    raise SystemExit(f"error: the {what} read gave {got['rows']} rows, not {data.rows}")
                reads[what].append(got["wall_s"])
            e2e["local"].append(measured_e2e(data, local_env, "local", i))
            local_rows = predictions(data) if i == 0 else None
            e2e["s3"].append(measured_e2e(data, remote_env, "s3", i))
            if local_rows is not None and not predictions(data).equals(local_rows):
                raise SystemExit("error: the S3 run's predictions differ from the local run's")
            print(
                f"round {i + 1}/{args.repeat}: read {reads['local'][-1]:.2f} / {reads['s3'][-1]:.2f} s, "
                f"e2e {e2e['local'][-1]['wall_s']:.2f} / {e2e['s3'][-1]['wall_s']:.2f} s",
                file=sys.stderr,
                flush=True,
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
    rows = []
    for figure, local, remote_runs in (
        ("read", reads["local"], reads["s3"]),
        ("e2e", [r["wall_s"] for r in e2e["local"]], [r["wall_s"] for r in e2e["s3"]]),
    ):
        local_s, s3_s = median(local), median(remote_runs)
        record = {
            "bench": "s3_source",
            "figure": figure,
            "rows": data.rows,
            "repeat": args.repeat,
            "local_wall_s": round(local_s, 3),
            "s3_wall_s": round(s3_s, 3),
            "ratio": round(s3_s / local_s, 2),
            "local_runs": local,
            "s3_runs": remote_runs,
        }
        emit(record)
        rows.append([figure, record["local_wall_s"], record["s3_wall_s"], f"{record['ratio']:.2f}"])
    print_table(
        f"S3 source vs local folder: {data.rows:,} rows (median of {args.repeat})",
        ["figure", "local s", "s3 s", "s3 / local"],
        rows,
    )
    print(json.dumps({"bench": "s3_source", "predictions_identical": True}))


if __name__ == "__main__":
    main()
