"""Calls to a raw source under a time limit: a listing, a file's footer, a row group.

A store that stops answering (a killed or frozen S3 server, a hung NFS mount) would otherwise hold
the run without a word: pyarrow's S3 client waits ~100 s per request and retries on its own, and a
local read has no limit at all. Each call runs in a daemon thread and is given `timeout_s`; one
that does not answer in time, or fails with a network or server error, is tried again after a
warning that says so and how long the retries may still take. After the last try the run
stops: SourceUnreachable (exit 3) naming the source when it never answered, else the store's own
error, which the caller names.

A call that timed out cannot be interrupted inside pyarrow: its thread is left behind and dies with
the process. An S3 request is given the same limit (tasks/sources/parquet.py), so it ends by itself
soon after and pyarrow's S3 shutdown at exit does not wait on it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

from tasks.errors import SourceUnreachable

log = logging.getLogger("scoring.source")

T = TypeVar("T")

_TRANSIENT = re.compile(
    r"NETWORK_CONNECTION|Could not connect|Connection refused|Connection reset|Timeout was reached|timed out|"
    r"HTTP status (500|502|503|504)|SlowDown|ServiceUnavailable",
    re.IGNORECASE,
)
_SERVER_ERROR = re.compile(r"HTTP status 5\d\d|SlowDown|ServiceUnavailable", re.IGNORECASE)
_NOT_TRANSIENT = re.compile(r"Could not resolve|resolving region", re.IGNORECASE)
"""A host name that does not resolve is a configuration or network fault that a retry a second later does not fix."""


@dataclass(frozen=True)
class ReadLimit:
    """How long one call to a raw source may go unanswered (`SCORING_SOURCE_TIMEOUT_S`), and how many
    times a call that did not answer is made in all."""

    timeout_s: float
    attempts: int = 3

    def pause_s(self, attempt: int) -> float:
        """The wait before try `attempt + 1`: short, so that a store back within seconds costs seconds."""
        return min(float(attempt), self.timeout_s)

    def left_s(self, attempt: int) -> float:
        """The most the tries after `attempt` can still take, pauses included."""
        return sum(self.pause_s(a) + self.timeout_s for a in range(attempt, self.attempts))


def bounded(call: Callable[[], T], *, where: str, limit: ReadLimit | None, store: Hashable = None) -> T:
    """`call()`, tried up to `limit.attempts` times while it does not answer within `limit.timeout_s`
    or fails with a network or server error; `where` (a path or a URL without its query) names the
    source in the warning and the error. Other errors are raised as they are. No limit: `call()` itself.

    Once the tries at a store are used up, its other calls fail at once for as long as the tries
    took: the run's other work units would each wait through the same tries (one after the other
    on each worker) before the run could fail. `store` tells the stores apart (an object store's
    bucket and the credentials it is reached with); by default the store `where` names."""
    if limit is None:
        return call()
    store = (_store(where), store)
    _refuse_if_given_up(store, where, limit)
    started = time.monotonic()
    for attempt in range(1, limit.attempts + 1):
        finished, value, error = _within(call, limit.timeout_s)
        if finished and error is None:
            return value  # type: ignore[return-value]
        if finished and not _transient(error):
            # The caller names what the store's own error means (refused credentials, a missing object, ...).
            raise error  # type: ignore[misc]
        reason = f"no answer within {limit.timeout_s:g} s" if not finished else _first_line(error)
        if attempt == limit.attempts:
            with _given_up_lock:
                _given_up[store] = (time.monotonic(), time.monotonic() - started, reason)
            if finished:
                raise error  # type: ignore[misc]
            raise SourceUnreachable(
                f"raw source {where} stopped answering: {reason}, {limit.attempts} times in "
                f"{time.monotonic() - started:.0f} s (SCORING_SOURCE_TIMEOUT_S)"
            )
        what = "answered with an error" if finished and _SERVER_ERROR.search(str(error)) else "stopped answering"
        log.warning(
            "source %s %s (%s); retrying (attempt %d of %d, up to %.0f s more)",
            where,
            what,
            reason,
            attempt + 1,
            limit.attempts,
            limit.left_s(attempt),
        )
        time.sleep(limit.pause_s(attempt))
    raise AssertionError("unreachable")  # the last attempt returns or raises


_given_up: dict[Hashable, tuple[float, float, str]] = {}
"""Store → (when its tries were used up, how long they took, why), in this process."""
_given_up_lock = threading.Lock()


def _store(where: str) -> str:
    """What a failure is remembered by: an object store's scheme and bucket, else the path itself."""
    parts = urllib.parse.urlsplit(where)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else where


def _refuse_if_given_up(store: tuple[str, Hashable], where: str, limit: ReadLimit) -> None:
    with _given_up_lock:
        if store not in _given_up:
            return
        at, took, reason = _given_up[store]
        ago = time.monotonic() - at
        if ago >= max(took, limit.timeout_s):
            del _given_up[store]
            return
    raise SourceUnreachable(
        f"raw source {where} not read: {store[0]} stopped answering {ago:.0f} s ago ({reason}) after {limit.attempts} tries "
        "(SCORING_SOURCE_TIMEOUT_S)"
    )


def _within(call: Callable[[], T], timeout_s: float) -> tuple[bool, T | None, BaseException | None]:
    """(finished, value, error) of `call()` run in a daemon thread for at most `timeout_s`."""
    outcome: list = []
    done = threading.Event()

    def target() -> None:
        try:
            outcome.append((call(), None))
        except BaseException as exc:  # noqa: BLE001  (handed to the caller, which raises it)
            outcome.append((None, exc))
        finally:
            done.set()

    # A daemon thread: one stuck in a read that never returns must not keep the process alive at exit.
    threading.Thread(target=target, name="raw-source-call", daemon=True).start()
    if not done.wait(timeout_s):
        return False, None, None
    value, error = outcome[0]
    return True, value, error


def _transient(error: BaseException | None) -> bool:
    text = str(error)
    return (
        isinstance(error, OSError)
        and getattr(error, "errno", None) is None
        and bool(_TRANSIENT.search(text))
        and not _NOT_TRANSIENT.search(text)
    )


def _first_line(error: BaseException | None) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
