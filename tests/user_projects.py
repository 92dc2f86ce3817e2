"""A user's own churn project driven through the `score` command, shared by the framework and ONNX tests
(test_framework_lightgbm.py, test_framework_catboost.py, test_framework_sklearn.py, test_onnx_outputs.py,
test_onnx_reasons.py); and a user's own sales forecast project (`sales_project`: units sold per item, a count
job) for the forecast tests (test_forecast_frameworks.py).

Each of those modules builds one such project in a module-scoped fixture, with its own days, rows and seeds:
`score_cli` runs the CLI in a subprocess as the user would, `churn_project` writes the user's data (training
and hold-out files, the scored days' raw partitions and labels) and runs `score init` and `score features`;
the other helpers read what the commands wrote.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl
import yaml
from test_bring_your_own import day_rows

from tasks.settings import PROJECT_ROOT

sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
from forked_score import completed  # noqa: E402

SCORE = Path(sys.executable).parent / "score"

ScoreCli = Callable[..., subprocess.CompletedProcess]


def score_cli(root: Path, env: dict[str, str]) -> ScoreCli:
    """`score(*args, ok=True, environ=None)`: the `score` command run in `root` with `env` (or `environ`); never a
    traceback, and exit 0 unless `ok=False`. With `env` the command is forked from a process that imported `score`
    once (scripts/forked_score.py: ~2-3 s less a command); an `environ` of its own gets a `score` process of its own."""

    def score(*args: str, ok: bool = True, environ: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        if environ is None:
            done = completed(list(args), env=env, cwd=root, timeout=600)
        else:
            done = subprocess.run(
                [str(SCORE), *args], env=environ, cwd=root, capture_output=True, text=True, timeout=600
            )
        assert "Traceback" not in done.stdout + done.stderr, (args, done.stdout[-3000:], done.stderr[-3000:])
        if ok:
            assert done.returncode == 0, (args, done.returncode, done.stdout[-3000:], done.stderr[-3000:])
        return done

    return score


def raw_partition(day: dt.date) -> str:
    """The folder of the churn job's raw partition of `day`, relative to the project's root."""
    return f"data/raw/churn/date={day}"


def churn_project(
    root: Path,
    score: ScoreCli,
    *,
    train_days: Sequence[dt.date],
    holdout_day: dt.date,
    scored_days: Sequence[dt.date],
    rows: int,
    seed: int,
    features_of: Sequence[tuple[str, str]],
    labels: bool = True,
) -> None:
    """The user's churn data under `root` and the job scaffolded from it.

    Every day gets `rows` rows of `day_rows`, seeded `seed`, `seed + 1`, … in the order training days, hold-out
    day, scored days. The training days go to train.parquet, the hold-out day to holdout.parquet; each scored day
    is a raw partition without its outcome and (with `labels`) a label partition, observed 90 days later. Then
    `score init churn` from train.parquet, and `score features` for each (source, name) of `features_of`: the
    source (relative to `root`) written to `root / f"{name}.parquet"`, in that order."""
    days = [*train_days, holdout_day, *scored_days]
    frames = {day: day_rows(day, rows, seed=seed + i) for i, day in enumerate(days)}
    pl.concat([frames[d] for d in train_days]).write_parquet(root / "train.parquet")
    frames[holdout_day].write_parquet(root / "holdout.parquet")
    for day in scored_days:
        raw = root / raw_partition(day)
        raw.mkdir(parents=True)
        frames[day].drop("churned").write_parquet(raw / "part-0.parquet")
        if labels:
            observed = root / "data" / "labels" / "churn" / f"date={day}"
            observed.mkdir(parents=True)
            frames[day].select(
                "customer_id", "churned", pl.lit(day + dt.timedelta(days=90)).alias("observed_date")
            ).write_parquet(observed / "part-0.parquet")
    score(
        "init",
        "churn",
        "--from",
        str(root / "train.parquet"),
        "--entity-column",
        "customer_id",
        "--label-column",
        "churned",
    )
    for source, name in features_of:
        score("features", "churn", "--from", str(root / source), "--out", str(root / f"{name}.parquet"))


def sales_rows(day: dt.date, rows: int, seed: int) -> pl.DataFrame:
    """One day of items: price, promotion, temperature, rain and the units sold, Poisson around a log-linear mean
    (a promotion and warm dry weekend days sell more, a higher price less); `sold_out` is 1 where 10 or more sold."""
    rng = np.random.default_rng(seed)
    price = rng.uniform(1, 10, rows).round(2)
    promo = (rng.random(rows) < 0.2).astype(np.int8)
    temperature = rng.normal(15, 8, rows).round(1)
    rain = np.where(rng.random(rows) < 0.3, rng.exponential(5, rows), 0).round(1)
    mean = np.exp(1.5 + 0.8 * promo - 0.15 * price + 0.02 * temperature - 0.04 * rain + 0.2 * (day.weekday() >= 5))
    units = rng.poisson(mean)
    return pl.DataFrame(
        {
            "item_id": [f"IT-{day:%m%d}-{i:06d}" for i in range(rows)],
            "price": price,
            "promo": promo,
            "temperature": temperature,
            "rain_mm": rain,
            "units": units,
            "sold_out": (units >= 10).astype(np.int8),
        }
    )


def sales_project(
    root: Path,
    score: ScoreCli,
    *,
    train_days: Sequence[dt.date],
    holdout_day: dt.date,
    scored_days: Sequence[dt.date],
    rows: int,
    seed: int,
    features_of: Sequence[tuple[str, str]],
) -> None:
    """The user's sales data under `root` and two jobs scaffolded from it: `sales`, a count forecast of `units`, and
    `sales_flag`, a binary job on `sold_out` over the same inputs.

    Days as in `churn_project` (rows of `sales_rows`, seeded `seed`, `seed + 1`, …): train.parquet, holdout.parquet
    (both outcomes), each scored day a raw partition of the sales job and its units as labels the next day. `score init`
    takes the training rows with `units` for `sales` (it proposes target kind count and three rules on the forecast's
    interval) and with `sold_out` for `sales_flag`; the sales spec then gives every decision its top-2 reasons. Then
    `score features sales` for each (source, name) of `features_of`."""
    days = [*train_days, holdout_day, *scored_days]
    frames = {day: sales_rows(day, rows, seed=seed + i) for i, day in enumerate(days)}
    pl.concat([frames[d] for d in train_days]).write_parquet(root / "train.parquet")
    frames[holdout_day].write_parquet(root / "holdout.parquet")
    for day in scored_days:
        raw = root / "data" / "raw" / "sales" / f"date={day}"
        raw.mkdir(parents=True)
        frames[day].drop("units", "sold_out").write_parquet(raw / "part-0.parquet")
        observed = root / "data" / "labels" / "sales" / f"date={day}"
        observed.mkdir(parents=True)
        frames[day].select("item_id", "units", pl.lit(day + dt.timedelta(days=1)).alias("observed_date")).write_parquet(
            observed / "part-0.parquet"
        )
    for job, label, other in (("sales", "units", "sold_out"), ("sales_flag", "sold_out", "units")):
        pl.read_parquet(root / "train.parquet").drop(other).write_parquet(root / f"{job}_sample.parquet")
        score(
            "init",
            job,
            "--from",
            str(root / f"{job}_sample.parquet"),
            "--entity-column",
            "item_id",
            "--label-column",
            label,
        )
    spec_path = root / "jobs" / "sales.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    spec["target"]["unit"] = "units"
    spec["prediction"]["reasons"] |= {
        "top_k": 2,
        "for_decisions": sorted({rule["decision"] for rule in spec["prediction"]["rules"]}),
    }
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    for source, name in features_of:
        score("features", "sales", "--from", str(root / source), "--out", str(root / f"{name}.parquet"))


class ModelInputs(NamedTuple):
    """A `score features` file as a model takes it: the inputs as float32 (NaN where missing), the outcome
    (None without one), the input names in order, and the entity ids."""

    x: np.ndarray
    outcome: np.ndarray | None
    names: list[str]
    ids: pl.Series


def model_inputs(path: Path, entity: str = "customer_id") -> ModelInputs:
    frame = pl.read_parquet(path)
    names = [c for c in frame.columns if c not in (entity, "outcome")]
    outcome = frame["outcome"].to_numpy() if "outcome" in frame.columns else None
    return ModelInputs(frame.select(names).to_numpy().astype(np.float32), outcome, names, frame[entity].cast(pl.String))


def registered_version(stdout: str, job: str = "churn") -> str:
    """The version `score register` printed."""
    line = next(line for line in stdout.splitlines() if line.startswith(f"registered {job} version "))
    return line.split()[3]


def registry_versions(root: Path, job: str = "churn") -> list[str]:
    """The versions in the project's registry, sorted."""
    folder = root / "data" / "models" / job
    return sorted(p.name for p in folder.iterdir() if (p / "metadata.json").is_file()) if folder.is_dir() else []


def day_output(root: Path, dataset: str, day: dt.date, job: str = "churn") -> pl.DataFrame:
    """One day of a published dataset (`predictions`, `shadow_predictions`, `reports/fallback`, …)."""
    return pl.read_parquet(root / "data" / "output" / job / dataset / f"date={day}" / "*.parquet")


def assert_one_error_line(done: subprocess.CompletedProcess, path: Path, expected: str, *, returncode: int = 2) -> None:
    """The command exited with `returncode` and said one line: an error naming `path` and saying `expected`."""
    assert done.returncode == returncode, (done.stdout, done.stderr)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and str(path) in lines[0], lines
    assert expected in " ".join(lines[0].split()), lines[0]


def assert_nothing_registered(root: Path, before: list[str], job: str = "churn") -> None:
    """The registry holds the versions it held `before`, and nothing is left in its staging folder."""
    assert registry_versions(root, job) == before
    assert not list((root / "data" / "models" / ".staging").glob("*"))
