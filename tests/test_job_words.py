"""The job's own words, on a job that is not about credit: a propensity job (who buys a product within 30 days) in a
user's own project, driven through the `score` command — `init`, `features`, an XGBoost model trained here,
`register`, one `backfill` over two days, `outcomes`, `card`. Everything a person reads of it (the run pages, the
monitoring page, the model card, every artifact the runs left in Prefect, the alerts, the run log and the command's
output) says nothing of risk, adverse outcomes or declines, and says the job's own words where it shows the score,
the decisions and the features. The credit job keeps its own words ("risk score", "decline")."""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from conftest import key_numbers_table, user_project_env
from user_projects import day_output, score_cli

JOB = "propensity"
TRAIN, HOLDOUT = dt.date(2026, 6, 1), dt.date(2026, 6, 2)
SCORED = [dt.date(2026, 6, 3), dt.date(2026, 6, 4)]
CREDIT_WORDS = re.compile(r"\b(risk\w*|advers\w*|declin\w*)", re.IGNORECASE)
SCORE_NAME, HIGHER = "propensity score", "more likely to buy"
CONTACT, NO_CONTACT = "contact the customer", "leave the customer be"
FEATURE_LABELS = {
    "visits_30d": "Visits in the last 30 days",
    "basket_value": "Average basket",
    "email_opens": "Emails opened",
    "tenure_months": "Months as a customer",
}
PREDICTION = {
    "event": "buys the product within 30 days",
    "interval_level": 0.9,
    "score": {"name": SCORE_NAME, "higher": HIGHER, "base_probability": 0.3, "points_to_double_odds": 10},
    "rules": [
        {
            "id": "CONTACT",
            "description": "Likely enough to buy that a call pays.",
            "when": {"probability": {"ge": 0.4}},
            "decision": "contact",
        },
        {
            "id": "NO_CONTACT",
            "description": "Not worth a call.",
            "when": {"probability": {"lt": 0.4}},
            "decision": "no_contact",
        },
    ],
    "decisions": {"contact": {"label": CONTACT, "action": True}, "no_contact": {"label": NO_CONTACT}},
    "reasons": {
        "top_k": 2,
        "for_decisions": ["contact"],
        "no_reason_code": "P00",
        "no_reason_text": "No single factor made buying more likely.",
        "codes": {
            feature: {"code": f"P0{i + 1}", "text": f"{label} is high", "label": label}
            for i, (feature, label) in enumerate(FEATURE_LABELS.items())
        },
    },
}


def shopper_rows(day: dt.date, rows: int, seed: int) -> pl.DataFrame:
    """One day of customers and whether each bought (a logistic in visits, basket, email opens and tenure)."""
    rng = np.random.default_rng(seed)
    visits, basket, opens, tenure = (
        rng.poisson(3, rows),
        rng.gamma(2.0, 30.0, rows).round(2),
        rng.poisson(1.5, rows),
        rng.integers(1, 120, rows),
    )
    logit = -2.4 + 0.35 * visits + 0.012 * basket + 0.3 * opens - 0.006 * tenure
    return pl.DataFrame(
        {
            "customer_id": [f"C-{day:%m%d}-{i:05d}" for i in range(rows)],
            "visits_30d": visits,
            "basket_value": basket,
            "email_opens": opens,
            "tenure_months": tenure,
            "bought": (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.int8),
        }
    )


def _text(page: str) -> str:
    """A page's words as a reader sees them: tags, inline plots and images out, entities decoded."""
    page = re.sub(r"<svg.*?</svg>|<style.*?</style>|data:image/png;base64,[A-Za-z0-9+/=]+", " ", page, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


@pytest.fixture(scope="module")
def shop(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> dict:
    import xgboost as xgb
    from prefect.settings import PREFECT_API_URL

    root = tmp_path_factory.mktemp("propensity")
    # The test's own Prefect API: every command's runs and artifacts land where the test can read them back.
    env = {**user_project_env(root), "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    score = score_cli(root, env)
    shopper_rows(TRAIN, 3_000, 1).write_parquet(root / "train.parquet")
    shopper_rows(HOLDOUT, 3_000, 2).write_parquet(root / "holdout.parquet")
    for i, day in enumerate(SCORED):
        frame = shopper_rows(day, 2_000, 3 + i)
        for folder, part in (
            ("raw", frame.drop("bought")),
            ("labels", frame.select("customer_id", "bought", observed_date=pl.lit(day + dt.timedelta(days=30)))),
        ):
            target = root / "data" / folder / JOB / f"date={day}"
            target.mkdir(parents=True)
            part.write_parquet(target / "part-0.parquet")
    said = [
        score(
            "init",
            JOB,
            "--from",
            str(root / "train.parquet"),
            "--entity-column",
            "customer_id",
            "--label-column",
            "bought",
        )
    ]
    spec_path = root / "jobs" / f"{JOB}.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    spec["description"] = "Who buys the product within 30 days, for the call list."
    spec["prediction"] = PREDICTION
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    said.append(score("features", JOB, "--from", str(root / "train.parquet"), "--out", str(root / "inputs.parquet")))
    inputs = pl.read_parquet(root / "inputs.parquet")
    names = [c for c in inputs.columns if c not in ("customer_id", "outcome")]
    booster = xgb.train(
        {"objective": "binary:logistic", "max_depth": 3, "eta": 0.3, "seed": 1},
        xgb.DMatrix(inputs.select(names).to_numpy(), label=inputs["outcome"].to_numpy(), feature_names=names),
        30,
    )
    booster.save_model(str(root / "propensity.ubj"))
    said.append(
        score("register", JOB, "--model", str(root / "propensity.ubj"), "--holdout", str(root / "holdout.parquet"))
    )
    said.append(score("backfill", JOB, "--start", SCORED[0].isoformat(), "--end", SCORED[-1].isoformat()))
    said.append(score("outcomes", JOB, "--start", SCORED[0].isoformat(), "--end", SCORED[-1].isoformat()))
    said.append(score("card", JOB))
    return {"root": root, "output": "\n".join(d.stdout + d.stderr for d in said)}


def _artifacts(root: Path) -> list[dict]:
    """Every artifact the job's runs left in Prefect: those of its scoring runs (their flow runs are the ledger's run
    ids) and those keyed by its name (the outcomes run's)."""
    import duckdb
    from prefect.client.orchestration import get_client

    with duckdb.connect(str(root / "data" / "warehouse.duckdb"), read_only=True) as con:
        run_ids = {r[0] for r in con.sql("SELECT run_id FROM runs WHERE job = ?", params=[JOB]).fetchall()}
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    # Filtered by the server: the suite's shared API holds every other test's artifacts too, more than one page of them.
    with get_client(sync_client=True) as client:
        stored = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=sorted(run_ids)))
        )
        stored += client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_=f"%-{JOB}")))
    mine = list(
        {a.id: a for a in stored if str(a.flow_run_id) in run_ids or (a.key or "").endswith(f"-{JOB}")}.values()
    )
    return [{"key": a.key, "description": a.description, "data": a.data} for a in mine]


def test_nothing_a_reader_sees_of_a_propensity_job_speaks_of_risk_or_declines(shop: dict) -> None:
    root = shop["root"]
    html_dir = root / "data" / "output" / JOB / "reports" / "html"
    artifacts = _artifacts(root)
    keys = {a["key"] for a in artifacts}
    assert {
        f"{k}-{JOB}"
        for k in (
            "key-numbers",
            "run-summary",
            "run-report",
            "drift-report",
            "fallback-report",
            "model-health",
            "decision-monitoring",
            "realized-performance",
            "monitoring-report",
            "model-card",
        )
    } <= keys, keys
    logs = list((root / "data" / "output" / "logs").glob("*.log"))
    read = {
        **{f"run page {d}": _text((html_dir / f"date={d}.html").read_text()) for d in SCORED},
        "monitoring page": _text((html_dir / "monitoring.html").read_text()),
        "model card": (root / "data" / "output" / JOB / "model_card.md").read_text(),
        "model card page": _text((root / "data" / "output" / JOB / "model_card.html").read_text()),
        **{f"artifact {a['key']}": f"{a['description']} {json.dumps(a['data'])}" for a in artifacts},
        "run logs": "\n".join(p.read_text() for p in logs),
        "command output": shop["output"],
    }
    assert logs and "[PRED]" in read["run logs"]
    for where, text in read.items():
        assert not CREDIT_WORDS.search(text), (
            where,
            CREDIT_WORDS.findall(text),
            text[max(0, CREDIT_WORDS.search(text).start() - 200) :][:400],
        )


def test_the_pages_card_and_artifacts_say_the_jobs_score_decisions_and_features(shop: dict) -> None:
    root = shop["root"]
    html_dir = root / "data" / "output" / JOB / "reports" / "html"
    day = SCORED[-1]
    published = day_output(root, "predictions", day, job=JOB)
    counts = dict(published["decision"].value_counts().iter_rows())
    assert set(counts) == {"contact", "no_contact"}, counts

    page = _text((html_dir / f"date={day}.html").read_text())
    assert f"event: {PREDICTION['event']} · {SCORE_NAME}, higher: {HIGHER}" in page
    # The ledger summary names the decisions as the spec does, with the rows polars counts in the published partition.
    assert f"{CONTACT}: {counts['contact']:,}" in page and f"{NO_CONTACT}: {counts['no_contact']:,}" in page
    assert "rows_without_reason" in page and "rows_without_adverse_reason" not in page
    for feature, label in FEATURE_LABELS.items():
        assert f"{label} ({feature})" in page, feature

    monitoring = _text((html_dir / "monitoring.html").read_text())
    assert f"Actions against outcomes: {CONTACT}" in monitoring and f"{SCORE_NAME}, higher: {HIGHER}" in monitoring
    assert "any action" in monitoring and PREDICTION["event"] in monitoring

    card = (root / "data" / "output" / JOB / "model_card.md").read_text()
    assert (
        f"Score: **{SCORE_NAME}**, higher: {HIGHER}" in card
        and f"| {SCORE_NAME[:1].upper()}{SCORE_NAME[1:]} from the probability; higher: {HIGHER}. |" in card
    )
    assert f"CONTACT → {CONTACT} (Likely enough to buy that a call pays.)" in card
    for i, (feature, label) in enumerate(FEATURE_LABELS.items()):
        assert f"| {label} (`{feature}`) | P0{i + 1} | {label} is high |" in card

    numbers = next(
        a for a in _artifacts(root) if a["key"] == f"key-numbers-{JOB}" and day.isoformat() in a["description"]
    )
    table = key_numbers_table(numbers["data"])
    for decision, label in (("contact", CONTACT), ("no_contact", NO_CONTACT)):
        assert table[f"decision {label}"] == f"{counts[decision]:,} ({counts[decision] / published.height:.1%})"

    # The [PRED] lines give each chunk's mean score under the job's name for it.
    logs = "\n".join(p.read_text() for p in (root / "data" / "output" / "logs").glob("*.log"))
    means = [float(m) for m in re.findall(r"\[PRED\] entity=propensity .*? propensity_score_mean=([0-9.]+)", logs)]
    assert means and min(means) >= published["score"].min() and max(means) <= published["score"].max()


def test_the_alerts_of_a_propensity_run_name_its_features_decisions_and_score(shop: dict) -> None:
    from tasks.jobspec import load_job_spec
    from tasks.monitoring.alerts import published_run_alerts
    from tasks.settings import Settings

    root = shop["root"]
    settings = Settings(data_dir=root / "data", jobs_dir=root / "jobs", expectations_dir=root / "expectations")
    drift = day_output(root, "reports/drift", SCORED[-1], job=JOB).to_dicts()
    alerts = published_run_alerts(
        JOB,
        SCORED[-1].isoformat(),
        drift_rows=[{**r, "flag": "alert"} for r in drift],
        monitoring={"shifted": ["decision_share:contact", "score_mean:all"], "shifted_slices": []},
        run_link=None,
        page="page.html",
        words=load_job_spec(JOB, settings).words,
    )
    text = "\n".join(f"{a.subject}\n{a.body}" for a in alerts)
    assert [a.event for a in alerts] == ["drift_alert", "decision_shift"] and not CREDIT_WORDS.search(text), text
    assert f"decision_share:contact ({CONTACT})" in text and f"score_mean:all (mean {SCORE_NAME})" in text
    assert all(f"- {label} ({feature}) against reference" in text for feature, label in FEATURE_LABELS.items()), text


def test_the_credit_job_keeps_its_own_words() -> None:
    from tasks.jobspec import load_job_spec
    from tasks.reports.html_report import run_report_html
    from tasks.runs.key_numbers import key_numbers
    from tasks.scoring.summary import ScoringSummary
    from tasks.settings import PROJECT_ROOT, Settings

    words = load_job_spec("credit_risk", Settings(jobs_dir=PROJECT_ROOT / "jobs")).words
    decisions = {"approve": 80, "manual_review": 15, "decline": 5}
    page = _text(
        run_report_html(
            job="credit_risk",
            partition_date="2026-03-10",
            run_id="r1",
            summary={"rows_read": 100, "decisions": decisions},
            fallback_rows=[],
            drift_rows=[],
            histograms={},
            words=words,
        )
    )
    assert "risk score, higher: riskier" in page and "decline: 5" in page and "manual review: 15" in page
    table = {
        r["measure"]: r["value"]
        for r in key_numbers(ScoringSummary(rows_read=100, rows_scored=100, decisions=decisions), words)
    }
    assert table["decision decline"] == "5 (5.0%)" and table["decision manual review"] == "15 (15.0%)"


def test_the_old_fallback_kind_name_still_limits_rows_without_a_reason() -> None:
    from tasks.jobspec import Limits
    from tasks.quality.fallback_report import fallback_report_rows

    limits = Limits.model_validate({"max_fallback_share": {"no_adverse_reason": 0.01}}).max_fallback_share
    rows = fallback_report_rows(
        rows_read=100,
        guard_by_expectation={},
        guard_columns={},
        rows_repaired=0,
        rows_quarantined=0,
        rows_fallback=0,
        fallback_reason=None,
        rows_failed=0,
        rows_without_adverse_reason=5,
        rows_reasons_by_framework=0,
        reasons_kernel_reason=None,
        limits=dict(limits),
    )
    (row,) = [r for r in rows if r["kind"] == "no_reason"]
    assert row["limit"] == 0.01 and row["breached"] and not [r for r in rows if "adverse" in r["kind"]]
