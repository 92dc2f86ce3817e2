"""A forecast job's pages and artifacts speak its target: the run page, the key numbers, the monitoring page and the
model card of a real count job (`score init`, `score features`, an XGBoost count:poisson trained here, `score
register`, two partitions scored by the flow), their numbers checked against the published `forecasts` rows and
the label files recomputed with numpy, and no probability, score, risk or event words anywhere.

The estimated error (model health `estimated_error`) comes from the scoring pass and the realized error
(`outcome_errors`, `outcome_estimates`) from ingesting the label files, as in production; the pages' numbers are
checked against numpy on the published rows and the label files. The key numbers' estimated-MAE line and flag are
also checked on a `model_health` row written here, so its alert shows whatever the producer flags on these days.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from conftest import _SCORING_VARS, key_numbers_table, user_project_env
from user_projects import score_cli

from tasks.catalog import FORECASTS, MODEL_HEALTH
from tasks.monitoring.forecast_distribution import (
    BucketCounts,
    ForecastDistribution,
    display_histogram,
    forecast_run_summary,
)
from tasks.results import PartitionResult
from tasks.settings import Settings, current_settings

JOB = "sales"
DAYS = [dt.date(2026, 3, 1) + dt.timedelta(days=d) for d in range(7)]
TRAIN_DAYS, HOLDOUT_DAY, SCORED_DAYS = DAYS[:4], DAYS[4], DAYS[5:]
FEATURES = ["price", "promo", "temperature", "rain_mm"]
BINARY_WORDS = re.compile(r"\b(probabilit(y|ies)|scores?|risks?|risky|events?)\b", re.IGNORECASE)
"""A binary job's words, which no page of a forecast job may use (`scored`, `scoring` are the run's, not the target's)."""
LEVEL = 0.9
RULE_CUT = 9.0


def sales_rows(day: dt.date, n: int, seed: int) -> pl.DataFrame:
    """Daily unit sales per item: price, promotion, temperature and rain drive a Poisson mean."""
    rng = np.random.default_rng(seed)
    price = rng.uniform(1, 10, n).round(2)
    promo = (rng.random(n) < 0.2).astype(np.int8)
    temp = rng.normal(15, 8, n).round(1)
    rain = np.where(rng.random(n) < 0.3, rng.exponential(5, n), 0).round(1)
    mu = np.exp(1.5 + 0.8 * promo - 0.15 * price + 0.02 * temp - 0.04 * rain + 0.2 * (day.weekday() >= 5))
    return pl.DataFrame(
        {
            "item_id": [f"IT-{day:%m%d}-{i:05d}" for i in range(n)],
            "price": price,
            "promo": promo,
            "temperature": temp,
            "rain_mm": rain,
            "units": rng.poisson(mu),
        }
    )


@dataclass(frozen=True)
class SalesJob:
    root: Path
    settings: Settings
    results: dict[dt.date, PartitionResult]

    def forecasts(self, day: dt.date) -> pl.DataFrame:
        return pl.read_parquet(self.root / "data" / "output" / JOB / "forecasts" / f"date={day}" / "*.parquet")

    def actuals(self, day: dt.date) -> pl.DataFrame:
        return pl.read_parquet(self.root / "data" / "labels" / JOB / f"date={day}" / "*.parquet")

    def page(self, day: dt.date) -> str:
        return (self.root / "data" / "output" / JOB / "reports" / "html" / f"date={day}.html").read_text()


@pytest.fixture(scope="module")
def sales(tmp_path_factory: pytest.TempPathFactory, prefect_harness: None) -> Iterator[SalesJob]:  # noqa: ARG001
    """A user's count job scored on two days by the flow, in this process, under the session's Prefect harness."""
    import xgboost as xgb

    from flows.score_partition import score_partition

    root = tmp_path_factory.mktemp("sales")
    env = user_project_env(root)
    score = score_cli(root, env)
    frames = {
        day: sales_rows(day, 3000 if day in SCORED_DAYS or day == HOLDOUT_DAY else 2000, seed=i)
        for i, day in enumerate(DAYS)
    }
    pl.concat([frames[d] for d in TRAIN_DAYS]).write_parquet(root / "train.parquet")
    frames[HOLDOUT_DAY].write_parquet(root / "holdout.parquet")
    for day in SCORED_DAYS:
        (root / "data" / "raw" / JOB / f"date={day}").mkdir(parents=True)
        frames[day].drop("units").write_parquet(root / "data" / "raw" / JOB / f"date={day}" / "part-0.parquet")
        (root / "data" / "labels" / JOB / f"date={day}").mkdir(parents=True)
        frames[day].select("item_id", "units", pl.lit(day + dt.timedelta(days=1)).alias("observed_date")).write_parquet(
            root / "data" / "labels" / JOB / f"date={day}" / "part-0.parquet"
        )
    score("init", JOB, "--from", str(root / "train.parquet"), "--entity-column", "item_id")
    spec_file = root / "jobs" / f"{JOB}.yaml"
    spec = yaml.safe_load(spec_file.read_text())
    spec["description"] = "Daily unit sales per item, forecast each night to plan the next day's stock."
    spec["features"]["columns"] = [c for c in spec["features"]["columns"] if c["name"] != "units"]
    spec["target"] = {"kind": "count", "name": "units sold", "unit": "units"}
    spec["prediction"] = {
        "interval_level": LEVEL,
        "rules": [
            {"id": "ADD_STOCK", "when": {"forecast_high": {"ge": RULE_CUT}}, "decision": "add_stock"},
            {"id": "KEEP", "decision": "keep"},
        ],
        "reasons": {
            "top_k": 2,
            "for_decisions": ["add_stock"],
            "codes": {
                "price": {"code": "PRICE", "text": "Price"},
                "promo": {"code": "PROMO", "text": "Promotion"},
                "temperature": {"code": "TEMP", "text": "Temperature"},
                "rain_mm": {"code": "RAIN", "text": "Rain"},
            },
        },
    }
    spec["monitoring"]["labels"]["outcome_column"] = "units"
    spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    suite_file = root / "expectations" / f"{JOB}.json"
    suite = json.loads(suite_file.read_text())
    suite["expectations"] = [e for e in suite["expectations"] if e.get("kwargs", {}).get("column") != "units"]
    suite_file.write_text(json.dumps(suite, indent=1))
    score("features", JOB, "--from", str(root / "train.parquet"), "--out", str(root / "inputs.parquet"))
    inputs = pl.read_parquet(root / "inputs.parquet")
    model = xgb.XGBRegressor(objective="count:poisson", n_estimators=60, max_depth=3, learning_rate=0.1, n_jobs=2)
    model.fit(inputs.select(FEATURES).to_numpy(), inputs["outcome"].to_numpy())
    model.save_model(root / "count.ubj")
    score("register", JOB, "--model", str(root / "count.ubj"), "--holdout", str(root / "holdout.parquet"))
    # A shallow challenger that shadows version 1 and flips some of its decisions.
    spec["model"]["version"] = "1"
    spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    challenger = xgb.XGBRegressor(objective="count:poisson", n_estimators=12, max_depth=2, learning_rate=0.2, n_jobs=2)
    challenger.fit(inputs.select(FEATURES).to_numpy(), inputs["outcome"].to_numpy())
    challenger.save_model(root / "challenger.ubj")
    score("register", JOB, "--model", str(root / "challenger.ubj"), "--holdout", str(root / "holdout.parquet"))
    spec["model"]["challenger"] = "2"
    spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.MonkeyPatch.context() as mp:
        for name in _SCORING_VARS:
            mp.delenv(name, raising=False)
        for name in ("SCORING_DATA_DIR", "SCORING_JOBS_DIR", "SCORING_EXPECTATIONS_DIR"):
            mp.setenv(name, env[name])
        settings = current_settings()
        assert settings.data_dir == root / "data"
        yield SalesJob(root, settings, {day: score_partition(JOB, day) for day in SCORED_DAYS})


def visible_text(page: str) -> str:
    """What a reader sees and hovers: the page without its style and its images' bytes, tags dropped, entities read."""
    page = re.sub(r"<style>.*?</style>", " ", page, flags=re.S)
    page = re.sub(r'src="data:[^"]*"', " ", page)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def number(text: str) -> float:
    return float(text.replace(",", "").split()[0])


def table_cells(page: str, heading: str) -> list[list[str]]:
    """The body cells of the first table after the <h2> `heading`."""
    section = page.split(f"<h2>{heading}</h2>", 1)[1]
    body = section.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [
        [
            html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
            for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, flags=re.S)
        ]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, flags=re.S)
    ]


def bar_counts(page: str, name: str) -> list[tuple[str, int]]:
    """The rows each bar of a histogram's SVG says it holds, as (range text, rows), underflow bar first."""
    svg = re.search(rf'<svg [^>]*data-histogram="{name}".*?</svg>', page, flags=re.S).group(0)
    return [
        (html.unescape(text), int(rows.replace(",", "")))
        for text, rows in re.findall(r"<rect [^>]*><title>(.*?): ([\d,]+) rows", svg)
    ]


def edges_of(bars: list[tuple[str, int]]) -> np.ndarray:
    """The bin edges the bars' ranges name: `below E0`, `E0 to E1 units`, …, `En units and above`."""
    return np.array([number(text.split(" to ")[0]) for text, _ in bars[1:]])


def test_the_run_page_shows_the_forecast_and_its_interval_in_the_targets_unit_against_the_published_rows(
    sales: SalesJob,
) -> None:
    day = SCORED_DAYS[0]
    page, published = sales.page(day), sales.forecasts(day)
    text = visible_text(page)
    assert f"Forecast run {JOB} {day}" in text and "forecast of units sold (units; count) , interval 90%" in text
    assert not BINARY_WORDS.findall(text), BINARY_WORDS.findall(text)
    assert 'data-feature="score"' not in page

    forecast = published["forecast"].to_numpy()
    width = (published["forecast_high"] - published["forecast_low"]).to_numpy()
    for name, values in (("forecast", forecast), ("interval_width", width)):
        bars = bar_counts(page, name)
        edges = edges_of(bars)
        assert len(bars) == len(edges) + 1 and all(t.endswith(("units", "units and above")) for t, _ in bars[1:])
        expected = np.bincount(np.searchsorted(edges, values, side="right"), minlength=len(edges) + 1)
        assert [rows for _, rows in bars] == expected.tolist()
        # The page's bins span the middle 99% of the rows: few in the open-ended ones, none lost.
        assert (expected[0] + expected[-1]) / values.size <= 0.011

    measures = dict(table_cells(page, "Forecast: units sold (units; count)"))
    assert number(measures["rows forecast"]) == published.height == sales.results[day].rows_scored
    for label, values in (
        ("mean forecast", forecast),
        ("mean interval width", width),
        ("mean expected error |actual − forecast|", published["expected_error"].to_numpy()),
    ):
        assert measures[label].endswith(" units") and number(measures[label]) == pytest.approx(values.mean(), rel=5e-4)
    low, high = (number(x) for x in measures["mean interval (90%)"].split(" to "))
    assert low == pytest.approx(published["forecast_low"].mean(), rel=5e-4) and high == pytest.approx(
        published["forecast_high"].mean(), rel=5e-4
    )
    for p in (5, 50, 95):
        bucket_low, bucket_high = (number(x) for x in measures[f"forecast p{p:02d}"].split(" to "))
        assert bucket_low <= np.quantile(forecast, p / 100, method="inverted_cdf") < bucket_high

    rules = {row[0]: row for row in table_cells(page, "Decisions and rules")}
    assert rules["ADD_STOCK"][1] == f"forecast_high ≥ {RULE_CUT:g}" and rules["KEEP"][1] == "always"
    for rule, decision in (("ADD_STOCK", "add_stock"), ("KEEP", "keep")):
        rows = int((published["rule_id"] == rule).sum())
        assert rows > 0 and rules[rule][2] == decision and number(rules[rule][3]) == rows
        assert (published.filter(pl.col("rule_id") == rule)["decision"] == decision).all()

    codes = published.select(pl.col("reason_codes").explode()).drop_nulls()["reason_codes"].value_counts()
    shown = {row[0]: row for row in table_cells(page, "Reasons given")}
    assert (
        set(shown) == set(codes["reason_codes"].to_list())
        and any(c.endswith("_DOWN") for c in shown)
        and any(c.endswith("_UP") for c in shown)
    )
    for code, rows in codes.iter_rows():
        base, direction = code.rsplit("_", 1)
        text = {"PRICE": "Price", "PROMO": "Promotion", "TEMP": "Temperature", "RAIN": "Rain"}[base]
        assert (
            shown[code][1] == f"{text} {'raised' if direction == 'UP' else 'lowered'} the forecast"
            and number(shown[code][2]) == rows
        )
    with_reasons = int((published["reason_codes"].list.len() > 0).sum())
    assert with_reasons == sales.results[day].rows_with_reasons == int((published["decision"] == "add_stock").sum())

    for heading in ("Fallback report", "Drift", "Feature histograms (most drifted first)"):
        assert f"<h2>{heading}</h2>" in page
    # The forecast drifts against the hold-out's forecasts beside the inputs against the training reference.
    assert all(f'data-feature="{f}"' in page for f in (*FEATURES, "forecast"))

    estimated = {row[0]: row for row in table_cells(page, "Model health before actuals")}
    for r in published_health(sales, day).filter(pl.col("section") == "estimated_error").iter_rows(named=True):
        row = estimated[r["measure"]]
        for cell, value in zip(row[2:6], (r["value"], r["low"], r["high"], r["reference"]), strict=True):
            assert number(cell) == pytest.approx(value, rel=5e-4)
        assert row[6] == (r["flag"] or "—") and number(row[7]) == published.height
    assert set(estimated) == {"mae", "rmse"}

    flips = sales.root / "data" / "output" / JOB / "reports" / "decision_flips" / f"date={day}"
    flipped = pl.read_parquet(flips / "*.parquet").height
    assert "<h2>Champion and challenger</h2>" in page and f"would flip <b>{flipped}</b> decisions" in page
    assert "Forecast delta (challenger − champion)" in visible_text(page) and flipped > 0


def published_health(sales: SalesJob, day: dt.date) -> pl.DataFrame:
    return pl.read_parquet(
        sales.root / "data" / "output" / JOB / "reports" / "model_health" / f"date={day}" / "*.parquet"
    )


def _estimated_error_row(sales: SalesJob, day: dt.date, *, mae: float, low: float, high: float, flag: str) -> dict:
    """A `model_health` row of the shape the estimated-error producer writes (section estimated_error, measure mae)."""
    meta = json.loads((sales.root / "data" / "models" / JOB / "1" / "metadata.json").read_text())
    return {
        "run_id": sales.results[day].run_id,
        "job": JOB,
        "partition_date": day,
        "model_version": "1",
        "section": "estimated_error",
        "measure": "mae",
        "item": "all",
        "value": mae,
        "low": low,
        "high": high,
        "reference": meta["interval"]["check"]["mae"],
        "delta": mae - meta["interval"]["check"]["mae"],
        "flag": flag,
        "rows": sales.results[day].rows_scored,
    }


def test_the_key_numbers_give_the_mean_forecast_interval_width_decisions_and_the_estimated_mae(sales: SalesJob) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from tasks.reports.forecast_report import forecast_run_report_html
    from tasks.runs.key_numbers import key_numbers
    from tasks.scoring.summary import ScoringSummary

    day = SCORED_DAYS[-1]
    published = sales.forecasts(day)
    with get_client(sync_client=True) as client:
        (latest,) = client.read_latest_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[f"key-numbers-{JOB}"]))
        )
    table = key_numbers_table(latest.data)
    width = (published["forecast_high"] - published["forecast_low"]).to_numpy()
    assert number(table["mean forecast (units sold)"]) == pytest.approx(published["forecast"].mean(), rel=5e-4)
    assert table["mean forecast (units sold)"].endswith(" units")
    assert number(table["mean interval width (90%)"]) == pytest.approx(width.mean(), rel=5e-4)
    assert number(table["rows forecast"]) == published.height
    for decision in ("add_stock", "keep"):
        rows = int((published["decision"] == decision).sum())
        # By its plain name: the spec gives none, so the decision's own with spaces for underscores.
        assert table[f"decision {decision.replace('_', ' ')}"] == f"{rows:,} ({rows / published.height:.1%})"
    assert not BINARY_WORDS.findall(json.dumps(table)) and "rows scored" not in table
    for r in published_health(sales, day).filter(pl.col("section") == "estimated_error").iter_rows(named=True):
        assert table[f"estimated {r['measure'].upper()}"].startswith(
            f"{r['value']:,.4g} units ({r['low']:,.4g}–{r['high']:,.4g}"
        )

    # Model health's estimated MAE, once its producer writes it, joins the key numbers and the page with its interval and flag.
    distribution = ForecastDistribution()
    distribution.add(published.to_arrow().cast(FORECASTS.schema))
    summary = ScoringSummary(
        rows_read=published.height,
        rows_scored=published.height,
        decisions=dict(published["decision"].value_counts().iter_rows()),
    )
    summary.forecast_report = forecast_run_summary(
        distribution,
        target={"kind": "count", "name": "units sold", "unit": "units"},
        level=LEVEL,
        rules=[],
        rule_rows={},
        reason_texts={},
    )
    summary.model_health = [_estimated_error_row(sales, day, mae=1.75, low=1.62, high=1.91, flag="alert")]
    table = {r["measure"]: r["value"] for r in key_numbers(summary)}
    reference = summary.model_health[0]["reference"]
    assert table["estimated MAE"] == f"1.75 units (1.62–1.91, alert: above the hold-out's {reference:,.4g} units)"
    assert number(table["mean forecast (units sold)"]) == pytest.approx(published["forecast"].mean(), rel=5e-4)
    page = forecast_run_report_html(
        job=JOB,
        partition_date=day,
        run_id="r",
        summary=summary.ledger_counts(),
        forecast=summary.forecast_report,
        fallback_rows=[],
        drift_rows=[],
        histograms={},
        health_rows=summary.model_health,
    )
    (row,) = table_cells(page, "Model health before actuals")
    assert row[:6] == ["mae", "all", "1.75", "1.62", "1.91", f"{reference:.4g}"] and row[6] == "alert"
    assert not BINARY_WORDS.findall(visible_text(page))


def _realized(published: pl.DataFrame, actuals: pl.DataFrame) -> dict:
    """A partition's realized error, computed here with numpy from the published forecasts and the label file."""
    joined = published.join(
        actuals.select(pl.col("item_id").alias("entity_id"), pl.col("units").cast(pl.Float64)), on="entity_id"
    )
    actual, forecast = joined["units"].to_numpy(), joined["forecast"].to_numpy()
    error = actual - forecast
    nonzero = actual != 0
    return {
        "rows": published.height,
        "labelled": joined.height,
        "actual_mean": actual.mean(),
        "forecast_mean": forecast.mean(),
        "mae": np.abs(error).mean(),
        "rmse": np.sqrt((error**2).mean()),
        "bias": error.mean(),
        "mape": np.abs(error[nonzero] / actual[nonzero]).mean(),
        "smape": (2 * np.abs(error) / (np.abs(actual) + np.abs(forecast))).mean(),
        "coverage": (
            (actual >= joined["forecast_low"].to_numpy()) & (actual <= joined["forecast_high"].to_numpy())
        ).mean(),
    }


def test_the_monitoring_page_shows_forecasts_realized_error_and_estimated_mae_over_time(sales: SalesJob) -> None:
    from tasks.runs.monitoring import ingested_partition_outcomes, written_monitoring_page
    from tasks.sinks.warehouse_choice import warehouse_for

    warehouse = warehouse_for(sales.settings)
    for day in SCORED_DAYS:
        ingested_partition_outcomes(warehouse, sales.settings, JOB, day)
    realized = {day: _realized(sales.forecasts(day), sales.actuals(day)) for day in SCORED_DAYS}
    page_path, artifacts = written_monitoring_page(warehouse, sales.settings, JOB, SCORED_DAYS[0], SCORED_DAYS[-1])
    page = page_path.read_text()
    text = visible_text(page)
    assert (
        f"Forecast monitoring {JOB} {SCORED_DAYS[0]}..{SCORED_DAYS[-1]}" in text
        and "forecast of units sold (units; count)" in text
    )
    assert not BINARY_WORDS.findall(text), BINARY_WORDS.findall(text)
    for plot in ("decision-mix", "forecast-mean", "interval-width", "mae", "rmse", "bias", "coverage", "estimated-mae"):
        assert f'data-plot="{plot}"' in page

    means = {row[0]: row for row in table_cells(page, "Forecasts per partition")}
    for day in SCORED_DAYS:
        published = sales.forecasts(day)
        row = means[day.isoformat()]
        assert number(row[2]) == published.height
        for cell, values in (
            (row[3], published["forecast"]),
            (row[6], published["forecast_high"] - published["forecast_low"]),
            (row[7], published["expected_error"]),
        ):
            assert number(cell) == pytest.approx(values.mean(), rel=5e-4)
        shares = [f"{(published['decision'] == d).mean():.2%}" for d in ("add_stock", "keep")]
        assert row[8:10] == shares

    errors = {row[0]: row for row in table_cells(page, "Realized error per partition")}
    for day in SCORED_DAYS:
        row, r = errors[day.isoformat()], realized[day]
        assert number(row[2]) == r["rows"] and number(row[3]) == r["labelled"]
        for cell, key in zip(
            row[4:11], ("actual_mean", "forecast_mean", "mae", "rmse", "bias", "mape", "smape"), strict=True
        ):
            assert number(cell) == pytest.approx(r[key], rel=5e-4), key
        assert row[11] == f"{r['coverage']:.2%}" and row[12] == "90.00%"

    # The MAE model health estimated before the actuals, its interval, and the realized MAE beside it.
    health = pl.concat([published_health(sales, d) for d in SCORED_DAYS])
    estimated = {row[0]: row for row in table_cells(page, "Estimated against realized error")}
    for day in SCORED_DAYS:
        (mae,) = health.filter(
            (pl.col("partition_date") == day)
            & (pl.col("section") == "estimated_error")
            & (pl.col("measure") == "mae")
            & (pl.col("item") == "all")
        ).iter_rows(named=True)
        row = estimated[day.isoformat()]
        for cell, value in zip(row[2:5], (mae["value"], mae["low"], mae["high"]), strict=True):
            assert number(cell) == pytest.approx(value, rel=5e-4)
        assert number(row[5]) == pytest.approx(realized[day]["mae"], rel=5e-4)
        assert row[6] == ("yes" if not mae["low"] <= realized[day]["mae"] <= mae["high"] else "no")

    # Per decision over the range: each partition weighted by its labelled rows, so a recomputation on all rows at once.
    both = pl.concat(
        [
            sales.forecasts(d).join(
                sales.actuals(d).select(pl.col("item_id").alias("entity_id"), "units"), on="entity_id"
            )
            for d in SCORED_DAYS
        ]
    )
    decided = {row[1]: row for row in table_cells(page, "Realized error per decision")}
    for (decision,), part in both.group_by(["decision"]):
        error = part["units"].to_numpy() - part["forecast"].to_numpy()
        assert number(decided[decision][2]) == part.height
        assert number(decided[decision][5]) == pytest.approx(np.abs(error).mean(), rel=5e-4)
        assert number(decided[decision][6]) == pytest.approx(np.sqrt((error**2).mean()), rel=5e-4)

    # The challenger against the champion on the same actuals: each one's MAE recomputed from its own published forecasts.
    compared = {(row[0], row[3]): row for row in table_cells(page, "Champion and challenger on actuals")}
    for day in SCORED_DAYS:
        shadow = pl.read_parquet(
            sales.root / "data" / "output" / JOB / "shadow_forecasts" / f"date={day}" / "*.parquet"
        )
        row = compared[(day.isoformat(), "mae")]
        assert row[1:3] == ["1", "2"] and number(row[5]) == pytest.approx(realized[day]["mae"], rel=5e-4)
        assert number(row[6]) == pytest.approx(_realized(shadow, sales.actuals(day))["mae"], rel=5e-4)

    shown = {a.key: a for a in artifacts}
    rows = shown[f"realized-performance-{JOB}"].table
    assert [r["date"] for r in rows] == [d.isoformat() for d in SCORED_DAYS]
    assert float(rows[-1]["mae"]) == pytest.approx(realized[SCORED_DAYS[-1]]["mae"], rel=5e-4)
    assert not BINARY_WORDS.findall(
        json.dumps([a.description for a in artifacts] + [a.markdown or "" for a in artifacts])
    )


def test_the_model_card_gives_the_forecast_contract_the_target_the_interval_and_the_rules(sales: SalesJob) -> None:
    from tasks.contracts import FORECAST_FIELD_MEANINGS
    from tasks.reports.model_card import job_model_card

    card = job_model_card(JOB, sales.settings)
    assert not BINARY_WORDS.findall(card), BINARY_WORDS.findall(card)

    def section(title: str) -> str:
        return card.split(f"## {title}\n")[1].split("\n## ")[0]

    def rows(title: str) -> list[list[str]]:
        lines = [line for line in section(title).splitlines() if line.startswith("| ")][1:]
        return [
            [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))] for line in lines
        ]

    contract = section("Prediction Contract")
    assert "Target: **units sold**, in units: a count" in contract and "90% prediction interval" in contract
    assert [(r[0], r[2]) for r in rows("Prediction Contract")] == list(FORECAST_FIELD_MEANINGS.items())
    assert [r[:3] for r in rows("Decision rules")] == [
        ["ADD_STOCK", f"forecast_high ≥ {RULE_CUT:g}", "add_stock"],
        ["KEEP", "always", "keep"],
    ]
    # The feature by the plain name made from its column (the spec gives no label), the column beside it.
    assert ["Rain mm (`rain_mm`)", "RAIN_UP / RAIN_DOWN", "Rain"] in rows("Reason codes")

    meta = json.loads((sales.root / "data" / "models" / JOB / "1" / "metadata.json").read_text())
    check = meta["interval"]["check"]
    interval = section("Prediction interval")
    assert (
        "**split conformal, normalized by the error model**" in interval
        and "log link" in interval
        and "**90%**" in interval
    )
    held_back = dict((r[0], r[1]) for r in rows("Prediction interval"))
    assert held_back["rows"] == f"{check['rows']:,}" and held_back["coverage (level 90%)"] == f"{check['coverage']:.1%}"
    for label, key in (
        ("mean interval width", "mean_width"),
        ("MAE", "mae"),
        ("RMSE", "rmse"),
        ("bias (actual − forecast)", "bias"),
        ("mean width, easy half of rows", "easy_half_width"),
        ("mean width, hard half of rows", "hard_half_width"),
    ):
        assert held_back[label] == f"{check[key]:.4g} units", label
    assert check["easy_half_width"] < check["hard_half_width"]
    assert f"sha256 {meta['error_model_sha256'][:12]}" in interval


def test_decimal_buckets_merge_exactly_across_units_and_the_display_bins_count_every_row() -> None:
    rng = np.random.default_rng(5)
    cases = {
        "counts": rng.gamma(2.0, 2.0, 40_000),
        "far from zero": rng.normal(10_000.0, 30.0, 40_000),
        "both signs": rng.normal(0.0, 1.0, 40_000),
        "on the edges": np.round(rng.normal(5.0, 3.0, 40_000), 1),
        "powers of ten": np.array(
            [-100.0, -10.0, -1.0, -0.0, 0.0, 1e-15, -1e-15, 1.0, 10.0, 100.0, 1000.0, 999.99999, 12.5]
        ),
    }
    for name, values in cases.items():
        whole, parts = BucketCounts(), []
        whole.add(values)
        for chunk in np.array_split(values, 9):
            part = BucketCounts()
            part.add(chunk)
            parts.append(part)
        merged = parts[0]
        for part in parts[1:]:
            merged.merge(part)
        low, high, rows = merged.bounds()
        assert all(np.array_equal(x, y) for x, y in zip(whole.bounds(), (low, high, rows), strict=True)), name
        assert rows.sum() == values.size and (high[:-1] <= low[1:]).all(), name
        # Every value lies in its own bucket [low, high).
        at = np.searchsorted(low, values, side="right") - 1
        assert (low[at] <= values).all() and (values < high[at]).all(), name
        shown = display_histogram(merged)
        edges = np.asarray(shown["edges"])
        assert (
            shown["exact"]
            and shown["counts"]
            == np.bincount(np.searchsorted(edges, values, side="right"), minlength=edges.size + 1).tolist()
        ), name
        for q in (0.05, 0.5, 0.95):
            bucket_low, bucket_high = merged.quantile_range(q)
            assert bucket_low <= np.quantile(values, q, method="inverted_cdf") < bucket_high, (name, q)


def test_the_warehouse_counts_and_averages_a_forecast_jobs_rows_on_both_backends(any_warehouse, tmp_path: Path) -> None:
    from test_warehouse_backends import DAY, sample_rows, staged_run
    from test_warehouse_backends import JOB as BACKEND_JOB

    any_warehouse.replace_partition(job=BACKEND_JOB, partition_date=DAY, files=staged_run(tmp_path, "run-1", rows=30))
    rows = sample_rows(FORECASTS.schema, run_id="run-1", rows=30).to_pandas()
    means = any_warehouse.forecast_means(BACKEND_JOB, first_date=DAY, last_date=DAY).to_pylist()
    assert len(means) == len(set(rows["model_version"])) == 30
    first = next(m for m in means if m["model_version"] == "model_version-7")
    assert (
        first["rows"] == 1
        and first["forecast_mean"] == pytest.approx(7 / 8)
        and first["width_mean"] == pytest.approx(0.0)
    )
    counts = any_warehouse.prediction_counts(
        BACKEND_JOB, first_date=DAY, last_date=DAY, by=("decision",), dataset=FORECASTS
    )
    assert counts.num_rows == 30 and counts["rows"].to_pylist() == [1] * 30
    with pytest.raises(ValueError, match="predictions or forecasts"):
        any_warehouse.prediction_counts(
            BACKEND_JOB, first_date=DAY, last_date=DAY, by=("decision",), dataset=MODEL_HEALTH
        )
