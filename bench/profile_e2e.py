"""Profile of one end-to-end scoring run in this process (pyinstrument), with its top costs.

    .venv/bin/python bench/profile_e2e.py --rows 1000000

Runs the `score_partition` flow on the bench partition exactly as `score run` does, in this
process: imports, Prefect's ephemeral API start-up, every task, publishing and reports. pyinstrument
samples one thread per profiler, so there are two kinds of profile:

- main: the main thread from before `flows.score_partition` is imported to the flow's return:
  imports, Prefect start-up, orchestration, and the time it waits on the task runner's futures;
- tasks: every work item the thread pools run (`concurrent.futures` work items: the chunk tasks
  of the ThreadPoolTaskRunner), one profiler per item, combined. Samples of items that ran at the
  same time add up, so this tree is thread-seconds, not wall seconds.

Written under `<bench data>/profiles/<variant>-chunk<rows>/`: `<name>.txt`, `<name>.html` and
`<name>.pyisession` (`pyinstrument --load`) for both, and `top.json`.
Printed: the wall time, the top `--top` functions by self time over both (waits on locks, queues,
selectors and futures are summed apart as `idle`), and self time per component (polars, pyarrow,
xgboost, numpy, prefect, duckdb, project code, imports, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from _data import DEMO_JOB, add_data_arguments, data_from_args
from _harness import child_env, emit, print_table

IDLE_FUNCTIONS = {
    "wait",
    "acquire",
    "select",
    "poll",
    "sleep",
    "_wait_for_tstate_lock",
    "join",
    "get",
    "result",
    "run_forever",
    "_run_once",
    "epoll",
    "as_completed",
    "wait_for",
    "recv",
    "recv_into",
    "accept",
}
IDLE_FILES = ("threading.py", "selectors.py", "queue.py", "concurrent/futures/", "asyncio/", "socket.py", "ssl.py")
COMPONENTS = (
    ("polars", "polars"),
    ("pyarrow", "pyarrow"),
    ("xgboost", "xgboost"),
    ("numba", "numba"),
    ("llvmlite", "numba"),
    ("numpy", "numpy"),
    ("scipy", "scipy"),
    ("duckdb", "duckdb"),
    ("great_expectations", "great_expectations"),
    ("matplotlib", "matplotlib"),
    ("PIL", "matplotlib"),
    ("prefect", "prefect"),
    ("pydantic", "pydantic"),
    ("pydantic_core", "pydantic"),
    ("sqlalchemy", "sqlalchemy"),
    ("httpx", "httpx"),
    ("httpcore", "httpx"),
    ("anyio", "anyio/asyncio"),
    ("asyncio", "anyio/asyncio"),
    ("yaml", "yaml"),
    ("rich", "rich"),
    ("logging", "logging"),
    ("/tasks/", "project: tasks"),
    ("/flows/", "project: flows"),
    ("/cli/", "project: cli"),
)


def _component(path: str, function: str) -> str:
    if "importlib" in path or "<frozen" in path or function == "<module>":
        return "imports"
    for needle, name in COMPONENTS:
        if needle.startswith("/"):
            if needle in path:
                return name
        elif f"/{needle}/" in path or path.startswith(f"{needle}/") or f"/{needle}.py" in path:
            return name
    return "other"


def _is_idle(path: str, function: str) -> bool:
    # C functions come as "<built-in>" with names like "lock.acquire" or "socket.recv".
    name = function.rsplit(".", 1)[-1]
    return name in IDLE_FUNCTIONS and (path.startswith("<") or any(f in path for f in IDLE_FILES))


def _walk_self_times(
    frame, on_stack: frozenset, caller: str, out_self: dict, out_total: dict, components: dict
) -> None:  # noqa: ANN001
    """Self time per function and per component; a C function's time goes to its caller's component."""
    if not frame.is_synthetic:
        path = frame.file_path or ""
        key = (frame.function, frame.file_path_short or path, frame.line_no or 0)
        component = caller if path.startswith("<built-in") else _component(path, frame.function)
        self_s = frame.total_self_time
        if self_s > 0:
            if _is_idle(path, frame.function):
                components["idle (waits)"] += self_s
            else:
                out_self[key] += self_s
                components[component] += self_s
        if key not in on_stack:
            out_total[key] += frame.time
        on_stack, caller = on_stack | {key}, component
    for child in frame.children:
        _walk_self_times(child, on_stack, caller, out_self, out_total, components)


def _work_item_profiling(interval: float, sessions: list, lock: threading.Lock):  # noqa: ANN202
    """Patch concurrent.futures' work items so that each one runs under its own profiler."""
    import concurrent.futures.thread as cft

    from pyinstrument import Profiler

    original = cft._WorkItem.run

    def profiled_run(self):  # noqa: ANN001, ANN202
        profiler = Profiler(interval=interval, async_mode="disabled")
        try:
            profiler.start()
        except RuntimeError:
            return original(self)
        try:
            return original(self)
        finally:
            session = profiler.stop()
            with lock:
                sessions.append(session)

    cft._WorkItem.run = profiled_run
    return lambda: setattr(cft._WorkItem, "run", original)


def _render(session, folder: Path, name: str) -> tuple[Path, Path]:  # noqa: ANN001
    from pyinstrument.renderers import ConsoleRenderer, HTMLRenderer

    text = folder / f"{name}.txt"
    html = folder / f"{name}.html"
    session.save(folder / f"{name}.pyisession")  # reopen with `pyinstrument --load FILE` or Session.load
    text.write_text(ConsoleRenderer(unicode=True, color=False, show_all=False).render(session))
    html.write_text(HTMLRenderer().render(session))
    return text, html


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    add_data_arguments(parser, rows=1_000_000)
    parser.add_argument(
        "--variant",
        default="non_approved",
        choices=("off", "non_approved", "every_row"),
        help="reason codes, as in e2e.py (default non_approved, the shipped spec)",
    )
    parser.add_argument("--chunk-rows", type=int, default=None, help="rows per chunk (default: the job's)")
    parser.add_argument("--interval", type=float, default=0.002, help="sampling interval in seconds (default 0.002)")
    parser.add_argument("--top", type=int, default=15, help="functions listed (default 15)")
    args = parser.parse_args()

    data = data_from_args(args)
    from e2e import variant_jobs_dir

    jobs_dir, for_decisions = variant_jobs_dir(args.data_dir.resolve(), args.variant)
    os.environ.update(child_env(data, jobs_dir=jobs_dir))
    if "prefect" in sys.modules:
        print("warning: prefect was imported before PREFECT_HOME was set", file=sys.stderr)

    import datetime as dt

    from pyinstrument import Profiler

    sessions: list = []
    lock = threading.Lock()
    restore = _work_item_profiling(args.interval, sessions, lock)
    main_profiler = Profiler(interval=args.interval)
    start = time.perf_counter()
    main_profiler.start()
    try:
        from flows.score_partition import score_partition

        imported = time.perf_counter()
        result = score_partition(DEMO_JOB, dt.date.fromisoformat(data.date), args.chunk_rows or 0)
    finally:
        main_session = main_profiler.stop()
        restore()
    wall = time.perf_counter() - start

    from pyinstrument.session import Session

    folder = data.data_dir / "profiles" / f"{args.variant}-chunk{args.chunk_rows or 'job'}"
    folder.mkdir(parents=True, exist_ok=True)
    written = {"main": _render(main_session, folder, "main")}
    tasks_session = None
    for session in sessions:
        tasks_session = session if tasks_session is None else Session.combine(tasks_session, session)
    if tasks_session is not None:
        written["tasks"] = _render(tasks_session, folder, "tasks")

    self_s: dict = defaultdict(float)
    total_s: dict = defaultdict(float)
    components: dict = defaultdict(float)
    for session in filter(None, (main_session, tasks_session)):
        root = session.root_frame()
        if root is not None:
            _walk_self_times(root, frozenset(), "other", self_s, total_s, components)
    top = sorted(self_s.items(), key=lambda kv: kv[1], reverse=True)[: args.top]
    busy = sum(v for k, v in components.items() if k != "idle (waits)")
    figure = {
        "bench": "profile_e2e",
        "variant": args.variant,
        "for_decisions": for_decisions,
        "rows": data.rows,
        "chunk_rows": args.chunk_rows,
        "wall_s": round(wall, 2),
        "import_s": round(imported - start, 2),
        "main_thread_s": round(main_session.duration, 2),
        "task_thread_s": round(tasks_session.duration if tasks_session else 0.0, 2),
        "work_items": len(sessions),
        "busy_s": round(busy, 2),
        "idle_s": round(components.get("idle (waits)", 0.0), 2),
        "rows_scored": result.rows_scored,
        "components": {k: round(v, 2) for k, v in sorted(components.items(), key=lambda kv: kv[1], reverse=True)},
        "top_self": [
            {"function": f, "where": f"{p}:{line}", "self_s": round(s, 2), "total_s": round(total_s[(f, p, line)], 2)}
            for (f, p, line), s in top
        ],
        "profiles": {name: [str(p) for p in paths] for name, paths in written.items()},
    }
    (folder / "top.json").write_text(json.dumps(figure, indent=2) + "\n")
    emit(figure)
    print_table(
        f"top {args.top} self time, {data.rows:,} rows, reasons {args.variant} ({wall:.1f} s wall; "
        f"{figure['busy_s']:.1f} s busy in all threads)",
        ["function", "self s", "total s", "where"],
        [[t["function"], t["self_s"], t["total_s"], t["where"][-70:]] for t in figure["top_self"]],
    )
    print_table(
        "self time per component (all threads)",
        ["component", "self s", "share of busy"],
        [[k, round(v, 2), "-" if k == "idle (waits)" else f"{v / busy:.0%}"] for k, v in figure["components"].items()],
    )
    print(f"profiles: {folder}", file=sys.stderr)


if __name__ == "__main__":
    main()
