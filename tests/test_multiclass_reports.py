"""Everything a person reads about a multiclass job, on a user's own fault-type table driven through the commands
of docs/guides/multiclass-jobs.md: `score init --label-column`, `score features`, an XGBoost multi:softprob model
trained here on what features wrote, `score register`, `score backfill` with the user's own rule table,
`score card`. The run page, the key numbers and the ledger's summary show the class mix that polars recomputes
from the published classifications; the model card shows the classes and the classwise reliability; the
monitoring page speaks of classes. None of them says risk, score, event or AUC."""

from __future__ import annotations

import datetime as dt
import html
import json
import re

import polars as pl
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import user_project_env
from test_multiclass_prediction import RULES, fault_rows
from user_projects import day_output, score_cli

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
# A user's project whose `score` talks to the session's Prefect server (conftest.user_project_env).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

CREDIT_WORDS = re.compile(r"\b(risk|risky|scores?|events?|AUC|default)\b", re.IGNORECASE)
TRAIN = [dt.date(2026, 5, 1), dt.date(2026, 5, 2)]
HOLDOUT = dt.date(2026, 5, 3)
SCORED = [dt.date(2026, 5, 4), dt.date(2026, 5, 5)]
CLASSES = ["bearing", "leak", "none", "overheat"]
"""The scaffold's order: the label's text values sorted."""


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> dict:
    import xgboost as xgb

    root = tmp_path_factory.mktemp("multiclass_pages")
    env = user_project_env(root)
    score = score_cli(root, env)
    pl.concat([fault_rows(d, 3_000, 60 + i) for i, d in enumerate(TRAIN)]).write_parquet(root / "train.parquet")
    fault_rows(HOLDOUT, 4_000, 70).write_parquet(root / "holdout.parquet")
    for i, day in enumerate(SCORED):
        folder = root / "data" / "raw" / "faults" / f"date={day}"
        folder.mkdir(parents=True)
        fault_rows(day, 3_000, 80 + i).drop("fault").write_parquet(folder / "part-0.parquet")
    init = score(
        "init",
        "faults",
        "--from",
        str(root / "train.parquet"),
        "--entity-column",
        "machine_id",
        "--label-column",
        "fault",
    )
    spec_path = root / "jobs" / "faults.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    assert spec["target"]["classes"] == CLASSES, spec["target"]
    spec["target"]["name"] = "fault type"
    spec["prediction"]["rules"] = RULES
    # The user's own decisions replace the scaffold's, in the words section too.
    spec["prediction"]["decisions"] = {"stop": {"action": True}, "service": {"action": True}}
    spec["prediction"]["reasons"]["for_decisions"] = ["stop", "service", "inspect"]
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    features = score("features", "faults", "--from", str(root / "train.parquet"), "--out", str(root / "inputs.parquet"))
    inputs = pl.read_parquet(root / "inputs.parquet")
    names = [c for c in inputs.columns if c not in ("machine_id", "outcome")]
    booster = xgb.train(
        {"objective": "multi:softprob", "num_class": len(CLASSES), "max_depth": 3, "eta": 0.2, "seed": 1},
        xgb.DMatrix(inputs.select(names).to_numpy(), label=inputs["outcome"].to_numpy(), feature_names=names),
        40,
    )
    booster.save_model(str(root / "faults.ubj"))
    score("register", "faults", "--model", str(root / "faults.ubj"), "--holdout", str(root / "holdout.parquet"))
    score("backfill", "faults", "--start", SCORED[0].isoformat(), "--end", SCORED[-1].isoformat())
    score("card", "faults")
    return {"root": root, "env": env, "init": init.stdout, "features": features.stdout, "inputs": inputs}


def _mix(published: pl.DataFrame) -> pl.DataFrame:
    """The class mix recomputed from the published rows: rows, share and mean probability per predicted class."""
    return (
        published.group_by("predicted_class")
        .agg(pl.len().alias("rows"), pl.col("probability").mean().alias("mean_probability"))
        .with_columns(share=pl.col("rows") / published.height)
    )


def _text(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", re.sub(r"<svg.*?</svg>", " ", page, flags=re.S))))


def test_features_wrote_the_class_index_the_model_trained_on(faults: dict) -> None:
    train = pl.read_parquet(faults["root"] / "train.parquet")
    joined = train.join(faults["inputs"], on="machine_id")
    assert joined.height == faults["inputs"].height >= train.height * 0.99
    assert (joined["outcome"] == joined["fault"].replace_strict(CLASSES, list(range(4)), return_dtype=pl.Int32)).all()
    assert "0 bearing, 1 leak, 2 none, 3 overheat" in " ".join(faults["features"].split())
    assert "target: multiclass, proposed because fault holds 4 text values" in faults["init"]


def test_the_run_page_shows_the_class_mix_of_the_published_rows(faults: dict) -> None:
    day = SCORED[0]
    published = day_output(faults["root"], "classifications", day, job="faults")
    page = (faults["root"] / "data" / "output" / "faults" / "reports" / "html" / f"date={day}.html").read_text()
    for name, rows, mean, share in (
        _mix(published).select("predicted_class", "rows", "mean_probability", "share").iter_rows()
    ):
        cells = f'<td>{name}</td><td class="n">{rows:,}</td><td class="n">{share:.2%}</td><td class="n">{mean:.3f}</td>'
        assert cells in page, (name, cells)
    text = _text(page)
    low = int((published["margin"] < 0.1).sum())
    assert f"rows with a margin below 0.1: {low:,} ({low / published.height:.2%})" in text
    for decision in published["decision"].unique().to_list():
        counts = [
            int(((published["decision"] == decision) & (published["predicted_class"] == c)).sum()) for c in CLASSES
        ]
        assert f"{decision} {' '.join(f'{n:,}' for n in counts)} {sum(counts):,}" in text, decision
    assert (
        "class in {bearing, overheat, leak} and probability < 0.5" in text
        and "class = leak and probability ≥ 0.5" in text
    )
    assert 'data-plot="margin"' in page and "Classification run faults" in text
    # The glance: the decisions' mix of the published rows, and the class whose share moved most, at its published share.
    glance = _text(page.split('<section class="glance', 1)[1].split("</section>", 1)[0])
    for decision, n in published.group_by("decision").len().iter_rows():
        assert f"{decision} {n:,} ({n / published.height:.2%})" in glance, decision
    moved = re.search(r"the largest change is (\w+), ([\d.]+)% of rows", glance)
    assert moved is not None, glance
    shares = dict(_mix(published).select("predicted_class", "share").iter_rows())
    assert moved.group(2) == f"{shares[moved.group(1)]:.2%}"[:-1]
    assert not CREDIT_WORDS.search(text), CREDIT_WORDS.search(text)


def test_the_ledger_summary_and_the_key_numbers_are_the_published_class_mix(faults: dict) -> None:
    import duckdb

    from tasks.monitoring.class_distribution import ClassDistribution, class_run_summary
    from tasks.runs.key_numbers import key_numbers
    from tasks.scoring.summary import ScoringSummary

    root = faults["root"]
    with duckdb.connect(str(root / "data" / "warehouse.duckdb"), read_only=True) as warehouse:
        ledger = dict(
            warehouse.execute(
                "SELECT partition_date, inference FROM runs WHERE job = 'faults' AND status = 'succeeded'"
            ).fetchall()
        )
    spec = yaml.safe_load((root / "jobs" / "faults.yaml").read_text())
    for day in SCORED:
        published = day_output(root, "classifications", day, job="faults")
        recorded = json.loads(ledger[day])["classification"]
        mix = {
            name: (rows, share)
            for name, rows, share in _mix(published).select("predicted_class", "rows", "share").iter_rows()
        }
        assert recorded["rows"] == published.height and recorded["name"] == "fault type"
        assert recorded["predicted_share"] == pytest.approx({c: mix.get(c, (0, 0.0))[1] for c in CLASSES}, abs=1e-12)
        assert recorded["mean_probability"] == pytest.approx(published["probability"].mean(), rel=1e-12)
        assert recorded["low_margin_share"] == pytest.approx(float((published["margin"] < 0.1).mean()), abs=1e-12)
        assert recorded["decisions"] == dict(published["decision"].value_counts().iter_rows())
        assert not CREDIT_WORDS.search(json.dumps(recorded))
    # The key numbers of the first day, from its published chunks summed as a run sums them.
    day = SCORED[0]
    published = day_output(root, "classifications", day, job="faults")
    counted = ClassDistribution()
    for file in sorted((root / "data" / "output" / "faults" / "classifications" / f"date={day}").glob("*.parquet")):
        counted.add(pq.read_table(file))
    rules = [
        {
            "id": r["id"],
            "decision": r["decision"],
            "when": {k: v for k, v in (r.get("when") or {}).items() if k != "class"},
            "classes": r.get("when", {}).get("class", ()),
        }
        for r in spec["prediction"]["rules"]
    ]
    summary = ScoringSummary(
        rows_read=published.height,
        rows_scored=published.height,
        decisions=dict(published["decision"].value_counts().iter_rows()),
    )
    summary.classification_report = class_run_summary(
        counted, name="fault type", classes=CLASSES, level=0.9, rules=rules, rule_rows={}, reason_texts={}
    )
    numbers = {row["measure"]: row["value"] for row in key_numbers(summary)}
    assert numbers["rows classified"] == f"{published.height:,}" and "rows scored" not in numbers
    for name, rows, mean, share in (
        _mix(published).select("predicted_class", "rows", "mean_probability", "share").iter_rows()
    ):
        assert numbers[f"predicted {name}"] == f"{rows:,} ({share:.1%}), mean probability {mean:.3f}"
    low = int((published["margin"] < 0.1).sum())
    assert numbers["rows with margin < 0.1"] == f"{low:,} ({low / published.height:.1%})"
    assert numbers["mean probability of the predicted class"] == f"{published['probability'].mean():.3f}"
    assert not any(CREDIT_WORDS.search(k + " " + v) for k, v in numbers.items())


def test_the_model_card_gives_the_classes_and_their_reliability(faults: dict) -> None:
    root = faults["root"]
    card = (root / "data" / "output" / "faults" / "model_card.md").read_text()
    metadata = json.loads((root / "data" / "models" / "faults" / "1" / "metadata.json").read_text())
    assert "in the model's order: 0 `bearing`, 1 `leak`, 2 `none`, 3 `overheat`" in card
    assert "table `classifications`" in card and "## Calibration of the class probabilities" in card
    holdout = pl.read_parquet(root / "holdout.parquet")["fault"].value_counts()
    quarantined = metadata["training"]["rows_quarantined"]
    reliability = metadata["calibration"]["reliability"]
    assert f"classwise ECE **{reliability['classwise_ece']:.4f}**" in card
    for row in reliability["classes"]:
        actual = dict(holdout.iter_rows())[row["class"]]
        assert actual - quarantined <= row["rows"] <= actual
        bins = row["bins"]
        # The class's ECE is its bins' weighted gap between mean probability and observed share.
        n = sum(b["rows"] for b in bins)
        assert row["ece"] == pytest.approx(
            sum(b["rows"] / n * abs(b["mean_probability"] - b["observed_rate"]) for b in bins), rel=1e-9
        )
        assert f"| {row['class']} | {row['rows']:,} | {row['ece']:.4f} |" in card
        for b in bins:
            assert (
                f"| {b['low']:.1f}–{b['high']:.1f} | {b['rows']:,} | {b['mean_probability']:.4f} | {b['observed_rate']:.4f} |"
                in card
            )
    assert f"Hold-out accuracy | {metadata['training']['holdout_accuracy']:.4g}" in card
    assert "| INSPECT | class in {bearing, overheat, leak} and probability < 0.5 | inspect |" in card
    assert not CREDIT_WORDS.search(card), CREDIT_WORDS.search(card)


def test_the_monitoring_page_speaks_of_classes(faults: dict) -> None:
    from tasks.runs.monitoring import written_monitoring_page
    from tasks.settings import Settings
    from tasks.sinks.warehouse_choice import warehouse_for

    root = faults["root"]
    settings = Settings(data_dir=root / "data", jobs_dir=root / "jobs", expectations_dir=root / "expectations")
    page, artifacts = written_monitoring_page(warehouse_for(settings), settings, "faults", SCORED[0], SCORED[-1])
    text = _text(page.read_text())
    for day in SCORED:
        published = day_output(root, "classifications", day, job="faults")
        shares = dict(_mix(published).select("predicted_class", "share").iter_rows())
        assert f"{day} 1 {published.height:,} " + " ".join(f"{shares.get(c, 0.0):.2%}" for c in CLASSES) in text
    assert not CREDIT_WORDS.search(text) and not any(CREDIT_WORDS.search(a.description) for a in artifacts)
