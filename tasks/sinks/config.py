"""Optional output sinks a job spec declares under `sinks:`."""

from __future__ import annotations

import urllib.parse

from pydantic import BaseModel, ConfigDict, Field, field_validator

_SECRET_QUERY_KEYS = {"access_key", "secret_key", "session_token", "password", "sas_token", "account_key", "token"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeltaSink(_Strict):
    """Every partitioned dataset also as a Delta Lake table `<url>/<dataset>`, partitioned by date."""

    url: str = Field(
        min_length=1,
        description="Folder or object-store prefix holding one Delta table per dataset: a local path (relative to the data root), file:// or s3://.",
    )

    @field_validator("url")
    @classmethod
    def _secret_free(cls, value: str) -> str:
        parts = urllib.parse.urlsplit(value)
        keys = {k.lower() for k, _ in urllib.parse.parse_qsl(parts.query)}
        if parts.password is not None or parts.username is not None or keys & _SECRET_QUERY_KEYS:
            raise ValueError("url carries credentials; put them in the environment (AWS_ACCESS_KEY_ID, ...) and keep the spec free of secrets")
        return value


class SinksConfig(_Strict):
    delta: DeltaSink | None = None
