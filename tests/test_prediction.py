"""tasks/prediction: calibration, score, rules and reasons on synthetic inputs (no ML runtime)."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml
from pydantic import ValidationError

from tasks.contracts import FeatureContributions, InferenceOutput
from tasks.errors import JobSpecError
from tasks.jobspec import load_job_spec
from tasks.prediction.calibration import (
    BinnedBetaCalibrator,
    ProbabilityMap,
    predict_calibrator_from_metadata,
    predict_fitted_calibrator,
)
from tasks.prediction.config import PredictionConfig, ReasonConfig, ScoreConfig, ThresholdRule
from tasks.prediction.decisions import predict_probability_cutoffs, predict_rule_decisions, predict_rule_table_problems
from tasks.prediction.outputs import predict_decided_chunk, predict_output
from tasks.prediction.reasons import predict_reason_codes
from tasks.prediction.scores import predict_score
from tasks.settings import PROJECT_ROOT, Settings


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def logistic_sample(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Margins whose true event probability is exactly sigmoid(margin)."""
    rng = np.random.default_rng(seed)
    margins = rng.normal(-1.5, 1.5, n)
    outcomes = (rng.random(n) < sigmoid(margins)).astype(np.float64)
    return margins, outcomes


# --- calibration ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def calibrator() -> BinnedBetaCalibrator:
    return predict_fitted_calibrator(*logistic_sample(100_000, seed=1))


def test_calibrated_probability_is_monotone_in_the_margin(calibrator: BinnedBetaCalibrator) -> None:
    grid = np.linspace(-8, 6, 2001)
    out = ProbabilityMap(calibrator, 0.9).predict_calibrated_probability(grid)
    assert np.all(np.diff(out.probability) >= 0)
    assert np.all(np.diff(out.low) >= -1e-12)
    assert np.all(np.diff(out.high) >= -1e-12)


def test_calibrator_knots_are_monotone_even_on_noisy_data() -> None:
    # Few rows per bin: raw bin rates are out of order, pooling must restore monotonicity.
    margins, outcomes = logistic_sample(400, seed=3)
    cal = predict_fitted_calibrator(margins, outcomes)
    posterior_means = (cal.events + 0.5) / (cal.totals + 1.0)
    assert np.all(np.diff(posterior_means) > 0)
    assert np.all(np.diff(cal.centers) > 0)
    assert cal.totals.sum() == 400 and cal.events.sum() == outcomes.sum()


@pytest.mark.parametrize("level", [0.5, 0.9, 0.99])
def test_interval_contains_the_probability_and_stays_in_unit_range(
    calibrator: BinnedBetaCalibrator, level: float
) -> None:
    margins = np.concatenate([np.linspace(-10, 10, 501), logistic_sample(5_000, seed=2)[0]])
    out = ProbabilityMap(calibrator, level).predict_calibrated_probability(margins)
    assert np.all(0 <= out.low)
    assert np.all(out.low <= out.probability)
    assert np.all(out.probability <= out.high)
    assert np.all(out.high <= 1)


@pytest.mark.parametrize("level", [0.05, 0.5, 0.9])
def test_interval_contains_the_probability_for_rare_events_at_any_level(level: float) -> None:
    # Bins of a single event: their Beta posteriors are strongly skewed, so a narrow
    # equal-tailed interval around the median need not contain the mean.
    rng = np.random.default_rng(8)
    margins = rng.normal(-5.0, 1.0, 2_000)
    outcomes = (rng.random(margins.size) < sigmoid(margins)).astype(np.float64)
    cal = predict_fitted_calibrator(margins, outcomes, min_class_rows=1)
    assert (cal.events == 1).any()
    out = ProbabilityMap(cal, level).predict_calibrated_probability(np.linspace(-9, 0, 301))
    assert np.all(out.low <= out.probability) and np.all(out.probability <= out.high)
    assert np.all(out.low >= 0) and np.all(out.high <= 1)


def test_wider_credibility_gives_wider_intervals(calibrator: BinnedBetaCalibrator) -> None:
    margins = np.linspace(-4, 2, 101)
    narrow = ProbabilityMap(calibrator, 0.5).predict_calibrated_probability(margins)
    wide = ProbabilityMap(calibrator, 0.99).predict_calibrated_probability(margins)
    assert np.all(wide.low <= narrow.low) and np.all(wide.high >= narrow.high)
    assert np.mean(wide.high - wide.low) > np.mean(narrow.high - narrow.low)


def test_intervals_shrink_with_more_training_data() -> None:
    margins = np.linspace(-3, 0, 61)
    small = ProbabilityMap(predict_fitted_calibrator(*logistic_sample(2_000, seed=4)), 0.9)
    large = ProbabilityMap(predict_fitted_calibrator(*logistic_sample(200_000, seed=5)), 0.9)
    width = lambda m: (lambda o: np.mean(o.high - o.low))(m.predict_calibrated_probability(margins))  # noqa: E731
    assert width(large) < width(small) / 3  # ~ sqrt(100) = 10x more data per bin


def test_calibrated_probability_matches_the_true_rate(calibrator: BinnedBetaCalibrator) -> None:
    margins, _ = logistic_sample(200_000, seed=11)
    truth = sigmoid(margins)
    out = ProbabilityMap(calibrator, 0.9).predict_calibrated_probability(margins)
    # On average over the whole sample (the event rate) ...
    assert abs(out.probability.mean() - truth.mean()) < 0.005
    # ... and within each decile of the calibrated probability.
    edges = np.quantile(out.probability, np.linspace(0, 1, 11))
    which = np.clip(np.searchsorted(edges, out.probability, side="right") - 1, 0, 9)
    for d in range(10):
        sel = which == d
        assert abs(out.probability[sel].mean() - truth[sel].mean()) < 0.02, d
    # Pointwise where training data is plentiful (bins of 2,500 rows: rate s.e. ≲ 0.01).
    grid = np.linspace(-3, 0, 31)
    assert (
        np.max(np.abs(ProbabilityMap(calibrator, 0.9).predict_calibrated_probability(grid).probability - sigmoid(grid)))
        < 0.04
    )


def test_calibrator_round_trips_through_metadata(calibrator: BinnedBetaCalibrator) -> None:
    again = predict_calibrator_from_metadata(calibrator.to_metadata())
    margins = np.linspace(-5, 3, 77)
    a = ProbabilityMap(calibrator, 0.9).predict_calibrated_probability(margins)
    b = ProbabilityMap(again, 0.9).predict_calibrated_probability(margins)
    np.testing.assert_array_equal(a.probability, b.probability)
    np.testing.assert_array_equal(a.low, b.low)
    with pytest.raises(ValueError, match="method"):
        predict_calibrator_from_metadata({**calibrator.to_metadata(), "method": "platt"})


def test_calibrator_needs_one_binary_outcome_per_finite_margin() -> None:
    with pytest.raises(ValueError, match="one outcome each"):
        predict_fitted_calibrator(np.zeros(0), np.zeros(0))
    with pytest.raises(ValueError, match="one outcome each"):
        predict_fitted_calibrator(np.zeros(100), np.zeros(99))
    with pytest.raises(ValueError, match="finite"):
        predict_fitted_calibrator(np.array([0.0, np.nan]), np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="0 or 1"):
        predict_fitted_calibrator(np.zeros(3), np.array([0.0, 1.0, 0.5]))


# --- score ------------------------------------------------------------------------------------

SCORE = ScoreConfig(base_probability=0.10, points_to_double_odds=10)


def p_of_odds(odds: float) -> float:
    return odds / (1 + odds)


def test_base_probability_maps_to_fifty() -> None:
    assert predict_score(np.array([0.10]), SCORE).tolist() == [50]
    other = ScoreConfig(base_probability=0.3, points_to_double_odds=20)
    assert predict_score(np.array([0.3]), other).tolist() == [50]


def test_doubling_the_odds_adds_points_to_double_odds() -> None:
    base_odds = 0.10 / 0.90
    probs = np.array([p_of_odds(base_odds * f) for f in (0.25, 0.5, 1, 2, 4, 8)])
    assert predict_score(probs, SCORE).tolist() == [30, 40, 50, 60, 70, 80]
    steep = ScoreConfig(base_probability=0.10, points_to_double_odds=7)
    assert predict_score(probs, steep).tolist() == [36, 43, 50, 57, 64, 71]


def test_score_is_monotone_and_within_0_100() -> None:
    p = np.concatenate([[0.0, 1e-300, 1e-9, 0.5, 1 - 1e-9, 1.0], np.linspace(0, 1, 10_001)])
    p.sort()
    s = predict_score(p, SCORE)
    assert s.dtype == np.int16
    assert s.min() == 0 and s.max() == 100
    assert np.all(np.diff(s.astype(int)) >= 0)


# --- rules ------------------------------------------------------------------------------------


def rule(id_: str, decision: str, **when: dict[str, float]) -> ThresholdRule:
    return ThresholdRule(id=id_, decision=decision, when=when)


RULES = [
    rule("DECLINE", "decline", probability_low={"ge": 0.25}),
    rule("REVIEW_STRADDLE", "review", probability_low={"lt": 0.25}, probability_high={"ge": 0.25}),
    rule("REVIEW_SCORE", "review", probability_high={"lt": 0.25}, score={"gt": 60}),
    rule("APPROVE", "approve"),
]
SCORE = ScoreConfig(base_probability=0.1, points_to_double_odds=10)


def values(p: list[float], low: list[float], high: list[float], score: list[int]) -> dict[str, np.ndarray]:
    return {
        "probability": np.array(p),
        "probability_low": np.array(low),
        "probability_high": np.array(high),
        "score": np.array(score),
    }


def test_each_row_gets_the_one_rule_it_matches_and_otherwise_takes_the_rest() -> None:
    v = values(
        p=[0.30, 0.20, 0.19, 0.10, 0.19],
        low=[0.26, 0.15, 0.10, 0.05, 0.10],
        high=[0.40, 0.25, 0.24, 0.15, 0.24],
        score=[75, 65, 61, 50, 60],
    )
    assert predict_rule_table_problems(RULES, SCORE) == []
    out = predict_rule_decisions(v, RULES)
    # Row 4 has score exactly 60, not > 60: no conditional rule takes it, so the last rule does.
    assert out.rule_id.tolist() == ["DECLINE", "REVIEW_STRADDLE", "REVIEW_SCORE", "APPROVE", "APPROVE"]
    assert out.decision.tolist() == ["decline", "review", "review", "approve", "approve"]
    # An interval straddles when it contains a probability cut-off (0.25): low < cut <= high.
    assert out.straddling.tolist() == [False, True, False, False, False]


def test_rows_decided_here_and_rows_read_back_give_the_same_columns_and_rows_needing_reasons() -> None:
    """Rows decided here take their strings from the rule table by position; rows read back (the hand-off
    files) carry them. Both give the decisions the rules' conditions give, evaluated here with numpy."""
    from tasks.prediction.decisions import RuleDecisions
    from tasks.prediction.outputs import _rule_columns

    rng = np.random.default_rng(7)
    p = rng.uniform(0, 1, 5_000)
    low, high = p * rng.uniform(0, 1, p.size), p + (1 - p) * rng.uniform(0, 1, p.size)
    score = rng.integers(0, 101, p.size)
    decided = predict_rule_decisions(values(p.tolist(), low.tolist(), high.tolist(), score.tolist()), RULES)
    ids = np.where(
        low >= 0.25,
        "DECLINE",
        np.where(high >= 0.25, "REVIEW_STRADDLE", np.where(score > 60, "REVIEW_SCORE", "APPROVE")),
    )
    decisions = np.array([{"DECLINE": "decline", "APPROVE": "approve"}.get(i, "review") for i in ids])
    assert len(set(ids)) == 4
    read_back = RuleDecisions(decided.decision, decided.rule_id, decided.straddling)
    for rules in (decided, read_back):
        assert rules.decision.tolist() == decisions.tolist() and rules.rule_id.tolist() == ids.tolist()
        decision, rule_id = _rule_columns(rules)
        assert decision.to_pylist() == decisions.tolist() and rule_id.to_pylist() == ids.tolist()
        assert decision.type == rule_id.type == pa.string()
        assert rules.rows_deciding(("review", "decline")).tolist() == np.flatnonzero(decisions != "approve").tolist()
        assert rules.rows_deciding(()).size == 0


def test_probability_cutoffs_are_the_probability_thresholds_only() -> None:
    assert predict_probability_cutoffs(RULES) == [0.25]


def test_rules_on_an_empty_chunk() -> None:
    out = predict_rule_decisions(values([], [], [], []), RULES)
    assert out.decision.size == 0 and out.rule_id.size == 0


def test_an_overlap_is_named_with_both_rules_and_a_row_that_matches_both() -> None:
    rules = [
        rule("DECLINE", "decline", probability={"ge": 0.3}),
        rule("REVIEW", "review", probability={"ge": 0.1}),
        rule("APPROVE", "approve", probability={"lt": 0.1}),
    ]
    (problem,) = predict_rule_table_problems(rules, SCORE)
    assert "DECLINE and REVIEW overlap" in problem
    p = float(problem.split("probability=")[1].split(",")[0])
    assert p >= 0.3


def test_a_gap_is_named_with_a_row_no_rule_covers() -> None:
    rules = [
        rule("DECLINE", "decline", probability={"ge": 0.3}),
        rule("APPROVE", "approve", probability={"lt": 0.1}),
    ]
    (problem,) = predict_rule_table_problems(rules, SCORE)
    assert "no rule covers" in problem
    p = float(problem.split("probability=")[1].split(",")[0])
    assert 0.1 <= p < 0.3


def test_a_gap_hidden_by_an_inclusive_bound_is_found() -> None:
    # p < 0.3 and p > 0.3 leave out exactly p == 0.3.
    rules = [rule("HIGH", "decline", probability={"gt": 0.3}), rule("LOW", "approve", probability={"lt": 0.3})]
    (problem,) = predict_rule_table_problems(rules, SCORE)
    assert "probability=0.3," in problem


def test_score_thresholds_are_checked_against_probability_thresholds() -> None:
    # The rounded score reaches 70 at p ≈ 0.3014 (base 10 %, 10 points per doubling of the odds).
    high = rule("HIGH", "decline", score={"ge": 70})
    (overlap,) = predict_rule_table_problems([high, rule("LOW", "approve", probability={"lt": 0.31})], SCORE)
    assert "HIGH and LOW overlap" in overlap
    (gap,) = predict_rule_table_problems([high, rule("LOW", "approve", probability={"lt": 0.30})], SCORE)
    assert "no rule covers" in gap and "score=69" in gap
    assert predict_rule_table_problems([high, rule("LOW", "approve", score={"lt": 70})], SCORE) == []


@pytest.mark.parametrize("seed", range(40))
def test_a_table_proven_exact_gives_every_random_row_exactly_one_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cuts = np.round(np.sort(rng.uniform(0.02, 0.6, 2)), 2)
    fields = ["probability", "probability_low", "probability_high"]
    f1, f2 = rng.choice(fields, 2)
    rules = [
        rule("A", "a", **{f1: {"ge": float(cuts[1])}}),
        rule("B", "b", **{f1: {"lt": float(cuts[1])}, f2: {"ge": float(cuts[0])}}),
        rule("C", "c", **{f1: {"lt": float(cuts[1])}, f2: {"lt": float(cuts[0])}}),
    ]
    if rng.random() < 0.5:
        rules[1] = rule("B", "b", **{f2: {"ge": float(cuts[0])}})  # may overlap A
    problems = predict_rule_table_problems(rules, SCORE)
    p = rng.uniform(0, 1, 20_000)
    low, high = p * rng.uniform(0, 1, p.size), p + (1 - p) * rng.uniform(0, 1, p.size)
    v = {"probability": p, "probability_low": low, "probability_high": high, "score": np.zeros(p.size)}
    hits = sum(predict_rule_decisions(v, [r, rule("Z", "z")]).rule_id.astype(str) != "Z" for r in rules)
    if problems:
        assert any("overlap" in x for x in problems) and (hits > 1).any()
    else:
        assert (hits == 1).all()


def _prediction_doc(rules: list[dict]) -> dict:
    spec = yaml.safe_load((PROJECT_ROOT / "jobs" / "credit_risk.yaml").read_text())
    return {**spec["prediction"], "rules": rules}


@pytest.mark.parametrize(
    "rules",
    [
        pytest.param(
            [
                {"id": "APPROVE", "decision": "approve"},
                {"id": "DECLINE", "decision": "decline", "when": {"probability": {"ge": 0.3}}},
                {"id": "REVIEW", "decision": "manual_review", "when": {"probability": {"ge": 0.1, "lt": 0.3}}},
            ],
            id="catch-all-first",
        ),
        pytest.param(
            [
                {"id": "DECLINE", "decision": "decline", "when": {"probability": {"ge": 0.3}}},
                {"id": "REVIEW", "decision": "manual_review", "when": {"probability": {"ge": 0.1}}},
            ],
            id="overlap-and-gap",
        ),
        pytest.param(
            [
                {"id": "DECLINE", "decision": "decline", "when": {"probability": {"ge": 0.3}}},
                {"id": "REVIEW", "decision": "manual_review"},
                {"id": "APPROVE", "decision": "approve"},
            ],
            id="two-catch-alls",
        ),
    ],
)
def test_a_rule_table_that_is_not_exact_is_refused_naming_the_rules(tmp_path: Path, rules: list[dict]) -> None:
    with pytest.raises(ValidationError, match="rules"):
        PredictionConfig.model_validate(_prediction_doc(rules))
    # Through the job spec loader, the error names the file and the rules.
    spec = yaml.safe_load((PROJECT_ROOT / "jobs" / "credit_risk.yaml").read_text())
    spec["prediction"]["rules"] = rules
    (tmp_path / "credit_risk.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(JobSpecError, match="rules") as err:
        load_job_spec("credit_risk", Settings(jobs_dir=tmp_path))
    assert "credit_risk.yaml" in str(err.value)


def test_rule_ids_must_be_unique() -> None:
    rules = [
        {"id": "REVIEW", "decision": "manual_review", "when": {"probability": {"ge": 0.1}}},
        {"id": "REVIEW", "decision": "decline", "when": {"probability": {"ge": 0.3}}},
        {"id": "APPROVE", "decision": "approve"},
    ]
    with pytest.raises(ValidationError, match="REVIEW"):
        PredictionConfig.model_validate(_prediction_doc(rules))


def test_the_job_spec_is_valid() -> None:
    spec = load_job_spec("credit_risk", Settings())
    assert predict_rule_table_problems(spec.prediction.rules, spec.prediction.score) == []
    assert [r.id for r in spec.prediction.rules] == [
        "DECLINE_HIGH_RISK",
        "REVIEW_UNCERTAIN",
        "REVIEW_ELEVATED",
        "APPROVE",
    ]


# --- reasons ----------------------------------------------------------------------------------

NAMES = ("income", "dti", "util", "age")
REASONS = ReasonConfig(
    top_k=2,
    for_decisions=["decline"],
    no_reason_code="R00",
    no_reason_text="nothing adverse",
    codes={n: {"code": f"C_{n}", "text": f"{n} text"} for n in NAMES},
)


def contributions(rows: list[list[float]]) -> FeatureContributions:
    values = np.array(rows, dtype=np.float64).reshape(len(rows), len(NAMES))
    return FeatureContributions(row_index=np.arange(len(rows)), values=values, feature_names=NAMES)


def test_reasons_are_the_top_k_positive_contributions_largest_first() -> None:
    out = predict_reason_codes(
        contributions(
            [
                [0.1, 0.5, -0.2, 0.3],  # dti, age
                [-0.1, 0.0, 0.4, -0.3],  # only util is positive: one code, not padded
                [0.2, -0.5, 0.9, 0.25],  # util, age
            ]
        ),
        REASONS,
    )
    assert out.codes.to_pylist() == [["C_dti", "C_age"], ["C_util"], ["C_util", "C_age"]]
    assert out.texts.to_pylist()[0] == ["dti text", "age text"]
    assert out.without_pushing_factor == 0


def test_reason_ties_break_on_feature_order() -> None:
    out = predict_reason_codes(contributions([[0.3, 0.1, 0.3, 0.3], [0.0, 0.2, 0.2, 0.1]]), REASONS)
    assert out.codes.to_pylist() == [["C_income", "C_util"], ["C_dti", "C_util"]]


def test_a_row_without_positive_contribution_gets_the_no_reason_code_and_is_counted() -> None:
    out = predict_reason_codes(
        contributions([[-0.1, 0.0, -0.2, -0.3], [0.1, -0.1, -0.1, -0.1], [0.0, 0.0, 0.0, 0.0]]), REASONS
    )
    assert out.codes.to_pylist() == [["R00"], ["C_income"], ["R00"]]
    assert out.texts.to_pylist()[0] == ["nothing adverse"]
    assert out.without_pushing_factor == 2


def test_reason_table_must_cover_every_model_feature() -> None:
    partial = ReasonConfig(**{**REASONS.model_dump(), "codes": {n: {"code": "X", "text": "x"} for n in NAMES[:3]}})
    with pytest.raises(ValueError, match="age"):
        predict_reason_codes(contributions([[0.1, 0.1, 0.1, 0.1]]), partial)


# --- a whole chunk: margins in, contract rows out ---------------------------------------------


def test_a_chunk_of_margins_becomes_contract_rows(calibrator: BinnedBetaCalibrator) -> None:
    config = PredictionConfig.model_validate(
        {
            "event": "default",
            "score": {"base_probability": 0.1, "points_to_double_odds": 10},
            "rules": [
                {"id": "DECLINE", "decision": "decline", "when": {"probability": {"ge": 0.3}}},
                {"id": "APPROVE", "decision": "approve"},
            ],
            "reasons": REASONS.model_dump(),
        }
    )
    margins = np.array([-4.0, 0.5, -1.0, 2.0])
    output = InferenceOutput(
        chunk_id=3,
        entity_ids=pa.array(["a", "b", "c", "d"]),
        margins=margins,
        model_name="m",
        model_version="7",
        device_type="cpu",
        latency_ms=1.0,
    )
    decided = predict_decided_chunk(output, ProbabilityMap(calibrator, 0.9), config)
    declined = np.flatnonzero(decided.calibrated.probability >= 0.3)
    assert decided.reason_rows.tolist() == declined.tolist() and declined.size >= 1
    contrib = FeatureContributions(
        row_index=decided.reason_rows, values=np.tile([0.0, 0.4, 0.1, -0.2], (declined.size, 1)), feature_names=NAMES
    )
    out = predict_output(
        decided, contrib, config, run_id="r1", job="j", partition_date=dt.date(2026, 1, 2), feature_version="1.0.0"
    )
    rows = out.table.to_pylist()
    assert [r["entity_id"] for r in rows] == ["a", "b", "c", "d"]
    for i, r in enumerate(rows):
        if i in declined:
            assert r["decision"] == "decline" and r["reason_codes"] == ["C_dti", "C_util"]
        else:
            assert r["decision"] == "approve" and r["reason_codes"] == [] and r["reason_texts"] == []
        assert r["raw_margin"] == margins[i]
    assert out.decisions == {"decline": declined.size, "approve": 4 - declined.size}
    assert out.rows_needing_reasons == declined.size
    with pytest.raises(ValueError, match="other rows"):
        wrong = FeatureContributions(row_index=np.array([0]), values=np.zeros((1, 4)), feature_names=NAMES)
        predict_output(
            decided, wrong, config, run_id="r1", job="j", partition_date=dt.date(2026, 1, 2), feature_version="1"
        )


def test_prediction_modules_do_not_load_an_ml_runtime() -> None:
    # This process imported tasks.prediction above; the runtime may be imported by other test
    # modules in the same session, so check in a fresh interpreter.
    code = (
        "import sys, tasks.prediction.outputs, tasks.prediction.calibration;"
        "bad = sorted(m for m in ('xgboost', 'onnxruntime', 'torch', 'tasks.inference') if m in sys.modules);"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
