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
from tasks.sources.parquet import ParquetPartition, checked_parquet_files, is_url, local_path, opened_parquet
from tasks.sources.sql import SqlPartition

__all__ = ["ParquetPartition", "RawPartition", "SqlPartition", "checked_parquet_files", "opened_parquet", "raw_partition"]


RawPartition = ParquetPartition | SqlPartition


def raw_partition(source: SourceConfig | None, settings: Settings, job: str, partition_date: dt.date) -> RawPartition:
    """Where `job`'s raw rows of `partition_date` live: its `source:`, or `data/raw/<job>/date=<date>/`."""
    if source is None:
        return ParquetPartition(str(settings.raw_partition_dir(job, partition_date.isoformat())))
    if isinstance(source.parquet, ParquetSource):
        url = source.parquet.partition_url(partition_date)
        if not is_url(url) and not url.startswith("file://") and not Path(url).is_absolute():
            url = str(settings.data_dir / url)
        return ParquetPartition(url.rstrip("/") if is_url(url) else str(local_path(url)))
    assert isinstance(source.sql, SqlSource)
    return SqlPartition.of(source.sql, settings, job, partition_date)
