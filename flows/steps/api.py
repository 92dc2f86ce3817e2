"""The Prefect API a run reports to, and what its loss means for the run.

A run scores without the API (task states go out as events), but the flow run's states, artifacts and
logs go to it. When it stops answering mid-run, the run fails before it publishes, naming the API:
outputs the orchestrator cannot account for would leave its UI, its automations and the ledger
disagreeing. Prefect's own client waits for it (PREFECT_CLIENT_MAX_RETRIES, set in tasks/__init__.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from prefect.client.orchestration import get_client
from prefect.settings import PREFECT_API_URL

from tasks.errors import OrchestrationLost

_HEALTH_PAUSES_S = (0.0, 1.0, 3.0)
_HEALTH_TIMEOUT_S = 10.0


def orchestration_api_url() -> str | None:
    """The API a run reports to; None for Prefect's ephemeral API, which lives and dies with this process."""
    return PREFECT_API_URL.value() or None


def ensure_orchestration_api(what: str) -> None:
    """OrchestrationLost naming the API when it does not answer its health check now; `what` says
    what the run will not do for it (e.g. "run R of J D is not published")."""
    url = orchestration_api_url()
    if url is None:
        return
    problem: BaseException | None = None
    for pause_s in _HEALTH_PAUSES_S:
        time.sleep(pause_s)
        try:
            # A client of its own (other httpx settings than the run's): the run's client, having
            # connected once, retries a refused connection for ~14 s; this one fails at once, and the
            # pauses here ride out a restart of a few seconds.
            with get_client(httpx_settings={"timeout": _HEALTH_TIMEOUT_S}, sync_client=True) as client:
                problem = client.api_healthcheck()
        except Exception as exc:  # noqa: BLE001  (entering the client talks to the API too)
            problem = exc
        if problem is None:
            return
    raise OrchestrationLost(f"the orchestration API at {url} was lost during the run ({_reason(problem)}); {what}")


@contextmanager
def reporting_to_api() -> Iterator[None]:
    """A call that reports to the API (a progress artifact) raises OrchestrationLost when the API is gone,
    after Prefect's own retries: the run's failure then names the lost API, not an HTTP error."""
    try:
        yield
    except Exception as exc:
        lost = orchestration_lost(exc)
        if lost is None:
            raise
        raise lost from exc


def orchestration_lost(exc: BaseException) -> OrchestrationLost | None:
    """The OrchestrationLost that `exc` amounts to: one raised by the run itself anywhere in its chain, or
    an HTTP transport error of a request to the API (the flow engine's own, reporting the run's state);
    None for anything else."""
    url = orchestration_api_url()
    found: OrchestrationLost | None = None
    pending, seen = [exc], set()
    while pending:
        current = pending.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OrchestrationLost):
            return current
        if (
            found is None
            and url
            and isinstance(current, httpx.TransportError)
            and _requested_url(current).startswith(url.rstrip("/"))
        ):
            found = OrchestrationLost(f"the orchestration API at {url} was lost during the run ({_reason(current)})")
        pending += [current.__cause__, current.__context__]
    return found


def _requested_url(exc: httpx.TransportError) -> str:
    try:
        return str(exc.request.url)
    except RuntimeError:  # an httpx error raised without its request
        return ""


def _reason(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
