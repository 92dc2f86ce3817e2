"""Artifact contents made by tasks/ (tables, Markdown) left as Prefect artifacts of the current run."""

from __future__ import annotations

import time
import uuid

import httpx
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.client.orchestration import SyncPrefectClient, get_client

from tasks.reports.artifacts import Artifact

_ID_SPACE = 1 << 128
MAX_TRIES = 64
"""Creations of one artifact before it is kept wherever its id fell: the order is a reading aid, never worth a failure."""
QUICK_DELETE_TRIES = 20
"""Deletions answered 503 sent again after 20, 40, ... ms (4.2 s in all) before the client's own retries take over."""


def _deleted(client: SyncPrefectClient, artifact_id: uuid.UUID) -> None:
    """Delete an artifact, sending a deletion answered 503 again within milliseconds. On Prefect's SQLite database a
    deletion's transaction (it reads the key's latest version, then writes) finds the database locked by the server's
    event writes now and then, and the server answers 503 at once; the client's own retry sleeps 2 s first (4 s the
    next time), whatever PREFECT_CLIENT_MAX_RETRIES says, which made up most of a backfill's cost per partition
    (bench/backfill.py). So the first tries go through the client's httpx transport without its retrying `send`."""
    transport = client._client  # PrefectHttpxSyncClient: an httpx.Client whose `send` adds the retries
    for attempt in range(QUICK_DELETE_TRIES):
        response = httpx.Client.send(transport, transport.build_request("DELETE", f"/artifacts/{artifact_id}"))
        if response.status_code != 503:
            break
        time.sleep(0.02 * (attempt + 1))
    if response.is_success or response.status_code == 404:
        return
    client.delete_artifact(artifact_id)


def left_artifact(artifact: Artifact) -> uuid.UUID:
    if artifact.link is not None:
        return create_link_artifact(
            key=artifact.key, link=artifact.link, link_text=artifact.description, description=artifact.description
        )
    if artifact.table is not None:
        return create_table_artifact(key=artifact.key, table=artifact.table, description=artifact.description)
    return create_markdown_artifact(
        key=artifact.key, markdown=artifact.markdown or "", description=artifact.description
    )


def left_artifacts(artifacts: list[Artifact]) -> None:
    for artifact in artifacts:
        left_artifact(artifact)


def artifact_id_bounds(position: int, pinned: int, above: int) -> tuple[int, int]:
    """The ids (as integers) the artifact at `position` may take so that Prefect shows it there: its UI lists a run's
    artifacts by id, descending (`sort: ID_DESC` in both the new and the old UI), and the server draws each id at
    random (uuid4), so creation order alone says nothing. The `pinned` first ones each take a band of their own at the
    top, in their order, below the previous one's id `above`; the others anywhere below the last pinned one."""
    if position >= pinned:
        return 0, above
    # Bands of 1/(2k+1) of the ids each, from the top: a third for one pinned artifact, which takes about 4 deletions
    # of a dozen artifacts in all, the fewest (a deletion costs several creations on Prefect's server).
    return _ID_SPACE * 2 * (pinned - position) // (2 * pinned + 1), above


def left_artifacts_in_order(artifacts: list[Artifact]) -> list[uuid.UUID]:
    """Leave `artifacts`, the pinned ones (`Artifact.pinned`, first in the list) shown first in the UI in their order,
    the others after them: an artifact whose id falls outside its bounds (`artifact_id_bounds`) is deleted and made
    again. Returns the ids kept."""
    pinned = next((i for i, artifact in enumerate(artifacts) if not artifact.pinned), len(artifacts))
    kept: list[uuid.UUID] = []
    above = _ID_SPACE
    with get_client(sync_client=True) as client:
        for position, artifact in enumerate(artifacts):
            low, high = artifact_id_bounds(position, pinned, above)
            for attempt in range(MAX_TRIES):
                made = left_artifact(artifact)
                if low <= made.int < high or attempt == MAX_TRIES - 1:
                    break
                _deleted(client, made)
            kept.append(made)
            if position < pinned:
                above = made.int
    return kept
