"""A page opened in Debian's chromium, offline: the browser tests of the run page (test_html_report.py,
test_wide_run_page.py) and the monitoring page (test_outcomes.py) open their file here.

Every request but `file://` and `data:` is aborted and listed, console errors and page errors are collected, so a test
asserts both lists are empty: the page works on its own and phones nowhere.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    """Debian's chromium; skipped without it locally, a failure in CI (which must run these tests)."""
    exe = shutil.which("chromium")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but Debian's `chromium` is not installed (.ci/run installs it with apt-get)")
        pytest.skip("Debian's `chromium` is not installed (apt-get install chromium); CI runs this test")
    return exe


@dataclass
class OfflinePage:
    page: Any
    """playwright's Page, loaded."""
    errors: list[str] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)

    @property
    def fetched_elsewhere(self) -> list[str]:
        """The requests that went anywhere but the file itself and data: URLs (all aborted)."""
        return [u for u in self.requested if not u.startswith(("file://", "data:"))]


@contextmanager
def offline_page(path: Path) -> Iterator[OfflinePage]:
    """The HTML file `path` loaded in a 1200 × 900 chromium page that can fetch nothing but itself and data: URLs."""
    exe = chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            opened = OfflinePage(browser.new_page(viewport={"width": 1200, "height": 900}))

            def only_local(route: Any) -> None:
                opened.requested.append(route.request.url)
                if route.request.url.startswith(("file://", "data:")):
                    route.continue_()
                else:
                    route.abort()

            opened.page.on(
                "console", lambda m: opened.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None
            )
            opened.page.on("pageerror", lambda e: opened.errors.append(f"pageerror: {e}"))
            opened.page.route("**/*", only_local)
            opened.page.goto(path.as_uri(), wait_until="load")
            yield opened
        finally:
            browser.close()
