"""Progress of long work, for whoever watches in this process (the CLI's progress bar).

Flows report through `reported_progress`; Prefect's progress artifacts are created beside it by
the flows themselves, so a run started from the UI shows the same progress there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

ProgressListener = Callable[[str, int, int], None]
"""(what, done, total): e.g. ("credit_risk 2026-03-09 chunks", 3, 8)."""

_listeners: list[ProgressListener] = []


@contextmanager
def progress_listener(listener: ProgressListener) -> Iterator[None]:
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)


def reported_progress(what: str, done: int, total: int) -> None:
    for listener in list(_listeners):
        listener(what, done, total)
