"""A new user's first commands on a quantity to forecast: `score init` proposes the target's kind from the label
column (or takes `--kind`, checked against it) and scaffolds a forecast job; `score features` writes the actual
numbers; `score validate` and `score run` speak of forecasts and their interval, never of events or risk.

The samples are generated here: daily demand per store and item (a count), claim amounts (a regression), and
labels a binary job cannot take as they are. The end-to-end part drives the `score` command in a subprocess on a
count model the test trains itself with XGBoost, and checks every printed number against the files it wrote.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from conftest import user_project_env
from test_scaffold import invoke, one_error_line, workspace  # noqa: F401  (workspace: the fixture)
from user_projects import day_output, registered_version, score_cli

from tasks.features import job_features
from tasks.jobspec import load_job_spec
from tasks.prediction.decisions import FORECAST_FIELDS
from tasks.settings import Settings

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
# A user's project whose `score` talks to the session's Prefect server (conftest.user_project_env).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

STORES = ("north", "south", "harbour", "airport")
CREDIT_WORDS = re.compile(r"\b(events?|risk|probabilit\w*|AUC|calibrat\w*)\b", re.IGNORECASE)


def demand_rows(day: dt.date, rows: int, seed: int, *, shift: float = 0.0) -> pl.DataFrame:
    """Units sold per store and item on `day`: Poisson around a mean set by price, promotion, temperature and store."""
    rng = np.random.default_rng(seed)
    price = rng.uniform(1, 10, rows).round(2)
    promo = rng.random(rows) < 0.2
    temperature = rng.normal(15 + shift, 8, rows).round(1)
    store = rng.choice(STORES, rows, p=[0.4, 0.3, 0.2, 0.1])
    mean = np.exp(1.4 + 0.8 * promo - 0.15 * price + 0.02 * temperature + 0.3 * (store == "airport"))
    return pl.DataFrame(
        {
            "item_id": [f"IT-{day:%m%d}-{i:06d}" for i in range(rows)],
            "price": price,
            "promo": promo,
            "temperature": temperature,
            "store": store,
            "units_sold": rng.poisson(mean),
        }
    )


def claim_rows(rows: int, seed: int) -> pl.DataFrame:
    """Claim amounts in EUR (cents, so fractional) by vehicle age and region."""
    rng = np.random.default_rng(seed)
    vehicle_age = rng.integers(0, 20, rows)
    region = rng.choice(["city", "rural"], rows)
    amount = rng.lognormal(7 + 0.03 * vehicle_age + 0.4 * (region == "city"), 0.6, rows).round(2)
    return pl.DataFrame(
        {
            "claim_id": [f"CL-{i:07d}" for i in range(rows)],
            "vehicle_age": vehicle_age,
            "region": region,
            "claim_amount": amount,
        }
    )


def _written(tmp_path: Path, frame: pl.DataFrame, name: str) -> Path:
    path = tmp_path / f"{name}.parquet"
    frame.write_parquet(path)
    return path


def _nothing_written(settings: Settings) -> bool:
    return not list(settings.jobs_dir.iterdir()) and not list(settings.expectations_dir.iterdir())


def _review_lines(spec_path: Path) -> list[str]:
    return [line for line in spec_path.read_text().splitlines() if "# review:" in line]


# --- the kind proposed from the label column ------------------------------------------------------


def test_a_demand_history_becomes_a_count_job_cut_at_its_90th_percentile(workspace: Settings, tmp_path: Path) -> None:  # noqa: F811
    sample = demand_rows(dt.date(2026, 3, 1), 3_000, seed=1)
    result = invoke(
        "init",
        "demand",
        "--from",
        str(_written(tmp_path, sample, "demand")),
        "--entity-column",
        "item_id",
        "--label-column",
        "units_sold",
    )
    assert result.exit_code == 0, (result.output, result.exception)
    units = sample["units_sold"].to_numpy()
    assert (
        f"target: count, proposed because units_sold holds non-negative whole numbers, {units.min()} to {units.max()}"
        in result.output
    )
    assert (
        "train a regressor" in result.output
        and "count:poisson" in result.output
        and "binary classifier" not in result.output
    )
    assert not CREDIT_WORDS.search(result.output), result.output

    spec = load_job_spec("demand", workspace)
    assert (spec.target.kind, spec.target.name, spec.target.unit) == ("count", "units sold", "")
    p = spec.prediction
    assert p.score is None and p.event is None and p.reasons.no_reason_code is None and p.reasons.no_reason_text is None
    cut = float(np.quantile(units, 0.9, method="higher"))
    thresholds = {(r.id, f, op): v for r in p.rules for f, cmp in r.when.items() for op, v in cmp.items()}
    assert thresholds == {
        ("HIGH_FORECAST", "forecast_low", "ge"): cut,
        ("REVIEW_UNCERTAIN", "forecast_low", "lt"): cut,
        ("REVIEW_UNCERTAIN", "forecast_high", "ge"): cut,
        ("NO_ACTION", "forecast_high", "lt"): cut,
    }
    assert {f for _, f, _ in thresholds} <= set(FORECAST_FIELDS)
    assert {r.decision for r in p.rules} == {"act", "manual_review", "no_action"} and p.reasons.for_decisions == [
        "act",
        "manual_review",
    ]
    assert spec.action_decisions == ["act"] and spec.words.decision("manual_review") == "A person decides"
    # The label is the outcome, never a feature, and no guard expects it in the raw rows.
    assert spec.monitoring.labels.outcome_column == "units_sold"
    assert job_features(spec).FEATURES == ("price", "promo", "temperature", "store") and set(p.reasons.codes) == {
        "price",
        "promo",
        "temperature",
        "store",
    }
    suite = json.loads((workspace.expectations_dir / "demand.json").read_text())
    assert not [e for e in suite["expectations"] if e["kwargs"].get("column") == "units_sold"]
    reviews = _review_lines(workspace.jobs_dir / "demand.yaml")
    for topic in (
        "count, proposed because",
        "what is forecast",
        "the unit pages print",
        f"the cut-off {int(cut)} is a placeholder (the 90th percentile of units_sold",
        "raised the forecast",
        "interval's level",
    ):
        assert any(topic in line for line in reviews), topic
    text = (workspace.jobs_dir / "demand.yaml").read_text()
    assert "score init --force --kind regression" in text
    assert not CREDIT_WORDS.search(text), CREDIT_WORDS.search(text)


def test_claim_amounts_become_a_regression_job(workspace: Settings, tmp_path: Path) -> None:  # noqa: F811
    sample = claim_rows(2_000, seed=2)
    result = invoke(
        "init",
        "claims",
        "--from",
        str(_written(tmp_path, sample, "claims")),
        "--entity-column",
        "claim_id",
        "--label-column",
        "claim_amount",
    )
    assert result.exit_code == 0, (result.output, result.exception)
    assert "target: regression, proposed because claim_amount holds numbers with fractions" in result.output
    spec = load_job_spec("claims", workspace)
    assert (spec.target.kind, spec.target.name) == ("regression", "claim amount")
    cut = float(f"{np.quantile(sample['claim_amount'].to_numpy(), 0.9):.3g}")
    assert spec.prediction.rules[0].when == {"forecast_low": {"ge": cut}}
    assert job_features(spec).FEATURES == ("vehicle_age", "region")


def test_a_count_mostly_zero_is_cut_above_its_minimum(workspace: Settings, tmp_path: Path) -> None:  # noqa: F811
    rng = np.random.default_rng(3)
    sample = pl.DataFrame(
        {
            "id": [f"S{i:05d}" for i in range(1_000)],
            "x": rng.normal(size=1_000),
            "returns": np.where(rng.random(1_000) < 0.93, 0, rng.integers(1, 5, 1_000)),
        }
    )
    assert np.quantile(sample["returns"].to_numpy(), 0.9, method="higher") == 0
    # Five whole numbers would propose a multiclass job (class codes): a count of returns says so with --kind.
    assert (
        invoke(
            "init",
            "returns",
            "--from",
            str(_written(tmp_path, sample, "returns")),
            "--entity-column",
            "id",
            "--label-column",
            "returns",
            "--kind",
            "count",
        ).exit_code
        == 0
    )
    spec = load_job_spec("returns", workspace)
    assert spec.target.kind == "count" and spec.prediction.rules[0].when == {"forecast_low": {"ge": 1}}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["paid", "default"], ["has values ['default', 'paid']", "say which is the event with --positive"]),
        ([1, 2], ["has values [1, 2]", "--positive 1 (or --positive 2)", "--kind count or --kind regression"]),
    ],
)
def test_two_values_other_than_1_and_0_are_refused_naming_both(
    workspace: Settings,
    tmp_path: Path,
    values: list,
    expected: list[str],  # noqa: F811
) -> None:
    rng = np.random.default_rng(4)
    sample = pl.DataFrame(
        {"id": [f"L{i:05d}" for i in range(500)], "x": rng.normal(size=500), "status": rng.choice(values, 500)}
    )
    path = _written(tmp_path, sample, "two")
    line = one_error_line(
        invoke("init", "loans", "--from", str(path), "--entity-column", "id", "--label-column", "status")
    )
    assert str(path) in line and "'status'" in line, line
    for part in expected:
        assert part in line, line
    assert _nothing_written(workspace)


def test_two_whole_numbers_are_a_count_when_kind_says_so(workspace: Settings, tmp_path: Path) -> None:  # noqa: F811
    rng = np.random.default_rng(5)
    sample = pl.DataFrame(
        {"id": [f"L{i:05d}" for i in range(500)], "x": rng.normal(size=500), "visits": rng.choice([1, 2], 500)}
    )
    result = invoke(
        "init",
        "visits",
        "--from",
        str(_written(tmp_path, sample, "visits")),
        "--entity-column",
        "id",
        "--label-column",
        "visits",
        "--kind",
        "count",
    )
    assert result.exit_code == 0, result.output
    assert "target: count, as --kind asked" in result.output
    assert load_job_spec("visits", workspace).target.kind == "count"


@pytest.mark.parametrize(
    ("kind", "label", "expected"),
    [
        ("count", "price", ["--kind count", "'price'", "fractional values", "--kind regression"]),
        ("count", "change", ["--kind count", "'change'", "negative values", "--kind regression"]),
        ("binary", "units_sold", ["--kind binary", "'units_sold'", "must hold 1 (the event) and 0 (not)"]),
        ("regression", "store", ["--kind regression", "'store'", "holds text", "not numbers"]),
    ],
)
def test_a_kind_the_label_column_cannot_hold_is_one_error_line(
    workspace: Settings,
    tmp_path: Path,
    kind: str,
    label: str,
    expected: list[str],  # noqa: F811
) -> None:
    sample = demand_rows(dt.date(2026, 3, 1), 500, seed=6).with_columns(
        (pl.col("units_sold") - pl.col("units_sold").median()).cast(pl.Int64).alias("change")
    )
    path = _written(tmp_path, sample, "sample")
    line = one_error_line(
        invoke(
            "init", "demand", "--from", str(path), "--entity-column", "item_id", "--label-column", label, "--kind", kind
        )
    )
    assert str(path) in line, line
    for part in expected:
        assert part in line, line
    assert _nothing_written(workspace)


def test_a_1_0_label_can_be_forecast_when_kind_says_so(workspace: Settings, tmp_path: Path) -> None:  # noqa: F811
    sample = demand_rows(dt.date(2026, 3, 1), 500, seed=7).with_columns(
        (pl.col("units_sold") > 5).cast(pl.Int8).alias("sold_out")
    )
    path = _written(tmp_path, sample.drop("units_sold"), "flags")
    assert (
        invoke(
            "init", "flags", "--from", str(path), "--entity-column", "item_id", "--label-column", "sold_out"
        ).exit_code
        == 0
    )
    assert load_job_spec("flags", workspace).target.kind == "binary"
    result = invoke(
        "init",
        "flags",
        "--from",
        str(path),
        "--entity-column",
        "item_id",
        "--label-column",
        "sold_out",
        "--kind",
        "regression",
        "--force",
    )
    assert result.exit_code == 0, result.output
    spec = load_job_spec("flags", workspace)
    assert spec.target.kind == "regression" and spec.prediction.score is None


# --- score features -------------------------------------------------------------------------------


def test_features_write_a_forecast_jobs_actual_numbers_even_when_they_are_all_0_and_1(
    workspace: Settings, tmp_path: Path
) -> None:  # noqa: F811
    sample = demand_rows(dt.date(2026, 3, 1), 2_000, seed=8)
    assert (
        invoke(
            "init",
            "demand",
            "--from",
            str(_written(tmp_path, sample, "demand")),
            "--entity-column",
            "item_id",
            "--label-column",
            "units_sold",
        ).exit_code
        == 0
    )
    for name, rows in (("all", sample), ("low", sample.filter(pl.col("units_sold") <= 1))):
        out = tmp_path / f"{name}_inputs.parquet"
        result = invoke(
            "features", "demand", "--from", str(_written(tmp_path, rows, f"train_{name}")), "--out", str(out)
        )
        assert result.exit_code == 0, result.output
        written = pl.read_parquet(out)
        assert written.schema["outcome"] == pl.Float64
        expected = rows.join(written.select("item_id", "outcome"), on="item_id")
        assert expected.height == rows.height
        np.testing.assert_array_equal(expected["outcome"].to_numpy(), expected["units_sold"].to_numpy().astype(float))


# --- validate and run, through the command --------------------------------------------------------

TRAIN_DAYS = [dt.date(2026, 5, 1) + dt.timedelta(days=i) for i in range(3)]
HOLDOUT_DAY, SCORED_DAY = dt.date(2026, 5, 4), dt.date(2026, 5, 5)


@pytest.fixture(scope="module")
def sales(tmp_path_factory: pytest.TempPathFactory):
    """A user's demand project: `score init` from the training days, `score features`, an XGBoost count:poisson model
    trained on those inputs and registered on the hold-out day, one raw partition to score."""
    import xgboost as xgb

    root = tmp_path_factory.mktemp("forecast-words")
    env = user_project_env(root)
    score = score_cli(root, env)
    pl.concat([demand_rows(d, 1_500, seed=10 + i) for i, d in enumerate(TRAIN_DAYS)]).write_parquet(
        root / "train.parquet"
    )
    demand_rows(HOLDOUT_DAY, 2_000, seed=20).write_parquet(root / "holdout.parquet")
    raw = root / "data" / "raw" / "sales" / f"date={SCORED_DAY}"
    raw.mkdir(parents=True)
    demand_rows(SCORED_DAY, 2_000, seed=21).drop("units_sold").write_parquet(raw / "part-0.parquet")
    score(
        "init",
        "sales",
        "--from",
        str(root / "train.parquet"),
        "--entity-column",
        "item_id",
        "--label-column",
        "units_sold",
    )
    spec_path = root / "jobs" / "sales.yaml"
    spec_path.write_text(spec_path.read_text().replace('unit: ""', "unit: units"))
    score("features", "sales", "--from", str(root / "train.parquet"), "--out", str(root / "inputs.parquet"))
    inputs = pl.read_parquet(root / "inputs.parquet")
    names = [c for c in inputs.columns if c not in ("item_id", "outcome")]
    booster = xgb.train(
        {"objective": "count:poisson", "max_depth": 3, "eta": 0.2, "nthread": 1, "seed": 1},
        xgb.DMatrix(inputs.select(names).to_numpy(), label=inputs["outcome"].to_numpy(), feature_names=names),
        num_boost_round=40,
    )
    booster.save_model(root / "model.ubj")
    version = registered_version(
        score(
            "register", "sales", "--model", str(root / "model.ubj"), "--holdout", str(root / "holdout.parquet")
        ).stdout,
        "sales",
    )
    return root, score, version


def test_validate_says_the_kind_and_the_interval_measured_at_registration(sales) -> None:
    root, score, version = sales
    done = score("validate", "sales")
    check = json.loads((root / "data" / "models" / "sales" / version / "metadata.json").read_text())["interval"][
        "check"
    ]
    assert "  target: count forecast of units sold (units)" in done.stdout.splitlines()
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("  interval:")]
    assert line.startswith(f"  interval: 90% split conformal (model sales {version}, link log)")
    assert f"on {check['rows']:,} held-back hold-out rows, the 90% interval covered {check['coverage']:.1%}" in line
    assert f"mean width {check['mean_width']:.4g} units" in line and f"MAE {check['mae']:.4g} units" in line
    assert not CREDIT_WORDS.search(done.stdout.replace("expectations", "")), done.stdout


def test_a_model_of_another_kind_is_one_problem_of_validate(sales, tmp_path: Path) -> None:
    """The user scaffolds a binary job from the same rows, with the count model's registry name: validate refuses."""
    root, score, version = sales
    flags = demand_rows(HOLDOUT_DAY, 500, seed=30)
    flags.with_columns((pl.col("units_sold") > 5).cast(pl.Int8).alias("sold_out")).drop("units_sold").write_parquet(
        tmp_path / "flags.parquet"
    )
    score(
        "init",
        "sold_out",
        "--from",
        str(tmp_path / "flags.parquet"),
        "--entity-column",
        "item_id",
        "--label-column",
        "sold_out",
    )
    spec_path = root / "jobs" / "sold_out.yaml"
    document = yaml.safe_load(spec_path.read_text())
    document["model"]["name"] = "sales"
    spec_path.write_text(yaml.safe_dump(document, sort_keys=False))
    done = score("validate", "sold_out", ok=False)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    meta_path = root / "data" / "models" / "sales" / version / "metadata.json"
    assert len(lines) == 1 and lines[0].startswith("error:") and str(meta_path) in lines[0], lines
    assert (
        f"model sales version {version} was registered as a count forecast model, but job sold_out is binary"
        in " ".join(lines[0].split())
    )


def test_run_prints_the_forecast_mean_width_and_decisions_of_what_it_published(sales) -> None:
    root, score, _ = sales
    done = score("run", "sales", "--date", str(SCORED_DAY))
    published = day_output(root, "forecasts", SCORED_DAY, job="sales")
    assert published.height == 2_000
    mean = published["forecast"].mean()
    width = (published["forecast_high"] - published["forecast_low"]).mean()
    shares = (
        published["decision"]
        .value_counts(normalize=True, name="share")
        .sort(["share", "decision"], descending=[True, False])
    )
    decisions = ", ".join(f"{d} {s:.1%}" for d, s in shares.iter_rows())
    expected = f"count forecast of units sold: mean {mean:.4g} units, mean width of the 90% interval {width:.4g} units; decisions {decisions}"
    assert expected in done.stdout.splitlines(), done.stdout
    (health,) = [line for line in done.stdout.splitlines() if line.startswith("model health:")]
    assert "flagged:" in health
    assert not CREDIT_WORDS.search(done.stdout), done.stdout
    import duckdb

    with duckdb.connect(str(root / "data" / "warehouse.duckdb"), read_only=True) as warehouse:
        (ledger,) = warehouse.execute("SELECT inference FROM runs WHERE job = 'sales'").fetchall()
    recorded = json.loads(ledger[0])["forecast"]
    assert recorded["mean"] == pytest.approx(mean, rel=1e-9) and recorded["mean_interval_width"] == pytest.approx(
        width, rel=1e-9
    )
    assert (recorded["kind"], recorded["rows"], recorded["interval_level"]) == ("count", 2_000, 0.9)


def test_run_reads_the_estimated_error_when_model_health_has_it() -> None:
    """The run's line of model health from `estimated_error` rows (the scoring pass writes them, tasks/monitoring)."""
    from cli.console import console
    from cli.run_summaries import print_model_health
    from tasks.monitoring.health import health_headline

    rows = [
        {
            "section": "estimated_error",
            "measure": "mae",
            "item": "all",
            "value": 1.61,
            "low": 1.52,
            "high": 1.7,
            "reference": 1.53,
            "flag": "ok",
        },
        {
            "section": "estimated_error",
            "measure": "rmse",
            "item": "all",
            "value": 2.2,
            "low": 2.05,
            "high": 2.4,
            "reference": 2.08,
            "flag": "warn",
        },
        {
            "section": "attribution",
            "measure": "share",
            "item": "price",
            "value": 0.3,
            "low": None,
            "high": None,
            "reference": 0.3,
            "flag": "ok",
        },
    ]
    headline = health_headline(rows, forecasts=True)
    assert "event_rate" not in headline and "auc" not in headline
    with console.capture() as captured:
        print_model_health({"model_health": headline, "forecast": {"unit": "units"}})
    assert captured.get().strip() == (
        "model health: estimated MAE 1.61 (1.52–1.7) units (at registration 1.53); estimated RMSE 2.2 (2.05–2.4) units "
        "(at registration 2.08); flagged: estimated_error all rmse warn"
    )
