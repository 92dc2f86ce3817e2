"""Parquet partitions: chunks are staged per run, then the partition folder is swapped in.

File names carry the run id, so a reader never mixes files of two runs under one name, and the
old partition is renamed aside before the new one is renamed in, then deleted.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def staging_dir(dataset_dir: Path, run_id: str) -> Path:
    # Beside the dataset, not inside it, so a reader globbing the dataset never sees staged files;
    # on the same file system, so the swap is a rename.
    return dataset_dir.parent / "_staging" / dataset_dir.name / run_id


def write_staged_chunk(dataset_dir: Path, run_id: str, chunk_id: int, table: pa.Table, *, part: str = "") -> Path:
    """Stage one chunk's rows; `part` tells apart two files of one chunk (e.g. two kinds of quarantine)."""
    folder = staging_dir(dataset_dir, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"part-{run_id}-{chunk_id:05d}{'-' + part if part else ''}.parquet"
    pq.write_table(table, path, compression="zstd")
    return path


def staged_files(dataset_dir: Path, run_id: str) -> list[Path]:
    return sorted(staging_dir(dataset_dir, run_id).glob("*.parquet"))


def _restore_interrupted_swap(dataset_dir: Path, partition: str) -> None:
    target = dataset_dir / f"date={partition}"
    for aside in sorted(dataset_dir.glob(f".replaced-date={partition}-*")):
        if target.exists():
            shutil.rmtree(aside)
        else:
            aside.rename(target)


def publish_staged_partition(dataset_dir: Path, partition: str, run_id: str, empty_schema: pa.Schema) -> Path:
    """Make the run's staged files the partition `date=<partition>`; returns its folder."""
    _restore_interrupted_swap(dataset_dir, partition)
    staged = staging_dir(dataset_dir, run_id)
    staged.mkdir(parents=True, exist_ok=True)
    if not any(staged.glob("*.parquet")):
        # An empty partition is still a partition: readers must see zero rows, not the old run.
        pq.write_table(empty_schema.empty_table(), staged / f"part-{run_id}-00000.parquet")
    target = dataset_dir / f"date={partition}"
    aside = dataset_dir / f".replaced-date={partition}-{run_id}"
    if target.exists():
        target.rename(aside)
    target.parent.mkdir(parents=True, exist_ok=True)
    staged.rename(target)
    if aside.exists():
        shutil.rmtree(aside)
    return target


def discard_staged(dataset_dir: Path, run_id: str) -> None:
    shutil.rmtree(staging_dir(dataset_dir, run_id), ignore_errors=True)
