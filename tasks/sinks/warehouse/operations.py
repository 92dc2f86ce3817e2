"""The warehouse's operations, written once over a backend's sessions: each part in its own module."""

from __future__ import annotations

from tasks.sinks.warehouse.aliases import AliasLedger
from tasks.sinks.warehouse.leases import PartitionLeases
from tasks.sinks.warehouse.ledger import RunLedger
from tasks.sinks.warehouse.publish import PartitionPublishing
from tasks.sinks.warehouse.reads import MonitoringReads


class Warehouse(RunLedger, PartitionPublishing, MonitoringReads, AliasLedger, PartitionLeases):
    """The warehouse's operations, written once over a backend's sessions (tasks/sinks/duckdb_warehouse.py,
    tasks/sinks/postgres_warehouse.py)."""
