"""The one place where the environment is read. Everything else receives a `Settings`."""

from __future__ import annotations

import os
import re
import urllib.parse
import zoneinfo
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tasks.catalog import LOGS_FOLDER, MONITORING_PAGE, PAGES_FOLDER, PREDICTIONS, run_page_name
from tasks.errors import SettingsError, UnsafePath
from tasks.redaction import is_credential_parameter, redacted_url, url_parts

PROJECT_ROOT = Path(__file__).resolve().parents[1]
_SECRET_MASK = str(SecretStr("x"))


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (what a container's cpuset or `taskset` leaves it), not the
    machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


class Settings(BaseSettings):
    """Where data, job specs and the warehouse live. Override with `SCORING_*` variables."""

    model_config = SettingsConfigDict(env_prefix="SCORING_", extra="ignore", hide_input_in_errors=True)

    data_dir: Path = Field(
        default=PROJECT_ROOT / "data",
        description="Root of raw partitions, labels, the model registry and outputs.",
    )
    jobs_dir: Path = Field(default=PROJECT_ROOT / "jobs", description="Folder of `<job>.yaml` specs.")
    expectations_dir: Path = Field(
        default=PROJECT_ROOT / "expectations", description="Folder of Great Expectations suites."
    )
    timezone: str = Field(default="UTC", description="Business timezone: what 'yesterday' means for nightly runs.")
    warehouse_path: Path | None = Field(
        default=None, description="DuckDB file; defaults to `<data_dir>/warehouse.duckdb`."
    )
    duckdb_memory_limit: str = Field(
        # A 10 M-row load within 128 MB writes blocks out as it goes: +140 MB of RSS where 1GB took +680 MB, and no slower.
        default="128MB",
        pattern=r"(?i)^\s*\d+(\.\d+)?\s*([KMGT]i?B|B|%)\s*$",
        description="DuckDB's memory cap for warehouse loads and queries (e.g. 512MB, 4GB, 50%).",
    )
    warehouse_url: SecretStr | None = Field(
        default=None,
        description="PostgreSQL warehouse, e.g. postgresql://user:password@host:5432/db; none keeps the DuckDB file.",
    )
    warehouse_secret_block: str | None = Field(
        default=None, description="Name of a Prefect Secret block holding the PostgreSQL warehouse URL instead."
    )
    source_url: SecretStr | None = Field(
        default=None,
        description="PostgreSQL database of jobs whose `source.sql.warehouse` is postgresql; none uses the warehouse URL.",
    )
    source_secret_block: str | None = Field(
        default=None, description="Name of a Prefect Secret block holding the PostgreSQL source URL instead."
    )
    warehouse_lock_wait_s: float = Field(
        default=120.0,
        ge=0,
        allow_inf_nan=False,
        description="How long opening the DuckDB warehouse waits while another process holds its file lock (0: fail at once).",
    )
    lock_ttl_s: float = Field(
        default=300.0,
        gt=0,
        allow_inf_nan=False,
        description="Partition lease lifetime; renewed every third of it while the run lives, taken over once expired.",
    )
    lock_wait_s: float = Field(
        default=900.0,
        ge=0,
        allow_inf_nan=False,
        description="How long a run waits for another live run of the same partition before failing (0: fail at once).",
    )

    task_runner: Literal["threads", "dask"] = Field(
        default="threads",
        description="Where the chunk tasks of score_partition run: a thread pool here, or a Dask cluster.",
    )
    task_workers: int = Field(
        default_factory=usable_cores,
        ge=1,
        description=(
            "Threads of the thread runner (units scored at once); default: the cores this process may use. Each unit's "
            "framework calls get twice the cores' fair share among them, at most every core, unless the job sets "
            "`inference.nthread`."
        ),
    )
    dask_address: str | None = Field(
        default=None,
        description="Scheduler of an existing Dask cluster, e.g. tcp://10.0.0.5:8786; none starts a local one.",
    )
    dask_workers: int = Field(default=2, ge=1, description="Worker processes of the local Dask cluster.")
    dask_threads_per_worker: int = Field(default=1, ge=1, description="Threads per worker of the local Dask cluster.")
    inference_resources: dict[str, float] = Field(
        default_factory=dict,
        description=(
            'Dask worker resources each inference task holds, e.g. {"GPU": 1}; the cluster\'s workers must '
            "declare them (`dask worker --resources GPU=1`). Prediction tasks never ask for any."
        ),
    )

    source_timeout_s: float = Field(
        default=30.0,
        gt=0,
        allow_inf_nan=False,
        description=(
            "How long one call to a raw source (a listing, a file's footer, a row group) may go unanswered before it is "
            "made again, with a warning; after 3 tries the run fails naming the source (exit 3)."
        ),
    )
    max_run_seconds: float = Field(
        default=21_600.0,
        gt=0,
        allow_inf_nan=False,
        description="Longest a partition run may take (from its start under the lease to its publish) unless its spec says otherwise.",
    )
    alert_block: str | None = Field(
        default=None,
        pattern=r"^([a-z0-9-]+/)?[a-z0-9][a-z0-9-]*$",
        description=(
            "The Prefect notification block alerts go through: `<block type>/<name>` (e.g. slack-webhook/ops), or a "
            "name alone for a custom-webhook block; none sends no alerts."
        ),
    )
    report_base_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s]+$",
        description=(
            "Where a web server serves `<data_dir>/output` (e.g. http://reports.internal:8080): each run then leaves a "
            "link artifact to its page there, which the Prefect UI opens; none keeps the file path."
        ),
    )
    catch_up_days: int = Field(
        default=3,
        ge=0,
        le=366,
        description="Days before the new one that `nightly` scores first when their last run failed, was abandoned or never ran.",
    )
    max_backfill_days: int = Field(
        default=366,
        ge=1,
        le=3660,
        description="Most days one backfill may span; a longer range is refused before anything runs (split it, or raise this).",
    )
    crash_at: str | None = Field(
        default=None,
        description="Crash trials only: a glob of tasks/sinks/crash_points.py names where the process kills itself.",
    )

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError("not a known IANA time zone (e.g. UTC, Europe/Berlin, America/New_York)") from None
        return value

    @field_validator("jobs_dir", "expectations_dir")
    @classmethod
    def _existing_folder(cls, value: Path) -> Path:
        if not value.is_dir():
            raise ValueError("no such folder" if not value.exists() else "not a folder")
        return value

    @field_validator("data_dir")
    @classmethod
    def _folder_if_present(cls, value: Path) -> Path:
        if value.exists() and not value.is_dir():
            raise ValueError("exists and is not a folder")
        return value

    @field_validator("warehouse_path")
    @classmethod
    def _file_if_present(cls, value: Path | None) -> Path | None:
        if value is not None and value.is_dir():
            raise ValueError("is a folder; give the DuckDB file, e.g. /srv/scoring/warehouse.duckdb")
        return value

    @field_validator("warehouse_url", "source_url")
    @classmethod
    def _postgres_url(cls, value: SecretStr | None) -> SecretStr | None:
        # Settings sent to a task as JSON carry pydantic's mask instead of the URL; the task takes the URL
        # from its own environment (flows/steps/partition.py), so the mask is not checked as one.
        if value is None or value.get_secret_value() == _SECRET_MASK:
            return value
        try:
            parts = urllib.parse.urlsplit(value.get_secret_value())
            parts.port  # noqa: B018  (raises on a port that is not a number)
        except ValueError:
            raise ValueError("is not a URL") from None
        if parts.scheme not in ("postgresql", "postgres"):
            raise ValueError("must start with postgresql:// (e.g. postgresql://user:password@host:5432/db)")
        if not parts.hostname and "host=" not in parts.query:
            raise ValueError("names no host (e.g. postgresql://user:password@host:5432/db)")
        return value

    @model_validator(mode="after")
    def _one_url_source(self) -> Settings:
        # Either could be the one meant; picking one would score into a warehouse the operator did not choose.
        for url_field, block_field in (
            ("warehouse_url", "warehouse_secret_block"),
            ("source_url", "source_secret_block"),
        ):
            if getattr(self, url_field) is not None and getattr(self, block_field):
                raise ValueError(
                    f"environment variables SCORING_{url_field.upper()} and SCORING_{block_field.upper()} are both set: "
                    f"set one of them, not both (the URL itself, or the name of the Prefect Secret block holding it)"
                )
        return self

    def with_urls_of(self, resolved: Settings) -> Settings:
        """These settings with the warehouse and source URLs of `resolved` (their Secret blocks read):
        settings sent between processes as JSON carry pydantic's mask in place of those secrets."""
        return self.model_copy(
            update={
                "warehouse_url": resolved.warehouse_url,
                "warehouse_secret_block": None,
                "source_url": resolved.source_url,
                "source_secret_block": None,
            }
        )

    @property
    def duckdb_path(self) -> Path:
        return self.warehouse_path or self.data_dir / "warehouse.duckdb"

    def inside_data_root(self, *parts: str) -> Path:
        """`data_dir / parts…`, refused unless every part is one plain name: not empty, `.` or
        `..`, no path separator, no NUL byte. Checked on the names alone: symlinks inside the root
        are the operator's (a models folder on another mount) and are followed."""
        path = self.data_dir.joinpath(*parts)
        if any(part in ("", ".", "..") or any(c in part for c in "/\\\x00") for part in parts):
            raise UnsafePath(f"path {str(path)[:200]!r} leaves the data root {self.data_dir}")
        return path

    def raw_partition_dir(self, job: str, partition: str) -> Path:
        return self.inside_data_root("raw", job, f"date={partition}")

    def labels_partition_dir(self, job: str, partition: str) -> Path:
        return self.inside_data_root("labels", job, f"date={partition}")

    def model_registry_dir(self, model_name: str) -> Path:
        return self.inside_data_root("models", model_name)

    @property
    def output_root(self) -> Path:
        """`<data_dir>/output`: every job's outputs and the logs, the folder SCORING_REPORT_BASE_URL serves."""
        return self.inside_data_root("output")

    def output_dir(self, job: str) -> Path:
        return self.inside_data_root("output", job)

    def run_page_path(self, job: str, partition: str) -> Path:
        """A partition's run page: a link to the page of the version published."""
        return self.output_dir(job) / PAGES_FOLDER / run_page_name(partition)

    def monitoring_page_path(self, job: str) -> Path:
        return self.output_dir(job) / PAGES_FOLDER / MONITORING_PAGE

    def command_log_path(self, name: str) -> Path:
        """A `score` command's log file, beside the logs of the runs that are no partition's."""
        return self.inside_data_root("output", LOGS_FOLDER, name)

    def predictions_dir(self, job: str) -> Path:
        return self.output_dir(job) / PREDICTIONS.folder

    def run_log_path(
        self, flow_name: str, flow_run_id: str, *, job: str | None = None, partition: str | None = None
    ) -> Path:
        """A flow run's log file, under `<data_dir>/output` so SCORING_REPORT_BASE_URL serves it: a partition run's
        beside its job's outputs, `<job>/logs/date=<partition>/<flow run id>.log`; a backfill, nightly or outcomes
        run's `logs/<flow name>-<flow run id>.log`."""
        if job is not None and partition is not None:
            return self.inside_data_root("output", job, LOGS_FOLDER, f"date={partition}", f"{flow_run_id}.log")
        return self.inside_data_root("output", LOGS_FOLDER, f"{flow_name}-{flow_run_id}.log")


def _shown_value(field: str, value: object) -> str:
    if field in ("warehouse_url", "source_url"):
        # The URL may hold a password: show it as every message shows it, with `***`.
        return repr(redacted_url(str(value)))
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "…"


def settings_problems(error: ValidationError) -> str:
    """`SCORING_<NAME>=<value>: <problem>` for each invalid variable, with any password hidden."""
    problems = []
    for item in error.errors(include_url=False):
        message = re.sub(r"^Value error, ", "", item["msg"])
        if not item["loc"]:
            # A check across variables names them itself; its input is every value, secrets included.
            problems.append(message)
            continue
        field = str(item["loc"][0])
        problems.append(
            f"environment variable SCORING_{field.upper()}={_shown_value(field, item.get('input'))}: {message}"
        )
    return "; ".join(problems)


OBJECT_STORE_CREDENTIALS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")
"""Variables holding object-store credentials, which delta-rs and pyarrow read themselves."""


def credential_free_url(value: str) -> str:
    """`value`, refused when it carries a user, a password or a credential parameter (a token, a
    signature, a key): credentials live in the environment."""
    standard = urllib.parse.urlsplit(value)
    parts = url_parts(value)
    # A user part a parser would miss (a `/` in the password) still counts when it looks like `user:password`.
    hidden_user = parts is not None and parts.userinfo is not None and (parts.clean_userinfo or ":" in parts.userinfo)
    named = parts is not None and any(is_credential_parameter(name) for name, _ in parts.query_items())
    if standard.username is not None or hidden_user or named:
        raise ValueError(
            f"url {redacted_url(value)!r} carries credentials; put them in the environment (AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY, ...) and keep the spec free of secrets"
        )
    return value


def object_store_credentials() -> list[str]:
    """The values of OBJECT_STORE_CREDENTIALS set in this process's environment, to be masked in
    messages; never passed on, and never shown."""
    return [value for name in OBJECT_STORE_CREDENTIALS if (value := os.environ.get(name, "").strip())]


def current_settings() -> Settings:
    """The settings of this process's environment; SettingsError names each invalid variable and value."""
    try:
        return Settings()
    except ValidationError as exc:
        raise SettingsError(settings_problems(exc)) from None
