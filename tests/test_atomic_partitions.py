"""Parquet partitions swap atomically, all datasets at once: a reader sees one complete run, the old one or the new one."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.sinks.parquet_store import PartitionStore, staging_dir, write_staged_chunk

SCHEMA = pa.schema([("run_id", pa.string()), ("row", pa.int64())])
PARTITION = "2026-03-10"


def _store(root: Path) -> PartitionStore:
    datasets = {
        "predictions": root / "predictions",
        "quarantine": root / "quarantine",
        "fallback_report": root / "reports" / "fallback",
    }
    return PartitionStore(root=root, datasets=datasets, schemas=dict.fromkeys(datasets, SCHEMA))


def _stage(store: PartitionStore, run_id: str, rows: int, files: int = 3) -> None:
    """Stage `rows` predictions, `rows // 10` quarantined rows and one fallback row for the run."""
    for name, n_rows in (("predictions", rows), ("quarantine", rows // 10), ("fallback_report", 1)):
        per_file = -(-n_rows // files)
        for chunk in range(files):
            first = chunk * per_file
            n = max(min(per_file, n_rows - first), 0)
            if n:
                write_staged_chunk(
                    store.datasets[name],
                    run_id,
                    chunk,
                    pa.table({"run_id": [run_id] * n, "row": list(range(first, first + n))}, schema=SCHEMA),
                )


def _published(store: PartitionStore, run_id: str, rows: int) -> None:
    _stage(store, run_id, rows)
    store.assembled_version(PARTITION, run_id, page_html=f"<html>{run_id}</html>")
    store.swapped_in(PARTITION, run_id)


def _read(partition: Path) -> pa.Table:
    # What a careful reader does: resolve the partition once, then read that folder.
    return pq.read_table(os.path.realpath(partition), schema=SCHEMA)


def _runs(store: PartitionStore, name: str) -> set[str]:
    return set(_read(store.datasets[name] / f"date={PARTITION}")["run_id"].to_pylist())


def test_republishing_leaves_only_the_last_run_and_keeps_the_one_before(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for i, run in enumerate(["run-a", "run-b", "run-c"]):
        _published(store, run, 100 + i)
    for name in store.datasets:
        assert _runs(store, name) == {"run-c"}, name
        assert (store.datasets[name] / f"date={PARTITION}").is_symlink()
    assert _read(store.datasets["predictions"] / f"date={PARTITION}").num_rows == 102
    assert store.page_link(PARTITION).read_text() == "<html>run-c</html>"
    assert store.current_run(PARTITION) == "run-c"
    assert sorted(p.name for p in store.version_dir(PARTITION, "x").parent.iterdir()) == ["run-b", "run-c"]
    assert not staging_dir(store.datasets["predictions"], "run-c").exists()
    # Readers walking a dataset see one entry per partition, nothing staged or hidden.
    assert [p.name for p in store.datasets["predictions"].iterdir()] == [f"date={PARTITION}"]
    # Every dataset resolves through the one pointer into the same version folder.
    resolved = {
        Path(os.path.realpath(store.datasets[n] / f"date={PARTITION}")).relative_to(tmp_path).parts[:3]
        for n in store.datasets
    }
    assert resolved == {("_partitions", f"date={PARTITION}", "run-c")}


def test_a_killed_runs_leftovers_go_with_the_next_publish(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _published(store, "run-a", 100)
    # A run killed halfway through assembling its version: one dataset moved, the others staged.
    _stage(store, "killed", 7)

    def killed_after(name: str) -> None:
        raise KeyboardInterrupt(name)

    with pytest.raises(KeyboardInterrupt, match="predictions"):
        store.assembled_version(PARTITION, "killed", page_html=None, after_each=killed_after)
    with pytest.raises(FileNotFoundError, match="not complete"):
        store.swapped_in(PARTITION, "killed")
    assert all(_runs(store, n) == {"run-a"} for n in store.datasets)  # still run-a, complete
    store.discarded_run(PARTITION, "killed")
    _published(store, "run-b", 20)
    assert sorted(p.name for p in store.version_dir(PARTITION, "x").parent.iterdir()) == ["run-a", "run-b"]
    assert all(_runs(store, n) == {"run-b"} for n in store.datasets)
    assert not staging_dir(store.datasets["quarantine"], "killed").exists()


def test_swapping_in_again_is_harmless(tmp_path: Path) -> None:
    """Recovery may finish a publish the run had already finished: nothing changes."""
    store = _store(tmp_path)
    _published(store, "run-a", 100)
    _published(store, "run-b", 120)
    assert store.swapped_in(PARTITION, "run-b") is None
    assert all(_runs(store, n) == {"run-b"} for n in store.datasets)
    assert (store.version_dir(PARTITION, "run-a")).is_dir()


def test_an_empty_run_replaces_the_partition_with_zero_rows(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _published(store, "run-a", 50)
    store.assembled_version(PARTITION, "run-b", page_html=None)
    store.swapped_in(PARTITION, "run-b")
    assert all(_read(store.datasets[n] / f"date={PARTITION}").num_rows == 0 for n in store.datasets)


def test_older_layouts_are_converted_on_the_next_publish(tmp_path: Path) -> None:
    store = _store(tmp_path)
    # A plain folder (before versions existed) and a per-dataset versioned link (before the pointer).
    legacy = store.datasets["predictions"] / f"date={PARTITION}"
    legacy.mkdir(parents=True)
    pq.write_table(pa.table({"run_id": ["old"] * 5, "row": list(range(5))}, schema=SCHEMA), legacy / "part-old.parquet")
    old_version = tmp_path / "_versions" / "quarantine" / f"date={PARTITION}" / "old"
    old_version.mkdir(parents=True)
    pq.write_table(pa.table({"run_id": ["old"], "row": [0]}, schema=SCHEMA), old_version / "part-old.parquet")
    store.datasets["quarantine"].mkdir()
    (store.datasets["quarantine"] / f"date={PARTITION}").symlink_to(
        os.path.relpath(old_version, store.datasets["quarantine"])
    )
    _published(store, "run-a", 80)
    assert all(_runs(store, n) == {"run-a"} for n in store.datasets)
    assert not old_version.exists()
    assert sorted(p.name for p in store.datasets["predictions"].iterdir()) == [f"date={PARTITION}"]


def test_a_reader_never_sees_two_runs_across_datasets_while_runs_are_published(tmp_path: Path) -> None:
    store = _store(tmp_path)
    rows_of = {f"run-{i:03d}": 200 + 37 * i for i in range(40)}
    first = next(iter(rows_of))
    _published(store, first, rows_of[first])
    done = threading.Event()
    seen: list[str] = []
    problems: list[str] = []
    links = {n: store.datasets[n] / f"date={PARTITION}" for n in store.datasets}

    def reader() -> None:
        while not done.is_set():
            before = os.path.realpath(links["predictions"])
            others = {n: os.path.realpath(links[n]) for n in ("quarantine", "fallback_report")}
            predictions = pq.read_table(before, schema=SCHEMA)
            quarantine = pq.read_table(others["quarantine"], schema=SCHEMA)
            after = os.path.realpath(links["predictions"])
            runs = set(predictions["run_id"].to_pylist())
            if len(runs) != 1:
                problems.append(f"predictions mixed: {sorted(runs)}")
                continue
            run = runs.pop()
            if predictions.num_rows != rows_of[run]:
                problems.append(f"{run}: {predictions.num_rows} rows of {rows_of[run]}")
            # No swap between the two looks at predictions: the other datasets must be the same run's.
            if before == after and set(quarantine["run_id"].to_pylist()) - {run}:
                problems.append(f"predictions of {run} beside quarantine of {set(quarantine['run_id'].to_pylist())}")
            seen.append(run)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for run, rows in list(rows_of.items())[1:]:
            _published(store, run, rows)
    finally:
        done.set()
        thread.join()
    assert not problems, problems[:5]
    # The reader really overlapped the publishing: it saw several different runs.
    assert len(set(seen)) >= 3, seen[:10]
