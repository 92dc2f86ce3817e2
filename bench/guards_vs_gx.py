"""Compiled feature guards against Great Expectations' own pandas validation, as JSON lines.

    .venv/bin/python bench/guards_vs_gx.py --rows 1000000 --chunk-rows 100000 --repeat 3

Each path runs `--repeat` times on the same data and its median time is reported.

Writes `--rows` seeded synthetic rows (an `entity_id`, 24 float features, 4 categoricals and 2
ids) as 4 Parquet files, with violations injected at known small rates: nulls, NaN, values
below/above and exactly on bounds, ±inf (only where a between check has both bounds: the guards
reject +inf above a minimum-only bound on purpose, GX lets it pass), unknown categories, and ids
that break a regex or a length. A 60-expectation GX 1.x suite with `meta.guard` actions covers it.

- streamed: `raw_chunks` → `pl.from_arrow` → `guarded_chunk`, one chunk in memory at a time, as a
  run does; its counts are compared and its peak RSS reported (the data is written by a child
  process and GX is imported only later, so the figure is the compiled path's own);
- compiled evaluation: `guard_violation_counts` on the same chunks held in memory, the
  like-for-like rival of GX's validation (both only judge and count, data already loaded);
- compiled guarding: `guarded_chunk` on those chunks, which also repairs, quarantines and records
  every action — work GX does not do;
- GX: the whole data read into one pandas DataFrame and validated by an ephemeral context with
  the same suite JSON (`result_format` BASIC); read, to_pandas and validate are timed apart.

Per expectation, the guards' count (summed over actions) must equal GX's `unexpected_count`;
the script prints any mismatch and exits 1 if there is one.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

import tasks  # noqa: F401
from tasks.guards import GuardCounts, GuardSuite, guard_violation_counts, guarded_chunk, load_guard_suite
from tasks.scoring.units import raw_chunks
from tasks.sources import ParquetPartition

FILES = 4
TARGET_SPEEDUP = 100.0
"""Compiled evaluation at least this many times faster than GX's validation of the same rows."""
ENTITY = "entity_id"

CLIP = {"action": "repair", "repair": "clip"}
QUARANTINE = {"action": "quarantine"}
FAIL = {"action": "fail"}


def default(value: Any) -> dict[str, Any]:
    return {"action": "repair", "repair": "default", "default": value}


@dataclass(frozen=True)
class Numeric:
    """A float feature: its between check (either bound may be open), its not-null check, and
    the range most of its values are drawn from (inside the bounds)."""

    name: str
    min_value: float | None
    max_value: float | None
    typical: tuple[float, float]
    between: dict[str, Any]
    not_null: dict[str, Any] | None
    strict_min: bool = False
    strict_max: bool = False


@dataclass(frozen=True)
class Strings:
    """A string feature: its allowed values (categoricals; ids are generated), its checks, and
    the bad values injected into it."""

    name: str
    good: tuple[str, ...]
    bad: tuple[str, ...]
    not_null: dict[str, Any]
    in_set: dict[str, Any] | None = None
    regex: tuple[str, dict[str, Any]] | None = None
    lengths: tuple[int, int, dict[str, Any]] | None = None


NUMERICS = (
    Numeric("annual_income", 0, 5_000_000, (8_000, 400_000), CLIP, default(0)),
    Numeric("debt_to_income", 0, 10, (0, 1.2), QUARANTINE, QUARANTINE),
    Numeric("credit_utilization", 0, 1.5, (0, 1), CLIP, default(0.0)),
    Numeric("loan_amount", 500, 1_000_000, (1_000, 80_000), QUARANTINE, QUARANTINE, strict_max=True),
    Numeric("loan_term_months", 6, 360, (12, 84), default(36), default(36)),
    Numeric("interest_rate", 0, 0.4, (0.02, 0.3), CLIP, QUARANTINE, strict_min=True),
    Numeric("age_years", 18, 110, (18, 90), QUARANTINE, FAIL),
    Numeric("employment_years", 0, None, (0, 45), CLIP, default(0)),
    Numeric("num_open_accounts", 0, 100, (0, 30), CLIP, default(0)),
    Numeric("num_credit_inquiries_6m", 0, None, (0, 12), QUARANTINE, None),
    Numeric("delinquencies_2y", 0, 50, (0, 5), FAIL, default(0)),
    Numeric("months_since_last_delinquency", 0, 600, (1, 240), CLIP, None),
    Numeric("revolving_balance", 0, None, (0, 60_000), CLIP, default(0)),
    Numeric("installment_amount", 0, None, (20, 4_000), QUARANTINE, QUARANTINE, strict_min=True),
    Numeric("total_assets", None, 1e9, (-20_000, 2_000_000), QUARANTINE, default(0.0)),
    Numeric("monthly_rent", 0, 50_000, (0, 5_000), CLIP, None),
    Numeric("savings_balance", 0, None, (0, 150_000), default(0), None),
    Numeric("checking_balance", -50_000, 5_000_000, (-2_000, 40_000), CLIP, default(0)),
    Numeric("credit_history_years", 0, 80, (0, 50), QUARANTINE, QUARANTINE),
    Numeric("bureau_score", 300, 850, (450, 820), QUARANTINE, FAIL),
    Numeric("payment_to_income", None, 5, (0, 0.6), CLIP, default(0.1), strict_max=True),
    Numeric("num_late_payments_12m", 0, 12, (0, 4), CLIP, default(0)),
    Numeric("avg_txn_amount", 0, 100_000, (5, 900), FAIL, None),
    Numeric("max_txn_amount", 0, 250_000, (50, 20_000), QUARANTINE, default(0), strict_max=True),
)

STRINGS = (
    Strings(
        "home_ownership",
        ("RENT", "OWN", "MORTGAGE", "OTHER"),
        ("rent", "Mortgage ", "", "N/A"),
        not_null=default("OTHER"),
        in_set=default("OTHER"),
    ),
    Strings(
        "loan_purpose",
        ("debt_consolidation", "credit_card", "home_improvement", "car", "medical", "other"),
        ("vacation", "CAR", "credit-card"),
        not_null=QUARANTINE,
        in_set=QUARANTINE,
    ),
    Strings(
        "employment_type",
        ("salaried", "self_employed", "contractor", "retired", "unemployed", "unknown"),
        ("Salaried", "intern", " retired"),
        not_null=default("unknown"),
        in_set=QUARANTINE,
    ),
    Strings(
        "region",
        ("NE", "MA", "SE", "MW", "SW", "MT", "PC", "AK"),
        (),
        not_null=QUARANTINE,
        in_set=FAIL,
    ),
    Strings(
        "branch_code",
        (),
        ("BX-1234", "br-1234", "BR-12a4", "BR-12é4", "BR-１２３4", "BR-12345", "BR-123", "BR1234"),
        not_null=QUARANTINE,
        regex=("^BR-[0-9]{4}$", QUARANTINE),
        lengths=(7, 7, QUARANTINE),
    ),
    Strings(
        "account_ref",
        (),
        ("abc123456", "AB1234567", "ABC12345", "ABC123456789", "ABC1234567 ", "ÄBC123456"),
        not_null=default("UNK000000"),
        regex=("^[A-Z]{3}[0-9]{6,8}$", QUARANTINE),
        lengths=(9, 11, QUARANTINE),
    ),
)

NUMERIC_RATES = {
    "null": 0.005,
    "nan": 0.003,
    "below": 0.004,
    "above": 0.004,
    "at_min": 0.002,
    "at_max": 0.002,
    "pos_inf": 0.001,
    "neg_inf": 0.001,
}
STRING_RATES = {"null": 0.005, "bad": 0.012}


def expectation(etype: str, guard: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return {"type": etype, "kwargs": kwargs, "meta": {"guard": guard}}


def suite_document() -> dict[str, Any]:
    """The GX 1.x suite both paths validate, as its JSON document."""
    exps = [
        expectation("expect_column_values_to_not_be_null", FAIL, column=ENTITY),
        expectation("expect_column_values_to_match_regex", FAIL, column=ENTITY, regex="^E[0-9]{8}$"),
        expectation("expect_column_value_lengths_to_be_between", FAIL, column=ENTITY, min_value=9, max_value=9),
    ]
    for f in NUMERICS:
        bounds = {k: v for k, v in (("min_value", f.min_value), ("max_value", f.max_value)) if v is not None}
        strict = {k: True for k, v in (("strict_min", f.strict_min), ("strict_max", f.strict_max)) if v}
        exps.append(expectation("expect_column_values_to_be_between", f.between, column=f.name, **bounds, **strict))
        if f.not_null is not None:
            exps.append(expectation("expect_column_values_to_not_be_null", f.not_null, column=f.name))
    for s in STRINGS:
        exps.append(expectation("expect_column_values_to_not_be_null", s.not_null, column=s.name))
        if s.in_set is not None:
            exps.append(
                expectation("expect_column_values_to_be_in_set", s.in_set, column=s.name, value_set=list(s.good))
            )
        if s.regex is not None:
            exps.append(expectation("expect_column_values_to_match_regex", s.regex[1], column=s.name, regex=s.regex[0]))
        if s.lengths is not None:
            lo, hi, guard = s.lengths
            exps.append(
                expectation(
                    "expect_column_value_lengths_to_be_between", guard, column=s.name, min_value=lo, max_value=hi
                )
            )
    assert len(exps) == 60, len(exps)
    return {"name": "guards_vs_gx", "expectations": exps, "meta": {}}


def _numeric_column(rng: np.random.Generator, f: Numeric, n: int) -> pa.Array:
    values = np.round(rng.uniform(*f.typical, size=n), 2)
    rates = dict(NUMERIC_RATES)
    clean_bounds = f.between["action"] == "fail"
    if f.not_null is not None and f.not_null["action"] == "fail":
        rates["null"] = rates["nan"] = 0.0
    if f.min_value is None or clean_bounds:
        rates["below"] = 0.0
    if f.max_value is None or clean_bounds:
        rates["above"] = 0.0
    if f.min_value is None or (clean_bounds and f.strict_min):
        rates["at_min"] = 0.0
    if f.max_value is None or (clean_bounds and f.strict_max):
        rates["at_max"] = 0.0
    if f.min_value is None or f.max_value is None or clean_bounds:
        rates["pos_inf"] = rates["neg_inf"] = 0.0
    kind = np.searchsorted(np.cumsum(list(rates.values())), rng.random(n), side="right")
    span = f.typical[1] - f.typical[0]
    for i, name in enumerate(rates):
        at = np.flatnonzero(kind == i)
        if not at.size:
            continue
        if name == "nan":
            values[at] = np.nan
        elif name == "below":
            far = f.min_value - rng.uniform(0.01, 1.0, size=at.size) * span
            values[at] = np.where(rng.random(at.size) < 0.3, np.nextafter(float(f.min_value), -np.inf), far)
        elif name == "above":
            far = f.max_value + rng.uniform(0.01, 1.0, size=at.size) * span
            values[at] = np.where(rng.random(at.size) < 0.3, np.nextafter(float(f.max_value), np.inf), far)
        elif name == "at_min":
            values[at] = f.min_value
        elif name == "at_max":
            values[at] = f.max_value
        elif name == "pos_inf":
            values[at] = np.inf
        elif name == "neg_inf":
            values[at] = -np.inf
    return pa.array(values, mask=kind == list(rates).index("null"))


def _branch_codes(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.strings.add("BR-", np.strings.zfill(rng.integers(0, 10_000, size=n).astype(str), 4))


def _account_refs(rng: np.random.Generator, n: int) -> np.ndarray:
    letters = rng.integers(ord("A"), ord("Z") + 1, size=(n, 3), dtype=np.uint32).view("U1").reshape(n, 3)
    prefix = np.strings.add(np.strings.add(letters[:, 0], letters[:, 1]), letters[:, 2])
    digits = np.strings.zfill(rng.integers(0, 10**6, size=n).astype(str), 6)
    longer = np.strings.add(digits, rng.integers(0, 100, size=n).astype(str))
    return np.strings.add(prefix, np.where(rng.random(n) < 0.2, longer, digits))


ID_GENERATORS = {"branch_code": _branch_codes, "account_ref": _account_refs}


def _string_column(rng: np.random.Generator, s: Strings, n: int) -> pa.Array:
    if s.good:
        values = np.asarray(s.good, dtype=object)[rng.integers(0, len(s.good), size=n)]
    else:
        values = ID_GENERATORS[s.name](rng, n).astype(object)
    rates = dict(STRING_RATES)
    if s.not_null["action"] == "fail":
        rates["null"] = 0.0
    if not s.bad:
        rates["bad"] = 0.0
    kind = np.searchsorted(np.cumsum(list(rates.values())), rng.random(n), side="right")
    bad = np.flatnonzero(kind == 1)
    if bad.size:
        values[bad] = np.asarray(s.bad, dtype=object)[rng.integers(0, len(s.bad), size=bad.size)]
    return pa.array(values, type=pa.string(), mask=kind == 0)


def write_data(raw_dir: Path, rows: int, seed: int) -> None:
    """The synthetic partition, as FILES Parquet files (run in a child process)."""
    rng = np.random.default_rng(seed)
    columns: dict[str, pa.Array] = {
        ENTITY: pa.array(np.strings.add("E", np.strings.zfill(np.arange(rows).astype(str), 8)), type=pa.string()),
    }
    columns |= {f.name: _numeric_column(rng, f, rows) for f in NUMERICS}
    columns |= {s.name: _string_column(rng, s, rows) for s in STRINGS}
    table = pa.table(columns)
    raw_dir.mkdir(parents=True)
    step = -(-rows // FILES)
    for i in range(FILES):
        pq.write_table(table.slice(i * step, step), raw_dir / f"part-{i}.parquet")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def streamed_guarding(suite: GuardSuite, raw_dir: Path, chunk_rows: int) -> tuple[GuardCounts, float, int]:
    """Merged guard counts, wall seconds including the Parquet reads, and the chunk count: the
    production path, one chunk in memory at a time."""
    counts = GuardCounts()
    chunks = 0
    start = time.perf_counter()
    for table in raw_chunks(ParquetPartition(str(raw_dir)), chunk_rows):
        counts.merge(guarded_chunk(pl.from_arrow(table), suite, entity_column=ENTITY).counts)
        chunks += 1
    return counts, time.perf_counter() - start, chunks


def timed_passes(
    work: Callable[[pl.DataFrame], Any], frames: list[pl.DataFrame], repeat: int
) -> tuple[list[Any], float]:
    """`work` on every chunk, `repeat` times; the results of the first pass and the median seconds."""
    times, first = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        results = [work(frame) for frame in frames]
        times.append(time.perf_counter() - start)
        first = first or results
    return first, statistics.median(times)


def gx_counts(
    frame: Any, doc: dict[str, Any], keys: dict[tuple[str, str], str], repeat: int
) -> tuple[dict[str, int], dict[str, float]]:
    """GX's unexpected count per guard key, and the seconds its setup and validation took."""
    import great_expectations as gx
    from great_expectations.core import ExpectationSuite
    from great_expectations.data_context.types.base import ProgressBarsConfig

    start = time.perf_counter()
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    asset = context.data_sources.add_pandas("bench").add_dataframe_asset("whole")
    batch = asset.add_batch_definition_whole_dataframe("whole").get_batch(batch_parameters={"dataframe": frame})
    suite = ExpectationSuite(**doc)
    setup_s = time.perf_counter() - start
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = batch.validate(suite, result_format={"result_format": "BASIC"})
        times.append(time.perf_counter() - start)
    validate_s = statistics.median(times)
    counts: dict[str, int] = {}
    for r in result.results:
        config = r.expectation_config
        key = keys[(config.type, config.kwargs["column"])]
        if r.exception_info.get("raised_exception"):
            raise RuntimeError(f"GX could not evaluate {key}: {r.exception_info.get('exception_message')}")
        counts[key] = int(r.result["unexpected_count"])
    return counts, {"setup_s": setup_s, "validate_s": validate_s}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-rows", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the temporary data dir and suite")
    parser.add_argument("--repeat", type=int, default=3, help="passes per path; the median time is reported")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="guards_vs_gx-"))
    try:
        raw_dir, suite_path = tmp / "raw", tmp / "suite.json"
        doc = suite_document()
        suite_path.write_text(json.dumps(doc, indent=2, ensure_ascii=False))
        start = time.perf_counter()
        child = multiprocessing.get_context("spawn").Process(target=write_data, args=(raw_dir, args.rows, args.seed))
        child.start()
        child.join()
        if child.exitcode != 0:
            sys.exit(f"writing the synthetic data failed (exit {child.exitcode})")
        generate_s = time.perf_counter() - start
        parquet_bytes = sum(p.stat().st_size for p in raw_dir.glob("*.parquet"))

        rss_before = peak_rss_mb()
        suite = load_guard_suite(suite_path)
        ours, streamed_s, chunks = streamed_guarding(suite, raw_dir, args.chunk_rows)
        rss_compiled = peak_rss_mb()
        # Timed like GX: on data already in memory (the same chunks), so no read competes for the cores.
        frames = [pl.from_arrow(table) for table in raw_chunks(ParquetPartition(str(raw_dir)), args.chunk_rows)]
        per_chunk, compiled_s = timed_passes(lambda f: guard_violation_counts(f, suite), frames, args.repeat)
        judged = {key: sum(c[key] for c in per_chunk) for key in per_chunk[0]}
        _, guarding_s = timed_passes(lambda f: guarded_chunk(f, suite, entity_column=ENTITY), frames, args.repeat)
        del frames
        assert ours.rows_in == args.rows, (ours.rows_in, args.rows)

        start = time.perf_counter()
        table = pads.dataset(raw_dir, format="parquet").to_table()
        read_s = time.perf_counter() - start
        start = time.perf_counter()
        frame = table.to_pandas()
        to_pandas_s = time.perf_counter() - start
        arrow_bytes, pandas_bytes = table.nbytes, int(frame.memory_usage(deep=True).sum())
        del table
        keys = {(e.type, e.column): e.key for e in suite.expectations}
        theirs, gx_times = gx_counts(frame, doc, keys, args.repeat)
        rss_gx = peak_rss_mb()
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    mine = {key: sum(ours.by_expectation.get(key, {}).values()) for key in keys.values()}
    mismatches = [
        (k, mine[k], judged.get(k), theirs.get(k))
        for k in keys.values()
        if not mine[k] == judged.get(k) == theirs.get(k)
    ]
    identical = not mismatches and len(theirs) == len(keys) == 60
    validate_s = gx_times["validate_s"]
    mb = 1024 * 1024
    common = {"bench": "guards_vs_gx", "rows": args.rows}
    figures = [
        {
            "figure": "guards_compiled_s",
            "value": round(compiled_s, 3),
            "what": "guard_violation_counts per chunk",
            "chunk_rows": args.chunk_rows,
            "chunks": chunks,
            "rows_per_s": round(args.rows / compiled_s),
            "polars_threads": pl.thread_pool_size(),
        },
        {
            "figure": "guards_full_s",
            "value": round(guarding_s, 3),
            "what": "guarded_chunk: judge, repair, quarantine, record",
            "streamed_with_parquet_reads_s": round(streamed_s, 3),
            "rows_per_s": round(args.rows / guarding_s),
            "actions_recorded": sum(mine.values()),
        },
        {
            "figure": "guards_gx_pandas_s",
            "value": round(validate_s, 3),
            "with_to_pandas_s": round(validate_s + to_pandas_s, 3),
            "with_read_and_to_pandas_s": round(read_s + to_pandas_s + validate_s, 3),
            "read_parquet_s": round(read_s, 3),
            "to_pandas_s": round(to_pandas_s, 3),
            "gx_setup_s": round(gx_times["setup_s"], 3),
            "result_format": "BASIC",
        },
        {
            "figure": "speedup",
            "value": round(validate_s / compiled_s, 2),
            "target": TARGET_SPEEDUP,
            "ok": validate_s / compiled_s >= TARGET_SPEEDUP,
            "with_to_pandas": round((validate_s + to_pandas_s) / compiled_s, 2),
            "with_read_and_to_pandas": round((read_s + to_pandas_s + validate_s) / compiled_s, 2),
            "full_guarding": round(validate_s / guarding_s, 2),
        },
        {
            "figure": "counts_identical",
            "value": identical,
            "expectations": len(keys),
            "expectations_with_violations": sum(1 for n in theirs.values() if n),
            "violations_total": sum(theirs.values()),
            "mismatches": len(mismatches),
        },
        {
            "figure": "peak_rss_mb_compiled",
            "value": round(rss_compiled, 1),
            "before_compiled_mb": round(rss_before, 1),
            "after_gx_mb": round(rss_gx, 1),
            "parquet_mb": round(parquet_bytes / mb, 1),
            "arrow_mb": round(arrow_bytes / mb, 1),
            "pandas_mb": round(pandas_bytes / mb, 1),
        },
    ]
    for figure in figures:
        print(json.dumps({**common, **figure}))

    print(f"\n{'path':<34}{'seconds':>10}")
    for label, seconds in (
        (f"generate {args.rows:,} rows (child)", generate_s),
        ("compiled evaluation (counts)", compiled_s),
        ("compiled guarding (full)", guarding_s),
        ("GX read Parquet to Arrow", read_s),
        ("GX to_pandas", to_pandas_s),
        ("GX validate (60 expectations)", validate_s),
    ):
        print(f"{label:<34}{seconds:>10.2f}")
    if mismatches:
        print(f"\n{'expectation':<48}{'guarded':>10}{'judged':>10}{'gx':>10}")
        for key, n_ours, n_judged, n_gx in mismatches:
            print(
                f"{key:<48}{n_ours:>10}{'-' if n_judged is None else n_judged:>10}{'-' if n_gx is None else n_gx:>10}"
            )
    else:
        print(f"\nno mismatches: {len(keys)} expectations, {sum(theirs.values()):,} violations, counts identical")
    print(
        f"speedup of the compiled evaluation over GX's validation: {validate_s / compiled_s:.1f} × (target ≥ {TARGET_SPEEDUP:g} ×)"
    )
    if not identical:
        sys.exit(1)


if __name__ == "__main__":
    main()
