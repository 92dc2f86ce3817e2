"""A multiclass job's monitoring, before and after labels, on a user's own table (not the demo generator's).

A fault-type job scaffolded, turned into a multiclass spec with a slice column, an XGBoost multi:softprob model
trained here, registered, eleven days scored by one `score backfill`, their labels (class names) landed and
`score outcomes` run. The estimates before labels are recomputed from the published classifications; the realized
measures from the published rows and the label files with scikit-learn (and numpy for the calibration error),
never from the tables under test. Ten days draw their labels from the same process the training rows came
from (unshifted); the last day's machines run with low pressure, so many more are predicted as leaking.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from conftest import user_project_env
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, log_loss, precision_recall_fscore_support
from user_projects import day_output, score_cli

from tasks.errors import LabelError
from tasks.jobspec import LabelSource
from tasks.monitoring.outcomes import parquet_labels
from tasks.sinks.duckdb_warehouse import DuckDBWarehouse
from tasks.sinks.warehouse import Warehouse

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
# A user's project whose `score` talks to the session's Prefect server (conftest.user_project_env).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

JOB = "faults"
CLASSES = ["none", "bearing", "overheat", "leak"]
FEATURES = ("vibration", "temperature", "pressure", "age_years")
SITES = ("north", "south", "east")
DAYS = [dt.date(2026, 5, 1) + dt.timedelta(days=i) for i in range(15)]
TRAIN_DAYS, HOLDOUT_DAY, SCORED_DAYS = DAYS[:3], DAYS[3], DAYS[4:]
UNSHIFTED, SHIFTED = SCORED_DAYS[:-1], SCORED_DAYS[-1]
ROWS = 1200
LEVEL = 0.9
BINS = 10
RULES = [
    {"id": "STOP_LEAK", "when": {"class": "leak", "probability": {"ge": 0.5}}, "decision": "stop"},
    {
        "id": "INSPECT",
        "when": {"class": ["bearing", "overheat", "leak"], "probability": {"lt": 0.5}},
        "decision": "inspect",
    },
    {"id": "SERVICE", "when": {"class": ["bearing", "overheat"], "probability": {"ge": 0.5}}, "decision": "service"},
    {"id": "RUN", "decision": "run"},
]


def fault_rows(day: dt.date, n: int, seed: int, *, pressure: float = 5.0) -> pl.DataFrame:
    """A day of machines: vibration points to bearings, heat to overheating, low pressure to leaks; the fault drawn
    from those probabilities, so a calibrated model's probabilities are the faults' own."""
    rng = np.random.default_rng(seed)
    vibration = rng.gamma(2.0, 1.0, n).round(3)
    temperature = rng.normal(60, 12, n).round(1)
    pressure_bar = rng.normal(pressure, 1.5, n).round(2)
    age = rng.integers(0, 20, n)
    logits = np.column_stack(
        [
            np.full(n, 1.5),
            -1.0 + 0.9 * vibration + 0.05 * age,
            -6.0 + 0.09 * temperature,
            4.5 - 1.1 * pressure_bar + 0.04 * age,
        ]
    )
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    fault = (p.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    return pl.DataFrame(
        {
            "machine_id": [f"M-{day:%m%d}-{i:06d}" for i in range(n)],
            "site": rng.choice(SITES, n),
            "vibration": vibration,
            "temperature": temperature,
            "pressure": pressure_bar,
            "age_years": age,
            "fault": np.asarray(CLASSES)[fault],
        }
    )


def labels_folder(root: Path, day: dt.date) -> Path:
    return root / "data" / "labels" / JOB / f"date={day}"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict:
    import xgboost as xgb

    root = tmp_path_factory.mktemp("multiclass-outcomes")
    score = score_cli(root, user_project_env(root))
    frames = {
        day: fault_rows(
            day,
            5000 if day in TRAIN_DAYS else 6000 if day == HOLDOUT_DAY else ROWS,
            seed=100 + i,
            pressure=3.5 if day == SHIFTED else 5.0,
        )
        for i, day in enumerate(DAYS)
    }
    train = pl.concat([frames[d] for d in TRAIN_DAYS])
    train.drop("fault").write_parquet(root / "sample.parquet")
    frames[HOLDOUT_DAY].write_parquet(root / "holdout.parquet")
    for day in SCORED_DAYS:
        raw = root / "data" / "raw" / JOB / f"date={day}"
        raw.mkdir(parents=True)
        frames[day].drop("fault").write_parquet(raw / "part-0.parquet")
        folder = labels_folder(root, day)
        folder.mkdir(parents=True)
        labels = frames[day].select("machine_id", "fault", pl.lit(day + dt.timedelta(days=3)).alias("observed_date"))
        if day == SCORED_DAYS[0]:
            # One machine's fault is still unknown: stored and counted, never measured.
            labels = labels.with_columns(
                pl.when(pl.int_range(pl.len()) == 0).then(None).otherwise(pl.col("fault")).alias("fault")
            )
        labels.write_parquet(folder / "part-0.parquet")

    score("init", JOB, "--from", str(root / "sample.parquet"), "--entity-column", "machine_id")
    spec_path = root / "jobs" / f"{JOB}.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    spec["features"]["columns"] = [c for c in spec["features"]["columns"] if c["name"] != "site"]
    spec["target"] = {"kind": "multiclass", "name": "fault type", "classes": CLASSES}
    spec["prediction"] = {
        "interval_level": LEVEL,
        "rules": RULES,
        "reasons": {
            "top_k": 2,
            "for_decisions": ["stop", "service", "inspect"],
            "codes": {
                "vibration": {"code": "VIB", "text": "Vibration"},
                "temperature": {"code": "TEMP", "text": "Temperature"},
                "pressure": {"code": "PRES", "text": "Pressure"},
                "age_years": {"code": "AGE", "text": "Machine age"},
            },
        },
    }
    spec["monitoring"]["labels"]["outcome_column"] = "fault"
    spec["monitoring"]["slices"] = ["site"]
    spec["monitoring"]["calibration_bins"] = BINS
    spec["monitoring"].setdefault("health", {})["interval_level"] = LEVEL
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))

    label = train["fault"].replace_strict(CLASSES, list(range(len(CLASSES)))).to_numpy()
    booster = xgb.train(
        {
            "objective": "multi:softprob",
            "num_class": len(CLASSES),
            "max_depth": 3,
            "eta": 0.15,
            "seed": 1,
            "nthread": 2,
        },
        xgb.DMatrix(train.select(FEATURES).to_numpy().astype(np.float32), label=label, feature_names=list(FEATURES)),
        60,
    )
    booster.save_model(str(root / "faults.ubj"))
    score("register", JOB, "--model", str(root / "faults.ubj"), "--holdout", str(root / "holdout.parquet"))
    scored = score("backfill", JOB, "--start", str(SCORED_DAYS[0]), "--end", str(SCORED_DAYS[-1])).stdout
    printed = score("outcomes", JOB, "--start", str(SCORED_DAYS[0]), "--end", str(SCORED_DAYS[-1])).stdout
    return {"root": root, "frames": frames, "scored": scored, "printed": printed}


def warehouse_of(root: Path) -> Warehouse:
    return DuckDBWarehouse(root / "data" / "warehouse.duckdb")


def stored(root: Path, table: str) -> pl.DataFrame:
    return pl.from_arrow(
        warehouse_of(root).monitoring_rows(table, job=JOB, first_date=SCORED_DAYS[0], last_date=SCORED_DAYS[-1])
    )


def health_of(root: Path) -> pl.DataFrame:
    return pl.from_arrow(warehouse_of(root).model_health_rows(JOB, SCORED_DAYS[0], SCORED_DAYS[-1]))


def joined_by_hand(root: Path, day: dt.date) -> pl.DataFrame:
    """The day's published classifications (Parquet) with each machine's label (null: none) and raw site."""
    published = day_output(root, "classifications", day, job=JOB)
    labels = pl.read_parquet(labels_folder(root, day) / "part-0.parquet")
    raw = pl.read_parquet(root / "data" / "raw" / JOB / f"date={day}" / "part-0.parquet")
    return published.join(
        labels.select(pl.col("machine_id").alias("entity_id"), "fault"), on="entity_id", how="left"
    ).join(raw.select(pl.col("machine_id").alias("entity_id"), "site"), on="entity_id", how="left")


def numpy_ece(probability: np.ndarray, outcome: np.ndarray) -> float:
    edges = np.linspace(0.0, 1.0, BINS + 1)
    index = np.clip(np.searchsorted(edges, probability, side="right") - 1, 0, BINS - 1)
    return sum(abs(probability[index == b].sum() - outcome[index == b].sum()) for b in range(BINS)) / probability.size


def sklearn_measures(group: pl.DataFrame) -> dict:
    labelled = group.filter(pl.col("fault").is_not_null())
    truth = labelled["fault"].to_numpy().astype(str)
    predicted = labelled["predicted_class"].to_numpy().astype(str)
    vectors = np.asarray(labelled["class_probabilities"].to_list())
    index = np.array([CLASSES.index(c) for c in truth])
    precision, recall, f1, support = precision_recall_fscore_support(
        truth, predicted, labels=CLASSES, zero_division=np.nan
    )
    eces = [numpy_ece(vectors[:, k], (index == k).astype(float)) for k in range(len(CLASSES))]
    return {
        "labelled": labelled.height,
        "accuracy": accuracy_score(truth, predicted),
        "log_loss": log_loss(index, vectors, labels=list(range(len(CLASSES)))),
        # A class neither predicted nor observed in the group has no F1 and stays out of the mean (zero_division nan).
        "macro_f1": f1_score(truth, predicted, labels=CLASSES, average="macro", zero_division=np.nan),
        "classwise_ece": float(np.mean(eces)),
        "eces": eces,
        "top_label_ece": numpy_ece(vectors.max(axis=1), (truth == predicted).astype(float)),
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "support": support,
        "predicted_rows": np.array([(predicted == c).sum() for c in CLASSES]),
    }


def close(a: float | None, b: float) -> bool:
    return (a is None and math.isnan(b)) or (a is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12))


def test_realized_measures_equal_sklearn_on_the_published_rows_and_labels(project: dict) -> None:
    root = project["root"]
    metrics, rates = stored(root, "outcome_class_metrics"), stored(root, "outcome_class_rates")
    assert stored(root, "outcome_metrics").is_empty() and stored(root, "outcome_errors").is_empty()
    for day in SCORED_DAYS:
        joined = joined_by_hand(root, day)
        groups = [("partition", "all", joined)]
        groups += [("decision", d, joined.filter(pl.col("decision") == d)) for d in sorted(joined["decision"].unique())]
        groups += [("slice:site", s, joined.filter(pl.col("site") == s)) for s in SITES]
        for section, item, group in groups:
            row = metrics.filter(
                (pl.col("partition_date") == day) & (pl.col("section") == section) & (pl.col("item") == item)
            )
            assert row.height == 1, (day, section, item)
            got, want = row.row(0, named=True), sklearn_measures(group)
            assert got["rows"] == group.height and got["labelled"] == want["labelled"]
            for measure in ("accuracy", "log_loss", "macro_f1", "classwise_ece", "top_label_ece"):
                assert close(got[measure], want[measure]), (day, section, item, measure, got[measure], want[measure])
            for k, name in enumerate(CLASSES):
                of_class = rates.filter(
                    (pl.col("partition_date") == day)
                    & (pl.col("section") == section)
                    & (pl.col("item") == item)
                    & (pl.col("class_name") == name)
                ).row(0, named=True)
                assert (
                    of_class["support"] == want["support"][k]
                    and of_class["predicted_rows"] == want["predicted_rows"][k]
                )
                for measure in ("precision", "recall", "f1"):
                    assert close(of_class[measure], float(want[measure][k])), (day, section, item, name, measure)
                assert close(of_class["ece"], want["eces"][k])
    labels = stored(root, "outcome_class_labels").filter(pl.col("partition_date") == SCORED_DAYS[0])
    partition = stored(root, "outcome_partitions").filter(pl.col("partition_date") == SCORED_DAYS[0]).row(0, named=True)
    assert labels["outcome"].null_count() == partition["labels_without_outcome"] == 1
    assert partition["predictions_labelled"] == labels.height - 1 - partition["labels_quarantined"]


def test_class_calibration_tables_add_up_and_match_numpy(project: dict) -> None:
    root = project["root"]
    table = stored(root, "outcome_class_calibration")
    pooled = table.group_by("class_name", "bin").agg(pl.col("rows", "events", "probability_sum").sum())
    vectors, truth = [], []
    for day in SCORED_DAYS:
        joined = joined_by_hand(root, day).filter(pl.col("fault").is_not_null())
        vectors.append(np.asarray(joined["class_probabilities"].to_list()))
        truth += joined["fault"].to_list()
    p, y = np.vstack(vectors), np.asarray(truth)
    for k, name in enumerate(CLASSES):
        index = np.minimum((p[:, k] * BINS).astype(int), BINS - 1)
        for b in range(BINS):
            row = pooled.filter((pl.col("class_name") == name) & (pl.col("bin") == b)).row(0, named=True)
            inside = index == b
            assert row["rows"] == inside.sum() and row["events"] == (y[inside] == name).sum()
            assert math.isclose(row["probability_sum"], p[inside, k].sum(), rel_tol=1e-9, abs_tol=1e-9)
    # Labels drawn from the process the model learned: the calibrated vectors are honest over all the partitions.
    ece = np.mean([numpy_ece(p[:, k], (y == name).astype(float)) for k, name in enumerate(CLASSES)])
    print(f"classwise ECE over {len(SCORED_DAYS)} partitions ({len(y)} labelled rows): {ece:.4f}")
    assert ece < 0.03


def _registered_training(root: Path) -> dict:
    import json

    versions = sorted((root / "data" / "models").glob("*/*/metadata.json"))
    return json.loads(versions[-1].read_text())["training"]


def test_estimates_before_labels_are_recomputed_from_the_published_vectors(project: dict) -> None:
    root = project["root"]
    health = health_of(root).filter(pl.col("section") == "estimated_performance")
    z = stats.norm.ppf((1 + LEVEL) / 2)
    holdout_rows = _registered_training(root)["rows_holdout"]
    for day in SCORED_DAYS:
        published = day_output(root, "classifications", day, job=JOB)
        of_day = health.filter(pl.col("partition_date") == day)
        rows = {(r["measure"], r["item"]): r for r in of_day.iter_rows(named=True)}
        p = published["probability"].to_numpy()
        n = p.size
        accuracy = rows[("accuracy", "all")]
        # The labels' draw (Poisson-binomial) and the calibration's own uncertainty from its hold-out rows, in quadrature.
        a = p.mean()
        half = z * np.sqrt((p * (1 - p)).sum() / n**2 + a * (1 - a) / holdout_rows)
        assert accuracy["rows"] == n and math.isclose(accuracy["value"], a, rel_tol=1e-9)
        assert math.isclose(accuracy["low"], max(0.0, a - half), rel_tol=1e-9)
        assert math.isclose(accuracy["high"], min(1.0, a + half), rel_tol=1e-9)
        vectors = np.asarray(published["class_probabilities"].to_list())
        predicted = published["predicted_class"].to_numpy()
        for k, name in enumerate(CLASSES):
            mine = predicted == name
            assert math.isclose(rows[("class_rate", name)]["value"], vectors[:, k].mean(), rel_tol=1e-9)
            assert math.isclose(rows[("precision", name)]["value"], vectors[mine, k].sum() / mine.sum(), rel_tol=1e-9)
            assert math.isclose(
                rows[("recall", name)]["value"], vectors[mine, k].sum() / vectors[:, k].sum(), rel_tol=1e-9
            )


def test_estimated_accuracy_covers_the_realized_accuracy_on_unshifted_partitions(project: dict) -> None:
    root = project["root"]
    estimates = stored(root, "outcome_estimates")
    accuracy = estimates.filter((pl.col("measure") == "accuracy") & (pl.col("item") == "all")).sort("partition_date")
    assert accuracy["partition_date"].to_list() == SCORED_DAYS
    metrics = stored(root, "outcome_class_metrics").filter(pl.col("section") == "partition")
    health = health_of(root).filter((pl.col("measure") == "accuracy") & (pl.col("section") == "estimated_performance"))
    for row in accuracy.iter_rows(named=True):
        realized = metrics.filter(pl.col("partition_date") == row["partition_date"])["accuracy"].item()
        estimated = health.filter(pl.col("partition_date") == row["partition_date"]).row(0, named=True)
        assert row["realized"] == realized and (row["estimate"], row["low"], row["high"]) == (
            estimated["value"],
            estimated["low"],
            estimated["high"],
        )
        assert row["outside"] == (not row["low"] <= realized <= row["high"]) and row["partition_flag"] == row["outside"]
    unshifted = accuracy.filter(pl.col("partition_date").is_in(UNSHIFTED))
    inside = int((~unshifted["outside"]).sum())
    widths = (unshifted["high"] - unshifted["low"]).to_numpy()
    print(
        f"estimated accuracy's {LEVEL:.0%} interval contained the realized accuracy on {inside}/{unshifted.height} unshifted "
        f"partitions ({inside / unshifted.height:.0%}); mean interval width {widths.mean():.3f}, mean |estimate - realized| "
        f"{np.abs(unshifted['estimate'] - unshifted['realized']).mean():.4f}"
    )
    assert inside / unshifted.height >= 0.9
    # The draw of the labels alone (the calibration's own uncertainty left out): how close the calibrated vectors are to the truth.
    z = stats.norm.ppf((1 + LEVEL) / 2)
    sampled = 0
    for row in unshifted.iter_rows(named=True):
        p = day_output(root, "classifications", row["partition_date"], job=JOB)["probability"].to_numpy()
        sampled += abs(row["realized"] - p.mean()) <= z * np.sqrt((p * (1 - p)).sum()) / p.size
    print(f"the labels' draw alone (sampling noise only) would contain it on {sampled}/{unshifted.height}")
    per_class = estimates.filter(
        pl.col("measure").is_in(["precision", "recall"]) & pl.col("partition_date").is_in(UNSHIFTED)
    )
    print(
        f"per-class precision/recall intervals: {int((~per_class['outside']).sum())}/{per_class.height} contain the realized value"
    )
    assert (~per_class["outside"]).mean() >= 0.85


def test_the_class_mix_flags_the_day_of_low_pressure_only(project: dict) -> None:
    root = project["root"]
    mix = health_of(root).filter((pl.col("section") == "class_mix") & (pl.col("measure") == "psi"))
    flags = dict(zip(mix["partition_date"].to_list(), mix["flag"].to_list(), strict=True))
    assert flags[SHIFTED] == "alert"
    assert [d for d in UNSHIFTED if flags[d] != "ok"] == []
    shares = health_of(root).filter(
        (pl.col("section") == "class_mix")
        & (pl.col("measure") == "predicted_share")
        & (pl.col("partition_date") == SHIFTED)
    )
    published = day_output(root, "classifications", SHIFTED, job=JOB)
    for row in shares.iter_rows(named=True):
        assert math.isclose(row["value"], (published["predicted_class"] == row["item"]).mean(), rel_tol=1e-9)
    leak = shares.filter(pl.col("item") == "leak").row(0, named=True)
    assert leak["value"] > 1.5 * leak["reference"]


def test_score_outcomes_prints_each_partitions_realized_and_estimated_accuracy(project: dict) -> None:
    printed = " ".join(project["printed"].split())
    assert "realized performance per partition and model version" in printed
    metrics = stored(project["root"], "outcome_class_metrics").filter(pl.col("section") == "partition")
    for row in metrics.iter_rows(named=True):
        assert f"{row['partition_date']}" in printed and f"{row['accuracy']:.2%}" in printed


def test_the_monitoring_page_shows_each_partitions_realized_accuracy(project: dict) -> None:
    page = (project["root"] / "data" / "output" / JOB / "reports" / "html" / "monitoring.html").read_text()
    realized = page[page.index("<h2>Realized measures</h2>") :]
    metrics = stored(project["root"], "outcome_class_metrics").filter(pl.col("section") == "partition")
    for row in metrics.iter_rows(named=True):
        assert f"<td>{row['partition_date']}</td>" in realized and f"{row['accuracy']:.2%}" in realized
    partitions = stored(project["root"], "outcome_partitions")
    assert "labels of entities never scored" in realized
    for row in partitions.iter_rows(named=True):
        line = next(tr for tr in realized.split("<tr>") if f"<td>{row['partition_date']}</td>" in tr)
        cells = re.findall(r"<td[^>]*>([^<]*)</td>", line)
        assert [int(c.replace(",", "")) for c in cells[-2:]] == [
            row["labels_quarantined"],
            row["labels_unknown_entity"],
        ]


def test_a_partitions_chunks_add_up_to_its_class_estimate_and_the_headline_names_it() -> None:
    from tasks.monitoring.health import HealthAccumulator, health_headline, model_health_rows
    from tasks.monitoring.multiclass_measures import multiclass_estimated_performance

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(900, 3)) * 2
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    c = p.argmax(axis=1)
    chosen = p[np.arange(900), c]
    units = [HealthAccumulator(), HealthAccumulator()]
    for i, (a, b) in enumerate(((0, 200), (200, 650), (650, 900))):
        units[i % 2].add_classified(p[a:b], c[a:b], chosen[a:b] - 0.01, chosen[a:b] + 0.01)
    partition = HealthAccumulator()
    for unit in units:
        partition.merge(unit)
    rows = model_health_rows(
        partition,
        {},
        model_version="1",
        decisions=[],
        rule_ids=[],
        actions=[],
        level=0.9,
        attribution_warn=0.1,
        attribution_alert=0.2,
        multivariate_tolerance=0.1,
        classes=["a", "b", "c"],
        class_reference={"rows": 1000, "predicted_share": {"a": 0.6, "b": 0.2, "c": 0.2}},
    )
    whole = multiclass_estimated_performance(
        p, c, classes=["a", "b", "c"], level=0.9, probability_low=chosen - 0.01, probability_high=chosen + 0.01
    )
    accuracy = next(r for r in rows if r["measure"] == "accuracy")
    assert [accuracy["value"], accuracy["low"], accuracy["high"]] == pytest.approx(
        [whole["accuracy"]["value"], whole["accuracy"]["low"], whole["accuracy"]["high"]], rel=1e-12
    )
    psi = next(r for r in rows if r["section"] == "class_mix" and r["measure"] == "psi")
    assert psi["flag"] == "alert" and psi["rows"] == 900
    headline = health_headline(rows, classifies=True)
    assert headline["accuracy"] == [accuracy["value"], accuracy["low"], accuracy["high"]]
    assert headline["flagged"] == ["class_mix all psi alert"]


def test_a_label_naming_no_class_is_refused(tmp_path: Path) -> None:
    source = LabelSource(entity_column="machine_id", outcome_column="fault")
    path = tmp_path / "labels.parquet"
    pl.DataFrame(
        {
            "machine_id": ["M-1", "M-2", "M-3"],
            "fault": ["leak", "spark", None],
            "observed_date": [dt.date(2026, 5, 9)] * 3,
        }
    ).write_parquet(path)
    with pytest.raises(LabelError) as error:
        parquet_labels(tmp_path, source, kind="multiclass", classes=CLASSES)
    assert str(error.value) == (
        f"labels file {path}: column 'fault' holds the class of a multiclass job and must name one of target.classes {CLASSES} "
        "(or be null while unknown); found 1 other value(s), e.g. ['spark']"
    )
    pl.DataFrame(
        {"machine_id": ["M-1", "M-2"], "fault": [3, None], "observed_date": [dt.date(2026, 5, 9)] * 2}
    ).write_parquet(path)
    with pytest.raises(LabelError, match=r"e\.g\. \['3'\]"):
        parquet_labels(tmp_path, source, kind="multiclass", classes=CLASSES)


def test_the_day_of_low_pressure_sends_one_class_mix_alert_naming_the_classes_that_moved(project: dict) -> None:
    from tasks.monitoring.alerts import published_run_alerts

    health = health_of(project["root"])
    for day in SCORED_DAYS:
        rows = health.filter(pl.col("partition_date") == day).to_dicts()
        alerts = published_run_alerts(
            JOB, day.isoformat(), drift_rows=[], monitoring=None, run_link=None, page=None, health_rows=rows
        )
        mix = [a for a in alerts if a.event == "class_mix_shift"]
        if day != SHIFTED:
            assert mix == []
            continue
        assert len(mix) == 1
        shares = {
            r["item"]: (r["value"], r["reference"])
            for r in rows
            if r["section"] == "class_mix" and r["measure"] == "predicted_share"
        }
        most = max(shares, key=lambda c: abs(shares[c][0] - shares[c][1]))
        assert f"- {most}: {shares[most][0]:.1%} of rows (reference {shares[most][1]:.1%})" in mix[0].body
        assert "risk" not in mix[0].body.lower() and "score" not in mix[0].body.lower()
