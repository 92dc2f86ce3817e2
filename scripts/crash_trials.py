"""Kill `score run` with SIGKILL at random points, re-run, and check no one ever saw a partial partition.

    .venv/bin/python scripts/crash_trials.py --trials 30                      # DuckDB warehouse
    .venv/bin/python scripts/crash_trials.py --trials 30 --warehouse-url postgresql://…
    .venv/bin/python scripts/crash_trials.py --mode publish --trials 22       # kills inside publish

Prepares a demo credit partition in a temporary data dir (or uses `--data-dir`, which must hold
raw data and a trained model), scores it once cleanly as the reference, then per trial starts
`score run` as a child process (forked from a server that imported the CLI and the flow once,
scripts/forked_score.py) and, once it logs its first Prefect line (the flow starting), kills its process group with SIGKILL after a random delay between 0 and 105 % of the
clean run's flow time (first to last Prefect line), so kills land all along guards, inference,
prediction, publishing and reports; then it checks the partition:

- the Parquet partitions (predictions, quarantine, guard tables, reports) each hold exactly one
  run's rows, and the predictions are complete (as many rows as the reference);
- the warehouse's predictions of the partition are one run's, complete.

A reader thread checks the Parquet predictions (and, on PostgreSQL, the warehouse) the whole
time the children run. After the last trial one run goes to completion; its predictions must
equal the reference's (every column but run_id), no ledger row of the partition may be left
`running`, and no staged files of the killed runs may remain.

`--mode publish` kills inside the publish step instead, at each point of `PUBLISH_POINTS` in turn
(`SCORING_CRASH_AT`, tasks/sinks/crash_points.py), each time with raw input that differs from the
published run's; after each kill it recovers — alternately with `score recover` and by starting a
run of another date of the job — and checks that every dataset of the partition, in Parquet and
the warehouse, holds rows of exactly one run (the previous one for kills before the warehouse
commit, the killed one after it), that every raw id is in predictions or quarantine, and that no
ledger row is left unfinished. A challenger shadows every run of this mode, so the check covers its
shadow predictions and flipped decisions too: never one run's champion beside another's challenger.

Prints one JSON line with the figures; exit code 1 when any check failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import tasks  # noqa: E402,F401  (telemetry off before anything loads Prefect)
from flows.steps.blocks import configured_warehouse  # noqa: E402
from tasks import catalog  # noqa: E402
from tasks.demo.challenger import challenger_jobs_dir, registered_demo_challenger  # noqa: E402
from tasks.inference.registry import inference_model_versions  # noqa: E402
from tasks.settings import Settings  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "scripts"))
from forked_score import ForkedChild, ScoreForks  # noqa: E402

JOB = "credit_risk"
DATASETS = tuple(d.name for d in catalog.PARTITION_DATASETS)
"""Every dataset a run publishes, in publish order (tasks/catalog.py)."""
_OTHER_KIND_TABLES = {
    d.table
    for d in (catalog.FORECASTS, catalog.SHADOW_FORECASTS, catalog.CLASSIFICATIONS, catalog.SHADOW_CLASSIFICATIONS)
}
"""The forecast and the multiclass contracts and their shadows (a dataset and its table share the name): a binary job
publishes them empty."""
_TASK_LINE = re.compile(r"Task run '([a-z][a-z-]*[a-z])-[0-9a-z]+'")
# Prefect's console lines start with a wall-clock time: `07:39:05.021 | INFO    | …`.
_PREFECT_LINE = re.compile(r"^(\d\d):(\d\d):(\d\d\.\d+) \| ", re.MULTILINE)


@dataclass
class CrashReport:
    backend: str
    trials: int
    clean_run_s: float
    flow_s: float
    kills: int = 0
    completed_before_kill: int = 0
    interrupted_in: dict[str, int] = field(default_factory=dict)
    """Where the kills landed: after the last task a killed child had logged as finished."""
    parquet_reads: int = 0
    warehouse_reads: int = 0
    violations: list[str] = field(default_factory=list)
    final_equals_reference: bool = False
    runs_left_running: int = -1
    leftover_staging: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            not self.violations
            and self.final_equals_reference
            and self.runs_left_running == 0
            and not self.leftover_staging
        )


def _parquet_partition(settings: Settings, dataset: str, day: dt.date) -> pa.Table | None:
    link = settings.output_dir(JOB) / catalog.dataset(dataset).folder / f"date={day.isoformat()}"
    if not os.path.lexists(link):
        return None
    return pq.read_table(os.path.realpath(link))


def _prediction_problems(where: str, table: pa.Table | None, expected_rows: int) -> list[str]:
    if table is None:
        return [f"{where}: partition missing"]
    runs = set(table.column("run_id").to_pylist())
    problems = []
    if len(runs) != 1:
        problems.append(f"{where}: {len(runs)} runs mixed: {sorted(runs)[:4]}")
    if table.num_rows != expected_rows:
        problems.append(f"{where}: {table.num_rows} rows, a complete run has {expected_rows}")
    return problems


def _parquet_problems(settings: Settings, day: dt.date, expected_rows: int) -> list[str]:
    problems = _prediction_problems(
        "parquet predictions", _parquet_partition(settings, "predictions", day), expected_rows
    )
    for dataset in DATASETS[1:]:
        table = _parquet_partition(settings, dataset, day)
        if table is not None and table.num_rows and len(set(table.column("run_id").to_pylist())) != 1:
            problems.append(f"parquet {dataset}: runs mixed")
    return problems


def _warehouse_problems(settings: Settings, day: dt.date, expected_rows: int) -> list[str]:
    table = configured_warehouse(settings).partition_predictions(JOB, day, ["run_id", "entity_id"])
    return _prediction_problems("warehouse predictions", table, expected_rows)


def _comparable(table: pa.Table) -> pa.Table:
    return table.drop_columns(["run_id"]).sort_by("entity_id")


def _last_task(log_path: Path) -> str:
    tasks_seen = _TASK_LINE.findall(log_path.read_text(errors="replace"))
    return f"after {tasks_seen[-1]}" if tasks_seen else "before any task finished"


def _flow_span_s(output: str) -> float:
    """Seconds from the first to the last Prefect log line of a run's output."""
    stamps = [int(h) * 3600 + int(m) * 60 + float(sec) for h, m, sec in _PREFECT_LINE.findall(output)]
    if len(stamps) < 2:
        raise RuntimeError(f"no Prefect log lines to time the flow by in:\n{output[-2000:]}")
    return (stamps[-1] - stamps[0]) % 86_400


def _wait_for_flow_start(child: ForkedChild, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while child.poll() is None and time.monotonic() < deadline:
        if _PREFECT_LINE.search(log_path.read_text(errors="replace")):
            return
        time.sleep(0.01)


def crash_trials(
    settings: Settings, day: dt.date, *, trials: int, seed: int, env: dict[str, str], logs: Path
) -> CrashReport:
    """Run the trials against the data dir and warehouse that `settings` and `env` name."""
    logs.mkdir(parents=True, exist_ok=True)
    with ScoreForks(env, with_prefect=True) as forks:
        return _crash_trials(settings, day, trials=trials, seed=seed, forks=forks, logs=logs)


def _crash_trials(
    settings: Settings, day: dt.date, *, trials: int, seed: int, forks: ScoreForks, logs: Path
) -> CrashReport:
    postgres = settings.warehouse_url is not None or settings.warehouse_secret_block is not None
    run = ["run", JOB, "--date", day.isoformat()]
    start = time.perf_counter()
    reference_run = forks.run(run, logs / "reference.log")
    clean_s = time.perf_counter() - start
    reference_output = (logs / "reference.log").read_text(errors="replace")
    if reference_run.returncode != 0:
        raise RuntimeError(f"the clean reference run failed:\n{reference_output[-6000:]}")
    flow_s = _flow_span_s(reference_output)
    reference = _parquet_partition(settings, "predictions", day)
    assert reference is not None
    expected_rows = reference.num_rows
    report = CrashReport(
        backend="postgresql" if postgres else "duckdb",
        trials=trials,
        clean_run_s=round(clean_s, 2),
        flow_s=round(flow_s, 2),
    )

    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            try:
                report.violations += [f"reader: {p}" for p in _parquet_problems(settings, day, expected_rows)]
                report.parquet_reads += 1
                if postgres:
                    report.violations += [f"reader: {p}" for p in _warehouse_problems(settings, day, expected_rows)]
                    report.warehouse_reads += 1
            except FileNotFoundError as exc:
                report.violations.append(f"reader: a file vanished while reading: {exc}")
            time.sleep(0.02)

    rng = random.Random(seed)
    interrupted: Counter[str] = Counter()
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        for trial in range(trials):
            log_path = logs / f"trial-{trial:03d}.log"
            child = forks.start(run, log_path)
            _wait_for_flow_start(child, log_path, timeout_s=2 * clean_s)
            delay = rng.uniform(0.0, 1.05) * flow_s
            try:
                child.wait(timeout=delay)
                report.completed_before_kill += 1
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                report.kills += 1
                interrupted[_last_task(log_path)] += 1
            report.violations += [f"after trial {trial}: {p}" for p in _parquet_problems(settings, day, expected_rows)]
            if not postgres:
                report.violations += [
                    f"after trial {trial}: {p}" for p in _warehouse_problems(settings, day, expected_rows)
                ]
        final = forks.run(run, logs / "final.log")
    finally:
        done.set()
        thread.join()
    report.interrupted_in = dict(sorted(interrupted.items()))
    if final.returncode != 0:
        final_output = (logs / "final.log").read_text(errors="replace")
        report.violations.append(f"the run after the last kill failed: {final_output[-4000:]}")
        return report
    report.violations += _parquet_problems(settings, day, expected_rows) + _warehouse_problems(
        settings, day, expected_rows
    )
    published = _parquet_partition(settings, "predictions", day)
    warehoused = configured_warehouse(settings).partition_predictions(JOB, day, list(reference.schema.names))
    report.final_equals_reference = (
        published is not None
        and _comparable(published).equals(_comparable(reference))
        and _comparable(warehoused.cast(reference.schema)).equals(_comparable(reference))
    )
    runs = configured_warehouse(settings).latest_partition_runs(JOB, first_date=day, last_date=day)
    report.runs_left_running = sum(1 for r in runs if r["status"] == "running")
    staging = settings.output_dir(JOB) / "_staging"
    report.leftover_staging = (
        sorted(str(p.relative_to(staging)) for p in staging.glob("*/*")) if staging.exists() else []
    )
    return report


PUBLISH_POINTS = (
    *(f"publish:staged:{d}" for d in DATASETS),
    "publish:assembled",
    "publish:intent",
    "publish:committed",
    "publish:swapped",
    "publish:delta",
)
"""Where `publish_crash_trials` kills a run (tasks/sinks/crash_points.py): between any two dataset moves,
before and after the ledger's intent, between the warehouse commit and the Parquet swap, after the
swap, after the Delta writes (none in the demo spec: the point is reached all the same)."""
COMMITTED_POINTS = ("publish:committed", "publish:swapped", "publish:delta")
"""Points after the warehouse commit: recovery rolls the killed run forward."""


@dataclass
class PublishCrashReport:
    backend: str
    trials: int
    kills: int = 0
    rolled_back: int = 0
    """Kills before the warehouse commit: the previous run's outputs stand."""
    rolled_forward: int = 0
    """Kills after the commit: recovery swapped the killed run's version in."""
    recovered_by: dict[str, int] = field(default_factory=dict)
    partitions_checked: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations and self.kills == self.trials


def _raw_versions(settings: Settings, day: dt.date) -> tuple[pa.Table, pa.Table]:
    """The partition's raw rows as they are, and with more rows the guards quarantine (no loan
    amount on every 50th row): two inputs whose runs differ in predictions, quarantine and every report."""
    raw_dir = settings.raw_partition_dir(JOB, day.isoformat())
    original = pq.read_table(raw_dir)
    amounts = original.column("loan_amount").to_pylist()
    for i in range(0, len(amounts), 50):
        amounts[i] = None
    return original, original.set_column(
        original.schema.get_field_index("loan_amount"),
        "loan_amount",
        pa.array(amounts, original.schema.field("loan_amount").type),
    )


def _write_raw(settings: Settings, day: dt.date, table: pa.Table) -> None:
    raw_dir = settings.raw_partition_dir(JOB, day.isoformat())
    for old in raw_dir.glob("*.parquet"):
        old.unlink()
    pq.write_table(table, raw_dir / "part-0.parquet", row_group_size=1000)


def _partition_runs(settings: Settings, day: dt.date) -> dict[str, set[str]]:
    """The run ids each dataset of the partition holds, in Parquet and in the warehouse."""
    found: dict[str, set[str]] = {}
    for dataset in DATASETS:
        table = _parquet_partition(settings, dataset, day)
        found[f"parquet {dataset}"] = set(table.column("run_id").to_pylist()) if table is not None else {"<missing>"}
    warehouse = configured_warehouse(settings)
    with warehouse._session(write=False) as session:
        for table in (*(catalog.dataset(d).table for d in DATASETS), catalog.DECISION_MONITORING.table):
            rows = session.rows(
                f"SELECT DISTINCT run_id FROM {table} WHERE job = $job AND partition_date = $day",
                {"job": JOB, "day": day},
            )
            found[f"warehouse {table}"] = {r["run_id"] for r in rows}
    return found


def _consistency_problems(settings: Settings, day: dt.date, expected_run: str, raw: pa.Table) -> list[str]:
    problems = []
    for where, runs in _partition_runs(settings, day).items():
        # Decision monitoring may be absent after a kill (it is recomputed later), never another run's.
        allowed = (
            ({expected_run}, set())
            if where.endswith("decision_monitoring") or "quarantine" in where or "guard_actions" in where
            else ({expected_run},)
        )
        if where.split()[-1] in _OTHER_KIND_TABLES:
            # The trials score a binary job: it publishes the other kinds' contracts, and their shadows, empty.
            allowed = (set(),)
        if runs not in allowed:
            problems.append(f"{where} holds runs {sorted(runs)}, expected {expected_run}")
    ids = {i for i in raw.column("entity_id").to_pylist() if i}
    ids_only = pa.schema([("entity_id", pa.string())])
    for store in ("parquet", "warehouse"):
        if store == "parquet":
            scored = _parquet_partition(settings, "predictions", day)
            held = _parquet_partition(settings, "quarantine", day)
            shadowed = _parquet_partition(settings, "shadow_predictions", day)
        else:
            warehouse = configured_warehouse(settings)
            scored = warehouse.partition_predictions(JOB, day, ["entity_id"])
            key = {"job": JOB, "day": day}
            with warehouse._session(write=False) as session:
                held, shadowed = (
                    pa.Table.from_pylist(
                        session.rows(f"SELECT entity_id FROM {table} WHERE job = $job AND partition_date = $day", key),
                        schema=ids_only,
                    )
                    for table in ("quarantine", "shadow_predictions")
                )
        if shadowed is None or sorted(shadowed.column("entity_id").to_pylist()) != sorted(
            scored.column("entity_id").to_pylist()
        ):
            problems.append(f"{store}: the shadow predictions are not of the rows the champion scored")
        seen = set(scored.column("entity_id").to_pylist()) | set(held.column("entity_id").to_pylist())
        lost = ids - seen
        if lost:
            problems.append(
                f"{store}: {len(lost)} raw id(s) in neither predictions nor quarantine, e.g. {sorted(lost)[:3]}"
            )
    runs = configured_warehouse(settings).unfinished_runs(JOB)
    if runs:
        problems.append(f"ledger: runs left unfinished: {[(r['run_id'], r['status']) for r in runs]}")
    return problems


def publish_crash_trials(
    settings: Settings,
    day: dt.date,
    other_day: dt.date,
    *,
    trials: int,
    env: dict[str, str],
    logs: Path,
    points: tuple[str, ...] = PUBLISH_POINTS,
) -> PublishCrashReport:
    """Kill `score run` inside its publish at each of `points` in turn, with an input that differs from the
    published run's, then recover — alternately by `score recover` and by the next run start of the job (a run of
    `other_day`) — and check both stores hold exactly one run."""
    logs.mkdir(parents=True, exist_ok=True)
    postgres = settings.warehouse_url is not None or settings.warehouse_secret_block is not None
    report = PublishCrashReport(backend="postgresql" if postgres else "duckdb", trials=trials)
    # A challenger shadows every run: its predictions and flipped decisions must commit with the champion's.
    champion = inference_model_versions(settings.model_registry_dir(JOB))[-1]
    challenger = registered_demo_challenger(settings, champion=champion)
    jobs = challenger_jobs_dir(settings, logs.parent / "jobs-with-challenger", champion=champion, challenger=challenger)
    env = {**env, "SCORING_JOBS_DIR": str(jobs)}
    raws = _raw_versions(settings, day)
    with ScoreForks(env, with_prefect=True) as forks:
        _publish_crash_trials(settings, day, other_day, report=report, raws=raws, forks=forks, logs=logs, points=points)
    return report


def _publish_crash_trials(
    settings: Settings,
    day: dt.date,
    other_day: dt.date,
    *,
    report: PublishCrashReport,
    raws: tuple[pa.Table, pa.Table],
    forks: ScoreForks,
    logs: Path,
    points: tuple[str, ...],
) -> None:
    published_raw: dict[str, int] = {}

    def scored(which: int, log_name: str, extra: dict[str, str] | None = None, target: dt.date = day) -> ForkedChild:
        if target == day:
            _write_raw(settings, day, raws[which])
        return forks.run(["run", JOB, "--date", target.isoformat()], logs / log_name, {**forks.env, **(extra or {})})

    if scored(0, "clean.log").returncode != 0:
        raise RuntimeError(f"the clean run failed; see {logs / 'clean.log'}")
    recovered_by: Counter[str] = Counter()
    for trial in range(report.trials):
        point = points[trial % len(points)]
        current = configured_warehouse(settings).latest_partition_runs(JOB, first_date=day, last_date=day)[0]
        previous_run = next(iter(_partition_runs(settings, day)["parquet predictions"]))
        which = 1 - published_raw.get(previous_run, 0)
        killed = scored(which, f"trial-{trial:03d}.log", {"SCORING_CRASH_AT": point})
        if killed.returncode != -signal.SIGKILL:
            report.violations.append(
                f"trial {trial} ({point}): the run was not killed (exit {killed.returncode}); see trial-{trial:03d}.log"
            )
            continue
        report.kills += 1
        runs = configured_warehouse(settings).latest_partition_runs(JOB, first_date=day, last_date=day)
        killed_run = runs[0]["run_id"] if runs and runs[0]["run_id"] != current["run_id"] else None
        committed = point in COMMITTED_POINTS
        if committed:
            report.rolled_forward += 1
            expected_run = killed_run
        else:
            report.rolled_back += 1
            expected_run = previous_run
        # At rest right after the kill, every Parquet dataset still shows one run (one pointer).
        parquet_runs = {w: r for w, r in _partition_runs(settings, day).items() if w.startswith("parquet")}
        if len(set().union(*parquet_runs.values()) - {"<missing>"}) != 1:
            report.violations.append(
                f"trial {trial} ({point}): right after the kill Parquet mixes runs: {parquet_runs}"
            )
        if trial % 2 == 0:
            how = "score recover"
            done = forks.run(["recover", JOB], logs / f"recover-{trial:03d}.log")
        else:
            how = "next run start"
            done = scored(0, f"next-{trial:03d}.log", target=other_day)
        recovered_by[how] += 1
        if done.returncode != 0:
            report.violations.append(f"trial {trial} ({point}): {how} failed (exit {done.returncode})")
            continue
        if expected_run is None:
            report.violations.append(f"trial {trial} ({point}): the killed run has no ledger row")
            continue
        if committed:
            published_raw[expected_run] = which
        surviving_raw = raws[published_raw.get(expected_run, 0)]
        report.violations += [
            f"trial {trial} ({point}, {how}): {p}"
            for p in _consistency_problems(settings, day, expected_run, surviving_raw)
        ]
        status = {
            r["run_id"]: r["status"]
            for r in configured_warehouse(settings).latest_partition_runs(JOB, first_date=day, last_date=day)
        }
        if killed_run and status.get(killed_run) not in (None, "succeeded" if committed else "failed"):
            report.violations.append(f"trial {trial} ({point}): the killed run ended {status.get(killed_run)}")
        report.partitions_checked += 1
    report.recovered_by = dict(recovered_by)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--data-dir", type=Path, help="a data dir with raw data and a model; default: a fresh demo in a temp dir"
    )
    parser.add_argument("--warehouse-url", help="PostgreSQL URL; default: the DuckDB file of the data dir")
    parser.add_argument(
        "--mode",
        choices=("random", "publish"),
        default="random",
        help="random kills, or kills at each point inside publish",
    )
    args = parser.parse_args()
    from tasks.demo.setup import prepared_demo

    with tempfile.TemporaryDirectory(prefix="crash-trials-") as tmp:
        data_dir = args.data_dir or Path(tmp) / "data"
        env = {**os.environ, "SCORING_DATA_DIR": str(data_dir), "SCORING_LOCK_WAIT_S": "60"}
        if args.warehouse_url:
            env["SCORING_WAREHOUSE_URL"] = args.warehouse_url
        settings = Settings(data_dir=data_dir, warehouse_url=args.warehouse_url)
        if args.data_dir is None:
            plan = prepared_demo(settings, days=2, rows_per_day=3000, train_days=5, seed=7, end=dt.date(2026, 3, 10))
            day = plan.scoring_dates[-1]
        else:
            day = max(
                dt.date.fromisoformat(p.name.removeprefix("date="))
                for p in settings.inside_data_root("raw", JOB).glob("date=*")
            )
        if args.mode == "publish":
            other = day - dt.timedelta(days=1)
            report = publish_crash_trials(settings, day, other, trials=args.trials, env=env, logs=Path(tmp) / "logs")
        else:
            report = crash_trials(settings, day, trials=args.trials, seed=args.seed, env=env, logs=Path(tmp) / "logs")
    print(
        json.dumps(
            {
                "figure": f"crash_trials_{args.mode}",
                **asdict(report),
                "violations": report.violations[:20],
                "ok": report.ok,
            }
        )
    )
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
