"""Parquet partitions of a job: every dataset of a run is swapped in by one pointer.

A run stages each dataset's chunks under `<dataset>/../_staging/<name>/<run_id>` (beside the
dataset, so a reader globbing it never sees them). Before the warehouse commit the staged files
are fsynced and renamed into one version folder per run and partition,
`<job>/_partitions/date=D/<run_id>/<dataset path>/`, together with the run's HTML page. The
partition's one pointer `<job>/_current/date=D` is a symlink to that folder, replaced with one
`rename(2)`; every reader path resolves through it:

    <job>/predictions/date=D            -> ../_current/date=D/predictions
    <job>/reports/fallback/date=D       -> ../../_current/date=D/reports/fallback
    <job>/reports/html/date=D.html      -> ../../_current/date=D/report.html

so one swap moves predictions, quarantine, guard tables, reports and the page together: a reader
resolving any of them sees one run's complete outputs, never one run's predictions beside
another's quarantine. The version the pointer left stays until the next publish (a reader that
resolved it a moment before can finish); older versions and leftovers of killed runs go then.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.catalog import PAGES_FOLDER, STAGED_DATASETS, Dataset, run_page_name

if TYPE_CHECKING:
    from tasks.settings import Settings

REPORT_PAGE = "report.html"
"""The run's HTML page inside its version folder."""


def staging_dir(dataset_dir: Path, run_id: str) -> Path:
    # Beside the dataset, not inside it, so a reader globbing the dataset never sees staged files;
    # on the same file system, so assembling the version is a rename.
    return dataset_dir.parent / "_staging" / dataset_dir.name / run_id


def write_staged_chunk(dataset_dir: Path, run_id: str, chunk_id: int, table: pa.Table, *, part: str = "") -> Path:
    """Stage one chunk's rows; `part` tells apart two files of one chunk (e.g. two kinds of quarantine)."""
    folder = staging_dir(dataset_dir, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"part-{run_id}-{chunk_id:05d}{'-' + part if part else ''}.parquet"
    pq.write_table(table, path, compression="zstd", use_dictionary=_repeating_columns(table.schema))
    return path


def _repeating_columns(schema: pa.Schema) -> list[str]:
    """Columns whose values repeat within a chunk (run, job, decision, codes, versions): dictionary
    pages pay off there. Entity ids and floats are all distinct, so a dictionary attempt on them
    is thrown away: writing a predictions chunk without it takes ~30 % less time and space."""
    return [
        f"{f.name}.list.element" if pa.types.is_list(f.type) else f.name
        for f in schema
        if f.name != "entity_id"
        and not pa.types.is_floating(f.type)
        and not (pa.types.is_list(f.type) and pa.types.is_floating(f.type.value_type))
    ]


def staged_files(dataset_dir: Path, run_id: str) -> list[Path]:
    return sorted(staging_dir(dataset_dir, run_id).glob("*.parquet"))


def discard_staged(dataset_dir: Path, run_id: str) -> None:
    shutil.rmtree(staging_dir(dataset_dir, run_id), ignore_errors=True)


def _synced(path: Path) -> None:
    """A file's bytes, or a folder's entries, on disk, not only in the page cache (a power cut after commit)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class PartitionStore:
    """The Parquet outputs of one job: `datasets` maps each dataset's name to its folder under `root`."""

    root: Path
    datasets: Mapping[str, Path]
    schemas: Mapping[str, pa.Schema]

    def version_dir(self, partition: str, run_id: str) -> Path:
        return self.root / "_partitions" / f"date={partition}" / run_id

    def pointer(self, partition: str) -> Path:
        return self.root / "_current" / f"date={partition}"

    def page_link(self, partition: str) -> Path:
        return self.root / PAGES_FOLDER / run_page_name(partition)

    def _relative(self, name: str) -> Path:
        return self.datasets[name].relative_to(self.root)

    def current_run(self, partition: str) -> str | None:
        """The run whose outputs readers see for `partition`, or None before its first publish."""
        pointer = self.pointer(partition)
        return Path(os.readlink(pointer)).name if pointer.is_symlink() else None

    def staged_files(self, name: str, run_id: str) -> list[Path]:
        return staged_files(self.datasets[name], run_id)

    def version_files(self, partition: str, run_id: str, name: str) -> list[Path]:
        return sorted((self.version_dir(partition, run_id) / self._relative(name)).glob("*.parquet"))

    def assembled_version(
        self,
        partition: str,
        run_id: str,
        *,
        page_html: str | None,
        after_each: Callable[[str], None] = lambda name: None,
    ) -> Path:
        """Move the run's staged files into its version folder, fsynced, ready to be swapped in;
        `after_each(name)` runs once each dataset is moved (crash trials stop there).

        Repeatable: a dataset already moved is left as it is. An empty dataset gets one empty file,
        so readers of the partition see zero rows, not the previous run's.
        """
        version = self.version_dir(partition, run_id)
        for name, folder in self.datasets.items():
            target = version / self._relative(name)
            if target.is_dir():
                continue
            staged = staging_dir(folder, run_id)
            staged.mkdir(parents=True, exist_ok=True)
            if not any(staged.glob("*.parquet")):
                pq.write_table(self.schemas[name].empty_table(), staged / f"part-{run_id}-00000.parquet")
            for path in staged.iterdir():
                _synced(path)
            _synced(staged)
            target.parent.mkdir(parents=True, exist_ok=True)
            staged.rename(target)
            _synced(target.parent)
            after_each(name)
        if page_html is not None:
            page = version / REPORT_PAGE
            tmp = page.with_suffix(".tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(page_html)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, page)
        _synced(version)
        _synced(version.parent)
        return version

    def is_assembled(self, partition: str, run_id: str) -> bool:
        version = self.version_dir(partition, run_id)
        return all((version / self._relative(name)).is_dir() for name in self.datasets)

    def swapped_in(self, partition: str, run_id: str) -> str | None:
        """Point the partition at the run's assembled version; returns the run it replaced.

        Repeatable, so recovery can finish a publish that a kill interrupted anywhere here.
        """
        version = self.version_dir(partition, run_id)
        if not self.is_assembled(partition, run_id):
            raise FileNotFoundError(f"version {version} is not complete; it cannot be published")
        pointer = self.pointer(partition)
        pointer.parent.mkdir(parents=True, exist_ok=True)
        previous = self.current_run(partition)
        if previous != run_id:
            fresh = pointer.with_name(f".{pointer.name}.{run_id}.link")
            fresh.unlink(missing_ok=True)
            fresh.symlink_to(os.path.relpath(version, pointer.parent), target_is_directory=True)
            os.replace(fresh, pointer)
            _synced(pointer.parent)
        for name in self.datasets:
            self._linked(self.datasets[name] / f"date={partition}", pointer / self._relative(name), partition)
        self._linked(self.page_link(partition), pointer / REPORT_PAGE, partition)
        if previous == run_id:
            return None
        self._removed_older_versions(partition, keep={run_id, previous})
        return previous

    def _linked(self, link: Path, target: Path, partition: str) -> None:
        """`link` → `target` (relative), made once; a link or folder of the older layouts is replaced."""
        wanted = os.path.relpath(target, link.parent)
        if link.is_symlink() and os.readlink(link) == wanted:
            return
        link.parent.mkdir(parents=True, exist_ok=True)
        fresh = link.with_name(f".{link.name}.link")
        fresh.unlink(missing_ok=True)
        fresh.symlink_to(wanted)
        legacy = None
        if link.is_dir() and not link.is_symlink():
            # A partition published as a plain folder (before versions existed) is moved aside once.
            legacy = link.with_name(f".{link.name}.legacy")
            shutil.rmtree(legacy, ignore_errors=True)
            link.rename(legacy)
        os.replace(fresh, link)
        _synced(link.parent)
        if legacy is not None:
            shutil.rmtree(legacy, ignore_errors=True)
        # Per-dataset versions of the layout before the partition pointer.
        shutil.rmtree(link.parent.parent / "_versions" / link.parent.name / f"date={partition}", ignore_errors=True)

    def _removed_older_versions(self, partition: str, *, keep: set[str | None]) -> None:
        folder = self.version_dir(partition, "x").parent
        for older in folder.iterdir():
            if older.name not in keep:
                shutil.rmtree(older, ignore_errors=True)
        for stale in self.pointer(partition).parent.glob(f".date={partition}.*.link"):
            stale.unlink(missing_ok=True)

    def discarded_run(self, partition: str, run_id: str) -> None:
        """Remove a run's staging and, unless readers see it, its version folder."""
        for folder in self.datasets.values():
            discard_staged(folder, run_id)
        if self.current_run(partition) != run_id:
            shutil.rmtree(self.version_dir(partition, run_id), ignore_errors=True)


@dataclass(frozen=True)
class OutputDirs:
    """The folders of a job's staged datasets (tasks/catalog.py STAGED_DATASETS) under its output dir
    `root`: `dirs.of(PREDICTIONS)`, or by the dataset's name, `dirs.predictions`."""

    root: Path

    def of(self, dataset: Dataset) -> Path:
        if dataset.folder is None:
            raise ValueError(f"dataset {dataset.name} has no folder: it lives in the warehouse only")
        return self.root / dataset.folder

    def __getattr__(self, name: str) -> Path:
        # Only names of staged datasets; anything else (pickle's probes too) is a plain AttributeError.
        dataset = _STAGED.get(name)
        if dataset is None:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}; staged datasets: {sorted(_STAGED)}")
        return self.of(dataset)

    def all(self) -> tuple[Path, ...]:
        return tuple(self.of(d) for d in STAGED_DATASETS)


_STAGED = {d.name: d for d in STAGED_DATASETS}


def output_dirs(settings: Settings, job: str) -> OutputDirs:
    return OutputDirs(root=settings.output_dir(job))
