"""A multiclass job end to end on a user's own table (not the demo generator's): a fault-type job scaffolded,
turned into a multiclass spec, an XGBoost multi:softprob model trained here, registered, two days scored.
Published rows are checked against XGBoost's own probabilities and per-class contributions."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from conftest import user_project_env
from user_projects import assert_nothing_registered, assert_one_error_line, registry_versions, score_cli

from tasks.prediction.config import PredictionConfig, TargetConfig

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
# A user's project whose `score` talks to the session's Prefect server (conftest.user_project_env).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

CLASSES = ["none", "bearing", "overheat", "leak"]
FEATURES = ("vibration", "temperature", "pressure", "age_years")


def fault_rows(day: dt.date, n: int, seed: int) -> pl.DataFrame:
    """A user's own equipment table: vibration points to bearings, heat to overheating, low pressure to leaks."""
    rng = np.random.default_rng(seed)
    vibration = rng.gamma(2.0, 1.0, n).round(3)
    temperature = rng.normal(60, 12, n).round(1)
    pressure = rng.normal(5, 1.5, n).round(2)
    age = rng.integers(0, 20, n)
    logits = np.column_stack(
        [
            np.full(n, 1.5),
            -1.0 + 0.9 * vibration + 0.05 * age,
            -6.0 + 0.09 * temperature,
            4.5 - 1.1 * pressure + 0.04 * age,
        ]
    )
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    fault = (p.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    return pl.DataFrame(
        {
            "machine_id": [f"M-{day:%m%d}-{i:06d}" for i in range(n)],
            "vibration": vibration,
            "temperature": temperature,
            "pressure": pressure,
            "age_years": age,
            "fault": np.asarray(CLASSES)[fault],
        }
    )


TRAIN = [dt.date(2026, 4, 1) + dt.timedelta(days=d) for d in range(3)]
HOLDOUT = dt.date(2026, 4, 4)
SCORED = [dt.date(2026, 4, 5), dt.date(2026, 4, 6)]
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


def _multiclass_spec(spec: dict) -> dict:
    spec["target"] = {"kind": "multiclass", "name": "fault type", "classes": CLASSES}
    spec["prediction"] = {
        "interval_level": 0.9,
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
    return spec


@pytest.fixture(scope="module")
def fault_job(tmp_path_factory: pytest.TempPathFactory) -> dict:
    import xgboost as xgb

    root = tmp_path_factory.mktemp("multiclass")
    env = user_project_env(root)
    score = score_cli(root, env)
    pl.concat([fault_rows(d, 6_000, i) for i, d in enumerate(TRAIN)]).write_parquet(root / "train.parquet")
    fault_rows(HOLDOUT, 8_000, 40).write_parquet(root / "holdout.parquet")
    scored = {}
    for i, day in enumerate(SCORED):
        frame = fault_rows(day, 10_000, 50 + i)
        folder = root / "data" / "raw" / "faults" / f"date={day}"
        folder.mkdir(parents=True)
        frame.drop("fault").write_parquet(folder / "part-0.parquet")
        scored[day] = frame
    pl.read_parquet(root / "train.parquet").drop("fault").write_parquet(root / "sample.parquet")
    score("init", "faults", "--from", str(root / "sample.parquet"), "--entity-column", "machine_id")
    spec_path = root / "jobs" / "faults.yaml"
    spec_path.write_text(yaml.safe_dump(_multiclass_spec(yaml.safe_load(spec_path.read_text())), sort_keys=False))
    train = pl.read_parquet(root / "train.parquet")
    label = train["fault"].replace_strict(CLASSES, list(range(len(CLASSES)))).to_numpy()
    booster = xgb.train(
        {"objective": "multi:softprob", "num_class": len(CLASSES), "max_depth": 3, "eta": 0.15, "seed": 1},
        xgb.DMatrix(train.select(FEATURES).to_numpy().astype(np.float32), label=label, feature_names=list(FEATURES)),
        80,
    )
    booster.save_model(str(root / "faults.ubj"))
    registered = score(
        "register", "faults", "--model", str(root / "faults.ubj"), "--holdout", str(root / "holdout.parquet")
    )
    score("backfill", "faults", "--start", SCORED[0].isoformat(), "--end", SCORED[-1].isoformat())
    return {"root": root, "score": score, "booster": booster, "scored": scored, "registered": registered.stdout}


def _classified(root: Path, day: dt.date) -> pl.DataFrame:
    return pl.read_parquet(root / "data" / "output" / "faults" / "classifications" / f"date={day}" / "*.parquet")


def test_classes_are_xgboosts_most_probable_class_and_the_vector_adds_up(fault_job: dict) -> None:
    import xgboost as xgb

    day = SCORED[0]
    out = _classified(fault_job["root"], day)
    raw = fault_job["scored"][day]
    # The scaffold's profiled ranges quarantine a few rows beyond the sample's; every other row is classified once.
    assert raw.height * 0.99 < out.height <= raw.height and out["entity_id"].n_unique() == out.height
    joined = raw.join(out, left_on="machine_id", right_on="entity_id")
    x = joined.select(FEATURES).to_numpy().astype(np.float32)
    theirs = fault_job["booster"].predict(xgb.DMatrix(x, feature_names=list(FEATURES)))
    margins = fault_job["booster"].predict(xgb.DMatrix(x, feature_names=list(FEATURES)), output_margin=True)
    vector = np.asarray(joined["class_probabilities"].to_list())
    assert np.allclose(vector.sum(axis=1), 1.0, atol=1e-9)
    assert np.allclose(np.asarray(joined["raw_margins"].to_list()), margins, atol=1e-5)
    predicted = np.asarray(CLASSES)[vector.argmax(axis=1)]
    assert (joined["predicted_class"].to_numpy() == predicted).all()
    # Calibration may move a near tie, never a clear winner: the model's own class wherever it leads by 0.1.
    order = np.sort(theirs, axis=1)
    clear = order[:, -1] - order[:, -2] > 0.1
    assert (joined["predicted_class"].to_numpy()[clear] == np.asarray(CLASSES)[theirs.argmax(axis=1)][clear]).all()
    top2 = np.sort(vector, axis=1)[:, -2:]
    assert np.allclose(joined["margin"].to_numpy(), top2[:, 1] - top2[:, 0])
    assert np.allclose(joined["probability"].to_numpy(), top2[:, 1])
    assert (joined["probability_low"] <= joined["probability"]).all() and (
        joined["probability"] <= joined["probability_high"]
    ).all()
    assert (
        _classified(fault_job["root"], day).filter(pl.col("predicted_class") == pl.col("runner_up_class")).height == 0
    )
    for dataset in ("predictions", "forecasts"):
        empty = fault_job["root"] / "data" / "output" / "faults" / dataset / f"date={day}"
        assert pl.read_parquet(empty / "*.parquet").height == 0


def test_decisions_follow_the_rule_table_on_class_and_probability(fault_job: dict) -> None:
    out = _classified(fault_job["root"], SCORED[1])
    cls, p = out["predicted_class"].to_numpy(), out["probability"].to_numpy()
    expected = np.where(
        (cls == "leak") & (p >= 0.5),
        "stop",
        np.where(
            (cls != "none") & (p < 0.5),
            "inspect",
            np.where(np.isin(cls, ["bearing", "overheat"]) & (p >= 0.5), "service", "run"),
        ),
    )
    assert (out["decision"].to_numpy() == expected).all()
    assert set(out["decision"].unique()) == {"stop", "inspect", "service", "run"}


def test_reasons_are_xgboosts_contributions_to_the_predicted_class(fault_job: dict) -> None:
    import xgboost as xgb

    day = SCORED[0]
    out = _classified(fault_job["root"], day).filter(pl.col("decision") != "run")
    joined = fault_job["scored"][day].join(out, left_on="machine_id", right_on="entity_id")
    x = joined.select(FEATURES).to_numpy().astype(np.float32)
    contributions = fault_job["booster"].predict(xgb.DMatrix(x, feature_names=list(FEATURES)), pred_contribs=True)
    chosen = joined["predicted_class"].replace_strict(CLASSES, list(range(len(CLASSES)))).to_numpy()
    of_class = contributions[np.arange(len(chosen)), chosen, :-1]
    codes = np.array(["VIB", "TEMP", "PRES", "AGE"])
    order = np.argsort(-of_class, axis=1, kind="stable")[:, :2]
    for row, got in enumerate(joined["reason_codes"].to_list()):
        expected = [codes[j] for j in order[row] if of_class[row, j] > 0]
        assert got == expected
    # Each class's trees have their own table kernel, checked against pred_contribs at load: XGBoost explained no row.
    fallback = pl.read_parquet(
        fault_job["root"] / "data" / "output" / "faults" / "reports" / "fallback" / f"date={day}" / "*.parquet"
    )
    framework = fallback.filter(pl.col("kind") == "reasons_by_framework").row(0, named=True)
    assert (framework["detail"], framework["rows"]) == ("table kernel in use", 0)


def test_the_registration_report_prints_the_classwise_reliability(fault_job: dict) -> None:
    text = fault_job["registered"]
    assert "classwise ECE" in text and "accuracy" in text


def test_a_binary_model_on_the_multiclass_job_is_one_line_and_nothing_is_registered(
    fault_job: dict, tmp_path: Path
) -> None:
    import xgboost as xgb

    root, score = fault_job["root"], fault_job["score"]
    train = pl.read_parquet(root / "train.parquet")
    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": 2},
        xgb.DMatrix(
            train.select(FEATURES).to_numpy(), label=(train["fault"] == "leak").to_numpy(), feature_names=list(FEATURES)
        ),
        5,
    )
    path = tmp_path / "binary.ubj"
    booster.save_model(str(path))
    before = registry_versions(root, "faults")
    done = score("register", "faults", "--model", str(path), "--holdout", str(root / "holdout.parquet"), ok=False)
    assert_one_error_line(done, path, "a binary classifier, but the job is multiclass")
    assert_nothing_registered(root, before, "faults")


def test_a_wrong_class_order_is_one_line_naming_the_swap(fault_job: dict) -> None:
    root, score = fault_job["root"], fault_job["score"]
    spec_path = root / "jobs" / "faults.yaml"
    original = spec_path.read_text()
    spec = yaml.safe_load(original)
    spec["target"]["classes"] = ["none", "overheat", "bearing", "leak"]
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    try:
        before = registry_versions(root, "faults")
        model = root / "faults.ubj"
        done = score("register", "faults", "--model", str(model), "--holdout", str(root / "holdout.parquet"), ok=False)
        assert_one_error_line(done, model, "output 1 behaves like 'bearing'")
        assert_nothing_registered(root, before, "faults")
    finally:
        spec_path.write_text(original)


def test_class_rule_tables_are_proven_exact() -> None:
    target = TargetConfig(kind="multiclass", classes=CLASSES)
    assert target.classifies
    reasons = {"for_decisions": ["stop"], "codes": {}}
    config = PredictionConfig.model_validate({"rules": RULES, "reasons": {**reasons, "for_decisions": ["stop"]}})
    assert config.classifies and config.rules[0].classes == ("leak",)
    from tasks.prediction.decisions import predict_class_rule_table_problems

    assert predict_class_rule_table_problems(config.rules, CLASSES) == []
    gap = PredictionConfig.model_validate(
        {
            "rules": RULES[:3]
            + [{"id": "RUN", "when": {"class": "none", "probability": {"ge": 0.5}}, "decision": "run"}],
            "reasons": reasons,
        }
    )
    problems = predict_class_rule_table_problems(gap.rules, CLASSES)
    assert (
        len(problems) == 1
        and problems[0].startswith("no rule covers e.g. class=none, ")
        and "probability=0.25" in problems[0]
    )
    assert predict_class_rule_table_problems(config.rules, ["none", "bearing", "overheat", "spark"]) == [
        "prediction.rules[0] (STOP_LEAK) when.class names 'leak', which is not one of target.classes ['none', 'bearing', 'overheat', 'spark']",
        "prediction.rules[1] (INSPECT) when.class names 'leak', which is not one of target.classes ['none', 'bearing', 'overheat', 'spark']",
    ]
    # Every example a gap names is a row that can exist: with 10 classes a predicted class's probability of 0.3 leaves a
    # runner-up of at least 0.7 / 9, so its margin is at most 0.3 - 0.0778.
    ten = [str(i) for i in range(10)]
    split = PredictionConfig.model_validate(
        {
            "rules": [
                {"id": "CLEAR", "when": {"margin": {"ge": 0.2}}, "decision": "act"},
                {"id": "CLOSE", "when": {"margin": {"lt": 0.1}}, "decision": "review"},
            ],
            "reasons": {"for_decisions": [], "codes": {}},
        }
    )
    (gap,) = predict_class_rule_table_problems(split.rules, ten)
    example = dict(part.split("=") for part in gap.removeprefix("no rule covers e.g. ").split("; ")[0].split(", "))
    p, margin = float(example["probability"]), float(example["margin"])
    assert 0.1 <= margin < 0.2 and margin <= p - (1 - p) / 9 + 1e-9 and margin >= 2 * p - 1 - 1e-9
    with pytest.raises(ValueError, match="at least 3 classes"):
        TargetConfig(kind="multiclass", classes=["a", "b"])


def classwise_ece(probabilities: np.ndarray, labels: np.ndarray, bins: int = 10) -> float:
    """Mean over classes of the one-vs-rest ECE with equal-width bins, computed here with numpy alone."""
    eces = []
    for k in range(probabilities.shape[1]):
        p, hit = probabilities[:, k], labels == k
        which = np.minimum((p * bins).astype(int), bins - 1)
        eces.append(
            sum(
                abs(p[which == b].mean() - hit[which == b].mean()) * (which == b).sum()
                for b in range(bins)
                if (which == b).any()
            )
            / p.size
        )
    return float(np.mean(eces))


def test_calibrated_vectors_are_classwise_calibrated_on_later_labelled_days(fault_job: dict) -> None:
    """The issue's bar: classwise ECE <= 0.02 on later labelled partitions where the hold-out has >= 100 rows a class."""
    holdout = pl.read_parquet(fault_job["root"] / "holdout.parquet")
    assert holdout["fault"].value_counts()["count"].min() >= 100
    frames = [
        fault_job["scored"][d].join(_classified(fault_job["root"], d), left_on="machine_id", right_on="entity_id")
        for d in SCORED
    ]
    joined = pl.concat(frames)
    labels = joined["fault"].replace_strict(CLASSES, list(range(len(CLASSES)))).to_numpy()
    calibrated = classwise_ece(np.asarray(joined["class_probabilities"].to_list()), labels)
    margins = np.asarray(joined["raw_margins"].to_list())
    raw = np.exp(margins - margins.max(axis=1, keepdims=True))
    raw /= raw.sum(axis=1, keepdims=True)
    print(
        f"classwise ECE on {labels.size:,} later labelled rows: {calibrated:.4f} calibrated, {classwise_ece(raw, labels):.4f} as the model gave them"
    )
    assert calibrated <= 0.02, (calibrated, classwise_ece(raw, labels))
