"""The warehouse: per-partition tables (`predictions`, `quarantine`, guard and drift reports), the
monitoring tables, the `runs` ledger and `partition_leases`, on DuckDB or on PostgreSQL.

Both backends create their tables from the same Arrow schemas, the catalog's (tasks/catalog.py
WAREHOUSE_DATASETS), and run the same SQL; they differ only in how they connect, how parameters
are written and how rows are bulk-loaded. A partition's rows are replaced in one transaction:
readers see the previous run's rows or the new ones, never a mix. DuckDB allows one read-write
process per file, so its connections are short and opening one retries with backoff while another
process holds the lock. PostgreSQL is loaded over Arrow with ADBC (binary COPY), never row by row,
and its password never appears in errors, logs or reprs.

This package holds what both share, a module per part: `session` (the shared SQL), `schema` and
`migrations`, the `ledger` of runs, `publish`, monitoring `reads`, `aliases`, `leases`, composed in
`operations.Warehouse`. The backends are `duckdb_warehouse` and `postgres_warehouse`, and
`warehouse_choice.warehouse_for` picks one.
"""

from tasks.sinks.warehouse.operations import Warehouse
from tasks.sinks.warehouse.reads import StraddlingRule

__all__ = ["StraddlingRule", "Warehouse"]
