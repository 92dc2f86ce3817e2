"""Operator faults through the installed `score` command: one `error:` line naming the thing, exit 2
for bad input and 3 for a broken environment, no traceback, nothing written before the lease.

Each CLI test runs `score` in a child process against its own copy of the demo data, forked from a process that
imported it once (scripts/forked_score.py), with the session's Prefect server as its API (the real console script
and Prefect's temporary API: test_terminal.py and the guides' walks).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import DEMO_JOB, DemoEnv

from tasks.errors import ExitCode, ReadOnlyStorage, user_facing_error
from tasks.inference.registry import inference_model_checksum
from tasks.settings import PROJECT_ROOT

sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
from forked_score import completed  # noqa: E402

# Trains models or runs `score` processes (minutes on two cores): left out of `make test-fast`.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

SCORE = Path(sys.executable).parent / "score"
DAY = "2026-03-10"


def copied_demo(demo_env: DemoEnv, target: Path) -> Path:
    """A never-scored copy of the demo inputs under `target/data`."""
    data = target / "data"
    for part in ("raw", "models"):
        shutil.copytree(demo_env.data_dir / part, data / part)
    return data


@pytest.fixture
def data(demo_env: DemoEnv, tmp_path: Path) -> Path:
    return copied_demo(demo_env, tmp_path)


def score(
    data_dir: Path, *args: str, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess:
    """`score args` (default: a run of the demo job's DAY) on `data_dir`, as a user's child process; its flows talk to
    the session's Prefect server where the module runs one (else to Prefect's temporary API)."""
    from prefect.settings import PREFECT_API_URL

    environment = {k: v for k, v in os.environ.items() if not k.startswith("SCORING_")}
    api = PREFECT_API_URL.value()
    environment.update(
        {**({"PREFECT_API_URL": str(api)} if api else {}), "SCORING_DATA_DIR": str(data_dir), **(env or {})}
    )
    return completed(list(args or ("run", DEMO_JOB, "--date", DAY)), env=environment, cwd=PROJECT_ROOT, timeout=timeout)


def one_error_line(result: subprocess.CompletedProcess, code: int) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == code, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output[-3000:]
    return errors[0]


def ledger_rows(warehouse: Path) -> int:
    if not warehouse.exists():
        return 0
    with duckdb.connect(str(warehouse), read_only=True) as con:
        if not con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'runs'").fetchall()[0][0]:
            return 0
        return con.execute("SELECT count(*) FROM runs").fetchall()[0][0]


def nothing_scored(data_dir: Path) -> bool:
    return ledger_rows(data_dir / "warehouse.duckdb") == 0 and not (data_dir / "output" / DEMO_JOB).exists()


def metadata_path(data_dir: Path) -> Path:
    (path,) = (data_dir / "models" / DEMO_JOB).glob("*/metadata.json")
    return path


def edit_metadata(data_dir: Path, change) -> Path:  # noqa: ANN001
    path = metadata_path(data_dir)
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))
    return path


def jobs_copy(tmp_path: Path, change) -> Path:  # noqa: ANN001
    jobs = tmp_path / "jobs"
    shutil.copytree(PROJECT_ROOT / "jobs", jobs)
    spec = yaml.safe_load((jobs / f"{DEMO_JOB}.yaml").read_text())
    change(spec)
    (jobs / f"{DEMO_JOB}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return jobs


def outputs_fingerprint(data_dir: Path) -> dict[str, str]:
    """Every published output file (resolved through the partition links) with its sha256; logs aside (a run that
    failed after its lease keeps its log file beside the job's outputs, `logs/date=…/<run id>.log`)."""
    root = data_dir / "output" / DEMO_JOB
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "_staging" not in path.parts and path.relative_to(root).parts[0] != "logs":
            found[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


# Model metadata: refused before the lease, naming metadata.json and the field.


def test_a_model_without_calibration_is_refused_before_the_lease(data: Path) -> None:
    path = edit_metadata(data, lambda m: m.pop("calibration"))
    line = one_error_line(score(data), ExitCode.USER)
    assert f"{path}: calibration: " in line, line
    assert nothing_scored(data)


def test_a_model_with_a_broken_calibration_map_is_refused(data: Path) -> None:
    path = edit_metadata(data, lambda m: m["calibration"].update(totals=m["calibration"]["totals"][:-1]))
    line = one_error_line(score(data), ExitCode.USER)
    assert f"{path}: calibration: " in line and "length" in line, line
    assert nothing_scored(data)


def test_a_model_without_reference_statistics_is_refused(data: Path) -> None:
    path = edit_metadata(data, lambda m: m.pop("reference"))
    line = one_error_line(score(data), ExitCode.USER)
    assert f"{path}: reference: " in line and "require_reference" in line, line
    assert nothing_scored(data)


def test_a_partial_reference_and_mismatched_dtypes_are_a_line_each(data: Path) -> None:
    def change(meta: dict) -> None:
        meta["reference"]["loan_amount"]["drift_edges"] = []
        meta["feature_dtypes"].pop("annual_income")

    path = edit_metadata(data, change)
    result = score(data)
    output = result.stdout + result.stderr
    assert result.returncode == ExitCode.USER and "Traceback" not in output, output[-3000:]
    # One line per field, in the order pydantic checks them.
    feature_dtypes, reference = [line for line in output.splitlines() if line.startswith("error:")]
    assert feature_dtypes.startswith(f"error: {path}: feature_dtypes: ") and "annual_income" in feature_dtypes, output
    assert reference.startswith(f"error: {path}: reference.loan_amount: ") and "drift_edges" in reference, output
    assert nothing_scored(data)


def test_the_reference_opt_in_scores_and_reports_no_drift_reference(data: Path, tmp_path: Path) -> None:
    edit_metadata(data, lambda m: m.pop("reference"))
    jobs = jobs_copy(tmp_path, lambda spec: spec.setdefault("drift", {}).update(require_reference=False))
    result = score(data, env={"SCORING_JOBS_DIR": str(jobs)})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "no training reference" in output
    report = pq.read_table(data / "output" / DEMO_JOB / "reports" / "fallback" / f"date={DAY}").to_pylist()
    (row,) = [r for r in report if r["kind"] == "no_drift_reference"]
    rows_read = sum(pq.read_metadata(f).num_rows for f in (data / "raw" / DEMO_JOB / f"date={DAY}").glob("*.parquet"))
    assert row["rows"] == rows_read and row["share"] == 1.0 and "require_reference: false" in row["detail"]
    drift = pq.read_table(data / "output" / DEMO_JOB / "reports" / "drift" / f"date={DAY}").to_pylist()
    assert not [r for r in drift if r["baseline"] == "reference" and r["feature"] != "score"]


def test_a_model_registered_before_model_health_scores_and_reports_no_health_reference(data: Path) -> None:
    edit_metadata(data, lambda m: m.pop("health"))
    result = score(data)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    report = pq.read_table(data / "output" / DEMO_JOB / "reports" / "fallback" / f"date={DAY}").to_pylist()
    (row,) = [r for r in report if r["kind"] == "no_health_reference"]
    rows_read = sum(pq.read_metadata(f).num_rows for f in (data / "raw" / DEMO_JOB / f"date={DAY}").glob("*.parquet"))
    assert (
        row["rows"] == rows_read and "no multivariate drift" in row["detail"] and "register it again" in row["detail"]
    )
    health = pq.read_table(data / "output" / DEMO_JOB / "reports" / "model_health" / f"date={DAY}").to_pylist()
    assert {r["section"] for r in health} == {"estimated_performance"}


def test_a_model_file_that_is_not_a_model_but_matches_its_sha256_is_named(data: Path) -> None:
    model = metadata_path(data).parent / "model.ubj"
    model.write_bytes(b"{" + os.urandom(4096))
    edit_metadata(data, lambda m: m.update(sha256=inference_model_checksum(model)))
    line = one_error_line(score(data), ExitCode.USER)
    assert str(model) in line and "not an XGBoost model" in line, line
    assert nothing_scored(data)


# Settings: exit 3, naming the variable and the value (never a password).


def test_an_unknown_timezone_is_refused_when_the_settings_are_read(data: Path) -> None:
    line = one_error_line(score(data, env={"SCORING_TIMEZONE": "Mars/Olympus"}), ExitCode.ENVIRONMENT)
    assert "SCORING_TIMEZONE='Mars/Olympus'" in line and "IANA" in line, line
    assert nothing_scored(data)


def test_a_bad_warehouse_url_is_refused_without_its_password(data: Path) -> None:
    result = score(data, env={"SCORING_WAREHOUSE_URL": "mysql://scorer:Hunter2Secret@db:3306/scoring"})
    line = one_error_line(result, ExitCode.ENVIRONMENT)
    assert "SCORING_WAREHOUSE_URL" in line and "mysql://scorer:***@db:3306/scoring" in line, line
    assert "Hunter2Secret" not in result.stdout + result.stderr
    assert nothing_scored(data)


def test_bad_numeric_limits_name_the_variable(data: Path) -> None:
    line = one_error_line(score(data, env={"SCORING_WAREHOUSE_LOCK_WAIT_S": "-1"}), ExitCode.ENVIRONMENT)
    assert "SCORING_WAREHOUSE_LOCK_WAIT_S='-1'" in line, line


def test_an_unreachable_postgres_warehouse_is_one_line_without_its_password(data: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = score(data, env={"SCORING_WAREHOUSE_URL": f"postgresql://scorer:Hunter2Secret@127.0.0.1:{port}/scoring"})
    line = one_error_line(result, ExitCode.ENVIRONMENT)
    assert f"postgresql://scorer:***@127.0.0.1:{port}/scoring" in line and "cannot connect" in line, line
    assert "Hunter2Secret" not in result.stdout + result.stderr


def test_a_warehouse_url_and_a_secret_block_both_set_name_both_variables(data: Path) -> None:
    result = score(
        data,
        env={
            "SCORING_WAREHOUSE_URL": "postgresql://scorer:Hunter2Secret@db:5432/scoring",
            "SCORING_WAREHOUSE_SECRET_BLOCK": "scoring-warehouse",
        },
    )
    line = one_error_line(result, ExitCode.ENVIRONMENT)
    assert "SCORING_WAREHOUSE_URL and SCORING_WAREHOUSE_SECRET_BLOCK are both set" in line, line
    assert "Hunter2Secret" not in result.stdout + result.stderr
    assert nothing_scored(data)


def test_a_secret_block_that_does_not_exist_is_named_with_the_api_asked(data: Path, prefect_harness: None) -> None:
    from prefect.blocks.system import Secret
    from prefect.settings import PREFECT_API_URL

    # A block of another name holds a password: nothing of it may show.
    Secret(value="postgresql://scorer:Hunter2Secret@db:5432/scoring").save("scoring-warehouse-real", overwrite=True)
    api = str(PREFECT_API_URL.value())
    result = score(data, env={"SCORING_WAREHOUSE_SECRET_BLOCK": "scoring-warehouse-typo", "PREFECT_API_URL": api})
    line = one_error_line(result, ExitCode.ENVIRONMENT)
    assert (
        "SCORING_WAREHOUSE_SECRET_BLOCK='scoring-warehouse-typo'" in line
        and "no Prefect Secret block" in line
        and api in line
    ), line
    assert "Hunter2Secret" not in result.stdout + result.stderr
    assert nothing_scored(data)


# Job spec YAML.


def test_a_job_spec_with_a_duplicate_key_names_the_key_and_the_line(data: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    shutil.copytree(PROJECT_ROOT / "jobs", jobs)
    spec = jobs / f"{DEMO_JOB}.yaml"
    lines = spec.read_text().splitlines()
    first = next(i for i, text in enumerate(lines) if text.startswith("chunk_rows:"))
    lines.insert(first + 1, "chunk_rows: 7")
    spec.write_text("\n".join(lines) + "\n")
    line = one_error_line(score(data, env={"SCORING_JOBS_DIR": str(jobs)}), ExitCode.USER)
    assert str(spec) in line and "duplicate key 'chunk_rows'" in line and f"line {first + 2}" in line, line
    assert nothing_scored(data)


# Corrupt raw Parquet: footer problems before the lease, mid-file corruption when read.


def _raw_file(data_dir: Path) -> Path:
    (path,) = (data_dir / "raw" / DEMO_JOB / f"date={DAY}").glob("*.parquet")
    return path


def _garbage_footer(content: bytes) -> bytes:
    footer_len = int.from_bytes(content[-8:-4], "little")
    return content[: -8 - footer_len] + bytes(b ^ 0x5A for b in content[-8 - footer_len : -8]) + content[-8:]


CORRUPT_FOOTERS = {
    "zero_bytes": lambda content: b"",
    "not_parquet": lambda content: b"entity_id,annual_income\n1,2\n" * 100,
    "garbage_footer": _garbage_footer,
}


@pytest.mark.parametrize("kind", sorted(CORRUPT_FOOTERS))
def test_a_raw_file_with_a_broken_footer_is_named_before_the_lease(data: Path, kind: str) -> None:
    raw = _raw_file(data)
    raw.write_bytes(CORRUPT_FOOTERS[kind](raw.read_bytes()))
    line = one_error_line(score(data), ExitCode.USER)
    assert f"raw file {raw}" in line, line
    assert nothing_scored(data)


@pytest.fixture(scope="module")
def scored(demo_env: DemoEnv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data copy whose DAY was scored once by `score run`."""
    data = copied_demo(demo_env, tmp_path_factory.mktemp("scored"))
    result = score(data)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return data


def test_a_raw_file_truncated_mid_file_with_its_footer_intact_is_named_when_read(scored: Path) -> None:
    raw = _raw_file(scored)
    content = raw.read_bytes()
    footer_len = int.from_bytes(content[-8:-4], "little")
    before = outputs_fingerprint(scored)
    raw.write_bytes(content[: len(content) // 3] + content[-8 - footer_len :])
    line = one_error_line(score(scored), ExitCode.USER)
    assert f"raw file {raw}" in line and "row group 0" in line, line
    assert outputs_fingerprint(scored) == before


def _snappy_with_a_corrupt_entity_column(path: Path) -> bytes:
    """The rows of the demo file `path` rewritten with snappy (as many producers write), then 64 bytes
    flipped inside the compressed pages of row group 0's entity column; the footer stays intact."""
    out = pa.BufferOutputStream()
    pq.write_table(pq.read_table(path), out, compression="snappy")
    content = bytearray(out.getvalue().to_pybytes())
    metadata = pq.ParquetFile(pa.BufferReader(bytes(content))).metadata
    names = [metadata.schema.column(i).name for i in range(metadata.num_columns)]
    chunk = metadata.row_group(0).column(names.index("entity_id"))
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    # A third into the column chunk: past its first page header, inside the compressed values.
    for i in range(start + chunk.total_compressed_size // 3, start + chunk.total_compressed_size // 3 + 64):
        content[i] ^= 0xFF
    return bytes(content)


def test_a_raw_file_corrupt_inside_the_entity_column_is_named_with_its_row_group(
    demo_env: DemoEnv, scored: Path
) -> None:
    raw = _raw_file(scored)
    before = outputs_fingerprint(scored)
    # From the demo's own file: another test of the module may have damaged this copy already.
    raw.write_bytes(_snappy_with_a_corrupt_entity_column(_raw_file(demo_env.data_dir)))
    opened = pq.ParquetFile(raw)
    with pytest.raises(OSError, match="Corrupt snappy compressed data"):  # the fault as pyarrow reports it
        opened.read_row_group(0, columns=["entity_id"])
    line = one_error_line(score(scored), ExitCode.USER)
    assert f"raw file {raw} is corrupt in row group 0: Corrupt snappy compressed data" in line, line
    assert outputs_fingerprint(scored) == before


# Raw entries that are no regular file: refused before anything opens them (a FIFO's open() would block for good).


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    # A socket's path must be short (108 bytes): bound under /tmp, then moved in (the file stays a socket).
    short = Path(tempfile.mkdtemp(dir="/tmp")) / "s"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(short))
    os.rename(short, path)
    short.parent.rmdir()


def _folder(path: Path) -> None:
    path.mkdir()


def _link_out_of_the_raw_folder(path: Path) -> None:
    outside = path.parents[4] / "elsewhere.parquet"  # beside the data folder, not under data/raw
    shutil.copy(next(path.parent.glob("*.parquet")), outside)
    path.symlink_to(outside)


def _link_to_a_fifo(path: Path) -> None:
    fifo = path.parent / "_pipe"
    os.mkfifo(fifo)
    path.symlink_to(fifo)


NOT_REGULAR = {
    "fifo": (_fifo, "is a FIFO (named pipe)"),
    "socket": (_socket, "is a socket"),
    "folder": (_folder, "is a directory"),
    "symlink_out_of_raw": (_link_out_of_the_raw_folder, "outside the raw folder"),
    "symlink_to_fifo": (_link_to_a_fifo, "is a FIFO (named pipe) (a symlink to"),
}


@pytest.mark.parametrize("kind", sorted(NOT_REGULAR))
def test_a_raw_entry_that_is_no_regular_file_is_refused_before_the_lease(data: Path, kind: str) -> None:
    make, named = NOT_REGULAR[kind]
    entry = _raw_file(data).parent / "part-9.parquet"
    make(entry)
    result = score(data, timeout=120)
    line = one_error_line(result, ExitCode.USER)
    assert f"raw file {entry} {named}" in line or (f"raw file {entry}" in line and named in line), line
    assert nothing_scored(data)


def ledger(warehouse: Path) -> dict[str, tuple[str, str | None]]:
    """Partition date → (status, error) of its newest run."""
    with duckdb.connect(str(warehouse), read_only=True) as con:
        rows = con.execute("SELECT partition_date, status, error FROM runs ORDER BY started_at").fetchall()
    return {str(day): (status, error) for day, status, error in rows}


def test_a_backfill_scores_the_other_days_past_an_unreadable_file_and_mode_failed_finds_it(data: Path) -> None:
    first, bad, last = "2026-03-08", "2026-03-09", DAY
    (raw,) = (data / "raw" / DEMO_JOB / f"date={bad}").glob("*.parquet")
    raw.write_bytes(CORRUPT_FOOTERS["not_parquet"](raw.read_bytes()))
    # That day alone cannot be scored: refused before anything starts, as `score run` is.
    alone = one_error_line(score(data, "backfill", DEMO_JOB, "--start", bad, "--end", bad), ExitCode.USER)
    assert f"raw file {raw} is not a readable Parquet file" in alone, alone
    assert nothing_scored(data)

    result = score(data, "backfill", DEMO_JOB, "--start", first, "--end", last)
    line = one_error_line(result, ExitCode.USER)
    assert (
        f"1 of 3 partition(s) failed: {DEMO_JOB} {bad}" in line
        and f"raw file {raw} is not a readable Parquet file" in line
    ), line
    runs = ledger(data / "warehouse.duckdb")
    assert runs[first][0] == runs[last][0] == "succeeded", runs
    status, error = runs[bad]
    assert status == "refused" and f"raw file {raw} is not a readable Parquet file" in error, runs[bad]
    # The analyst's next step finds exactly that day.
    planned = score(data, "backfill", DEMO_JOB, "--start", first, "--end", last, "--mode", "failed", "--dry-run")
    assert planned.returncode == 0 and f"would score 1 partition(s): {bad}" in planned.stdout, (
        planned.stdout + planned.stderr
    )
    missing = score(data, "backfill", DEMO_JOB, "--start", first, "--end", last, "--mode", "missing", "--dry-run")
    # A refused day was never scored: `missing` selects it too.
    assert missing.returncode == 0 and f"would score 1 partition(s): {bad}" in missing.stdout, (
        missing.stdout + missing.stderr
    )


# The environment: a full disk, a read-only warehouse, a locked warehouse.


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    tried = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=30m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if tried.returncode != 0:
        # test_enospc_and_erofs_are_classified_from_the_errno covers the classification without a mount.
        pytest.skip(f"cannot mount a tmpfs here ({tried.stderr.strip()}); run as root for the real full-disk test")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("free_kib", [16, 64], ids=["duplicate-pass-scratch", "staged-outputs"])
def test_a_full_disk_is_one_line_naming_where_and_the_free_space(
    demo_env: DemoEnv, tmpfs: Path, tmp_path: Path, free_kib: int
) -> None:
    data = copied_demo(demo_env, tmpfs)
    # 16 KiB: the duplicate-id pass's scratch files already do not fit; 64 KiB: they do, the
    # staged outputs of the 3,000 demo rows do not.
    with (tmpfs / "filler").open("wb") as filler:
        filler.write(b"\0" * (shutil.disk_usage(tmpfs).free - free_kib * 1024))
    warehouse = tmp_path / "warehouse.duckdb"
    line = one_error_line(score(data, env={"SCORING_WAREHOUSE_PATH": str(warehouse)}), ExitCode.ENVIRONMENT)
    assert line.startswith("error: disk full") and str(data) in line and "MiB free of 30.0 MiB" in line, line
    assert not list((data / "output" / DEMO_JOB / "predictions").glob("date=*"))
    # The warehouse is on another disk: the ledger tells the truth about the run.
    with duckdb.connect(str(warehouse), read_only=True) as con:
        ((status, error),) = con.execute("SELECT status, error FROM runs").fetchall()
    assert status == "failed" and "disk full" in error, error


def test_a_read_only_warehouse_is_one_line_naming_it(data: Path, tmpfs: Path) -> None:
    warehouse = tmpfs / "warehouse.duckdb"
    duckdb.connect(str(warehouse)).close()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    line = one_error_line(score(data, env={"SCORING_WAREHOUSE_PATH": str(warehouse)}), ExitCode.ENVIRONMENT)
    assert f"read-only warehouse {warehouse}" in line and "Read-only file system" in line, line
    assert not (data / "output" / DEMO_JOB).exists()


def test_a_warehouse_locked_by_another_process_names_the_holder(data: Path) -> None:
    warehouse = data / "warehouse.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, sys, time; c = duckdb.connect({str(warehouse)!r}); print('held', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        result = score(data, env={"SCORING_WAREHOUSE_LOCK_WAIT_S": "1"})
    finally:
        holder.kill()
        holder.wait()
    line = one_error_line(result, ExitCode.ENVIRONMENT)
    assert f"warehouse {warehouse} is locked by process {holder.pid}" in line and "waited 1 s" in line, line
    # The holder's program name, not its command line (tests/test_secrets_not_printed.py plants secrets there).
    assert (
        "SCORING_WAREHOUSE_LOCK_WAIT_S" in line
        and f"process {holder.pid} (python)" in line
        and "import duckdb" not in line
    ), line
    assert "waiting up to 1 s" in result.stdout + result.stderr  # logged once while it waited
    assert ledger_rows(warehouse) == 0


# The classification itself, for faults a test cannot cause cheaply.


def test_enospc_and_erofs_are_classified_from_the_errno(tmp_path: Path) -> None:
    target = tmp_path / "out" / "part-0.parquet"
    message, code = user_facing_error(OSError(errno.ENOSPC, "No space left on device", str(target)))
    assert code == ExitCode.ENVIRONMENT and f"disk full: no space left on device writing {target}" in message
    assert "MiB free of" in message
    message, code = user_facing_error(OSError(errno.EROFS, "Read-only file system", str(target)))
    assert code == ExitCode.ENVIRONMENT and str(target) in message and "Read-only file system" in message
    wrapped = RuntimeError("publish failed")
    wrapped.__cause__ = PermissionError(errno.EACCES, "Permission denied", str(target))
    assert user_facing_error(wrapped)[1] == ExitCode.ENVIRONMENT
    assert user_facing_error(ValueError("a bug"))[1] == ExitCode.BUG
    assert user_facing_error(ReadOnlyStorage("read-only warehouse /w.duckdb"))[1] == ExitCode.ENVIRONMENT
