"""Duplicated entity ids of a raw partition, found across every file before any chunk is scored.

Work units are guarded apart, on threads or Dask workers, so no chunk can tell that its id
appears again in another unit or file. The planner therefore reads only the entity column of
the partition, one row group at a time, in partition order (file, row group, row), and finds
every duplicated id exactly:

1. each id is hashed to 64 bits and the hashes are spilled to bucket files by hash, so memory
   holds one bucket (at most ~16 MB), not the partition;
2. per bucket, the hashes seen more than once are the candidates (a collision may add some);
3. a second read keeps the rows whose hash is a candidate, with their global row number, and
   groups them by the id itself, so a hash collision never makes a duplicate.

What the work units need is the sorted global row numbers of the rows the rule quarantines,
staged as a small Parquet file that each unit reads its own slice of.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.errors import GuardFailure, PartitionError
from tasks.guards.suite import EntityKeyRule, OnDuplicate
from tasks.sources import ParquetPartition, ReadLimit, opened_parquet, read_row_group

_HASHES_PER_BUCKET = 2_000_000
_QUARANTINED_ROWS_GROUP = 65_536
"""Row-group size of the staged row numbers: a unit's range filter then skips the groups of other units."""


@dataclass(frozen=True)
class RawRowGroup:
    """One non-empty Parquet row group of the raw partition and the global number of its first row."""

    path: str
    group: int
    rows: int
    first_row: int


def partition_row_groups(raw: ParquetPartition) -> list[RawRowGroup]:
    """The partition's non-empty row groups in partition order, from the Parquet footers alone.

    This order defines a row's global number; the work units and the duplicate pre-pass both use it.
    """
    groups: list[RawRowGroup] = []
    first_row = 0
    for path in raw.files():
        try:
            metadata = raw.opened(path).metadata
        except (pa.ArrowInvalid, OSError) as exc:
            raise PartitionError(f"raw file {path} is not a readable Parquet file: {exc}") from exc
        for group in range(metadata.num_row_groups):
            rows = metadata.row_group(group).num_rows
            if rows:
                groups.append(RawRowGroup(path, group, rows, first_row))
                first_row += rows
    return groups


@dataclass(frozen=True)
class DuplicatedIds:
    """Every row of an id that appears more than once: `entity_id` (as text), `row` (global
    number, ascending), `first` (the id's first row in partition order) and `path` (its file)."""

    column: str
    rows: pl.DataFrame

    @property
    def id_count(self) -> int:
        return int(self.rows["first"].sum())

    def quarantined_rows(self, on_duplicate: OnDuplicate) -> np.ndarray:
        """Global numbers of the rows the rule quarantines, ascending."""
        kept = self.rows if on_duplicate == "quarantine_all" else self.rows.filter(~pl.col("first"))
        return kept["row"].to_numpy().astype(np.int64)

    def failure(self, rule: EntityKeyRule, suite_name: str) -> GuardFailure:
        files = sorted({Path(p).name for p in self.rows["path"]})
        examples = self.rows.filter(pl.col("first"))["entity_id"].head(5).to_list()
        return GuardFailure(
            f"{self.id_count} entity id(s) appear more than once in column {self.column!r} ({self.rows.height} rows) "
            f"across raw file(s) {', '.join(files)}; {rule.key} in {suite_name} has action fail; examples: {examples}"
        )


def _entity_ids(
    groups: list[RawRowGroup], column: str, limit: ReadLimit | None
) -> Iterator[tuple[RawRowGroup, pl.Series]]:
    """The entity column of each row group as text, one row group in memory at a time; damaged bytes
    in it are named as in any other column (`raw file … is corrupt in row group N`)."""
    opened: tuple[str, pq.ParquetFile] | None = None
    for group in groups:
        if opened is None or opened[0] != group.path:
            opened = (group.path, opened_parquet(group.path, limit))
        parquet = opened[1]
        if column not in parquet.schema_arrow.names:
            raise GuardFailure(f"raw file {group.path} lacks the entity column {column!r}")
        ids = pl.from_arrow(
            read_row_group(parquet, group.path, group.group, columns=[column], limit=limit).column(column)
        )
        yield group, ids if ids.dtype == pl.String else ids.cast(pl.String)


def _hashes(ids: pl.Series) -> np.ndarray:
    # A fixed seed: both passes run in one process and must agree; collisions are resolved on the values.
    return ids.hash(seed=0).to_numpy()


def _candidate_hashes(groups: list[RawRowGroup], column: str, scratch: Path, limit: ReadLimit | None) -> np.ndarray:
    buckets = max(1, -(-sum(g.rows for g in groups) // _HASHES_PER_BUCKET))
    files = [open(scratch / f"bucket-{b:04d}.u64", "wb") for b in range(buckets)]
    try:
        for _, ids in _entity_ids(groups, column, limit):
            hashes = _hashes(ids)
            which = hashes % np.uint64(buckets)
            for b in np.unique(which):
                # Not ndarray.tofile: on a full disk it raises an OSError without errno ENOSPC
                # ("3000 requested and 1536 written"), which no one could tell from a bug.
                files[int(b)].write(hashes[which == b].tobytes())
    finally:
        for f in files:
            f.close()
    candidates = []
    for b in range(buckets):
        values, counts = np.unique(np.fromfile(scratch / f"bucket-{b:04d}.u64", dtype=np.uint64), return_counts=True)
        candidates.append(values[counts > 1])
    return np.sort(np.concatenate(candidates))


def duplicated_entity_ids(
    groups: list[RawRowGroup], column: str, *, scratch_parent: Path, limit: ReadLimit | None = None
) -> DuplicatedIds:
    """The rows of every id that appears more than once in the partition (nulls are no id, as in GX);
    each read of the store within `limit` (the partition's)."""
    empty = pl.DataFrame(schema={"entity_id": pl.String, "row": pl.Int64, "first": pl.Boolean, "path": pl.String})
    if not groups:
        return DuplicatedIds(column, empty)
    scratch_parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="entity-hashes-", dir=scratch_parent) as scratch:
        candidates = _candidate_hashes(groups, column, Path(scratch), limit)
    if candidates.size == 0:
        return DuplicatedIds(column, empty)
    found = []
    for group, ids in _entity_ids(groups, column, limit):
        hit = np.flatnonzero(np.isin(_hashes(ids), candidates))
        if hit.size:
            # to_list(): a gathered string Series is views into the row group's whole buffer, which
            # every row group's hits would then keep alive (~1.6 MB each) until the pass ends.
            found.append(
                pl.DataFrame(
                    {
                        "entity_id": pl.Series(ids.gather(hit).to_list(), dtype=pl.String),
                        "row": group.first_row + hit.astype(np.int64),
                        "path": group.path,
                    }
                )
            )
    rows = (
        pl.concat(found)
        .drop_nulls("entity_id")
        .filter(pl.len().over("entity_id") > 1)
        .with_columns((pl.col("row") == pl.col("row").min().over("entity_id")).alias("first"))
        .sort("row")
        .select("entity_id", "row", "first", "path")
    )
    return DuplicatedIds(column, rows)


def write_quarantined_rows(path: Path, rows: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"row": pa.array(rows, type=pa.int64())}), path, row_group_size=_QUARANTINED_ROWS_GROUP)
    return path


def quarantined_rows_between(path: str | None, first_row: int, rows: int) -> np.ndarray:
    """The staged row numbers in `[first_row, first_row + rows)`, ascending; none without a file."""
    if path is None:
        return np.empty(0, dtype=np.int64)
    table = pq.read_table(path, columns=["row"], filters=[("row", ">=", first_row), ("row", "<", first_row + rows)])
    return np.sort(table.column("row").to_numpy().astype(np.int64))


def chunk_duplicate_mask(quarantined: np.ndarray, first_row: int, rows: int) -> np.ndarray | None:
    """Which rows of a chunk starting at global row `first_row` the entity-key rule quarantines;
    None when it quarantines none of them."""
    lo, hi = np.searchsorted(quarantined, [first_row, first_row + rows])
    if lo == hi:
        return None
    mask = np.zeros(rows, dtype=bool)
    mask[quarantined[lo:hi] - first_row] = True
    return mask
