"""Named points where crash trials kill the process, to prove recovery from the worst moments.

`SCORING_CRASH_AT` (a glob over the names below, unset in production) makes the process SIGKILL
itself when it reaches a matching point, so a trial can stop a run exactly between two steps of
its publish instead of hoping a random kill lands there.

    publish:staged:<dataset>   a dataset's staged files moved into the run's version folder
    publish:assembled          every dataset and the page in the version folder, nothing committed
    publish:intent             the ledger says `publishing`, the warehouse not yet committed
    publish:committed          the warehouse transaction committed, the Parquet pointer not swapped
    publish:swapped            the pointer swapped, the Delta tables not yet written
    publish:delta              the Delta tables written (reached without a Delta sink too), the
                               ledger row not yet `succeeded`
    alias:moved                `score promote` / `score aliases --remove`: the alias file renamed
                               (the move marked unrecorded), its `model_aliases` row not yet written
    alias:recorded             the `model_aliases` row written, the file's unrecorded mark not cleared
"""

from __future__ import annotations

import fnmatch
import os
import signal


def crash_point(name: str, crash_at: str | None) -> None:
    if crash_at and fnmatch.fnmatchcase(name, crash_at):
        os.kill(os.getpid(), signal.SIGKILL)
