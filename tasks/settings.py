"""The one place where the environment is read. Everything else receives a `Settings`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from tasks.errors import UnsafePath

PROJECT_ROOT = Path(__file__).resolve().parents[1]


class Settings(BaseSettings):
    """Where data, job specs and the warehouse live. Override with `SCORING_*` variables."""

    model_config = SettingsConfigDict(env_prefix="SCORING_", extra="ignore")

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
        default="1GB", description="DuckDB's memory cap for warehouse loads and queries (e.g. 512MB, 4GB)."
    )
    warehouse_url: SecretStr | None = Field(
        default=None,
        description="PostgreSQL warehouse, e.g. postgresql://user:password@host:5432/db; none keeps the DuckDB file.",
    )
    warehouse_secret_block: str | None = Field(
        default=None, description="Name of a Prefect Secret block holding the PostgreSQL warehouse URL instead."
    )
    lock_ttl_s: float = Field(
        default=300.0, gt=0,
        description="Partition lease lifetime; renewed every third of it while the run lives, taken over once expired.",
    )
    lock_wait_s: float = Field(
        default=900.0, ge=0,
        description="How long a run waits for another live run of the same partition before failing (0: fail at once).",
    )

    task_runner: Literal["threads", "dask"] = Field(
        default="threads",
        description="Where the chunk tasks of score_partition run: a thread pool here, or a Dask cluster.",
    )
    task_workers: int = Field(default=2, ge=1, description="Threads of the thread runner (chunk tasks at once).")
    dask_address: str | None = Field(
        default=None, description="Scheduler of an existing Dask cluster, e.g. tcp://10.0.0.5:8786; none starts a local one."
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

    catch_up_days: int = Field(
        default=3, ge=0, le=366,
        description="Days before the new one that `nightly` re-scores first when their last run failed or was abandoned.",
    )
    crash_at: str | None = Field(
        default=None,
        description="Crash trials only: a glob of tasks/crash_points.py names where the process kills itself.",
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

    def output_dir(self, job: str) -> Path:
        return self.inside_data_root("output", job)

    def predictions_dir(self, job: str) -> Path:
        return self.output_dir(job) / "predictions"


def current_settings() -> Settings:
    return Settings()
