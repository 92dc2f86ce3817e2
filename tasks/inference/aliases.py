"""Model aliases: names such as `champion` and `challenger` that point at a registered version.

They live beside the versions, in `<registry>/<model>/aliases.json`, and change by an atomic
rename of that file, so a run resolving `model.version: champion` reads either the old or the new
pointer, never half of one. The file keeps each alias's history (who, when, from → to) as well;
the warehouse's `model_aliases` table is the ledger the product's reports read.

Moves are serialized by an exclusive lock on `.aliases.lock` beside the file
(`inference_alias_lock`): a read-modify-write of the file by two processes at once would let both
start from the same pointer and one move would vanish. The renamed file is the commit point of a
move: it carries the move in `unrecorded` until its ledger row is written, so a process killed
between the rename and the ledger insert leaves a move that the next alias command (or `score
recover`) writes to the ledger, instead of a file and a ledger that disagree.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.errors import AliasBusy, ModelArtifactError

ALIASES_FILE = "aliases.json"
ALIASES_LOCK = ".aliases.lock"
ALIAS_LOCK_WAIT_S = 60.0
"""How long a move waits for another process's move of the same model's aliases (seconds)."""
ALIAS_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
"""Lower-case names, so an alias never looks like a version (versions start with a digit by
default) and `latest`, which always means the highest version, is refused."""


@dataclass(frozen=True)
class AliasChange:
    """One move of an alias: `from_version` None when it is new, `to_version` None when it was removed."""

    model_name: str
    alias: str
    from_version: str | None
    to_version: str | None
    changed_by: str
    changed_at: dt.datetime
    note: str = ""

    def as_row(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "alias": self.alias,
            "from_version": self.from_version,
            "to_version": self.to_version,
            "changed_by": self.changed_by,
            "changed_at": self.changed_at,
            "note": self.note,
        }

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> AliasChange:
        """The change a history row of the file holds (its `changed_at` as ISO text)."""
        return cls(
            model_name=row["model_name"],
            alias=row["alias"],
            from_version=row["from_version"],
            to_version=row["to_version"],
            changed_by=row["changed_by"],
            changed_at=dt.datetime.fromisoformat(row["changed_at"]),
            note=row.get("note") or "",
        )


def _document(registry_dir: Path) -> dict[str, Any]:
    path = registry_dir / ALIASES_FILE
    if not path.is_file():
        return {"aliases": {}, "history": [], "unrecorded": []}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelArtifactError(f"{path} is not JSON ({exc}); restore it from the model_aliases table") from None
    if not isinstance(document, dict) or not isinstance(document.get("aliases"), dict):
        raise ModelArtifactError(f"{path} has no `aliases` mapping; restore it from the model_aliases table")
    document.setdefault("history", [])
    document.setdefault("unrecorded", [])
    return document


def inference_model_aliases(registry_dir: Path) -> dict[str, str]:
    """Alias → version of the model in `registry_dir`; empty when it has none."""
    return dict(sorted(_document(registry_dir)["aliases"].items()))


def inference_alias_history(registry_dir: Path) -> list[dict[str, Any]]:
    """Every change of the model's aliases, oldest first, as recorded beside them."""
    return list(_document(registry_dir)["history"])


def inference_unrecorded_alias_changes(registry_dir: Path) -> list[tuple[AliasChange, str | None]]:
    """Moves in the file whose `model_aliases` ledger row may not have been written (the mover died
    between the two), each with the job its row names."""
    return [(AliasChange.of_row(row), row.get("job")) for row in _document(registry_dir)["unrecorded"]]


def inference_recorded_alias_changes(registry_dir: Path, changes: list[AliasChange]) -> None:
    """Mark `changes` as written to the ledger: they leave the file's `unrecorded` list."""
    document = _document(registry_dir)
    done = {(change.alias, change.changed_at) for change in changes}
    kept = [
        row
        for row in document["unrecorded"]
        if (row["alias"], dt.datetime.fromisoformat(row["changed_at"])) not in done
    ]
    if len(kept) != len(document["unrecorded"]):
        _written_atomically(registry_dir / ALIASES_FILE, {**document, "unrecorded": kept})


@contextlib.contextmanager
def inference_alias_lock(registry_dir: Path, *, wait_s: float = ALIAS_LOCK_WAIT_S) -> Iterator[None]:
    """Hold the model's alias lock: one move at a time, from reading the pointer to its ledger row.

    flock(2) is released by the kernel when its holder dies, so a killed mover never leaves the
    aliases locked; the file keeps the holder's pid and host only to name it when waiting times out."""
    registry_dir.mkdir(parents=True, exist_ok=True)
    path = registry_dir / ALIASES_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
                    raise AliasBusy(
                        f"the aliases of model {registry_dir.name} are being moved by another process ({holder}); "
                        f"waited {wait_s:g} s for its lock {path}"
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(
            fd,
            f"pid {os.getpid()} on {socket.gethostname()} since {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%S} UTC".encode(),
            0,
        )
        yield
    finally:
        os.close(fd)


def inference_alias_name_problem(alias: str, versions: list[str]) -> str | None:
    """Why `alias` cannot name a version pointer, or None."""
    if alias == "latest":
        return "'latest' always means the highest version; choose another alias"
    if not re.fullmatch(ALIAS_PATTERN, alias):
        return f"alias {alias!r} must be lower-case letters, digits, '_' or '-', starting with a letter (at most 32)"
    if alias in versions:
        return f"alias {alias!r} is also the name of a registered version; choose another alias"
    return None


def _written_atomically(path: Path, document: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(document, fh, indent=2, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def inference_moved_alias(
    registry_dir: Path,
    alias: str,
    version: str | None,
    *,
    versions: list[str],
    changed_by: str,
    note: str = "",
    now: dt.datetime | None = None,
    job: str | None = None,
) -> AliasChange:
    """Point `alias` at `version` (None removes it), atomically, and return the change.

    `versions` are the model's registered versions. The caller has checked that `version` is fit to
    score and holds `inference_alias_lock`; this refuses only what would make the pointer itself
    wrong: a bad name, an unknown version, or no change at all. The move stays in the file's
    `unrecorded` list (with `job`, for its ledger row) until `inference_recorded_alias_changes`."""
    problem = inference_alias_name_problem(alias, versions)
    if problem:
        raise ModelArtifactError(problem)
    if version is not None and version not in versions:
        raise ModelArtifactError(f"model {registry_dir.name} has no version {version!r}; versions: {versions}")
    document = _document(registry_dir)
    previous = document["aliases"].get(alias)
    if previous == version:
        where = f"already points at {version}" if version else "does not exist"
        raise ModelArtifactError(f"alias {alias!r} of model {registry_dir.name} {where}; nothing to change")
    change = AliasChange(
        model_name=registry_dir.name,
        alias=alias,
        from_version=previous,
        to_version=version,
        changed_by=changed_by,
        changed_at=now or dt.datetime.now(dt.UTC),
        note=note,
    )
    if version is None:
        document["aliases"].pop(alias)
    else:
        document["aliases"][alias] = version
    row = {**change.as_row(), "changed_at": change.changed_at.isoformat()}
    document["history"].append(row)
    document["unrecorded"].append({**row, "job": job})
    _written_atomically(registry_dir / ALIASES_FILE, document)
    return change


def inference_alias_snapshot(registry_dir: Path) -> dict[str, Any]:
    """The aliases file as it is now, to put back with `inference_restored_aliases`."""
    return _document(registry_dir)


def inference_restored_aliases(registry_dir: Path, snapshot: dict[str, Any]) -> None:
    """Put back an aliases file read before a change whose ledger row could not be written."""
    _written_atomically(registry_dir / ALIASES_FILE, snapshot)
