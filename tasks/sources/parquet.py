"""Raw partitions stored as Parquet files, under a local folder or an object-store prefix: listing
them, opening one file (pyarrow's filesystems, else fsspec) and reading every footer before a run.
A SQL partition (tasks/sources/sql.py) becomes one of these once its snapshot is staged.

Every call to the store runs under the settings' time limit (tasks/sources/limits.py), and a local
entry that is no regular file (a FIFO would block `open()` forever) or a symlink out of the raw
folder is refused before it is opened.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from tasks.errors import PartitionError, SourceUnreachable
from tasks.redaction import redacted_url, scrubbed
from tasks.sources.limits import ReadLimit, bounded

_CREDENTIAL_ENV = re.compile(r"^(AWS_|GOOGLE_|GCS_|AZURE_|AZURE_STORAGE_)")


def is_url(location: str) -> bool:
    return "://" in location and not location.startswith("file://")


def local_path(location: str) -> Path:
    return (
        Path(urllib.parse.unquote(urllib.parse.urlsplit(location).path))
        if location.startswith("file://")
        else Path(location)
    )


def _credential_env() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if _CREDENTIAL_ENV.match(k)))


@functools.lru_cache(maxsize=32)
def _filesystem(scheme_and_host: str, env: tuple[tuple[str, str], ...], timeout_s: float | None) -> pafs.FileSystem:
    # One filesystem per store and credentials: every footer and row group of a run reuses its
    # connections; a changed environment (rotated keys) gets a new one.
    del env
    try:
        fs = pafs.FileSystem.from_uri(scheme_and_host + "/")[0]
    except pa.ArrowInvalid as exc:
        if "Unrecognized filesystem type" not in str(exc):
            raise
    else:
        if isinstance(fs, pafs.S3FileSystem) and timeout_s is not None:
            # The AWS client's defaults wait ~100 s on a store that stopped answering, retrying
            # silently; `bounded` retries instead, saying so. A request without a byte for a second
            # longer than `bounded` waits fails by itself, so `bounded` names the timeout, and its
            # abandoned thread ends soon after: pyarrow's S3 shutdown at exit would wait for it.
            _, (options,) = fs.__reduce__()
            return pafs.S3FileSystem(
                **{
                    **options,
                    "connect_timeout": timeout_s + 1,
                    "request_timeout": timeout_s + 1,
                    "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=1),
                }
            )
        return fs
    import fsspec

    fs, _ = fsspec.core.url_to_fs(scheme_and_host + "/")
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))


def _resolved(url: str, limit: ReadLimit | None = None) -> tuple[pafs.FileSystem, str]:
    """The filesystem of `url` and the path inside it. A store that cannot be reached (no DNS for
    its host, while pyarrow resolves an S3 bucket's region) is SourceUnreachable naming the URL."""
    parts = urllib.parse.urlsplit(url)
    try:
        fs = _filesystem(f"{parts.scheme}://{parts.netloc}", _credential_env(), limit.timeout_s if limit else None)
        if isinstance(fs, pafs.PyFileSystem):
            import fsspec

            return fs, fsspec.core.url_to_fs(url)[1]
        return fs, pafs.FileSystem.from_uri(url)[1]
    except OSError as exc:
        raise _remote_fault(url, exc) from None


def opened_parquet(location: str, limit: ReadLimit | None = None) -> pq.ParquetFile:
    """One raw Parquet file, local (a path or file://) or remote (any URL `raw_partition` lists), its
    footer read within `limit`. A local entry that is no regular file is a PartitionError, not opened."""
    if not is_url(location):
        path = local_path(location)
        problem = _not_a_regular_file(path)
        if problem:
            raise PartitionError(problem)
        return bounded(lambda: pq.ParquetFile(path), where=location, limit=limit)

    def opened() -> pq.ParquetFile:
        fs, path = _resolved(location, limit)
        return pq.ParquetFile(fs.open_input_file(path))

    try:
        return bounded(opened, where=redacted_url(location), limit=limit, store=_credential_env())
    except OSError as exc:
        raise _remote_fault(location, exc) from exc


def read_row_group(
    parquet: pq.ParquetFile,
    location: str,
    group: int,
    *,
    columns: list[str] | None = None,
    limit: ReadLimit | None = None,
) -> pa.Table:
    """Row group `group` of the raw file at `location`, within `limit`: bytes that are not (or no
    longer) Parquet, in any column, are a PartitionError naming the file and the row group; a store
    that does not answer is SourceUnreachable."""
    try:
        return bounded(
            lambda: parquet.read_row_group(group, columns=columns),
            where=redacted_url(location),
            limit=limit,
            store=_credential_env() if is_url(location) else None,
        )
    except (pa.ArrowException, OSError) as exc:
        # A real OS error (permission, disk) has an errno and is the environment's, not the file's content.
        if isinstance(exc, OSError) and exc.errno is not None:
            raise
        if is_url(location) and isinstance(fault := _remote_fault(location, exc), SourceUnreachable):
            raise fault from exc
        raise PartitionError(
            f"raw file {redacted_url(location)} is corrupt in row group {group}: {_first_line(exc)}"
        ) from exc


_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


def _not_a_regular_file(path: Path) -> str | None:
    """Why the raw entry `path` cannot be read as a file, from its mode alone (no `open`: a FIFO's
    blocks until a writer comes, which may be never); None for a regular file or a link to one."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return (
            f"raw file {path} is a symlink to {os.path.realpath(path)}, which does not exist"
            if path.is_symlink()
            else None
        )
    except OSError:
        return None  # opening it names the error (permission, I/O) as the environment's
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), f"a special file (mode {mode:o})")
    link = f" (a symlink to {os.path.realpath(path)})" if path.is_symlink() else ""
    return f"raw file {path} is {kind}{link}, not a regular Parquet file; remove it from the raw folder"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _remote_fault(url: str, exc: BaseException) -> BaseException:
    """A failed object-store call as the error it is: a missing object stays an OSError of the
    caller's, while refused credentials and an endpoint that does not answer are the environment's."""
    text = str(exc)
    first = scrubbed(text.strip().splitlines()[0], url=url) if text.strip() else type(exc).__name__
    if re.search(r"Could not resolve|resolving region", text, re.IGNORECASE):
        where = (
            "the endpoint comes from AWS_ENDPOINT_URL"
            if os.environ.get("AWS_ENDPOINT_URL")
            else ("no AWS_ENDPOINT_URL is set, so the store is AWS itself")
        )
        return SourceUnreachable(
            f"the object store of the raw source {redacted_url(url)} cannot be reached: its host name does not resolve "
            f"({where}; check the network and DNS): {first}"
        )
    if re.search(
        r"NETWORK_CONNECTION|Could not connect|Could not resolve|timed out|ACCESS_DENIED|AccessDenied|"
        r"InvalidAccessKeyId|SignatureDoesNotMatch|HTTP status (401|403|500|503)|credentials",
        text,
        re.IGNORECASE,
    ):
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
    root: str | None = None
    """Local only: the raw folder a symlinked file must resolve inside (`<data_dir>/raw`, or the folder a
    spec's url names above its `{date}`); None: the partition's own folder."""
    limit: ReadLimit | None = None
    """How long each call to the store may take (SCORING_SOURCE_TIMEOUT_S); None: no limit."""

    @property
    def local(self) -> bool:
        return not is_url(self.location)

    def __str__(self) -> str:
        return redacted_url(self.location)

    def exists(self) -> bool:
        """Whether the partition is there: the local folder exists, or the prefix holds a file."""
        if self.local:
            return bounded(local_path(self.location).is_dir, where=self.location, limit=self.limit)
        return bool(self.files())

    def files(self) -> list[str]:
        """The partition's `*.parquet` entries in name order, each a path (local) or a URL (remote).
        A local entry may be no regular file: `entry_problem` says so before anything opens it."""
        if self.local:
            folder = local_path(self.location)
            return bounded(
                lambda: [str(p) for p in sorted(folder.rglob("*.parquet"))], where=self.location, limit=self.limit
            )
        try:
            return bounded(self._listed, where=str(self), limit=self.limit, store=_credential_env())
        except OSError as exc:
            raise _remote_fault(self.location, exc) from exc

    def _listed(self) -> list[str]:
        fs, prefix = _resolved(self.location, self.limit)
        prefix = prefix.rstrip("/")
        self._check_bucket(fs, prefix)
        infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
        base = self.location.rstrip("/")
        names = sorted(
            info.path[len(prefix) :].lstrip("/")
            for info in infos
            if info.type == pafs.FileType.File
            and info.path.endswith(".parquet")
            and not any(part.startswith(("_", ".")) for part in info.path[len(prefix) :].split("/") if part)
        )
        return [f"{base}/{name}" for name in names]

    def _check_bucket(self, fs: pafs.FileSystem, prefix: str) -> None:
        # A listing under a missing bucket is simply empty: say which bucket is wrong instead.
        if isinstance(fs, pafs.S3FileSystem | pafs.GcsFileSystem) and "/" in prefix:
            bucket = prefix.split("/", 1)[0]
            if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                raise PartitionError(f"raw source {self}: bucket {bucket!r} does not exist (source.parquet.url)")

    def entry_problem(self, location: str) -> str | None:
        """Why the listed entry `location` must not be opened: not a regular file (a FIFO, a socket, a
        device, a folder named *.parquet), or a symlink that resolves outside the raw folder; None if fine."""
        if not self.local:
            return None
        path = local_path(location)
        if path.is_symlink():
            target = Path(os.path.realpath(path))
            roots = {
                Path(os.path.realpath(local_path(self.root or self.location))),
                Path(os.path.realpath(local_path(self.location))),
            }
            if not any(target.is_relative_to(root) for root in roots):
                shown = " or ".join(str(r) for r in sorted(roots))
                return f"raw file {path} is a symlink to {target}, outside the raw folder {shown}; copy the file in instead"
        return _not_a_regular_file(path)

    def opened(self, location: str) -> pq.ParquetFile:
        """The listed file at `location`, its footer read within the partition's limit."""
        problem = self.entry_problem(location)
        if problem:
            raise PartitionError(problem)
        return opened_parquet(location, self.limit)

    def parquet_partition(self, staging: Path, chunk_rows: int) -> ParquetPartition:
        del staging, chunk_rows
        return self


def checked_parquet_files(raw: ParquetPartition) -> list[tuple[str, pa.Schema | None, str | None]]:
    """(file, schema, problem) of each of the partition's files, each footer read: an entry that is
    no regular file or links out of the raw folder, and a zero-byte, non-Parquet or garbage-footer
    file have no schema and a problem naming them."""
    checked = []
    for location in raw.files():
        problem = raw.entry_problem(location)
        if problem:
            checked.append((location, None, problem))
            continue
        try:
            checked.append((location, opened_parquet(location, raw.limit).schema_arrow, None))
        except (pa.ArrowException, OSError) as exc:
            # A real OS error (permission, disk) has an errno and is the environment's, not the file's content.
            if isinstance(exc, OSError) and exc.errno is not None:
                raise
            checked.append((location, None, f"raw file {location} is not a readable Parquet file: {_first_line(exc)}"))
    return checked
