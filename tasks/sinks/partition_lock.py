"""One writer per (job, partition): a lease in the warehouse, renewed while the run lives.

A run takes the lease before it opens its ledger row and gives it back when it ends. A second
run of the same partition waits up to `wait_s` for it, then fails naming the holder. A lease
whose holder was killed is taken over: at once when the holder ran on this host and its process
is gone, otherwise when the lease expires (`ttl_s` after its last renewal; the database's clock
decides). A run that lost its lease (it stalled past the TTL and someone took over) must not
publish: `ensure_held` raises before it does.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from tasks.errors import PartitionBusy, PartitionLeaseLost

log = logging.getLogger("scoring.run")


class LeaseStore(Protocol):
    def acquire_partition_lease(
        self, job: str, partition_date: Any, run_id: str, host: str, pid: int, ttl_s: float
    ) -> dict[str, Any] | None: ...

    def renew_partition_lease(self, job: str, partition_date: Any, run_id: str, ttl_s: float) -> bool: ...

    def release_partition_lease(self, job: str, partition_date: Any, run_id: str) -> None: ...

    def take_over_partition_lease(
        self, job: str, partition_date: Any, run_id: str, host: str, pid: int, ttl_s: float, previous_run_id: str
    ) -> bool: ...


def process_alive(pid: int) -> bool:
    """Whether `pid` names a live process on this host (a zombie counts as alive until reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class PartitionLease:
    store: LeaseStore
    job: str
    partition_date: Any
    run_id: str
    ttl_s: float
    wait_s: float
    poll_s: float = 1.0
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    taken_over_from: str | None = None
    """Run id of a holder whose process was gone, when this lease was taken from it."""
    _lost: threading.Event = field(default_factory=threading.Event, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)

    def acquire(self) -> None:
        deadline = time.monotonic() + self.wait_s
        waited_for: str | None = None
        while True:
            holder = self.store.acquire_partition_lease(
                self.job, self.partition_date, self.run_id, self.host, self.pid, self.ttl_s
            )
            if holder is None:
                return
            if holder["host"] == self.host and not process_alive(int(holder["pid"])):
                if self.store.take_over_partition_lease(
                    self.job, self.partition_date, self.run_id, self.host, self.pid, self.ttl_s, holder["run_id"]
                ):
                    self.taken_over_from = holder["run_id"]
                    log.warning(
                        "partition %s of job %s: took over the lease of run %s, whose process %s on %s is gone",
                        self.partition_date,
                        self.job,
                        holder["run_id"],
                        holder["pid"],
                        self.host,
                    )
                    return
                continue
            if time.monotonic() >= deadline:
                raise PartitionBusy(
                    f"partition {self.partition_date} of job {self.job} is being scored by run {holder['run_id']} "
                    f"(host {holder['host']}, pid {holder['pid']}, lease until {holder['expires_at']}); "
                    f"gave up after waiting {self.wait_s:g} s (SCORING_LOCK_WAIT_S)"
                )
            if waited_for != holder["run_id"]:
                waited_for = holder["run_id"]
                log.info(
                    "partition %s of job %s is being scored by run %s; waiting up to %g s",
                    self.partition_date,
                    self.job,
                    holder["run_id"],
                    self.wait_s,
                )
            time.sleep(min(self.poll_s, max(deadline - time.monotonic(), 0.0)))

    def _heartbeat(self) -> None:
        # Renew at a third of the TTL, so two missed renewals (a slow database) still leave it held.
        interval = self.ttl_s / 3.0
        held_until = time.monotonic() + self.ttl_s
        while not self._stop.wait(interval):
            try:
                if not self.store.renew_partition_lease(self.job, self.partition_date, self.run_id, self.ttl_s):
                    self._lost.set()
                    return
                held_until = time.monotonic() + self.ttl_s
            except Exception as exc:
                log.warning("partition %s of job %s: lease renewal failed: %s", self.partition_date, self.job, exc)
                if time.monotonic() > held_until:
                    self._lost.set()
                    return

    def ensure_held(self) -> None:
        """Raise if another run took the partition over; called before anything is published."""
        if self._lost.is_set():
            raise PartitionLeaseLost(
                f"run {self.run_id} lost the lease of partition {self.partition_date} of job {self.job} "
                f"(not renewed within {self.ttl_s:g} s, SCORING_LOCK_TTL_S); another run may be scoring it, so nothing is published"
            )

    @contextmanager
    def held(self) -> Iterator[PartitionLease]:
        self.acquire()
        beat = threading.Thread(target=self._heartbeat, name=f"lease-{self.job}-{self.partition_date}", daemon=True)
        beat.start()
        try:
            yield self
        finally:
            self._stop.set()
            beat.join()
            try:
                self.store.release_partition_lease(self.job, self.partition_date, self.run_id)
            except Exception as exc:
                # The lease expires by itself; the run's own outcome matters more than this.
                log.warning(
                    "partition %s of job %s: lease not released (%s); it expires in %g s",
                    self.partition_date,
                    self.job,
                    exc,
                    self.ttl_s,
                )
