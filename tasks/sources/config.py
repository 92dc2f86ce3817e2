"""Where a job's raw partitions live, as the job spec declares it under `source:`.

Credentials never come from here: object stores read the environment (`AWS_*`, `GOOGLE_*`,
`AZURE_*`), a PostgreSQL source reads `SCORING_SOURCE_URL` or the Prefect Secret block named by
`SCORING_SOURCE_SECRET_BLOCK`. A URL that carries a secret is refused at load.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tasks.redaction import redacted_url
from tasks.settings import credential_free_url

PARTITION_PARAMETER = re.compile(r"(?<![:\w]):partition_date\b")
"""`:partition_date` in a query, but not the `::` of a cast nor part of a longer name."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ParquetSource(_Strict):
    """Parquet files under a folder or an object-store prefix, one per partition."""

    url: str = Field(
        min_length=1,
        description=(
            "Folder or prefix of one partition, with `{date}` (ISO) or `{date:%Y/%m/%d}` in it: a local path "
            "(relative to the data root), file://, s3://, gs://, abfs:// or any fsspec URL."
        ),
    )

    @field_validator("url")
    @classmethod
    def _dated_and_secret_free(cls, value: str) -> str:
        # Credentials first: a URL that carries them is refused whatever else is wrong with it.
        credential_free_url(value)
        shown = redacted_url(value)
        try:
            formatted = value.format(date=dt.date(2026, 1, 31))
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"url {shown!r} must use only the placeholder {{date}} (or {{date:FORMAT}}): {exc}"
            ) from None
        if formatted == value:
            raise ValueError(f"url {shown!r} has no {{date}} placeholder, so every partition would read the same files")
        return value

    def partition_url(self, partition_date: dt.date) -> str:
        return self.url.format(date=partition_date)


class SqlSource(_Strict):
    """A query that returns one partition's rows, streamed as Arrow record batches."""

    warehouse: Literal["duckdb", "postgresql"] = Field(description="The database engine the query runs on.")
    query: str = Field(
        min_length=1,
        description="SELECT returning the partition's raw rows; `:partition_date` is bound to the partition's date.",
    )
    database: str | None = Field(
        default=None,
        description=(
            "duckdb only: the database file (relative to the data root); default the scoring warehouse's file. "
            "A PostgreSQL source's URL comes from SCORING_SOURCE_URL or SCORING_SOURCE_SECRET_BLOCK, never from here."
        ),
    )

    @field_validator("query")
    @classmethod
    def _one_bound_select(cls, value: str) -> str:
        stripped = value.strip().rstrip(";").strip()
        if not PARTITION_PARAMETER.search(stripped):
            raise ValueError(
                "query must filter on :partition_date (bound to each partition's date), or every partition would read the same rows"
            )
        if ";" in stripped:
            raise ValueError("query must be one statement (found ';' inside it)")
        return stripped

    @model_validator(mode="after")
    def _database_for_duckdb_only(self) -> SqlSource:
        if self.database is not None and self.warehouse != "duckdb":
            raise ValueError(
                "database is for duckdb sources; a postgresql source's URL comes from SCORING_SOURCE_URL or "
                "SCORING_SOURCE_SECRET_BLOCK, so no credential sits in the spec"
            )
        return self


class SourceConfig(_Strict):
    """Exactly one of `parquet` and `sql`; without `source:` a job reads `data/raw/<job>/date=<date>/`."""

    parquet: ParquetSource | None = None
    sql: SqlSource | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SourceConfig:
        if (self.parquet is None) == (self.sql is None):
            raise ValueError("source takes exactly one of `parquet` and `sql`")
        return self
