"""Where the wall of a terminal `score run` goes, with and without a Prefect server. JSON lines.

    .venv/bin/python bench/ephemeral.py --rows 20000 --repeat 3

`score run credit_risk --date D` of the bench partition as a child process, in two modes:

- ephemeral: PREFECT_API_URL unset, so Prefect starts its temporary API server in a subprocess,
  as a terminal run on a machine without a server does;
- server: against a `prefect server` started here first, as deployments and a set-up workstation run.

Each child's wall is split by the timestamps of its own log lines:

- start-up: spawn to the first line of Prefect (ephemeral: "Starting temporary server"; server:
  the flow run's first line): the interpreter, imports, and `score run`'s check of the spec, suite
  and model before Prefect starts (so a mistake costs one line, not a run); `imports_s` is the
  same imports timed alone in a child of their own;
- Prefect API start (ephemeral only): "Starting temporary server" to the flow run's first line:
  the temporary server's process, database and app start, then the flow run's creation;
- scoring: the flow run's first line to `summarize-run` finished: prepare, lease, guards,
  features, inference, prediction and staging;
- publishing: to `monitor-decisions` finished: the warehouse transaction, the Parquet swap, the
  run page, artifacts and decision monitoring;
- end: to the child's exit: the flow run's end, the temporary server's stop, interpreter exit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import time
from pathlib import Path

from _data import DEMO_JOB, BenchData, add_data_arguments, data_from_args
from _harness import (
    PYTHON,
    SCORE,
    add_repeat_argument,
    checked,
    child_env,
    emit,
    last_json_line,
    measured_child,
    median,
    prefect_api,
    print_table,
)

_STAMP = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) \| ")
_IMPORTS = (
    "import json, time\n"
    "t = time.perf_counter()\n"
    "import cli.score, flows.score_partition, xgboost, numba, scipy.stats\n"
    "print(json.dumps({'imports_s': time.perf_counter() - t}))\n"
)
PHASES = ("startup_s", "api_start_s", "scoring_s", "publishing_s", "end_s")


def _line_times(log: Path, day: dt.date) -> list[tuple[float, str]]:
    """(epoch seconds, text) of each timestamped log line; the log's clock is local time."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        match = _STAMP.match(line)
        if match:
            h, m, s, ms = (int(g) for g in match.groups())
            stamp = dt.datetime.combine(day, dt.time(h, m, s, ms * 1000)).timestamp()
            out.append((stamp, line[match.end() :]))
    return out


def _first(lines: list[tuple[float, str]], needle: str) -> float:
    for stamp, text in lines:
        if needle in text:
            return stamp
    raise SystemExit(f"error: no log line with {needle!r}")


def phases(log: Path, *, spawned: float, wall_s: float, ephemeral: bool) -> dict[str, float]:
    lines = _line_times(log, dt.datetime.fromtimestamp(spawned).date())
    flow_start = _first(lines, "Beginning flow run")
    prefect_start = _first(lines, "Starting temporary server") if ephemeral else flow_start
    scored = _first(lines, "Task run 'summarize-run")
    published = _first(lines, "Task run 'monitor-decisions")
    exited = spawned + wall_s
    return {
        "startup_s": round(prefect_start - spawned, 3),
        "api_start_s": round(flow_start - prefect_start, 3),
        "scoring_s": round(scored - flow_start, 3),
        "publishing_s": round(published - scored, 3),
        "end_s": round(exited - published, 3),
    }


def measured_run(data: BenchData, mode: str, run_index: int) -> dict:
    log = data.data_dir / "bench-logs" / f"ephemeral-{mode}-{run_index}.log"
    spawned = time.time()
    run = checked(
        measured_child([SCORE, "--verbose", "run", DEMO_JOB, "--date", data.date], env=child_env(data), log_path=log),
        f"score run ({mode})",
    )
    return {
        "wall_s": round(run.wall_s, 3),
        **phases(log, spawned=spawned, wall_s=run.wall_s, ephemeral=mode == "ephemeral"),
        "maxrss_mb": round(run.maxrss_mb, 1),
        "log": str(log),
    }


def measured_imports(data: BenchData, run_index: int) -> float:
    log = data.data_dir / "bench-logs" / f"ephemeral-imports-{run_index}.log"
    run = checked(measured_child([PYTHON, "-c", _IMPORTS], env=child_env(data), log_path=log), "imports")
    return round(last_json_line(run.stdout)["imports_s"], 3)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    add_data_arguments(parser, rows=20_000)
    add_repeat_argument(parser)
    args = parser.parse_args()
    data = data_from_args(args)
    runs: dict[str, list[dict]] = {"ephemeral": [], "server": []}
    imports = [measured_imports(data, i) for i in range(args.repeat)]
    with prefect_api(data, "ephemeral"):
        for i in range(args.repeat):
            runs["ephemeral"].append(measured_run(data, "ephemeral", i))
            print(
                f"round {i + 1}/{args.repeat}: ephemeral {runs['ephemeral'][-1]['wall_s']:.2f} s",
                file=sys.stderr,
                flush=True,
            )
    with prefect_api(data, "server"):
        for i in range(args.repeat):
            runs["server"].append(measured_run(data, "server", i))
            print(
                f"round {i + 1}/{args.repeat}: server {runs['server'][-1]['wall_s']:.2f} s", file=sys.stderr, flush=True
            )
    rows = []
    for mode, measured in runs.items():
        figure = {
            "bench": "ephemeral",
            "mode": mode,
            "rows": data.rows,
            "repeat": args.repeat,
            "wall_s": median([r["wall_s"] for r in measured]),
            "imports_s": median(imports),
            **{p: median([r[p] for r in measured]) for p in PHASES},
            "runs": measured,
        }
        emit(figure)
        rows.append([mode, figure["wall_s"], figure["imports_s"], *(figure[p] for p in PHASES)])
    print_table(
        f"score run of {data.rows:,} rows: where the wall goes (median of {args.repeat})",
        ["API", "wall s", "imports s", "start-up s", "API start s", "scoring s", "publishing s", "end s"],
        rows,
    )


if __name__ == "__main__":
    main()
