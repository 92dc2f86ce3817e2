"""Options several commands share."""

from __future__ import annotations

from typing import Annotated

import typer

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout instead of tables.")]
PositiveOption = Annotated[
    str | None,
    typer.Option(
        help="A binary job's event as the label's value when the labels are not 1/0 (e.g. Yes, churned, 2): read as 1, the "
        "other value as 0. The spec's monitoring.labels.positive is used without it, and a flag must agree with it.",
    ),
]
