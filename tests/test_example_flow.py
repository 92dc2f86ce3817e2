"""The example of a composed flow (flows/examples/score_when_landed.py) runs on the shared flows as they are."""

from __future__ import annotations

import datetime as dt

import pytest

from tasks.errors import PartitionError
from tasks.settings import Settings
from flows.steps.blocks import configured_warehouse

from conftest import DEMO_JOB, DemoEnv

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_a_landed_partition_is_scored_and_its_labels_ingested(demo_env: DemoEnv, fresh_data: Settings) -> None:
    from flows.examples.score_when_landed import score_when_landed

    day = demo_env.plan.scoring_dates[0]
    result = score_when_landed(DEMO_JOB, day, outcomes_from=day, outcomes_to=day)
    assert result["raw_files"] >= 1
    assert result["scored"]["rows_scored"] > 0.9 * result["scored"]["rows_read"]
    (ingested,) = result["outcomes"]
    assert ingested["date"] == day.isoformat() and ingested["labels"] > 0
    (run,) = configured_warehouse(fresh_data).latest_partition_runs(DEMO_JOB, first_date=day, last_date=day)
    assert run["status"] == "succeeded"


def test_a_partition_that_never_lands_fails_before_scoring(fresh_data: Settings) -> None:
    from flows.examples.score_when_landed import score_when_landed

    day = dt.date(2026, 1, 1)
    with pytest.raises(PartitionError, match="has not landed"):
        score_when_landed(DEMO_JOB, day)
    assert configured_warehouse(fresh_data).latest_partition_runs(DEMO_JOB, first_date=day, last_date=day) == []
