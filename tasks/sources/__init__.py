"""Where one raw partition's rows come from: Parquet files (a local folder or an object-store prefix)
or a SQL query, resolved from the job spec's `source:`.

Every reader downstream (footers, work units, the duplicate pre-pass, Dask workers) sees Parquet
row groups named by a path or URL string, opened with `opened_parquet`. A SQL partition is first
streamed once into a Parquet snapshot in the run's staging folder: the pre-pass and the scoring
pass read the same rows even if the table changes meanwhile, and the work units cut it as any
other partition.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from tasks.settings import Settings
from tasks.sources.config import ParquetSource, SourceConfig, SqlSource
from tasks.sources.limits import ReadLimit
from tasks.sources.parquet import (
    ParquetPartition,
    checked_parquet_files,
    is_url,
    local_path,
    opened_parquet,
    read_row_group,
)
from tasks.sources.sql import SqlPartition

__all__ = [
    "ParquetPartition",
    "RawPartition",
    "ReadLimit",
    "SqlPartition",
    "checked_parquet_files",
    "opened_parquet",
    "raw_partition",
    "read_row_group",
]


RawPartition = ParquetPartition | SqlPartition


def raw_partition(source: SourceConfig | None, settings: Settings, job: str, partition_date: dt.date) -> RawPartition:
    """Where `job`'s raw rows of `partition_date` live: its `source:`, or `data/raw/<job>/date=<date>/`."""
    limit = ReadLimit(settings.source_timeout_s)
    if source is None:
        folder = settings.raw_partition_dir(job, partition_date.isoformat())
        return ParquetPartition(str(folder), root=str(settings.data_dir / "raw"), limit=limit)
    if isinstance(source.parquet, ParquetSource):
        url = _under_data_root(source.parquet.partition_url(partition_date), settings)
        if is_url(url):
            return ParquetPartition(url.rstrip("/"), limit=limit)
        # A symlinked file may point anywhere under the folder the url names above its date.
        above_date = _under_data_root(source.parquet.url.split("{", 1)[0], settings)
        root = local_path(above_date) if above_date.endswith("/") else local_path(above_date).parent
        return ParquetPartition(str(local_path(url)), root=str(root), limit=limit)
    assert isinstance(source.sql, SqlSource)
    return SqlPartition.of(source.sql, settings, job, partition_date)


def _under_data_root(url: str, settings: Settings) -> str:
    """A relative path is under the data root; a URL or an absolute path is itself."""
    if not is_url(url) and not url.startswith("file://") and not Path(url).is_absolute():
        return str(settings.data_dir / url) + ("/" if url.endswith("/") or not url else "")
    return url
