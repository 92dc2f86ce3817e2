"""The one place where the environment is read. Everything else receives a `Settings`."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

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

    @property
    def duckdb_path(self) -> Path:
        return self.warehouse_path or self.data_dir / "warehouse.duckdb"

    def raw_partition_dir(self, job: str, partition: str) -> Path:
        return self.data_dir / "raw" / job / f"date={partition}"

    def labels_partition_dir(self, job: str, partition: str) -> Path:
        return self.data_dir / "labels" / job / f"date={partition}"

    def model_registry_dir(self, model_name: str) -> Path:
        return self.data_dir / "models" / model_name

    def predictions_dir(self, job: str) -> Path:
        return self.data_dir / "output" / job / "predictions"


def current_settings() -> Settings:
    return Settings()
