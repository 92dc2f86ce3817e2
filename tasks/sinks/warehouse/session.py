"""What both backends' sessions speak: the shared SQL with `$name` parameters, and plain identifiers."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

_PLAIN_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")
NAMED_PARAMETER = re.compile(r"\$([a-z_][a-z0-9_]*)")


def quoted(identifier: str) -> str:
    """A double-quoted SQL identifier; only plain lower-case names, so nothing needs escaping."""
    if not _PLAIN_IDENTIFIER.fullmatch(identifier):
        raise ValueError(f"not a plain SQL identifier: {identifier!r}")
    return f'"{identifier}"'


def parameter_names(sql: str) -> list[str]:
    """The `$name` parameters of a query, each once, in order of first use."""
    return list(dict.fromkeys(NAMED_PARAMETER.findall(sql)))


class Session(Protocol):
    """One connection of a backend, speaking the shared SQL (`$name` parameters)."""

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]: ...

    def arrow(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table: ...

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None: ...

    def transaction(self) -> contextlib.AbstractContextManager[None]: ...

    def append_parquet(self, table: str, paths: Sequence[Path]) -> None: ...

    def append_arrow(self, table: str, rows: pa.Table) -> None: ...


PARTITION_KEY = "job = $job AND partition_date = $partition_date"
