"""A new user's first commands on a label with several classes: `score init` proposes a multiclass job from a
text label and from whole-number codes (or takes `--kind multiclass`, checked against the column), with its classes
in a stable order, a review note on the model's class order and each class's share, and a starter rule table the
spec loader proves exact; `score features` writes the class index a multiclass trainer takes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from test_scaffold import invoke, one_error_line, workspace  # noqa: F401  (workspace: the fixture)

from tasks.jobspec import load_job_spec
from tasks.prediction.decisions import predict_class_rule_table_problems
from tasks.settings import Settings


def _tickets(rows: int, seed: int, labels: list, p: list[float]) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    return pl.DataFrame(
        {
            "ticket_id": [f"T-{i:06d}" for i in range(rows)],
            "wait_minutes": rng.gamma(2.0, 10.0, rows).round(1),
            "channel": rng.choice(["phone", "mail", "chat"], rows),
            "reopened": rng.random(rows) < 0.2,
            "outcome": rng.choice(np.asarray(labels), rows, p=p).tolist(),
        }
    )


def _written(tmp_path: Path, frame: pl.DataFrame, name: str) -> Path:
    path = tmp_path / f"{name}.parquet"
    frame.write_parquet(path)
    return path


def _review_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if "# review:" in line or line.lstrip().startswith("#   ")]


def _proven_exact(settings: Settings, job: str) -> None:
    spec = load_job_spec(job, settings)
    assert predict_class_rule_table_problems(spec.prediction.rules, spec.target.classes) == []
    assert [r.conditional for r in spec.prediction.rules][-1] is False
    non_catch_all = {r.decision for r in spec.prediction.rules if r.conditional}
    assert set(spec.prediction.reasons.for_decisions) == non_catch_all
    assert spec.action_decisions == ["act"]


def test_three_text_classes_become_a_multiclass_job_sorted_as_text(workspace: Settings, tmp_path: Path) -> None:  # noqa: F811
    sample = _tickets(1_200, 1, ["refund", "escalate", "close"], [0.5, 0.2, 0.3])
    result = invoke(
        "init",
        "tickets",
        "--from",
        str(_written(tmp_path, sample, "tickets")),
        "--entity-column",
        "ticket_id",
        "--label-column",
        "outcome",
    )
    assert result.exit_code == 0, (result.output, result.exception)
    assert "target: multiclass, proposed because outcome holds 3 text values" in result.output
    assert "multi:softprob" in result.output and "binary classifier" not in result.output
    spec = load_job_spec("tickets", workspace)
    assert (spec.target.kind, spec.target.classes, spec.target.name) == (
        "multiclass",
        ["close", "escalate", "refund"],
        "outcome",
    )
    assert (
        spec.monitoring.labels.outcome_column == "outcome"
        and spec.prediction.score is None
        and spec.prediction.event is None
    )
    _proven_exact(workspace, "tickets")
    notes = "\n".join(_review_lines(workspace.jobs_dir / "tickets.yaml"))
    assert "clf.classes_" in notes and "MUST be the model's class order" in notes and "sorted as text" in notes
    shares = sample["outcome"].value_counts(normalize=True, name="share")
    for name, share in shares.iter_rows():
        assert f"{name} {share:.1%}" in notes, (name, notes)
    # The label is the outcome, never a feature.
    assert "outcome" not in {c.name for c in spec.features.columns}


def test_four_whole_number_codes_become_classes_sorted_as_numbers(workspace: Settings, tmp_path: Path) -> None:  # noqa: F811
    sample = _tickets(1_500, 2, [10, 2, 0, 7], [0.1, 0.4, 0.3, 0.2]).with_columns(pl.col("outcome").cast(pl.Int64))
    result = invoke(
        "init",
        "codes",
        "--from",
        str(_written(tmp_path, sample, "codes")),
        "--entity-column",
        "ticket_id",
        "--label-column",
        "outcome",
    )
    assert result.exit_code == 0, (result.output, result.exception)
    assert "target: multiclass, proposed because outcome holds 4 whole numbers (0, 2, 7, 10)" in result.output
    assert "--force --kind count" in result.output
    spec = load_job_spec("codes", workspace)
    assert spec.target.classes == ["0", "2", "7", "10"]
    _proven_exact(workspace, "codes")
    notes = "\n".join(_review_lines(workspace.jobs_dir / "codes.yaml"))
    assert "sorted as numbers" in notes and "score init --force --kind count" in notes
    counts = sample["outcome"].value_counts()
    for code, n in counts.iter_rows():
        assert f"{code} {n / sample.height:.1%}" in notes


def test_kind_multiclass_is_checked_against_the_column(workspace: Settings, tmp_path: Path) -> None:  # noqa: F811
    two = _written(tmp_path, _tickets(300, 3, ["open", "closed"], [0.5, 0.5]), "two")
    line = one_error_line(
        invoke(
            "init",
            "two",
            "--from",
            str(two),
            "--entity-column",
            "ticket_id",
            "--label-column",
            "outcome",
            "--kind",
            "multiclass",
        )
    )
    assert line.startswith("error: --kind multiclass: sample ") and str(two) in line and "'outcome'" in line
    assert "holds 2 values" in line and "at least 3 classes" in line
    fractions = _written(
        tmp_path,
        _tickets(300, 4, [0.5, 1.5, 2.5], [0.3, 0.3, 0.4]).with_columns(pl.col("outcome").cast(pl.Float64)),
        "fractions",
    )
    line = one_error_line(
        invoke(
            "init",
            "frac",
            "--from",
            str(fractions),
            "--entity-column",
            "ticket_id",
            "--label-column",
            "outcome",
            "--kind",
            "multiclass",
        )
    )
    assert "fractional values" in line and "--kind regression" in line
    assert not list(workspace.jobs_dir.iterdir()) and not list(workspace.expectations_dir.iterdir())
    # Whole numbers asked as a count stay a count; many codes asked as classes are classes.
    many = _tickets(2_000, 5, list(range(12)), [1 / 12] * 12).with_columns(pl.col("outcome").cast(pl.Int64))
    path = _written(tmp_path, many, "many")
    assert (
        invoke(
            "init", "many", "--from", str(path), "--entity-column", "ticket_id", "--label-column", "outcome"
        ).exit_code
        == 0
    )
    assert load_job_spec("many", workspace).target.kind == "count"
    assert (
        invoke(
            "init",
            "many",
            "--from",
            str(path),
            "--entity-column",
            "ticket_id",
            "--label-column",
            "outcome",
            "--kind",
            "multiclass",
            "--force",
        ).exit_code
        == 0
    )
    assert load_job_spec("many", workspace).target.classes == [str(i) for i in range(12)]


def test_features_write_the_class_index_and_say_so(workspace: Settings, tmp_path: Path) -> None:  # noqa: F811
    sample = _tickets(800, 6, ["refund", "escalate", "close"], [0.5, 0.2, 0.3])
    path = _written(tmp_path, sample, "tickets")
    assert (
        invoke(
            "init", "tickets", "--from", str(path), "--entity-column", "ticket_id", "--label-column", "outcome"
        ).exit_code
        == 0
    )
    out = tmp_path / "inputs.parquet"
    result = invoke("features", "tickets", "--from", str(path), "--out", str(out))
    assert result.exit_code == 0, (result.output, result.exception)
    assert "+ outcome (the class's index into target.classes: 0 close, 1 escalate, 2 refund)" in " ".join(
        result.output.split()
    )
    inputs = pl.read_parquet(out)
    assert inputs["outcome"].dtype.is_integer()
    expected = sample["outcome"].replace_strict({"close": 0, "escalate": 1, "refund": 2}, return_dtype=pl.Int64)
    joined = sample.with_columns(expected=expected).join(inputs, on="ticket_id")
    assert joined.height == sample.height and (joined["outcome_right"].cast(pl.Int64) == joined["expected"]).all()


@pytest.mark.parametrize("labels", [[0, 1, 2], ["a", "b", "c", "d"]])
def test_a_binary_job_asked_of_several_classes_points_to_multiclass(
    workspace: Settings, tmp_path: Path, labels: list
) -> None:  # noqa: F811
    sample = _tickets(300, 7, labels, [1 / len(labels)] * len(labels))
    line = one_error_line(
        invoke(
            "init",
            "b",
            "--from",
            str(_written(tmp_path, sample, "b")),
            "--entity-column",
            "ticket_id",
            "--label-column",
            "outcome",
            "--kind",
            "binary",
        )
    )
    assert "--kind binary" in line and "'outcome'" in line
    if isinstance(labels[0], int):
        assert "pass --kind multiclass" in line
