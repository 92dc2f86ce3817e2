"""Compare two data folders row for row: every Parquet file under output/ and every warehouse table.

For a refactoring that must not change what is published: score the demo at the commit before and after,
on the same day (the demo's dates end yesterday), then compare:

    SCORING_DATA_DIR=/tmp/before score demo --days 2 --rows-per-day 3000 --windows-per-day 20 --store-items 1000 --train-days 6
    SCORING_DATA_DIR=/tmp/after  score demo ...   # the same flags, at the new commit
    python scripts/compare_outputs.py /tmp/before /tmp/after

Volatile columns (run ids, timestamps, durations, paths, the inference timings) are dropped; rows are sorted by
every remaining column; floats compare to 1e-9 relative (a sum's order may differ between runs). Prints one line
per difference and exits 1 when there is any.
"""

import re
import sys
from pathlib import Path

import duckdb
import numpy as np
import polars as pl

VOLATILE = re.compile(
    r"(^|_)(run_id|flow_run_id|id|at|time|ts|seconds|s|ms|latency|started|finished|created|updated|heartbeat|"
    r"pid|host|path|url|link|lease|token|duration|elapsed|wall|attempt|inference)($|_)|_at$|_s$|_ms$|seconds|timestamp|path|url"
)


def stable(df: pl.DataFrame) -> pl.DataFrame:
    keep = [c for c in df.columns if not VOLATILE.search(c.lower())]
    df = df.select(keep)
    keep = [
        c for c in keep if df.schema[c].is_numeric() or df.schema[c] in (pl.String, pl.Boolean, pl.Date, pl.Categorical)
    ]
    df = df.select([pl.col(c).cast(pl.String) if df.schema[c] == pl.Categorical else pl.col(c) for c in keep])
    return df.sort(keep, nulls_last=True) if keep else df


def same(a: pl.DataFrame, b: pl.DataFrame) -> str | None:
    a, b = stable(a), stable(b)
    if a.columns != b.columns:
        return f"columns {a.columns} vs {b.columns}"
    if a.height != b.height:
        return f"rows {a.height} vs {b.height}"
    diff = []
    for c in a.columns:
        if a[c].dtype.is_float():
            x, y = a[c].to_numpy(), b[c].to_numpy()
            if not np.allclose(x, y, rtol=1e-9, atol=1e-12, equal_nan=True):
                diff.append(c)
        elif not a[c].equals(b[c]):
            diff.append(c)
    if diff:
        return f"values differ in {diff}"
    return None


def main(a_dir: str, b_dir: str) -> int:
    a, b = Path(a_dir), Path(b_dir)
    problems, checked = [], 0
    uid = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{16,}")
    fa = {uid.sub("X", str(p.relative_to(a))): p for p in (a / "output").rglob("*.parquet") if ".staging" not in str(p)}
    fb = {uid.sub("X", str(p.relative_to(b))): p for p in (b / "output").rglob("*.parquet") if ".staging" not in str(p)}
    if set(fa) != set(fb):
        problems.append(
            f"parquet files differ: only A {sorted(set(fa) - set(fb))[:5]}, only B {sorted(set(fb) - set(fa))[:5]}"
        )
    for rel in sorted(set(fa) & set(fb)):
        checked += 1
        why = same(pl.read_parquet(fa[rel]), pl.read_parquet(fb[rel]))
        if why:
            problems.append(f"{rel}: {why}")
    ca, cb = (
        duckdb.connect(str(a / "warehouse.duckdb"), read_only=True),
        duckdb.connect(str(b / "warehouse.duckdb"), read_only=True),
    )
    q = "select table_schema || '.' || table_name from information_schema.tables where table_type='BASE TABLE' order by 1"
    ta, tb = {r[0] for r in ca.sql(q).fetchall()}, {r[0] for r in cb.sql(q).fetchall()}
    if ta != tb:
        problems.append(f"warehouse tables differ: only A {sorted(ta - tb)}, only B {sorted(tb - ta)}")
    for t in sorted(ta & tb):
        checked += 1
        why = same(ca.sql(f"select * from {t}").pl(), cb.sql(f"select * from {t}").pl())
        if why:
            problems.append(f"warehouse {t}: {why}")
    for p in problems:
        print(p)
    print(f"compared {checked} Parquet files and tables: {len(problems)} difference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
