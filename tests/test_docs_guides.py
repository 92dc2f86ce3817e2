"""Guides that cannot rot, and a site that builds.

Every ```bash block of the quick start and of the bring-your-own-model guide runs here, in the page's order,
as a reader pastes it into a shell with `score` on the PATH (tests/test_bring_your_own.py runs the guide's on
data it makes; this file the quick start's on the demo's). A renamed command or a changed flag fails the
block. `mkdocs build --strict` builds the site: a broken link, anchor or nav entry fails it, and so does a
catalog column or job spec key the generated reference cannot explain.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.settings import PROJECT_ROOT

DOCS = PROJECT_ROOT / "docs"
QUICK_START = DOCS / "getting-started" / "quick-start.md"
BRING_YOUR_OWN = DOCS / "guides" / "bring-your-own-model.md"
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def fenced_blocks(page: Path) -> list[tuple[str, str]]:
    """(language, text) of every fenced block of a Markdown page, in page order."""
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(page.read_text())]


def command_blocks(page: Path) -> list[str]:
    """The page's ```bash blocks: what a reader runs."""
    return [text for language, text in fenced_blocks(page) if language == "bash"]


def script_files(page: Path) -> dict[str, str]:
    """The page's ```python blocks that open with `# <name>.py`: the scripts its commands run, by file name."""
    found = {}
    for language, text in fenced_blocks(page):
        first = text.split("\n", 1)[0]
        if language == "python" and (named := re.match(r"# (\S+\.py)\b", first)):
            found[named.group(1)] = text
    return found


def reader_env(base: dict[str, str], bin_dir: Path) -> dict[str, str]:
    """`base` with `score` (this checkout's CLI) and the test's `python` first on the PATH, as after
    `source .venv/bin/activate`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    score = bin_dir / "score"
    score.write_text(
        f"#!/bin/sh\nexec {sys.executable} -c "
        '\'import sys; sys.argv[0] = "score"; from cli.score import main; main()\' "$@"\n'
    )
    score.chmod(0o755)
    return {
        **base,
        "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}",
        "PYTHONPATH": str(PROJECT_ROOT),
        "TZ": "UTC",
    }


def run_block(block: str, *, cwd: Path, env: dict[str, str], timeout: int = 900) -> str:
    """Run one command block as bash does for a reader, stopping at its first failing command; its output."""
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-x", "-c", block],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, (
        f"this block of the docs failed (exit {done.returncode}):\n{block}\n--- output ---\n{output[-6000:]}"
    )
    assert "Traceback" not in output, output[-6000:]
    return output


def test_the_block_reader_finds_commands_scripts_and_skips_other_languages(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n```bash\nscore init x --from a.parquet\n```\n\n```text\nnot run\n```\n\n"
        "```python\n# train.py — a script\nprint(1)\n```\n\n```python\nimport os\n```\n\n"
        "```bash\nscore validate x\nscore run x --date 2026-01-01\n```\n"
    )
    assert command_blocks(page) == [
        "score init x --from a.parquet\n",
        "score validate x\nscore run x --date 2026-01-01\n",
    ]
    assert script_files(page) == {"train.py": "# train.py — a script\nprint(1)\n"}


def test_a_block_with_a_wrong_flag_fails_loudly(tmp_path: Path) -> None:
    env = reader_env(dict(os.environ), tmp_path / "bin")
    with pytest.raises(AssertionError, match="No such option: --no-such-flag"):
        run_block("score runs credit_risk --no-such-flag\n", cwd=tmp_path, env=env, timeout=120)


def test_the_guides_hold_commands_and_the_scripts_they_run() -> None:
    quick = command_blocks(QUICK_START)
    assert any(line.startswith("score demo ") for block in quick for line in block.splitlines())
    own = command_blocks(BRING_YOUR_OWN)
    run_lines = [line.split()[:2] for block in own for line in block.splitlines() if line.startswith("score ")]
    assert {tuple(w) for w in run_lines} >= {
        ("score", c)
        for c in ("init", "features", "register", "validate", "backfill", "run", "outcomes", "card", "promote")
    }
    scripts = script_files(BRING_YOUR_OWN)
    for block in own:
        for script in re.findall(r"^python (\S+\.py)", block, re.MULTILINE):
            assert script in scripts, f"{BRING_YOUR_OWN.name} runs {script} but shows no `# {script}` block"


@pytest.mark.slow
def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SCORING_")}
    env = reader_env(
        {
            **base,
            "SCORING_DATA_DIR": str(tmp_path / "data"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "GX_ANALYTICS_ENABLED": "false",
        },
        tmp_path / "bin",
    )
    outputs = [run_block(block, cwd=tmp_path, env=env) for block in command_blocks(QUICK_START)]
    assert len(outputs) >= 2
    output_dir = tmp_path / "data" / "output"
    for job in ("credit_risk", "gearbox", "store_sales"):
        assert (output_dir / job / "model_card.md").is_file(), job
        assert list((output_dir / job / "reports" / "html").glob("date=*.html")), job
    assert (output_dir / "credit_risk" / "model_card.html").is_file()
    assert "succeeded" in outputs[1]


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=PROJECT_ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    site = tmp_path / "site"
    for page in (
        "reference/cli.html",
        "reference/job-spec.html",
        "reference/settings.html",
        "reference/catalog.html",
        "reference/python-api.html",
        "guides/bring-your-own-model.html",
    ):
        assert (site / page).is_file(), page
    cli = (site / "reference" / "cli.html").read_text()
    assert "--rows-per-day" in cli and "score backfill" in cli
    assert "SCORING_MAX_BACKFILL_DAYS" in (site / "reference" / "settings.html").read_text()
