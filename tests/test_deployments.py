"""prefect.yaml: the deployments people use exist, point at real flows and render typed forms."""

from __future__ import annotations

import importlib
from pathlib import Path

import yaml
from prefect.flows import Flow
from prefect.utilities.callables import parameter_schema

ROOT = Path(__file__).resolve().parents[1]


def _deployments() -> dict[str, dict]:
    doc = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    return {d["name"]: d for d in doc["deployments"]}


def _flow(entrypoint: str) -> Flow:
    path, name = entrypoint.split(":")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    return getattr(module, name)


def test_every_entrypoint_is_a_prefect_flow() -> None:
    for name, deployment in _deployments().items():
        assert isinstance(_flow(deployment["entrypoint"]), Flow), name


def test_nightly_runs_at_two_with_a_timezone() -> None:
    (schedule,) = _deployments()["nightly"]["schedules"]
    assert schedule["cron"] == "0 2 * * *"
    assert schedule["timezone"] and schedule["active"] is True


def test_backfill_form_has_a_job_select_and_date_pickers() -> None:
    schema = parameter_schema(_flow(_deployments()["backfill"]["entrypoint"])).model_dump_for_openapi()
    props = schema["properties"]
    assert set(schema["required"]) == {"job", "start_date", "end_date"}
    job = schema["definitions"]["JobName"] if "$ref" in str(props["job"]) else props["job"]
    assert "credit_risk" in job["enum"]
    assert props["start_date"]["format"] == "date" and props["end_date"]["format"] == "date"
    # At most this many partitions at once; the form shows a bounded number field.
    assert props["concurrency"]["default"] == 1
    assert (props["concurrency"]["minimum"], props["concurrency"]["maximum"]) == (1, 8)


def test_deployment_default_parameters_name_a_configured_job() -> None:
    jobs = {p.stem for p in (ROOT / "jobs").glob("*.yaml")}
    for name, deployment in _deployments().items():
        job = (deployment.get("parameters") or {}).get("job")
        assert job is None or job in jobs, name


def test_every_parameter_of_every_deployment_says_what_it_means() -> None:
    """The run form shows each property's description; a parameter without one is a bare name to an analyst."""
    for name, deployment in _deployments().items():
        props = parameter_schema(_flow(deployment["entrypoint"])).model_dump_for_openapi()["properties"]
        bare = [p for p, spec in props.items() if len(spec.get("description") or "") < 15]
        assert not bare, (name, bare)
        # No `int | None` toggle ("Property is type None") for a number: a plain integer field.
        if "chunk_rows" in props:
            assert props["chunk_rows"]["type"] == "integer" and props["chunk_rows"]["default"] == 0, name
    backfill = parameter_schema(_flow(_deployments()["backfill"]["entrypoint"])).model_dump_for_openapi()["properties"]
    # What an analyst sets comes first; the engineering knobs come last and say so.
    order = sorted(backfill, key=lambda p: backfill[p]["position"])
    assert order[-2:] == ["concurrency", "chunk_rows"]
    assert all(backfill[p]["description"].startswith("Engineering:") for p in order[-2:])
    assert not any(backfill[p]["description"].startswith("Engineering:") for p in order[:-2])


def test_every_deployment_says_what_it_is_for() -> None:
    """The deployment page's Description tab reads `description`: when it runs, what it does, what it leaves."""
    for name, deployment in _deployments().items():
        description = deployment.get("description") or ""
        assert len(description.split()) >= 20, (name, description)
        assert description != (_flow(deployment["entrypoint"]).description or ""), (
            f"{name}: the flow's docstring, not the analyst's"
        )
