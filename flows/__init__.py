"""The flows you may import to compose your own, and what they give back:

    from flows.score_partition import score_partition  # one partition of one job -> PartitionResult
    from flows.people import backfill, nightly  # many partitions, one score_partition subflow each
    from flows.outcomes import outcomes  # ingest labels, write the monitoring page
    from flows.results import read_published_run  # a published day's rows, ledger row and pages -> PublishedRun
    from tasks.results import NotPublished, PartitionResult, PublishedRun  # the types, Prefect-free

Everything else under `flows/steps/` and `tasks/` may change between releases. `tasks` is imported first so
telemetry is off before Prefect loads.
"""

import tasks  # noqa: F401
