"""Record batches of any size regrouped into tables of exactly one chunk."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa


def rechunked_tables(batches: Iterable[pa.RecordBatch], chunk_rows: int) -> Iterator[pa.Table]:
    """Tables of exactly `chunk_rows` rows (the last may be shorter) from batches of any size."""
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for batch in batches:
        pending.append(batch)
        pending_rows += batch.num_rows
        while pending_rows >= chunk_rows:
            table = pa.Table.from_batches(pending)
            yield table.slice(0, chunk_rows)
            rest = table.slice(chunk_rows)
            pending = rest.to_batches()
            pending_rows = rest.num_rows
    if pending_rows:
        yield pa.Table.from_batches(pending)
