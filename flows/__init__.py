"""Prefect flows: wiring only. `tasks` is imported first so telemetry is off before Prefect loads."""

import tasks  # noqa: F401
