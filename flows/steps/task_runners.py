"""The task runner of a run's chunk tasks, chosen by configuration: threads here or a Dask cluster.

Only references cross a task boundary (a run ticket, a work unit of row-group ids, per-unit
counts and histograms); tables stay in the worker that reads them and in staging files.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from tasks.settings import Settings, current_settings


class UnitThreadPoolTaskRunner(ThreadPoolTaskRunner):
    """The thread runner of `score_partition` itself, with `SCORING_TASK_WORKERS` threads read when
    each run starts (Prefect duplicates a flow's runner per run), so a deployment's run follows its
    worker's settings. Units run on it directly: a subflow of their own would cost ~0.6 s a partition."""

    def __init__(self, max_workers: int | None = None) -> None:
        super().__init__(max_workers=max_workers or current_settings().task_workers)

    def duplicate(self) -> UnitThreadPoolTaskRunner:
        return type(self)()


def units_in_own_flow(settings: Settings) -> bool:
    """Whether a run's units need a subflow of their own: on Dask, whose runner is not the run's."""
    return settings.task_runner != "threads"


def dask_task_runner(settings: Settings) -> TaskRunner:
    """The Dask runner of a run's `score-units` subflow: an existing cluster, or a local one."""
    from prefect_dask import DaskTaskRunner

    if settings.dask_address:
        return DaskTaskRunner(address=settings.dask_address)
    resources = {name: amount for name, amount in settings.inference_resources.items()}
    return DaskTaskRunner(
        cluster_kwargs={
            "n_workers": settings.dask_workers,
            "threads_per_worker": settings.dask_threads_per_worker,
            "processes": True,
            # None would still serve a dashboard on the default port; a free local port never clashes.
            "dashboard_address": "127.0.0.1:0",
            # A local cluster gives each worker the resources inference asks for, or its tasks would wait forever.
            **({"resources": resources} if resources else {}),
        }
    )


def inference_runs_apart(settings: Settings) -> bool:
    """Whether inference tasks run on workers of their own (Dask resources such as a GPU), so each
    unit is scored in two tasks rather than one."""
    return settings.task_runner == "dask" and bool(settings.inference_resources)


def inference_task_resources(settings: Settings) -> AbstractContextManager[Any]:
    """Wrap the submission of inference tasks: on Dask they hold `inference_resources`."""
    if not inference_runs_apart(settings):
        return nullcontext()
    import dask

    return dask.annotate(resources=dict(settings.inference_resources))
