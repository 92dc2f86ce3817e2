"""What a run keeps until it ends holds only its own few values, not views into a chunk's buffers.

Polars strings are views: a group-by key or a gathered row points into the source column's data
buffers and keeps all of them alive. A run keeps each chunk's decision groups until it ends, so a
view there held every chunk's strings: ~1.8 MB a 50 k-row chunk, 2.1 GB peak RSS at 10 M rows
(bench/memory.py). (The duplicate pass had the same leak in its per-row-group hits; its result is
compacted by its own concat and sort, so only the pass's peak showed it: bench/memory.py again.)
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tasks.monitoring.decisions import prediction_groups

ROWS = 100_000
LONG = "x" * 40  # longer than the 12 bytes a view holds inline


def held_bytes(frame: pl.DataFrame) -> int:
    """Bytes of every buffer behind the frame's columns, shared view buffers included."""
    table = frame.to_arrow(compat_level=pl.CompatLevel.newest())
    return sum(b.size for column in table.columns for chunk in column.chunks for b in chunk.buffers() if b is not None)


def test_a_chunks_decision_groups_hold_only_their_own_strings() -> None:
    rng = np.random.default_rng(3)
    decisions = np.array([f"{LONG}-approve", f"{LONG}-decline", f"{LONG}-review"])
    predictions = pl.DataFrame(
        {
            "run_id": [f"{LONG}-run"] * ROWS,
            "model_version": [f"{LONG}-v1"] * ROWS,
            "decision": decisions[rng.integers(0, 3, ROWS)],
            "rule_id": [f"{LONG}-rule"] * ROWS,
            "score": rng.integers(300, 850, ROWS).astype(np.int16),
            "probability": rng.random(ROWS),
            "probability_low": rng.random(ROWS) * 0.5,
            "probability_high": 0.5 + rng.random(ROWS) * 0.5,
        }
    )
    assert held_bytes(predictions.select("decision")) > 4_000_000  # the chunk's own strings: megabytes

    groups = prediction_groups(predictions, [0.2, 0.6])

    assert groups["rows"].sum() == ROWS
    own = held_bytes(pl.DataFrame(groups.to_dicts(), schema=groups.schema))  # the same rows, built afresh
    assert held_bytes(groups) < 1.5 * own
