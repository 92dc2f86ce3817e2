"""The ticket of one partition run: its identity, handed from step to step (flows/steps/partition.py and
units.py), with its models' versions pinned and its deadline."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict

from tasks.errors import ModelArtifactError
from tasks.prediction.words import JobWords
from tasks.scoring.prepared import PreparedJob
from tasks.scoring.units import RunDeadline
from tasks.sinks.config import DeltaSink


class RunTicket(BaseModel):
    """Identity of one scoring run, handed from step to step."""

    model_config = ConfigDict(frozen=True, protected_namespaces=())

    run_id: str
    job: str
    partition_date: dt.date
    chunk_rows: int
    model_name: str
    model_version: str
    feature_version: str
    delta_sink: DeltaSink | None = None
    """The Delta sink of the spec the run was prepared with: its publish writes there."""
    challenger_version: str | None = None
    """The version the job's challenger (`model.challenger`, maybe an alias) resolved to when the run started."""
    max_run_seconds: float | None = None
    """The run's time limit (`limits.max_run_seconds`, else SCORING_MAX_RUN_SECONDS)."""
    deadline: float | None = None
    """When the run must have finished scoring, in seconds since the epoch: set when it starts under the lease."""
    words: JobWords | None = None
    """The job's own words (event, score, decisions, features) in the spec the run was prepared with: its page,
    artifacts and alerts say them."""

    def started(self, now: float) -> RunTicket:
        """The ticket of the run starting now: its deadline set."""
        return self.model_copy(update={"deadline": now + self.max_run_seconds if self.max_run_seconds else None})

    def run_deadline(self) -> RunDeadline | None:
        if self.deadline is None or self.max_run_seconds is None:
            return None
        return RunDeadline(
            self.deadline, self.max_run_seconds, f"run {self.run_id} of {self.job} {self.partition_date}"
        )


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def run_ticket(
    prepared: PreparedJob,
    *,
    run_id: str,
    partition_date: dt.date,
    chunk_rows: int | None,
    max_run_seconds: float | None = None,
) -> RunTicket:
    """The run's identity; `max_run_seconds` is the settings' limit, which the spec's `limits.max_run_seconds` overrides."""
    meta = prepared.model.engine.metadata
    return RunTicket(
        run_id=run_id,
        job=prepared.spec.name,
        partition_date=partition_date,
        chunk_rows=chunk_rows or prepared.spec.chunk_rows,
        model_name=meta.name,
        model_version=meta.version,
        feature_version=prepared.features.FEATURE_VERSION,
        delta_sink=prepared.spec.sinks.delta,
        challenger_version=prepared.challenger_plan.version if prepared.challenger_plan else None,
        max_run_seconds=prepared.spec.limits.max_run_seconds or max_run_seconds,
        words=prepared.spec.words,
    )


def pinned_versions(prepared: PreparedJob, ticket: RunTicket) -> None:
    """Refuse a worker's job whose model versions are not the run's: an alias moved between the run's
    start and this worker's load, and the partition would be scored by two models."""
    meta = prepared.model.engine.metadata
    challenger = prepared.challenger_plan.version if prepared.challenger_plan else None
    if (meta.version, challenger) != (ticket.model_version, ticket.challenger_version):
        raise ModelArtifactError(
            f"run {ticket.run_id} of {ticket.job} {ticket.partition_date} started with model {ticket.model_name} "
            f"{ticket.model_version} (challenger {ticket.challenger_version}), but this worker loaded {meta.version} "
            f"(challenger {challenger}): an alias moved during the run; score the partition again"
        )
