"""Optional output sinks a job spec declares under `sinks:`."""

from __future__ import annotations

import urllib.parse
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tasks.settings import credential_free_url

DELTA_SCHEMES = ("", "file", "s3")
"""Where tasks/sinks/delta.py writes: a local path, a file:// URL or an s3:// prefix."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeltaSink(_Strict):
    """Every partitioned dataset also as a Delta Lake table `<url>/<dataset>`, partitioned by date."""

    url: str = Field(
        min_length=1,
        description="Folder or object-store prefix holding one Delta table per dataset: a local path (relative to the data root), file:// or s3://.",
    )

    @field_validator("url")
    @classmethod
    def _secret_free(cls, value: str) -> str:
        return credential_free_url(value)

    @field_validator("url")
    @classmethod
    def _writable_kind(cls, value: str) -> str:
        # Checked when the spec loads: the tables are written after the warehouse commit, where a
        # URL that could never work would leave the run committed until the spec is fixed.
        parts = urllib.parse.urlsplit(value)
        if parts.scheme not in DELTA_SCHEMES:
            raise ValueError(
                f"url scheme {parts.scheme!r} is not supported; use a local path, file:///… or s3://bucket/prefix"
            )
        if parts.scheme == "s3" and not parts.netloc:
            raise ValueError("an s3:// url names its bucket: s3://bucket/prefix")
        if parts.scheme == "file" and parts.netloc not in ("", "localhost"):
            raise ValueError("a file:// url is absolute and local: file:///path/to/tables")
        if parts.query or parts.fragment:
            raise ValueError("url takes no query or fragment")
        if not parts.scheme and not PurePosixPath(value).is_absolute() and ".." in PurePosixPath(value).parts:
            raise ValueError(
                "a relative path stays inside the data root: no `..`; give an absolute path to write elsewhere"
            )
        return value


class SinksConfig(_Strict):
    delta: DeltaSink | None = None
