"""Raw partitions stored as Parquet files, under a local folder or an object-store prefix: listing
them, opening one file (pyarrow's filesystems, else fsspec) and reading every footer before a run.
A SQL partition (tasks/sources/sql.py) becomes one of these once its snapshot is staged.
"""

from __future__ import annotations

import functools
import os
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from tasks.errors import PartitionError, SourceUnreachable
from tasks.redaction import redacted_url, scrubbed

_CREDENTIAL_ENV = re.compile(r"^(AWS_|GOOGLE_|GCS_|AZURE_|AZURE_STORAGE_)")


def is_url(location: str) -> bool:
    return "://" in location and not location.startswith("file://")


def local_path(location: str) -> Path:
    return Path(urllib.parse.unquote(urllib.parse.urlsplit(location).path)) if location.startswith("file://") else Path(location)


def _credential_env() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if _CREDENTIAL_ENV.match(k)))


@functools.lru_cache(maxsize=32)
def _filesystem(scheme_and_host: str, env: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    # One filesystem per store and credentials: every footer and row group of a run reuses its
    # connections; a changed environment (rotated keys) gets a new one.
    del env
    try:
        return pafs.FileSystem.from_uri(scheme_and_host + "/")[0]
    except pa.ArrowInvalid as exc:
        if "Unrecognized filesystem type" not in str(exc):
            raise
    import fsspec

    fs, _ = fsspec.core.url_to_fs(scheme_and_host + "/")
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))


def _resolved(url: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of `url` and the path inside it."""
    parts = urllib.parse.urlsplit(url)
    fs = _filesystem(f"{parts.scheme}://{parts.netloc}", _credential_env())
    if isinstance(fs, pafs.PyFileSystem):
        import fsspec

        return fs, fsspec.core.url_to_fs(url)[1]
    return fs, pafs.FileSystem.from_uri(url)[1]


def opened_parquet(location: str) -> pq.ParquetFile:
    """One raw Parquet file, local (a path or file://) or remote (any URL `raw_partition` lists)."""
    if not is_url(location):
        return pq.ParquetFile(local_path(location))
    fs, path = _resolved(location)
    try:
        return pq.ParquetFile(fs.open_input_file(path))
    except OSError as exc:
        raise _remote_fault(location, exc) from exc


def _remote_fault(url: str, exc: BaseException) -> BaseException:
    """A failed object-store call as the error it is: a missing object stays an OSError of the
    caller's, while refused credentials and an endpoint that does not answer are the environment's."""
    text = str(exc)
    first = scrubbed(text.strip().splitlines()[0], url=url) if text.strip() else type(exc).__name__
    if re.search(r"NETWORK_CONNECTION|Could not connect|Could not resolve|timed out|ACCESS_DENIED|AccessDenied|"
                 r"InvalidAccessKeyId|SignatureDoesNotMatch|HTTP status (401|403|500|503)|credentials", text, re.IGNORECASE):
        return SourceUnreachable(
            f"cannot read the raw source {redacted_url(url)}: {first} (credentials and endpoint come from the environment: "
            "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, ...)"
        )
    return PartitionError(f"cannot read the raw source {redacted_url(url)}: {first}")


@dataclass(frozen=True)
class ParquetPartition:
    """One partition's Parquet files, under a local folder or an object-store prefix."""

    location: str
    """The folder's path or the prefix's URL, as every message names it."""

    @property
    def local(self) -> bool:
        return not is_url(self.location)

    def __str__(self) -> str:
        return redacted_url(self.location)

    def exists(self) -> bool:
        """Whether the partition is there: the local folder exists, or the prefix holds a file."""
        if self.local:
            return local_path(self.location).is_dir()
        return bool(self.files())

    def files(self) -> list[str]:
        """The partition's `*.parquet` files in name order, each a path (local) or a URL (remote)."""
        if self.local:
            return [str(p) for p in sorted(local_path(self.location).rglob("*.parquet"))]
        fs, prefix = _resolved(self.location)
        prefix = prefix.rstrip("/")
        try:
            self._check_bucket(fs, prefix)
            infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
        except OSError as exc:
            raise _remote_fault(self.location, exc) from exc
        base = self.location.rstrip("/")
        names = sorted(
            info.path[len(prefix):].lstrip("/") for info in infos
            if info.type == pafs.FileType.File and info.path.endswith(".parquet")
            and not any(part.startswith(("_", ".")) for part in info.path[len(prefix):].split("/") if part)
        )
        return [f"{base}/{name}" for name in names]

    def _check_bucket(self, fs: pafs.FileSystem, prefix: str) -> None:
        # A listing under a missing bucket is simply empty: say which bucket is wrong instead.
        if isinstance(fs, pafs.S3FileSystem | pafs.GcsFileSystem) and "/" in prefix:
            bucket = prefix.split("/", 1)[0]
            if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                raise PartitionError(f"raw source {self}: bucket {bucket!r} does not exist (source.parquet.url)")

    def parquet_partition(self, staging: Path, chunk_rows: int) -> ParquetPartition:
        del staging, chunk_rows
        return self


def checked_parquet_files(raw: ParquetPartition) -> list[tuple[str, pa.Schema | None, str | None]]:
    """(file, schema, problem) of each of the partition's files, each footer read: a zero-byte,
    non-Parquet or garbage-footer file has no schema and a problem naming it."""
    checked = []
    for location in raw.files():
        try:
            checked.append((location, opened_parquet(location).schema_arrow, None))
        except (pa.ArrowException, OSError) as exc:
            # A real OS error (permission, disk) has an errno and is the environment's, not the file's content.
            if isinstance(exc, OSError) and exc.errno is not None:
                raise
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            checked.append((location, None, f"raw file {location} is not a readable Parquet file: {first}"))
    return checked
