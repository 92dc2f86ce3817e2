"""Parquet partitions: chunks are staged per run, then the partition is swapped in atomically.

A partition `date=D` is a symlink to a version folder `_versions/<dataset>/date=D/<run_id>`. A
run stages its files, renames the staging folder into a new version, and replaces the symlink
with `rename(2)`: a reader that opens `date=D` sees the old run's complete files or the new
run's, never a mix and never nothing. The version it replaced is kept until the next publish
(a reader that resolved the link just before the swap can finish); older versions and the
leftovers of a killed run (a version never linked, a half-made link) are removed then.
"""

from __future__ import annotations

import os
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


def versions_dir(dataset_dir: Path, partition: str) -> Path:
    # Beside the dataset like staging: readers that walk the dataset never see other versions.
    return dataset_dir.parent / "_versions" / dataset_dir.name / f"date={partition}"


def publish_staged_partition(dataset_dir: Path, partition: str, run_id: str, empty_schema: pa.Schema) -> Path:
    """Make the run's staged files the partition `date=<partition>`; returns its path (the symlink)."""
    staged = staging_dir(dataset_dir, run_id)
    staged.mkdir(parents=True, exist_ok=True)
    if not any(staged.glob("*.parquet")):
        # An empty partition is still a partition: readers must see zero rows, not the old run.
        pq.write_table(empty_schema.empty_table(), staged / f"part-{run_id}-00000.parquet")
    version = versions_dir(dataset_dir, partition) / run_id
    version.parent.mkdir(parents=True, exist_ok=True)
    staged.rename(version)
    dataset_dir.mkdir(parents=True, exist_ok=True)
    target = dataset_dir / f"date={partition}"
    for stale in dataset_dir.glob(f".date={partition}.*.link"):
        stale.unlink()
    link = dataset_dir / f".date={partition}.{run_id}.link"
    link.symlink_to(os.path.relpath(version, dataset_dir), target_is_directory=True)
    previous = (dataset_dir / os.readlink(target)).resolve() if target.is_symlink() else None
    if target.is_dir() and not target.is_symlink():
        # A partition published as a plain folder (before versions existed) becomes a version once.
        previous = version.parent / f"unversioned-{run_id}"
        target.rename(previous)
    os.replace(link, target)
    _synced(dataset_dir)
    # The version just replaced stays until the next publish: a reader that resolved the link a
    # moment ago still finds every file it listed.
    for older in version.parent.iterdir():
        if older not in (version, previous):
            shutil.rmtree(older)
    return target


def _synced(folder: Path) -> None:
    """The folder's renames on disk, not only in the page cache (a power cut after commit)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def discard_staged(dataset_dir: Path, run_id: str) -> None:
    shutil.rmtree(staging_dir(dataset_dir, run_id), ignore_errors=True)
