"""The Prefect automation of the deployments, as code: any flow run of a scoring deployment that ends
Failed or Crashed sends a notification through the alert block (`SCORING_ALERT_BLOCK`). The flows send
their own alerts (a failed run, drift alerts, decision shifts); this one also covers what no flow code
sees: a worker killed mid-run (Crashed), a run that never started.

    SCORING_ALERT_BLOCK=custom-webhook/ops-alerts .venv/bin/python -m flows.automations   # create or replace it
"""

from __future__ import annotations

import sys

from prefect.automations import Automation, EventTrigger, SendNotification
from prefect.blocks.core import Block
from prefect.events.schemas.automations import Posture

from tasks.settings import current_settings

AUTOMATION_NAME = "scoring: a deployment's run failed or crashed"


def failed_run_automation(block_document_id: object) -> Automation:
    """The automation for the notification block with this document id."""
    return Automation(
        name=AUTOMATION_NAME,
        description="Notifies the alert block when a flow run of a scoring deployment (tag `scoring`) fails or crashes.",
        trigger=EventTrigger(
            expect={"prefect.flow-run.Failed", "prefect.flow-run.Crashed"},
            match={"prefect.resource.id": "prefect.flow-run.*"},
            match_related={"prefect.resource.role": "tag", "prefect.resource.id": "prefect.tag.scoring"},
            posture=Posture.Reactive,
            threshold=1,
            within=0,
        ),
        actions=[
            SendNotification(
                block_document_id=block_document_id,
                subject="[scoring] {{ flow.name }} run {{ flow_run.name }}: {{ flow_run.state.name }}",
                body=(
                    "The flow run {{ flow_run.name }} of {{ flow.name }} (deployment {{ deployment.name }}) ended "
                    "{{ flow_run.state.name }}: {{ flow_run.state.message }}\nParameters: {{ flow_run.parameters }}\n"
                    "Run: {{ flow_run|ui_url }}"
                ),
            )
        ],
    )


def created_automation() -> Automation:
    """Create the automation for the settings' alert block, replacing one of the same name."""
    reference = current_settings().alert_block
    if not reference:
        raise SystemExit("error: SCORING_ALERT_BLOCK is not set: name the notification block alerts go through")
    block = Block.load(reference if "/" in reference else f"custom-webhook/{reference}")
    while True:
        try:
            Automation.read(name=AUTOMATION_NAME).delete()
        except ValueError:  # Prefect's "Automation with name … not found": none left to replace
            break
    return failed_run_automation(block._block_document_id).create()


if __name__ == "__main__":
    automation = created_automation()
    sys.stdout.write(f"automation {automation.name!r} created: {automation.id}\n")
