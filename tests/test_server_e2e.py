"""A real Prefect server, the deployments of prefect.yaml, a process worker and the UI's run form.

The module fixture starts `prefect server start` on a free port with its own PREFECT_HOME, creates
the process work pool, runs `prefect deploy --all --no-prompt` from the repository root and starts
a worker whose flow runs write into a tmp copy of the demo data. Test A triggers the backfill
deployment through the REST API the way the UI does and checks the warehouse, artifacts and run
reports; test B opens the deployment's custom run form in headless chromium.
Everything started here is stopped in the fixture's `finally`, also when a step fails.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest
from conftest import DEMO_JOB, DemoEnv
from offline_browser import CHROMIUM_ARGS, chromium

from tasks import TELEMETRY_OFF

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[1]
PREFECT = str(Path(sys.executable).parent / "prefect")
POOL = "scoring-process"


@dataclass(frozen=True)
class LiveServer:
    url: str  # http://127.0.0.1:PORT
    data_dir: Path
    logs_dir: Path
    env: dict[str, str]
    reports_url: str
    """SCORING_REPORT_BASE_URL of the worker's runs: the output folder served over HTTP."""

    @property
    def api(self) -> str:
        return f"{self.url}/api"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "<no log>"


def _child_env(prefect_home: Path, api_url: str, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "SCORING_"))}
    env.update(
        PREFECT_HOME=str(prefect_home),
        PREFECT_API_URL=api_url,
        **TELEMETRY_OFF,
        PREFECT_WORKER_QUERY_SECONDS="2",
        SCORING_DATA_DIR=str(data_dir),
        PYTHONUNBUFFERED="1",
    )
    return env


def _run_cli(args: list[str], env: dict[str, str], logs_dir: Path, name: str, timeout: float) -> None:
    log = logs_dir / f"{name}.log"
    with log.open("w") as out:
        proc = subprocess.run(
            [PREFECT, *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
        )
    assert proc.returncode == 0, f"prefect {' '.join(args)} exited {proc.returncode}:\n{_tail(log)}"


def _stop(proc: subprocess.Popen | None, first: int, grace: float) -> None:
    """Signal the process group (a worker's flow-run children too), escalating to SIGKILL."""
    if proc is None:
        return
    for sig, wait in ((first, grace), (signal.SIGTERM, 15.0), (signal.SIGKILL, 30.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    # Leftovers of the group (a server's or worker's children) go too.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@pytest.fixture(scope="module")
def live_server(demo_env: DemoEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("live-server")
    data_dir = base / "data"
    for part in ("raw", "labels", "models"):
        shutil.copytree(demo_env.data_dir / part, data_dir / part)
    prefect_home = base / "prefect-home"
    prefect_home.mkdir()
    logs_dir = base / "logs"
    logs_dir.mkdir()
    url = f"http://127.0.0.1:{_free_port()}"
    # The output folder served over HTTP, as an operator serves it behind SCORING_REPORT_BASE_URL: the analyst's
    # walk follows the links the artifacts carry.
    (data_dir / "output").mkdir(parents=True, exist_ok=True)
    reports_url = f"http://127.0.0.1:{_free_port()}"
    env = {**_child_env(prefect_home, f"{url}/api", data_dir), "SCORING_REPORT_BASE_URL": reports_url}

    server = worker = reports = None
    server_log = (logs_dir / "server.log").open("w")
    worker_log = (logs_dir / "worker.log").open("w")
    reports_log = (logs_dir / "reports.log").open("w")
    try:
        reports = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                "--directory",
                str(data_dir / "output"),
                reports_url.rsplit(":", 1)[1],
            ],
            cwd=base,
            stdout=reports_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        port = url.rsplit(":", 1)[1]
        server = subprocess.Popen(
            [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", port],
            cwd=base,
            env=env,
            stdout=server_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, f"server exited {server.returncode}:\n{_tail(logs_dir / 'server.log')}"
            try:
                if httpx.get(f"{url}/api/health", timeout=5).json() is True:
                    break
            except (httpx.HTTPError, ValueError):
                pass
            assert time.monotonic() < deadline, f"server not healthy in 120 s:\n{_tail(logs_dir / 'server.log')}"
            time.sleep(0.5)

        _run_cli(["work-pool", "create", POOL, "--type", "process", "--overwrite"], env, logs_dir, "pool", 120)
        _run_cli(["deploy", "--all", "--no-prompt"], env, logs_dir, "deploy", 300)

        worker = subprocess.Popen(
            [PREFECT, "worker", "start", "--pool", POOL],
            cwd=base,
            env=env,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        yield LiveServer(url=url, data_dir=data_dir, logs_dir=logs_dir, env=env, reports_url=reports_url)
    finally:
        _stop(worker, signal.SIGINT, 30.0)
        _stop(server, signal.SIGINT, 30.0)
        _stop(reports, signal.SIGTERM, 10.0)
        server_log.close()
        worker_log.close()
        reports_log.close()


def _backfill_deployment(live: LiveServer) -> dict:
    r = httpx.get(f"{live.api}/deployments/name/backfill/backfill", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _flow_run_logs(live: LiveServer, flow_run_id: str) -> str:
    try:
        r = httpx.post(
            f"{live.api}/logs/filter",
            json={"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "sort": "TIMESTAMP_ASC", "limit": 200},
            timeout=30,
        )
        return "\n".join(f"{row['level']} {row['name']} {row['message']}" for row in r.json())
    except Exception as exc:  # noqa: BLE001  (only for a failure message)
        return f"<logs unavailable: {exc!r}>"


def _artifacts(live: LiveServer, flow_run_id: str) -> dict[str, dict]:
    r = httpx.post(
        f"{live.api}/artifacts/filter",
        json={"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return {a["key"]: a for a in r.json() if a.get("key")}


def _started_backfill(live: LiveServer, parameters: dict) -> str:
    """The id of a flow run of the backfill deployment, created the way the UI's run form does."""
    deployment = _backfill_deployment(live)
    r = httpx.post(
        f"{live.api}/deployments/{deployment['id']}/create_flow_run", json={"parameters": parameters}, timeout=30
    )
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _final_state(live: LiveServer, run_id: str, expected: str, timeout: float = 240) -> dict:
    """The flow run's state once final; the test fails, with the run's logs, unless it is `expected`."""
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = httpx.get(f"{live.api}/flow_runs/{run_id}", timeout=30).json()["state"]
        if state and state["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            break
        time.sleep(1)
    assert state and state["type"] == expected, (
        f"flow run {state and state['type']} (expected {expected}): {state and state.get('message')}\n"
        f"{_flow_run_logs(live, run_id)}\nworker log:\n{_tail(live.logs_dir / 'worker.log')}"
    )
    return state


def _logs_with(live: LiveServer, run_id: str, text: str, timeout: float = 60) -> str:
    """The flow run's logs in the API once they hold `text`: a flow-run process sends its last lines in a batch
    after its final state."""
    deadline = time.monotonic() + timeout
    while text not in (logs := _flow_run_logs(live, run_id)) and time.monotonic() < deadline:
        time.sleep(1)
    return logs


def test_backfill_deployment_runs_on_the_worker(live_server: LiveServer, demo_env: DemoEnv) -> None:
    d1, d2 = demo_env.plan.scoring_dates[:2]
    run_id = _started_backfill(
        live_server,
        {
            "job": DEMO_JOB,
            "start_date": d1.isoformat(),
            "end_date": d2.isoformat(),
            "mode": "all",
            "dry_run": False,
            "concurrency": 2,
        },
    )
    _final_state(live_server, run_id, "COMPLETED")

    con = duckdb.connect(str(live_server.data_dir / "warehouse.duckdb"), read_only=True)
    try:
        runs = con.execute(
            "SELECT partition_date, status FROM runs WHERE job = ? ORDER BY partition_date", [DEMO_JOB]
        ).fetchall()
        predicted = dict(
            con.execute(
                "SELECT partition_date, count(*) FROM predictions WHERE job = ? GROUP BY 1", [DEMO_JOB]
            ).fetchall()
        )
    finally:
        con.close()
    assert runs == [(d1, "succeeded"), (d2, "succeeded")], runs
    assert predicted.get(d1, 0) > 0 and predicted.get(d2, 0) > 0, predicted

    artifacts = _artifacts(live_server, run_id)
    assert artifacts["backfill-outcomes"]["type"] == "table", artifacts["backfill-outcomes"]
    assert float(artifacts["backfill-progress"]["data"]) == 100.0, artifacts["backfill-progress"]
    # The days' table reads outcome and reason first, the run page last; the run is named after what it scored.
    outcomes = json.loads(artifacts["backfill-outcomes"]["data"])
    assert [(o["date"], o["outcome"], o["link"]) for o in outcomes] == [
        (d.isoformat(), "succeeded", f"{live_server.reports_url}/{DEMO_JOB}/reports/html/date={d}.html")
        for d in (d1, d2)
    ]
    assert list(outcomes[0])[:3] == ["date", "outcome", "reason"] and list(outcomes[0])[-1] == "link"
    assert (
        httpx.get(f"{live_server.api}/flow_runs/{run_id}", timeout=30).json()["name"]
        == f"{DEMO_JOB} {d1}…{d2} mode all"
    )

    html = live_server.data_dir / "output" / DEMO_JOB / "reports" / "html"
    for d in (d1, d2):
        assert (html / f"date={d.isoformat()}.html").is_file(), sorted(p.name for p in html.glob("*"))

    # The worker's flow-run process set up Prefect's logging before the product's loggers existed: their lines
    # reach each partition run's UI log all the same, and its log file, named after the partition's run.
    assert (live_server.data_dir / "output" / "logs" / f"backfill-{run_id}.log").is_file()
    backfill_log = f"{live_server.reports_url}/logs/backfill-{run_id}.log"
    assert f"this run's log file: {backfill_log}" in _logs_with(live_server, run_id, "this run's log file")
    assert httpx.get(backfill_log, timeout=30).status_code == 200
    for d in (d1, d2):
        files = list((live_server.data_dir / "output" / DEMO_JOB / "logs" / f"date={d.isoformat()}").glob("*.log"))
        assert len(files) == 1, files
        partition_run = httpx.get(f"{live_server.api}/flow_runs/{files[0].stem}", timeout=30).json()
        assert partition_run["parameters"]["date"] == d.isoformat() and partition_run["parent_task_run_id"], (
            partition_run
        )
        scored = f"scored {DEMO_JOB} {d.isoformat()}: "
        ui_log, file_log = _logs_with(live_server, files[0].stem, scored), files[0].read_text()
        for text in (ui_log, file_log):
            line = next((row for row in text.splitlines() if scored in row), "")
            assert f" {predicted[d]} scored" in line, text[-3000:]
            assert "[PRED] entity=credit_risk" in text and "[INF] model_name=credit_risk" in text, text[-3000:]
        # At the terminal's level, under the product's logger name.
        assert f"20 scoring.run {scored}" in ui_log, ui_log


def test_a_failed_run_shows_one_sentence_in_the_ui(live_server: LiveServer, demo_env: DemoEnv) -> None:
    from tasks.errors import user_facing_error
    from tasks.runs.calendar import backfill_dates

    d1, d2 = demo_env.plan.scoring_dates[:2]
    with pytest.raises(Exception) as refused:
        backfill_dates(demo_env.settings, d2, d1)
    sentence = user_facing_error(refused.value)[0]
    run_id = _started_backfill(live_server, {"job": DEMO_JOB, "start_date": d2.isoformat(), "end_date": d1.isoformat()})
    state = _final_state(live_server, run_id, "FAILED")

    # At once, before any partition runs, and the run's header says why in the `error:` line's words, not
    # "Flow run encountered an exception: PartitionError: …".
    assert state["message"] == sentence and f"the end date {d1} is before the start date {d2}" in sentence, state
    assert (
        httpx.post(
            f"{live_server.api}/flow_runs/filter",
            json={"flow_runs": {"parent_flow_run_id": {"any_": [run_id]}}},
            timeout=30,
        ).json()
        == []
    )
    ui_log = _logs_with(live_server, run_id, "Finished in state")
    assert f"error: {sentence}" in ui_log and "Traceback" not in ui_log, ui_log
    # A refusal before the run logged anything leaves no log file: nothing is written for bad input.
    assert "this run's log file" not in ui_log, ui_log
    assert not (live_server.data_dir / "output" / "logs" / f"backfill-{run_id}.log").exists()


@contextlib.contextmanager
def _ui_page(*, height: int) -> Iterator[Any]:
    """A chromium page 1400 px wide that reaches 127.0.0.1 only (the Prefect server and the served reports): what
    the UI needs from elsewhere is aborted. Skipped without chromium here, a failure in CI."""
    exe = chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": height})
            page.set_default_timeout(60_000)
            page.route(
                "**/*",
                lambda route: route.continue_() if route.request.url.startswith("http://127.0.0.1:") else route.abort(),
            )
            yield page
        finally:
            browser.close()


def _param(page, name: str, *, optional: bool = False):
    """The form group of one parameter, found by its label (`name`, or `name (Optional)`)."""
    label = f"{name} (Optional)" if optional else name
    return (
        page.locator("div.group").filter(has=page.locator("label", has_text=re.compile(rf"^{re.escape(label)}$"))).first
    )


def _expect_options(page, trigger, options: list[str]) -> None:
    """Open a select, check its options are listed, and close it again."""
    from playwright.sync_api import expect

    trigger.click()
    listbox = page.get_by_role("listbox")
    for option in options:
        expect(listbox.get_by_role("option", name=option, exact=True)).to_be_visible()
    page.keyboard.press("Escape")
    expect(listbox).to_have_count(0)


def test_backfill_run_form_renders_typed_parameters(live_server: LiveServer, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)  # generous: a loaded CI machine renders slowly

    deployment = _backfill_deployment(live_server)
    with _ui_page(height=1800) as page:
        page.goto(f"{live_server.url}/v2/deployments/deployment/{deployment['id']}/run", wait_until="domcontentloaded")
        # The parameter form renders once the deployment's schema has loaded.
        expect(_param(page, "chunk_rows", optional=True)).to_be_visible(timeout=90_000)

        job = _param(page, "job")
        # No job is preselected (prefect.yaml names none): the list is the jobs configured where `prefect deploy` ran.
        expect(job.get_by_role("button", name="Select job")).not_to_have_text("credit_risk")
        _expect_options(page, job.get_by_role("button", name="Select job"), [DEMO_JOB])

        for name in ("start_date", "end_date"):
            picker = _param(page, name).locator("button[aria-haspopup='dialog']")
            expect(picker).to_have_text(re.compile("Pick a date"))

        mode = _param(page, "mode", optional=True)
        expect(mode.get_by_role("button", name="Select mode")).to_have_text("all")
        _expect_options(page, mode.get_by_role("button", name="Select mode"), ["all", "missing", "failed"])

        expect(_param(page, "dry_run", optional=True).get_by_role("switch")).to_have_attribute("aria-checked", "false")
        expect(_param(page, "concurrency", optional=True).locator("input")).to_have_value("1")

        # A plain number, no int | None toggle ("Property is type None"); 0 keeps the job's chunk size.
        chunk_rows = _param(page, "chunk_rows", optional=True)
        expect(chunk_rows.locator("input")).to_have_value("0")
        expect(chunk_rows.get_by_role("tab")).to_have_count(0)
        # Every parameter says what it means, in the form itself; the engineering knobs say so.
        for name, optional, words in (
            ("job", False, "one of the specs in jobs/"),
            ("start_date", False, "not the day it is scored"),
            ("end_date", False, "inclusive"),
            ("mode", True, "missing, those never scored"),
            ("dry_run", True, "nothing is scored or written"),
            ("concurrency", True, "Engineering: how many days"),
            ("chunk_rows", True, "Engineering: rows per chunk"),
        ):
            expect(_param(page, name, optional=optional).get_by_text(words)).to_be_visible()

        page.wait_for_load_state("networkidle", timeout=60_000)
        shot = tmp_path / "run-form.png"
        page.screenshot(path=str(shot), full_page=True)

    import matplotlib.image as mpimg
    import numpy as np

    pixels = mpimg.imread(str(shot))
    assert pixels.ndim == 3 and len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 1, "blank screenshot"


def test_outcomes_run_form_is_typed_and_its_empty_dates_are_accepted(live_server: LiveServer, tmp_path: Path) -> None:
    """The outcomes form as an analyst leaves it: `all` preselected, two empty date pickers, no None toggle; submitted
    untouched, the server accepts the run with null dates (the flow's own defaults). The run is scheduled a day ahead
    on its way to the server, so the worker leaves it alone and the backfill test's warehouse stays its own."""
    import json

    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
    r = httpx.get(f"{live_server.api}/deployments/name/outcomes/outcomes", timeout=30)
    assert r.status_code == 200, r.text
    deployment = r.json()
    assert "06:00" in deployment["description"] and deployment["enforce_parameter_schema"] is False

    def a_day_ahead(route) -> None:
        body = json.loads(route.request.post_data)
        body["state"]["state_details"]["scheduled_time"] = time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 86_400)
        )
        route.continue_(post_data=json.dumps(body))

    with _ui_page(height=1200) as page:
        page.route("**/create_flow_run", a_day_ahead)
        page.goto(f"{live_server.url}/v2/deployments/deployment/{deployment['id']}/run", wait_until="domcontentloaded")
        expect(_param(page, "end_date", optional=True)).to_be_visible(timeout=90_000)

        job = _param(page, "job", optional=True)
        expect(job.get_by_role("button", name="Select job")).to_have_text("all")
        _expect_options(page, job.get_by_role("button", name="Select job"), ["all", DEMO_JOB])
        for name in ("start_date", "end_date"):
            group = _param(page, name, optional=True)
            expect(group.locator("button[aria-haspopup='dialog']")).to_have_text(re.compile("Pick a date"))
            expect(group.get_by_text("leave it empty")).to_be_visible()
        for name in ("job", "start_date", "end_date"):
            expect(_param(page, name, optional=True).get_by_role("tab")).to_have_count(0)
        expect(page.get_by_text('Property is type "None"')).to_have_count(0)
        page.screenshot(path=str(tmp_path / "outcomes-form.png"), full_page=True)

        for _ in range(3):
            with page.expect_response(lambda resp: resp.url.endswith("/create_flow_run")) as created:
                page.get_by_role("button", name="Submit").click()
            # 503: the server's database was busy (a loaded machine), which Prefect marks as worth a retry.
            if created.value.status != 503:
                break
            time.sleep(2)
        assert created.value.status == 201, created.value.text()
        run = created.value.json()
    try:
        assert run["parameters"] == {"job": "all", "start_date": None, "end_date": None}, run["parameters"]
        assert run["state"]["type"] == "SCHEDULED"
    finally:
        httpx.delete(f"{live_server.api}/flow_runs/{run['id']}", timeout=30)


SHOTS = ROOT / "build" / "screenshots" / "analyst-walk"
"""The analyst walk's screenshots, one file per step (build/ is ignored by git); look at them after a change to the UI's
artifacts, names or logs."""


def _backfill_run_ids(live: LiveServer, deployment_id: str) -> set[str]:
    r = httpx.post(
        f"{live.api}/flow_runs/filter",
        timeout=30,
        json={"flow_runs": {"deployment_id": {"any_": [deployment_id]}}, "limit": 200},
    )
    assert r.status_code == 200, r.text
    return {run["id"] for run in r.json()}


def _submitted_backfill(page, live: LiveServer, *, start: str, end: str, mode: str = "all") -> str:
    """Fill the backfill deployment's run form as an analyst does (the job and mode picked from their lists, dates
    typed as JSON), submit it, open the new run's page and return its id."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect

    deployment_id = _backfill_deployment(live)["id"]
    before = _backfill_run_ids(live, deployment_id)
    page.goto(f"{live.url}/v2/deployments/deployment/{deployment_id}/run", wait_until="domcontentloaded")
    expect(_param(page, "chunk_rows", optional=True)).to_be_visible(timeout=90_000)
    _param(page, "job").get_by_role("button", name="Select job").click()
    page.get_by_role("listbox").get_by_role("option", name=DEMO_JOB, exact=True).click()
    for name, value in (("start_date", start), ("end_date", end)):
        group = _param(page, name)
        group.get_by_role("button", name="Open menu").click()
        page.get_by_role("menuitem", name="Use JSON Input").click()
        editor = group.locator(".cm-content")
        # fill(), not key presses: the editor closes a typed quote itself, and a loaded machine's keys race it.
        editor.fill(f'"{value}"')
        expect(editor).to_have_text(f'"{value}"')
    if mode != "all":
        _param(page, "mode", optional=True).get_by_role("button", name="Select mode").click()
        page.get_by_role("listbox").get_by_role("option", name=mode, exact=True).click()
    # The new run from the form's own request (the UI's "View run" toast may be gone before a loaded machine's browser
    # looks); a click while the form still validates its last edit sends none, so an unanswered click is made again.
    for _ in range(3):
        try:
            with page.expect_response(
                lambda r: r.request.method == "POST" and r.url.endswith("/create_flow_run"), timeout=30_000
            ) as created:
                page.get_by_role("button", name="Submit").click()
            break
        except PlaywrightTimeout:
            continue
    else:
        _shot(page, "submit-failed")
        pytest.fail(f"the form sent no run; the page: {SHOTS / 'submit-failed.png'}")
    assert created.value.status == 201, created.value.text()
    run_id = created.value.json()["id"]
    assert _backfill_run_ids(live, deployment_id) - before == {run_id}
    page.goto(f"{live.url}/v2/runs/flow-run/{run_id}", wait_until="domcontentloaded")
    return run_id


def _shot(page, step: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.wait_for_load_state("networkidle", timeout=60_000)
    page.screenshot(path=str(SHOTS / f"{step}.png"), full_page=True)


def _linked_url(artifact: dict) -> str:
    """The address of a link artifact (Prefect keeps it as Markdown, `[text](url)`)."""
    found = re.fullmatch(r"\[.*\]\((\S+)\)", artifact["data"].strip(), re.S)
    assert found, artifact
    return found.group(1)


def _page_title(html: str) -> str:
    found = re.search(r"<title>(.*?)</title>", html, re.S)
    return found.group(1).strip() if found else ""


def test_analyst_walk_in_the_ui(live_server: LiveServer, demo_env: DemoEnv) -> None:
    """What an analyst walks the morning after, in chromium against the live server and worker: a backfill submitted
    from the form, a partition run opened by its name, its business log lines, its key numbers first, the run page,
    model card and monitoring page followed from their artifacts (HTTP 200, the page's title), an end date before the
    start refused in one sentence with no traceback in the UI, then `mode: failed` finding the day refused for want
    of raw data. Each step leaves a screenshot in build/screenshots/analyst-walk/."""
    from playwright.sync_api import expect

    from tasks.errors import user_facing_error
    from tasks.runs.calendar import backfill_dates

    expect.set_options(timeout=60_000)
    shutil.rmtree(SHOTS, ignore_errors=True)
    day = demo_env.plan.scoring_dates[-1]
    no_raw = day + dt.timedelta(days=1)
    assert not (live_server.data_dir / "raw" / DEMO_JOB / f"date={no_raw}").exists()
    key = DEMO_JOB.replace("_", "-")
    with _ui_page(height=1000) as page:
        # 1. A backfill of two days from the form; the second has no raw data, so the run fails naming it.
        backfill_id = _submitted_backfill(page, live_server, start=day.isoformat(), end=no_raw.isoformat())
        state = _final_state(live_server, backfill_id, "FAILED", timeout=300)
        assert (
            state["message"].startswith(f"1 of 2 partition(s) failed: {DEMO_JOB} {no_raw} (")
            and "Traceback" not in state["message"]
        ), state
        page.reload(wait_until="domcontentloaded")
        expect(page.get_by_text(f"{DEMO_JOB} {day}…{no_raw} mode all").first).to_be_visible()
        expect(page.get_by_text(state["message"]).first).to_be_visible()
        _shot(page, "01-backfill-failed-day")
        # A failed day's task state is one line: no "NoneType: None" after it (Prefect's exc_info outside an except).
        assert "NoneType: None" not in _flow_run_logs(live_server, backfill_id)
        outcomes = json.loads(_artifacts(live_server, backfill_id)["backfill-outcomes"]["data"])
        assert [(o["date"], o["outcome"]) for o in outcomes] == [(str(day), "succeeded"), (str(no_raw), "🔴 failed")], (
            outcomes
        )
        # A day refused for its data (before its lease) writes no log file, as bad input writes nothing: its row
        # names the run and the reason, and its refused ledger row keeps the traceback.
        assert outcomes[1]["run_id"] and outcomes[1]["link"] == "", outcomes[1]
        assert not list((live_server.data_dir / "output" / DEMO_JOB / "logs").glob(f"date={no_raw}/*.log"))

        # 2. The partition run, opened by its name from the backfill's subflow runs; the business lines in its log.
        page.get_by_role("tab", name="Subflow Runs").click()
        page.get_by_role("link", name=f"{DEMO_JOB} {day}", exact=True).first.click()
        page.wait_for_url(re.compile(r"/runs/flow-run/[0-9a-f-]{36}"))
        partition_id = re.search(r"/runs/flow-run/([0-9a-f-]{36})", page.url).group(1)
        _logs_with(live_server, partition_id, "this run's log file")
        page.get_by_role("tab", name="Logs").click()
        expect(page.get_by_text(re.compile(rf"scored {DEMO_JOB} {day}: \d+ read, \d+ scored")).first).to_be_visible()
        _shot(page, "02-partition-log")

        # 3. Its artifacts, the key numbers first; the key numbers' table opened.
        page.get_by_role("tab", name="Artifacts").click()
        cards = page.get_by_text(re.compile(rf"^[a-z-]+-{key}$"))
        expect(cards.first).to_have_text(f"key-numbers-{key}")
        _shot(page, "03-partition-artifacts")
        cards.first.click()
        expect(page.get_by_role("cell", name="rows scored", exact=True)).to_be_visible()
        _shot(page, "04-key-numbers")
        expect(page.get_by_role("cell", name="run page", exact=True)).to_be_visible()

        # 4. The links the artifacts carry, served under SCORING_REPORT_BASE_URL: the run page and the model card.
        artifacts = _artifacts(live_server, partition_id)
        titles = {}
        for name in ("run-page", "model-card"):
            url = _linked_url(artifacts[f"{name}-{key}"])
            assert url.startswith(live_server.reports_url), url
            response = httpx.get(url, timeout=30)
            assert response.status_code == 200, (url, response.status_code)
            titles[name] = _page_title(response.text)
            page.goto(url, wait_until="load")
            expect(page).to_have_title(titles[name])
            _shot(page, f"05-{name}")
        assert DEMO_JOB in titles["run-page"] and str(day) in titles["run-page"], titles
        assert titles["model-card"] == f"Model card: {DEMO_JOB}", titles

        # ... and the monitoring page, left by an outcomes run over the scored days.
        outcomes_deployment = httpx.get(f"{live_server.api}/deployments/name/outcomes/outcomes", timeout=30).json()
        r = httpx.post(
            f"{live_server.api}/deployments/{outcomes_deployment['id']}/create_flow_run",
            timeout=30,
            json={
                "parameters": {
                    "job": DEMO_JOB,
                    "start_date": str(demo_env.plan.scoring_dates[0]),
                    "end_date": str(day),
                },
            },
        )
        assert r.status_code == 201, r.text
        outcomes_id = r.json()["id"]
        _final_state(live_server, outcomes_id, "COMPLETED", timeout=300)
        url = _linked_url(_artifacts(live_server, outcomes_id)[f"monitoring-page-{key}"])
        response = httpx.get(url, timeout=30)
        assert response.status_code == 200 and _page_title(response.text).startswith(
            f"Prediction monitoring {DEMO_JOB}"
        ), url
        page.goto(f"{live_server.url}/v2/runs/flow-run/{outcomes_id}?tab=Artifacts", wait_until="domcontentloaded")
        expect(page.get_by_text(f"monitoring-page-{key}").first).to_be_visible()
        _shot(page, "06-outcomes-artifacts")
        page.goto(url, wait_until="load")
        expect(page).to_have_title(_page_title(response.text))
        _shot(page, "07-monitoring-page")

        # 5. An end date before the start: refused at once, the run's header says why in one sentence, and the
        # UI log holds no traceback.
        with pytest.raises(Exception) as refused:
            backfill_dates(demo_env.settings, day, day - dt.timedelta(days=1))
        sentence = user_facing_error(refused.value)[0]
        wrong_id = _submitted_backfill(page, live_server, start=day.isoformat(), end=str(day - dt.timedelta(days=1)))
        state = _final_state(live_server, wrong_id, "FAILED")
        assert state["message"] == sentence, (state, sentence)
        _logs_with(live_server, wrong_id, "Finished in state")
        time.sleep(3)  # the flow-run process's last lines, after its final state
        ui_log = _flow_run_logs(live_server, wrong_id)
        assert f"error: {sentence}" in ui_log and "Traceback" not in ui_log and "unexpected exception" not in ui_log, (
            ui_log
        )
        page.reload(wait_until="domcontentloaded")
        expect(page.get_by_text(sentence).first).to_be_visible()
        page.get_by_role("tab", name="Logs").click()
        expect(page.get_by_text(f"error: {sentence}").first).to_be_visible()
        assert "Traceback" not in page.locator("body").inner_text()
        _shot(page, "08-wrong-range")

        # 6. `mode: failed` over the first range finds the refused day, says why, and scores it again.
        failed_id = _submitted_backfill(page, live_server, start=day.isoformat(), end=no_raw.isoformat(), mode="failed")
        state = _final_state(live_server, failed_id, "FAILED")
        selection = _artifacts(live_server, failed_id)["backfill-selection"]
        rows = json.loads(selection["data"])
        assert [(r["date"], r["selected"], r["last status"]) for r in rows] == [
            (str(day), False, "succeeded"),
            (str(no_raw), True, "refused"),
        ], rows
        assert "no raw partition" in rows[1]["reason"] and f"{no_raw} (refused" in selection["description"], selection
        assert (
            httpx.get(f"{live_server.api}/flow_runs/{failed_id}", timeout=30).json()["name"]
            == f"{DEMO_JOB} {day}…{no_raw} mode failed"
        )
        page.reload(wait_until="domcontentloaded")
        page.get_by_role("tab", name="Artifacts").click()
        page.get_by_text("backfill-selection", exact=True).first.click()
        expect(page.get_by_text("refused").first).to_be_visible()
        _shot(page, "09-mode-failed-selection")

    con = duckdb.connect(str(live_server.data_dir / "warehouse.duckdb"), read_only=True)
    try:
        statuses = con.execute(
            "SELECT status FROM runs WHERE job = ? AND partition_date = ? ORDER BY started_at", [DEMO_JOB, no_raw]
        ).fetchall()
    finally:
        con.close()
    assert statuses == [("refused",), ("refused",)], statuses
