"""How an artifact points at a file the run wrote under `<data_dir>/output`: its address under
`SCORING_REPORT_BASE_URL` (a web server serving that folder), else its path as plain text.

Never a file:// link: the Prefect UI is a page served over http, and a browser opens no file:// link
from such a page, so the analyst would click a link that does nothing.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path


def served_url(base_url: str | None, output_root: Path, path: Path) -> str | None:
    """The address of `path` under `base_url`, which serves `output_root`; None without a base URL or for a
    file outside that folder (nothing serves it)."""
    if not base_url:
        return None
    try:
        relative = Path(path).relative_to(output_root)
    except ValueError:
        return None
    return f"{base_url.rstrip('/')}/{urllib.parse.quote(relative.as_posix(), safe='/=')}"


def file_reference_markdown(path: Path, url: str | None) -> str:
    """A Markdown link to `url` named after the file, or without one the file's path as code: a path the analyst
    can copy, not a link that opens nothing."""
    return f"[{Path(path).name}]({url})" if url else f"`{path}`"
