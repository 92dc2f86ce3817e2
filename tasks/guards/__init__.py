"""Feature guards: a Great Expectations suite compiled into vectorised polars checks, applied per chunk.

- `suite`: loading `expectations/<job>.json` into a `GuardSuite`, and what each `meta.guard` action means;
- `compiled`: the expectation types evaluated as polars expressions, and the semantics they share with GX;
- `gx`: the fallback for any other row-level expectation, validated by GX itself on each chunk;
- `apply`: a suite applied to one chunk (repairs, quarantines, the record of every action);
- `summary`: what the guards did in a run, and the run-level limits;
- `duplicates`: the partition's duplicated entity ids, found across every file before scoring.
"""

from tasks.guards.apply import GuardCounts, GuardedChunk, guard_violation_counts, guarded_chunk, raw_schema_problems
from tasks.guards.suite import EntityKeyRule, GuardSuite, OnDuplicate, load_guard_suite
from tasks.guards.summary import guard_limit_breaches, guard_summary_rows

__all__ = [
    "EntityKeyRule",
    "GuardCounts",
    "GuardSuite",
    "GuardedChunk",
    "OnDuplicate",
    "guard_limit_breaches",
    "guard_summary_rows",
    "guard_violation_counts",
    "guarded_chunk",
    "load_guard_suite",
    "raw_schema_problems",
]
