"""Prefect's console handlers in this process, which the command line quiets: it prints its own
one-line errors, so Prefect's echo of the same failure would only repeat them."""

from __future__ import annotations

import logging

from prefect.logging.handlers import PrefectConsoleHandler


def prefect_console_handlers() -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers if isinstance(h, PrefectConsoleHandler)]
