"""Alias moves under concurrency and kills: `score promote` processes at once apply one after the other
(the alias history is a chain), and a promotion killed between the alias file's rename and its
`model_aliases` row leaves a move that the next alias command or `score recover` records, never a
file and a ledger that disagree. Real `score` processes on the real DuckDB warehouse."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tasks.inference.aliases import ALIASES_FILE, inference_model_aliases
from tasks.settings import Settings
from tasks.sinks.warehouse_choice import warehouse_for
from tests.conftest import DEMO_JOB

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
pytestmark = pytest.mark.slow

SCORE = str(Path(sys.executable).with_name("score"))


def _versions(settings: Settings, names: list[str]) -> Path:
    """The demo's registered version copied as `names`: the same registered model, so each validates and can be promoted."""
    registry = settings.model_registry_dir(DEMO_JOB)
    source = registry / "1"
    for name in names:
        shutil.copytree(source, registry / name)
        meta = registry / name / "metadata.json"
        document = json.loads(meta.read_text())
        meta.write_text(json.dumps({**document, "version": name}))
    return registry


def _score(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([SCORE, *args], env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    return done


def _ledger(settings: Settings) -> list[tuple[str | None, str | None]]:
    rows = warehouse_for(settings).alias_changes(DEMO_JOB)
    return [(r["from_version"], r["to_version"]) for r in rows if r["alias"] == "champion"]


def _document(registry: Path) -> dict:
    return json.loads((registry / ALIASES_FILE).read_text())


def test_two_promotions_at_once_apply_one_after_the_other_over_twenty_rounds(fresh_data: Settings) -> None:
    registry = _versions(fresh_data, ["2", "3"])
    assert _score("promote", DEMO_JOB, "1").returncode == 0
    rounds, started = 20, time.monotonic()
    for i in range(rounds):
        current = inference_model_aliases(registry)["champion"]
        a, b = [v for v in ("1", "2", "3") if v != current][:: 1 if i % 2 else -1]
        procs = [
            subprocess.Popen([SCORE, "promote", DEMO_JOB, v], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for v in (a, b)
        ]
        outputs = [p.communicate(timeout=120) for p in procs]
        for p, (out, err) in zip(procs, outputs, strict=True):
            assert p.returncode == 0 and "Traceback" not in out + err, (i, p.returncode, out, err)
        moves = sorted(
            line.split("alias champion ", 1)[1].split(" (by", 1)[0]
            for out, _ in outputs
            for line in out.splitlines()
            if "alias champion" in line
        )
        # Each applied after the other: one moved from the version the round started at, the other from that one's target.
        first = next(m for m in moves if m.startswith(f"{current} → "))
        second = next(m for m in moves if m != first)
        assert second.startswith(f"{first.split(' → ')[1]} → "), (i, current, moves)
    elapsed = time.monotonic() - started

    ledger = _ledger(fresh_data)
    assert len(ledger) == 1 + 2 * rounds, ledger
    assert ledger[0] == (None, "1")
    # A chain: every move starts where the one before it ended; no two moves start from the same point.
    assert all(move[0] == before[1] for before, move in zip(ledger, ledger[1:], strict=False)), ledger
    document = _document(registry)
    assert document["aliases"]["champion"] == ledger[-1][1]
    assert [(h["from_version"], h["to_version"]) for h in document["history"]] == ledger
    assert document["unrecorded"] == []
    print(f"{rounds} rounds of two concurrent `score promote`: {elapsed:.1f} s")


def test_a_promotion_killed_between_the_alias_file_and_the_ledger_is_recorded_by_the_next_alias_command(
    fresh_data: Settings,
) -> None:
    registry = _versions(fresh_data, ["2", "3"])
    assert _score("promote", DEMO_JOB, "1").returncode == 0

    killed = _score("promote", DEMO_JOB, "2", env={**os.environ, "SCORING_CRASH_AT": "alias:moved"})
    assert killed.returncode == -signal.SIGKILL
    # The rename is the commit point: runs already resolve the new champion; its ledger row is owed.
    assert inference_model_aliases(registry)["champion"] == "2"
    assert [(u["from_version"], u["to_version"]) for u in _document(registry)["unrecorded"]] == [("1", "2")]
    assert _ledger(fresh_data) == [(None, "1")]
    recovered = _score("recover", DEMO_JOB)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    lines = [line for line in recovered.stdout.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1 and "alias champion 1 → 2" in lines[0] and "recorded now" in lines[0], recovered.stdout
    assert _ledger(fresh_data) == [(None, "1"), ("1", "2")]
    assert _document(registry)["unrecorded"] == []

    # Killed after the row, before the mark is cleared: the next promotion must not write the row twice.
    killed = _score("promote", DEMO_JOB, "3", env={**os.environ, "SCORING_CRASH_AT": "alias:recorded"})
    assert killed.returncode == -signal.SIGKILL
    assert _ledger(fresh_data) == [(None, "1"), ("1", "2"), ("2", "3")]
    assert len(_document(registry)["unrecorded"]) == 1
    moved = _score("promote", DEMO_JOB, "1")
    assert moved.returncode == 0 and "alias champion 3 → 1" in moved.stdout, moved.stdout + moved.stderr
    # Its row was written before the kill: nothing to record, so nothing to warn about.
    assert "warning:" not in moved.stdout and not moved.stderr.strip(), moved.stdout + moved.stderr
    ledger = _ledger(fresh_data)
    assert ledger == [(None, "1"), ("1", "2"), ("2", "3"), ("3", "1")]
    document = _document(registry)
    assert [(h["from_version"], h["to_version"]) for h in document["history"]] == ledger and document[
        "unrecorded"
    ] == []
    assert document["aliases"] == {"champion": "1"}
