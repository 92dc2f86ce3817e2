"""Errors a user or an operator can act on. The CLI prints these as one `error:` line and exits with
2 (ScoringError: the input is wrong) or 3 (EnvironmentFault: the machine or its configuration is);
anything else is a bug.

`user_facing_error` is the one classification of an arbitrary exception into that line and code;
the CLI prints it and the runs ledger records it.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tasks.redaction import redacted_text


class ScoringError(Exception):
    """Base class of errors caused by input, configuration or artifacts, not by our code (exit code 2)."""


class JobSpecError(ScoringError):
    """A job spec is missing or invalid."""


@dataclass(frozen=True)
class JobProblem:
    """One mistake in a job's inputs, found before anything runs."""

    file: Path | str
    """The file to fix: the job spec, the suite, a model's metadata.json, a raw file (a path or a URL)."""
    field: str
    """Where in it: a dotted spec key, an expectation, a metadata field, a column."""
    message: str
    """What is wrong, naming the value found."""

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}"


class JobValidationError(ScoringError):
    """A job's spec, suite, features, model metadata and data do not fit together; every problem at once."""

    def __init__(self, problems: Sequence[JobProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(str(p) for p in self.problems))

    def __reduce__(self) -> tuple:
        # Prefect and Dask pickle a task's exception; the default would rebuild it from the joined text.
        return (type(self), (self.problems,))


class PartitionError(ScoringError):
    """A partition date or its raw data is unusable."""


class PartitionsFailed(ScoringError):
    """Some partitions of a backfill or nightly run failed; the others were scored. The message names
    each failed partition with its error."""


class FeatureVersionMismatch(ScoringError):
    """The model was trained on other features than the feature module computes."""


class ModelArtifactError(ScoringError):
    """A model file or its metadata cannot be trusted."""


class GuardFailure(ScoringError):
    """A feature guard whose action is `fail` found violations, or a run-level limit was exceeded."""


class SuiteError(ScoringError):
    """An expectation suite is malformed or uses an expectation the guards cannot honour."""


class DeviceUnavailable(ScoringError):
    """The job asks for a device (e.g. `cuda`) that this machine or runtime cannot use."""


class InferenceFailure(ScoringError):
    """Chunks kept failing in inference after their retries, beyond the job's error budget."""


class FallbackLimitExceeded(ScoringError):
    """More rows went down a fallback path (a kind in the fallback report) than the job allows."""


class RunTimedOut(ScoringError):
    """A partition run went past its `limits.max_run_seconds` (or SCORING_MAX_RUN_SECONDS)."""


class LabelError(ScoringError):
    """Realized outcomes (labels) cannot be read: a missing column or table, or an outcome that is not 0/1."""


class UnsafePath(ScoringError):
    """A path built from input that would leave the data root."""


class PartitionBusy(ScoringError):
    """Another live run holds the partition's lease, and waiting for it timed out."""


class AliasBusy(ScoringError):
    """Another process is moving the same model's aliases, and waiting for its lock timed out."""


class PartitionLeaseLost(ScoringError):
    """The run's partition lease was taken over while it ran; it must not publish."""


class ExitCode:
    """Exit codes of the `score` command, one per kind of fault (docs/operations/runbook.md lists them)."""

    USER = 2
    """Bad input: a job spec, a date, a model artifact, raw data. Fix the input and re-run."""
    ENVIRONMENT = 3
    """A broken environment: a full disk, a read-only or locked warehouse, an unreachable database,
    invalid `SCORING_*` settings. Fix the machine or its configuration; the input may be fine."""
    BUG = 1
    """Anything else: a defect of the product. The traceback is in the run log."""


class EnvironmentFault(Exception):
    """The machine or its configuration, not the input, stops the run (exit code 3)."""


class RunStopped(EnvironmentFault):
    """A signal stopped the run: SIGTERM (`kill`, a supervisor, a container stopping) or SIGINT (Ctrl-C).
    The run closes its ledger row as failed on the way out; the CLI exits with 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by signal {signum} ({signal.Signals(signum).name})")

    def __reduce__(self) -> tuple:
        return (type(self), (self.signum,))


class MissingExtra(EnvironmentFault):
    """A model needs a framework whose optional extra is not installed here."""


class SettingsError(EnvironmentFault):
    """A `SCORING_*` environment variable holds a value the product cannot use."""


class DiskFull(EnvironmentFault):
    """A write failed with ENOSPC."""


class ReadOnlyStorage(EnvironmentFault):
    """A file or the warehouse cannot be written: a read-only filesystem, an immutable file, no permission."""


class WarehouseLocked(EnvironmentFault):
    """Another process holds the DuckDB warehouse file's lock past `SCORING_WAREHOUSE_LOCK_WAIT_S`."""


class WarehouseUnreachable(EnvironmentFault):
    """The PostgreSQL warehouse refused or did not answer a connection."""


class SourceUnreachable(EnvironmentFault):
    """A raw source (an object store, a source database) refused the credentials or did not answer."""


class OrchestrationLost(EnvironmentFault):
    """The orchestration API the run reports to (Prefect's, at PREFECT_API_URL) stopped answering; the run
    fails before it publishes rather than publish what the orchestrator cannot record."""


class SinkUnwritable(EnvironmentFault):
    """An output sink (a Delta table) could not be written: its store is unreachable, has no such
    bucket, refuses the credentials, or holds a table the rows do not fit. The run's rows are
    committed in the warehouse and Parquet; the next start of the job writes the sink again."""


_NO_SPACE = re.compile(r"no space left on device|errno 28\b|disk is full|out of disk space", re.IGNORECASE)
_READ_ONLY = re.compile(
    r"read-only file system|permission denied|operation not permitted|errno (13|30)\b|read-only mode", re.IGNORECASE
)
_DUCKDB_LOCK = re.compile(
    r'Could not set lock on file "(?P<path>[^"]+)": Conflicting lock is held in (?P<program>.*?) \(PID (?P<pid>\d+)\)'
)
_QUOTED_PATH = re.compile(r'"(/[^"]+)"|\'(/[^\']+)\'')


def process_description(pid: int) -> str:
    """`pid`'s program name (its /proc `comm`: `python3.11`, `score`, `duckdb`), never its command
    line: arguments carry DSNs with passwords, `--password=…`, `-pSECRET`, bearer tokens, in forms
    no redaction can know for every program. `ps -o args= -p PID` shows the rest to whoever may see it."""
    try:
        name = Path(f"/proc/{pid}/comm").read_text(errors="replace").strip()
    except OSError:
        return "program not readable"
    # A program may set its name from its title (setproctitle): a URL in it is still redacted.
    return redacted_text(name) or "program not readable"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def disk_full_fault(
    path: Path | None, *, needed_bytes: int | None = None, detail: str = "", exact: bool = True
) -> DiskFull:
    """DiskFull naming `path` (the file written, or with `exact=False` a folder it lay under), the
    free space left on its filesystem and, when known, the space needed."""
    where = (f" writing {path}" if exact else f" under {path}") if path else ""
    space = ""
    if path is not None:
        usage = shutil.disk_usage(_existing_ancestor(path))
        space = f"; {_mib(usage.free)} free of {_mib(usage.total)} on that filesystem"
    needed = f", {_mib(needed_bytes)} needed" if needed_bytes else ""
    return DiskFull(f"disk full: no space left on device{where}{space}{needed}" + (f" ({detail})" if detail else ""))


def locked_warehouse_fault(path: Path, pid: int, waited_s: float) -> WarehouseLocked:
    return WarehouseLocked(
        f"warehouse {path} is locked by process {pid} ({process_description(pid)}); "
        f"waited {waited_s:g} s (SCORING_WAREHOUSE_LOCK_WAIT_S)"
    )


def duckdb_lock_holder(message: str) -> int | None:
    """The PID DuckDB names as the holder of a file lock, in the text of its IOException."""
    found = _DUCKDB_LOCK.search(message)
    return int(found["pid"]) if found else None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _path_of(exc: BaseException) -> Path | None:
    filename = getattr(exc, "filename", None)
    if filename:
        return Path(str(filename))
    found = _QUOTED_PATH.search(str(exc))
    return Path(found[1] or found[2]) if found else None


def environment_fault(exc: BaseException, *, path_hint: Path | None = None) -> EnvironmentFault | None:
    """The EnvironmentFault that `exc` (or an exception it was raised from) amounts to, or None when
    it is not one: full disks, read-only storage and DuckDB lock conflicts are recognised by errno
    or, for pyarrow and DuckDB, which carry no errno, by their message."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, EnvironmentFault):
            return current
        fault = _classified(current, path_hint)
        if fault is not None:
            return fault
        current = current.__cause__ or current.__context__
    return None


def _classified(exc: BaseException, path_hint: Path | None) -> EnvironmentFault | None:
    errno_ = getattr(exc, "errno", None) if isinstance(exc, OSError) else None
    message = str(exc)
    # DuckDB's and pyarrow's IO errors are not OSError subclasses (or carry no errno): read their text.
    # DuckDB reports a WAL it cannot write at commit as a TransactionException, not an IOException.
    io_like = (
        isinstance(exc, OSError)
        or type(exc).__name__ in ("IOException", "ArrowIOError")
        or type(exc).__module__ in ("duckdb", "_duckdb")
    )
    if not io_like:
        return None
    named = _path_of(exc)
    path = named or path_hint
    if errno_ == errno.ENOSPC or _NO_SPACE.search(message):
        # pyarrow's write errors carry errno 28 but no file name: the hint (the data root) is the best place to name.
        return disk_full_fault(path, exact=named is not None)
    pid = duckdb_lock_holder(message)
    if pid is not None:
        return locked_warehouse_fault(Path(_DUCKDB_LOCK.search(message)["path"]), pid, 0)
    if errno_ in (errno.EROFS, errno.EACCES, errno.EPERM) or _READ_ONLY.search(message):
        reason = os.strerror(errno_) if errno_ else _first_line(message)
        return ReadOnlyStorage(f"cannot write {path or 'a file'}: {reason}")
    return None


def user_facing_error(exc: BaseException, *, path_hint: Path | None = None) -> tuple[str, int]:
    """(one-line message, exit code) for any exception: the CLI prints the message after `error:`
    and exits with the code, and the runs ledger records the same message. Exit 2: bad input
    (ScoringError); 3: a broken environment (EnvironmentFault, or an OS error classified as one);
    1: anything else, a bug, shown as its type and first line."""
    if isinstance(exc, ScoringError):
        return _one_line(str(exc)), ExitCode.USER
    fault = environment_fault(exc, path_hint=path_hint)
    if fault is not None:
        return _one_line(str(fault)), ExitCode.ENVIRONMENT
    return _one_line(f"{type(exc).__name__}: {_first_line(str(exc))}"), ExitCode.BUG


def _one_line(text: str) -> str:
    return " ".join(text.split())
