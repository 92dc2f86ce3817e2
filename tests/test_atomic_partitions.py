"""Parquet partitions swap atomically: a reader sees one complete run, the old one or the new one."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.parquet_store import publish_staged_partition, staging_dir, versions_dir, write_staged_chunk

SCHEMA = pa.schema([("run_id", pa.string()), ("row", pa.int64())])
PARTITION = "2026-03-10"


def _stage(dataset: Path, run_id: str, rows: int, files: int = 3) -> None:
    per_file = -(-rows // files)
    for chunk in range(files):
        first = chunk * per_file
        n = max(min(per_file, rows - first), 0)
        write_staged_chunk(dataset, run_id, chunk, pa.table({"run_id": [run_id] * n, "row": list(range(first, first + n))}, schema=SCHEMA))


def _read(partition: Path) -> pa.Table:
    # What a careful reader does: resolve the partition once, then read that folder.
    return pq.read_table(os.path.realpath(partition), schema=SCHEMA)


def test_republishing_leaves_only_the_last_run_and_keeps_the_one_before(tmp_path: Path) -> None:
    dataset = tmp_path / "predictions"
    for i, run in enumerate(["run-a", "run-b", "run-c"]):
        _stage(dataset, run, 100 + i)
        publish_staged_partition(dataset, PARTITION, run, SCHEMA)
    partition = dataset / f"date={PARTITION}"
    table = _read(partition)
    assert set(table["run_id"].to_pylist()) == {"run-c"} and table.num_rows == 102
    assert partition.is_symlink()
    assert sorted(p.name for p in versions_dir(dataset, PARTITION).iterdir()) == ["run-b", "run-c"]
    assert not staging_dir(dataset, "run-c").exists()
    # Readers walking the dataset see one entry per partition, nothing staged or hidden.
    assert [p.name for p in dataset.iterdir()] == [f"date={PARTITION}"]


def test_a_killed_runs_leftovers_go_with_the_next_publish(tmp_path: Path) -> None:
    dataset = tmp_path / "predictions"
    _stage(dataset, "run-a", 10)
    publish_staged_partition(dataset, PARTITION, "run-a", SCHEMA)
    # A run killed after renaming its staging into a version, with its link half made.
    _stage(dataset, "killed", 7)
    staging_dir(dataset, "killed").rename(versions_dir(dataset, PARTITION) / "killed")
    (dataset / f".date={PARTITION}.killed.link").symlink_to("nowhere")
    assert _read(dataset / f"date={PARTITION}").num_rows == 10  # still run-a, complete
    _stage(dataset, "run-b", 20)
    publish_staged_partition(dataset, PARTITION, "run-b", SCHEMA)
    assert sorted(p.name for p in versions_dir(dataset, PARTITION).iterdir()) == ["run-a", "run-b"]
    assert [p.name for p in dataset.iterdir()] == [f"date={PARTITION}"]
    assert set(_read(dataset / f"date={PARTITION}")["run_id"].to_pylist()) == {"run-b"}


def test_an_empty_run_replaces_the_partition_with_zero_rows(tmp_path: Path) -> None:
    dataset = tmp_path / "quarantine"
    _stage(dataset, "run-a", 50)
    publish_staged_partition(dataset, PARTITION, "run-a", SCHEMA)
    publish_staged_partition(dataset, PARTITION, "run-b", SCHEMA)
    assert _read(dataset / f"date={PARTITION}").num_rows == 0


def test_a_plain_folder_partition_is_converted_once(tmp_path: Path) -> None:
    dataset = tmp_path / "predictions"
    legacy = dataset / f"date={PARTITION}"
    legacy.mkdir(parents=True)
    pq.write_table(pa.table({"run_id": ["old"] * 5, "row": list(range(5))}, schema=SCHEMA), legacy / "part-old.parquet")
    _stage(dataset, "run-a", 8)
    publish_staged_partition(dataset, PARTITION, "run-a", SCHEMA)
    assert legacy.is_symlink() and _read(legacy).num_rows == 8


def test_a_reader_never_sees_a_mix_while_runs_are_published(tmp_path: Path) -> None:
    dataset = tmp_path / "predictions"
    rows_of = {f"run-{i:03d}": 200 + 37 * i for i in range(40)}
    first = next(iter(rows_of))
    _stage(dataset, first, rows_of[first])
    publish_staged_partition(dataset, PARTITION, first, SCHEMA)
    done = threading.Event()
    seen: list[tuple[str, int]] = []
    problems: list[str] = []

    def reader() -> None:
        while not done.is_set():
            table = _read(dataset / f"date={PARTITION}")
            runs = set(table["run_id"].to_pylist())
            if len(runs) != 1:
                problems.append(f"runs mixed: {sorted(runs)}")
                continue
            run = runs.pop()
            if table.num_rows != rows_of[run] or sorted(table["row"].to_pylist()) != list(range(rows_of[run])):
                problems.append(f"{run}: {table.num_rows} rows of {rows_of[run]}")
            seen.append((run, table.num_rows))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for run, rows in list(rows_of.items())[1:]:
            _stage(dataset, run, rows)
            publish_staged_partition(dataset, PARTITION, run, SCHEMA)
    finally:
        done.set()
        thread.join()
    assert not problems, problems[:5]
    # The reader really overlapped the publishing: it saw several different runs.
    assert len({run for run, _ in seen}) >= 3, seen[:10]
