"""A run's partitioned datasets as Delta Lake tables (delta-rs): `<url>/<table>` for each warehouse table
of tasks/catalog.py PARTITION_DATASETS, partitioned by `partition_date`, with `job` kept as a column.

Each table gets one commit per run: `write_deltalake(mode="overwrite", predicate="job = … AND
partition_date = …")` removes the partition's previous files and adds the run's in the same
commit, so a reader of one table sees the previous run's rows of the partition or the new ones,
never both, and other partitions and jobs are untouched. An empty dataset goes the same way:
delta-rs 1.x commits a predicate overwrite of zero rows as the removal of the partition's files,
so the previous run's rows go too (tests/test_delta_sink.py checks it). The tables are separate
commits: across tables there is no atomicity (docs/guides/delta.md).

Rows are streamed from the run's version files (a pyarrow dataset read batch by batch), never
concatenated. Columns go as the catalog's schemas type them: strings, date32, int16, int64,
float64, bool and lists of strings, floats and ints, which delta-rs takes as Delta's string, date,
short, long, double, boolean and array types. None needs a cast: there is no timestamp (whose
time zone Delta would fix to UTC) and no unsigned integer (which Delta lacks).

Credentials: delta-rs reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
AWS_REGION, AWS_ENDPOINT_URL and AWS_ALLOW_HTTP from the environment itself; nothing here passes
any, the spec's URL carries none (tasks/sinks/config.py), and errors mask their values.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tasks.catalog import PARTITION_DATASETS, warehouse_dataset
from tasks.errors import SinkUnwritable
from tasks.redaction import redacted_text, scrubbed
from tasks.settings import Settings, object_store_credentials
from tasks.sinks.config import DeltaSink

log = logging.getLogger("scoring.sinks.delta")

PARTITION_COLUMNS = ["partition_date"]
_BATCH_ROWS = 64_000
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_S3_ERROR = re.compile(r"<Code>(?P<code>[^<]+)</Code>\s*<Message>(?P<message>[^<]*)</Message>")
_RUST_OS_ERROR = re.compile(r'Os \{ code: (?P<code>\d+), kind: \w+, message: "(?P<message>[^"]*)" \}')


@dataclass(frozen=True)
class DeltaTables:
    """A job's Delta tables: `base` (a local path, file:// or s3:// URL) holds one table per dataset."""

    base: str

    def table_url(self, dataset: str) -> str:
        return f"{self.base.rstrip('/')}/{dataset}"


def delta_tables(sink: DeltaSink | None, settings: Settings) -> DeltaTables | None:
    """The tables `sink` names, a relative local path taken under the data root; None without a sink."""
    if sink is None:
        return None
    if urllib.parse.urlsplit(sink.url).scheme:
        return DeltaTables(sink.url)
    path = Path(sink.url)
    return DeltaTables(str(path if path.is_absolute() else settings.data_dir / path))


def delta_store_problem(tables: DeltaTables) -> str | None:
    """What makes the tables' store unusable before any run publishes to it: a missing S3 bucket, a
    local path that is a file (None when there is none). A store that refuses the credentials or does
    not answer, and a local folder that cannot be written, are SinkUnwritable, so a run fails before
    its commit instead of after it."""
    parts = urllib.parse.urlsplit(tables.base)
    if parts.scheme in ("", "file"):
        return _local_store_problem(tables, Path(urllib.parse.unquote(parts.path) if parts.scheme else tables.base))
    if parts.scheme != "s3":
        return None
    import pyarrow.fs as pafs

    try:
        fs, _ = pafs.FileSystem.from_uri(f"s3://{parts.netloc}/")
        found = fs.get_file_info(parts.netloc).type
    except OSError as exc:
        raise SinkUnwritable(
            f"the Delta tables' store {tables.base} cannot be reached: {_reason(type(exc).__name__, _masked(str(exc)))} "
            "(credentials and endpoint come from the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, ...)"
        ) from None
    if found == pafs.FileType.NotFound:
        return f"bucket {parts.netloc!r} of {tables.base} does not exist"
    return None


def _local_store_problem(tables: DeltaTables, base: Path) -> str | None:
    """A file where the tables' folder (or one table's) should be; SinkUnwritable when the nearest folder
    that exists of each table's log cannot take a file (a read-only mount, an immutable folder). A real
    file is created and removed there: as root, permission bits and os.access say little."""
    import tempfile

    probed: set[Path] = set()
    for dataset in PARTITION_DATASETS:
        log_dir = base / dataset.table / "_delta_log"
        folder = next((p for p in (log_dir, *log_dir.parents) if p.exists() or p.is_symlink()), Path("/"))
        if not folder.is_dir():
            return f"{folder} is not a folder; the url names the folder that holds one Delta table per dataset"
        if folder in probed:
            continue
        probed.add(folder)
        try:
            handle, name = tempfile.mkstemp(prefix=".scoring-write-probe-", dir=folder)
            os.close(handle)
            os.unlink(name)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise SinkUnwritable(
                f"sinks.delta.url: the Delta tables at {tables.base} cannot be written: {folder}: {reason}"
            ) from None
    return None


def partition_predicate(job: str, partition_date: dt.date) -> str:
    """The SQL predicate of one (job, partition) in every table."""
    return f"job = {_sql_text(job)} AND partition_date = '{partition_date.isoformat()}'"


def written_delta_partition(
    tables: DeltaTables,
    *,
    job: str,
    partition_date: dt.date,
    run_id: str,
    files: Mapping[str, Sequence[Path]],
) -> dict[str, int]:
    """Rows now in each table for (job, partition_date): every dataset's `files` replace the partition
    in `<base>/<dataset>`, one commit per table. Repeatable (recovery writes a committed run again)."""
    # pyarrow.dataset loads pandas (~0.5 s) and deltalake its Rust core: imported when a Delta table is
    # written, not with every run (most jobs have no Delta sink).
    import pyarrow.dataset as ds
    from deltalake import CommitProperties, write_deltalake

    predicate = partition_predicate(job, partition_date)
    written: dict[str, int] = {}
    for name, paths in files.items():
        url = tables.table_url(name)
        rows = ds.dataset([str(p) for p in paths], schema=warehouse_dataset(name).schema, format="parquet")
        try:
            write_deltalake(
                url,
                rows.scanner(batch_size=_BATCH_ROWS).to_reader(),
                mode="overwrite",
                predicate=predicate,
                partition_by=PARTITION_COLUMNS,
                # A column added to a dataset in a later release joins the table on its next write
                # (older rows read null), as the warehouse adds it in place.
                schema_mode="merge",
                commit_properties=CommitProperties(
                    custom_metadata={"run_id": run_id, "job": job, "partition_date": partition_date.isoformat()}
                ),
            )
        except Exception as exc:  # noqa: BLE001  (OSError, DeltaError, CommitFailedError, …: each is this table refusing the write)
            detail = _masked(_ANSI.sub("", str(exc)))
            log.warning("Delta table %s: writing run %s of %s %s failed: %s", url, run_id, job, partition_date, detail)
            raise SinkUnwritable(
                f"Delta table {url} could not be written: {_reason(type(exc).__name__, detail)}; run {run_id} of {job} "
                f"{partition_date} is published in the warehouse and Parquet and stays `committed` in the ledger: "
                f"the next start of {job} (or `score recover {job}`) writes its Delta tables again"
            ) from None
        written[name] = rows.count_rows()
    log.info(
        "Delta tables %s: partition (%s, %s) replaced by run %s, rows %s",
        tables.base,
        job,
        partition_date,
        run_id,
        written,
    )
    return written


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _masked(text: str) -> str:
    return redacted_text(scrubbed(text, secrets=object_store_credentials()))


def _reason(kind: str, detail: str) -> str:
    """One line out of delta-rs's multi-line error chain: its first line and, for an S3 error
    response, the service's code and message (NoSuchBucket: The specified bucket does not exist)."""
    lines = [line.strip(" ↳") for line in detail.splitlines() if line.strip(" ↳")]
    first = lines[0] if lines else kind
    found = _S3_ERROR.search(detail)
    text = f"{first}: {found['code']}: {found['message']}" if found else first
    # Rust's debug form of an io::Error (`Error: Os { code: 30, kind: ReadOnlyFilesystem, … }`), in words.
    if (os_error := _RUST_OS_ERROR.search(detail)) is not None:
        plain = f"{os_error['message']} (errno {os_error['code']})"
        text = _RUST_OS_ERROR.sub(plain, text) if os_error.group(0) in text else f"{text}: {plain}"
    return " ".join(text.split())[:400]
