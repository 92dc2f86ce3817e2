"""Artifact contents made by tasks/ (tables, Markdown) left as Prefect artifacts of the current run."""

from __future__ import annotations

from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from tasks.scoring.partition_run import Artifact


def left_artifacts(artifacts: list[Artifact]) -> None:
    for artifact in artifacts:
        if artifact.link is not None:
            create_link_artifact(key=artifact.key, link=artifact.link, link_text=artifact.description, description=artifact.description)
        elif artifact.table is not None:
            create_table_artifact(key=artifact.key, table=artifact.table, description=artifact.description)
        else:
            create_markdown_artifact(key=artifact.key, markdown=artifact.markdown or "", description=artifact.description)
