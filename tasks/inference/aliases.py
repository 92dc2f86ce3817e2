"""Model aliases: names such as `champion` and `challenger` that point at a registered version.

They live beside the versions, in `<registry>/<model>/aliases.json`, and change by an atomic
rename of that file, so a run resolving `model.version: champion` reads either the old or the new
pointer, never half of one. The file keeps each alias's history (who, when, from → to) as well;
the warehouse's `model_aliases` table is the ledger the product's reports read.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.errors import ModelArtifactError

ALIASES_FILE = "aliases.json"
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
            "model_name": self.model_name, "alias": self.alias, "from_version": self.from_version,
            "to_version": self.to_version, "changed_by": self.changed_by, "changed_at": self.changed_at, "note": self.note,
        }


def _document(registry_dir: Path) -> dict[str, Any]:
    path = registry_dir / ALIASES_FILE
    if not path.is_file():
        return {"aliases": {}, "history": []}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelArtifactError(f"{path} is not JSON ({exc}); restore it from the model_aliases table") from None
    if not isinstance(document, dict) or not isinstance(document.get("aliases"), dict):
        raise ModelArtifactError(f"{path} has no `aliases` mapping; restore it from the model_aliases table")
    document.setdefault("history", [])
    return document


def inference_model_aliases(registry_dir: Path) -> dict[str, str]:
    """Alias → version of the model in `registry_dir`; empty when it has none."""
    return dict(sorted(_document(registry_dir)["aliases"].items()))


def inference_alias_history(registry_dir: Path) -> list[dict[str, Any]]:
    """Every change of the model's aliases, oldest first, as recorded beside them."""
    return list(_document(registry_dir)["history"])


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
    registry_dir: Path, alias: str, version: str | None, *, versions: list[str], changed_by: str, note: str = "",
    now: dt.datetime | None = None,
) -> AliasChange:
    """Point `alias` at `version` (None removes it), atomically, and return the change.

    `versions` are the model's registered versions. The caller has checked that `version` is fit to
    score; this refuses only what would make the pointer itself wrong: a bad name, an unknown
    version, or no change at all."""
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
        model_name=registry_dir.name, alias=alias, from_version=previous, to_version=version, changed_by=changed_by,
        changed_at=now or dt.datetime.now(dt.UTC), note=note,
    )
    if version is None:
        document["aliases"].pop(alias)
    else:
        document["aliases"][alias] = version
    document["history"].append({**change.as_row(), "changed_at": change.changed_at.isoformat()})
    _written_atomically(registry_dir / ALIASES_FILE, document)
    return change


def inference_restored_aliases(registry_dir: Path, aliases: dict[str, str], history: list[dict[str, Any]]) -> None:
    """Put back an aliases file read before a change whose ledger row could not be written."""
    _written_atomically(registry_dir / ALIASES_FILE, {"aliases": aliases, "history": history})
