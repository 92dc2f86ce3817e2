"""A raw partition that is a SQL query, on DuckDB or PostgreSQL (over ADBC), read as Arrow record
batches and never fetched whole.

The query's `:partition_date` is bound as a parameter, never pasted into the text. A PostgreSQL
URL comes from the settings (`SCORING_SOURCE_URL`, its Secret block, else the warehouse's URL) and
is shown with `***` for its password in every message.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.errors import PartitionError, SourceUnreachable, environment_fault
from tasks.redaction import redacted_text, redacted_url, scrubbed
from tasks.settings import Settings
from tasks.sources.chunks import rechunked_tables
from tasks.sources.config import PARTITION_PARAMETER, SqlSource
from tasks.sources.parquet import ParquetPartition

SNAPSHOT_FILE = "part-0.parquet"


@dataclass(frozen=True)
class SqlPartition:
    """The rows one partition's query returns."""

    source: SqlSource
    job: str
    partition_date: dt.date
    database: Path | None
    """The DuckDB file the query runs on; None for PostgreSQL."""
    url: str | None = field(repr=False)
    """The PostgreSQL URL, password and all; never shown (see `location`)."""
    memory_limit: str = "128MB"

    @classmethod
    def of(cls, source: SqlSource, settings: Settings, job: str, partition_date: dt.date) -> SqlPartition:
        if source.warehouse == "duckdb":
            path = Path(source.database) if source.database else settings.duckdb_path
            return cls(
                source,
                job,
                partition_date,
                path if path.is_absolute() else settings.data_dir / path,
                None,
                settings.duckdb_memory_limit,
            )
        secret = settings.source_url or settings.warehouse_url
        if secret is None:
            raise SourceUnreachable(
                f"job {job} reads a postgresql source but no URL is set: set SCORING_SOURCE_URL (or SCORING_SOURCE_SECRET_BLOCK, "
                "or SCORING_WAREHOUSE_URL to read from the warehouse's database)"
            )
        return cls(source, job, partition_date, None, secret.get_secret_value())

    @property
    def location(self) -> str:
        where = str(self.database) if self.database is not None else redacted_url(self.url or "")
        return f"{self.source.warehouse} query on {where}"

    def __str__(self) -> str:
        return self.location

    def exists(self) -> bool:
        """A query always answers; an empty answer is judged by `limits.min_rows` after it ran."""
        return True

    def schema(self) -> pa.Schema:
        """The columns the query returns, from running it with no rows (`LIMIT 0`)."""
        with self._reader(f"SELECT * FROM ({self.source.query}) AS source_rows LIMIT 0", batch_rows=1) as reader:
            return reader.schema

    @contextmanager
    def batches(self, batch_rows: int) -> Iterator[pa.RecordBatchReader]:
        """The partition's rows as a stream of record batches of about `batch_rows` rows."""
        with self._reader(self.source.query, batch_rows=batch_rows) as reader:
            yield reader

    def parquet_partition(self, staging: Path, chunk_rows: int) -> ParquetPartition:
        """The query's rows, streamed once into `staging/part-0.parquet` in row groups of
        `chunk_rows`, as the Parquet partition every later read uses."""
        staging.mkdir(parents=True, exist_ok=True)
        target = staging / SNAPSHOT_FILE
        with self.batches(chunk_rows) as reader, pq.ParquetWriter(target, reader.schema) as writer:
            for table in rechunked_tables(reader, chunk_rows):
                writer.write_table(table, row_group_size=chunk_rows)
        return ParquetPartition(str(staging))

    @contextmanager
    def _reader(self, query: str, *, batch_rows: int) -> Iterator[pa.RecordBatchReader]:
        if self.database is not None:
            with self._duckdb_reader(query, batch_rows) as reader:
                yield reader
        else:
            with self._postgres_reader(query) as reader:
                yield reader

    @contextmanager
    def _duckdb_reader(self, query: str, batch_rows: int) -> Iterator[pa.RecordBatchReader]:
        import duckdb

        assert self.database is not None
        if not self.database.is_file():
            raise PartitionError(
                f"source database {self.database} of job {self.job} does not exist (source.sql.database)"
            )
        try:
            # The warehouse's own settings, so a source that is the warehouse file shares its instance.
            con = duckdb.connect(str(self.database), config={"memory_limit": self.memory_limit})
        except duckdb.Error as exc:
            raise environment_fault(exc, path_hint=self.database) or SourceUnreachable(
                f"cannot open the source database {self.database}: {_first_line(exc)}"
            ) from exc
        try:
            bound = PARTITION_PARAMETER.sub("$partition_date", query)
            try:
                # A relation's reader streams from the engine; a DB-API result's would copy the rows first.
                reader = con.sql(bound, params={"partition_date": self.partition_date}).to_arrow_reader(
                    batch_size=batch_rows
                )
            except (
                duckdb.ParserException,
                duckdb.BinderException,
                duckdb.CatalogException,
                duckdb.ConversionException,
                duckdb.InvalidInputException,
            ) as exc:
                raise self._query_error(exc) from None
            yield reader
        finally:
            con.close()

    @contextmanager
    def _postgres_reader(self, query: str) -> Iterator[pa.RecordBatchReader]:
        import adbc_driver_manager
        import adbc_driver_postgresql.dbapi

        assert self.url is not None
        url = self.url

        def scrub(text: str) -> str:
            # The driver may quote the URL, a piece of its password, or the query with a DSN in it.
            return redacted_text(scrubbed(text, url=url))

        try:
            con = adbc_driver_postgresql.dbapi.connect(self.url)
        except Exception as exc:
            raise SourceUnreachable(
                f"cannot connect to the source database {redacted_url(self.url)}: {scrub(_first_line(exc))}"
            ) from None
        try:
            with con.cursor() as cursor:
                try:
                    cursor.execute(PARTITION_PARAMETER.sub("$1", query), parameters=(self.partition_date,))
                    reader = cursor.fetch_record_batch()
                except adbc_driver_manager.ProgrammingError as exc:
                    raise self._query_error(exc, scrub) from None
                except adbc_driver_manager.Error as exc:
                    raise SourceUnreachable(
                        f"the source query of job {self.job} failed on {self.location}: {scrub(_first_line(exc))}"
                    ) from None
                yield reader
        finally:
            con.close()

    def _query_error(self, exc: BaseException, scrub: Callable[[str], str] = redacted_text) -> PartitionError:
        return PartitionError(
            f"the source query of job {self.job} ({redacted_text(self.source.query)!r}) fails on {self.location}: {scrub(_first_line(exc))} "
            "(source.sql.query)"
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
