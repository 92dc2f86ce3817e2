"""Domain code of the batch scorer: plain functions over Arrow / polars / numpy.

Prefect and Great Expectations phone home by default; the product runs offline at night,
so telemetry is off unless the operator explicitly turns it back on.
"""

import logging
import os

TELEMETRY_OFF = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "GX_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
"""The one statement of the telemetry defaults: set below for this process before Prefect or Great Expectations is
imported; a process started with an environment of its own (a Prefect server, a worker) is given them from here."""

for _name, _value in (
    *TELEMETRY_OFF.items(),
    # The [INF] / [PRED] lines of the domain loggers belong in the Prefect run logs too.
    ("PREFECT_LOGGING_EXTRA_LOGGERS", "scoring"),
    # Demo preparation and training log outside any flow run; those lines stay on the console.
    ("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore"),
    # Prefect's client retries a call to a lost API 5 times, waiting 2, 4 … 32 s: ~62 s a call, and a run
    # that lost its API makes several (224 s in a trial). 3 rides out a restart of a few seconds, ~14 s a call.
    ("PREFECT_CLIENT_MAX_RETRIES", "3"),
    # The temporary API a `score` command starts logs its own shutdown to the command's terminal: a failed
    # run that exits while the API still records task-run events printed the API's CancelledError traceback
    # under the run's one error line. The run's outcome is the ledger's; the API's bookkeeping is not news.
    ("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL"),
    # Arrow's default mimalloc pool keeps the pages of every chunk it has seen; the C library's
    # malloc gives them back: peak RSS of a run ~110 MB lower at the same speed (bench/memory.py).
    # Read once, when pyarrow is imported, which nothing does before this package.
    ("ARROW_DEFAULT_MEMORY_POOL", "system"),
):
    os.environ.setdefault(_name, _value)

# The per-chunk [INF] / [PRED] lines are INFO; the root logger's WARNING default would drop them.
logging.getLogger("scoring").setLevel(logging.INFO)
