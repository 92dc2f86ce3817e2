"""`partition_leases`: which run may write a partition, for how long; taken, renewed, released, taken over."""

from __future__ import annotations

from typing import Any

from tasks.sinks.warehouse.base import WarehouseBase
from tasks.sinks.warehouse.session import PARTITION_KEY

_LEASE_EXPIRY = "now() + CAST($ttl_s AS DOUBLE PRECISION) * INTERVAL '1 second'"


class PartitionLeases(WarehouseBase):
    """The partition leases of the runs."""

    def acquire_partition_lease(
        self, job: str, partition_date: Any, run_id: str, host: str, pid: int, ttl_s: float
    ) -> dict[str, Any] | None:
        """Take the partition's lease for `ttl_s` seconds: None when this run now holds it (it was
        free, expired or already ours), else the holder's row (run_id, host, pid, expires_at)."""
        values = {
            "job": job,
            "partition_date": partition_date,
            "run_id": run_id,
            "host": host,
            "pid": pid,
            "ttl_s": ttl_s,
        }
        with self._session(write=True) as session:
            # A holder may release between the failed insert and the look-up; then the insert is retried.
            for _ in range(3):
                taken = session.rows(
                    "INSERT INTO partition_leases AS held (job, partition_date, run_id, host, pid, acquired_at, expires_at) "
                    f"VALUES ($job, $partition_date, $run_id, $host, $pid, now(), {_LEASE_EXPIRY}) "
                    "ON CONFLICT (job, partition_date) DO UPDATE SET run_id = excluded.run_id, host = excluded.host, "
                    "pid = excluded.pid, expires_at = excluded.expires_at, "
                    "acquired_at = CASE WHEN held.run_id = excluded.run_id THEN held.acquired_at ELSE excluded.acquired_at END "
                    "WHERE held.expires_at <= now() OR held.run_id = excluded.run_id RETURNING run_id",
                    values,
                )
                if taken:
                    return None
                holder = session.rows(
                    f"SELECT run_id, host, pid, expires_at FROM partition_leases WHERE {PARTITION_KEY}", values
                )
                if holder:
                    return holder[0]
        raise RuntimeError(f"lease of ({job}, {partition_date}) kept changing hands; try again")

    def renew_partition_lease(self, job: str, partition_date: Any, run_id: str, ttl_s: float) -> bool:
        """Extend this run's lease to `ttl_s` seconds from now; False when the run no longer holds it."""
        with self._session(write=True) as session:
            return bool(
                session.rows(
                    f"UPDATE partition_leases SET expires_at = {_LEASE_EXPIRY} WHERE {PARTITION_KEY} AND run_id = $run_id "
                    "RETURNING run_id",
                    {"job": job, "partition_date": partition_date, "run_id": run_id, "ttl_s": ttl_s},
                )
            )

    def release_partition_lease(self, job: str, partition_date: Any, run_id: str) -> None:
        """Give up this run's lease; a lease another run holds is left alone."""
        with self._session(write=True) as session:
            session.execute(
                f"DELETE FROM partition_leases WHERE {PARTITION_KEY} AND run_id = $run_id",
                {"job": job, "partition_date": partition_date, "run_id": run_id},
            )

    def take_over_partition_lease(
        self, job: str, partition_date: Any, run_id: str, host: str, pid: int, ttl_s: float, previous_run_id: str
    ) -> bool:
        """Take the lease from `previous_run_id`, which the caller judged dead; False when that run
        no longer holds it (it renewed into someone else's hands, released, or another taker won)."""
        with self._session(write=True) as session:
            return bool(
                session.rows(
                    "UPDATE partition_leases SET run_id = $run_id, host = $host, pid = $pid, acquired_at = now(), "
                    f"expires_at = {_LEASE_EXPIRY} WHERE {PARTITION_KEY} AND run_id = $previous_run_id RETURNING run_id",
                    {
                        "job": job,
                        "partition_date": partition_date,
                        "run_id": run_id,
                        "host": host,
                        "pid": pid,
                        "ttl_s": ttl_s,
                        "previous_run_id": previous_run_id,
                    },
                )
            )
