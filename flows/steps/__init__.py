"""Prefect's side of the product, in one place: every `@task` wrapper, artifact, task runner and
Prefect block the flows use. Each step is a thin wrapper over a Prefect-free function of `tasks/`;
the flow modules beside this package (`flows/*.py`) only wire the steps.

- partition.py: a partition run's life — prepare, lease, start, publish, finish, fail, recover
- units.py: its work units — plan, score (or infer, then predict), summarize
- partitions.py: many partitions at once (the backfill window, re-monitoring in date order)
- monitoring.py: decision monitoring, outcome ingestion, the monitoring page
- artifacts.py, task_runners.py (threads or Dask), blocks.py (Secret blocks, the run's warehouse)
"""
