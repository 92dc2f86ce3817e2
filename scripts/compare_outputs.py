"""Compare two data folders' published outputs dataset by dataset, row for row: did a change alter what a job writes?

    .venv/bin/python scripts/compare_outputs.py OLD_DATA_DIR NEW_DATA_DIR [--rename OLD=NEW ...]

Every `output/<job>/<dataset>/date=D/*.parquet` of both folders is read (the current version of each partition,
through the folder a reader sees), run ids and timings are left out (they differ on every run), the rows are sorted by
every other column and compared exactly. `--rename` maps a text value of the old folder before comparing, for a value a
change renamed on purpose. Prints one line per dataset that differs (the columns that do) and a total; exit 1 if any.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

VOLATILE = ("run_id", "_at", "seconds", "latency", "duration", "elapsed", "_ms", "rows_per_s", "path", "peak_rss")


def _datasets(data_dir: Path) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    root = data_dir / "output"
    for f in sorted(root.glob("*/**/date=*/*.parquet")):
        rel = f.relative_to(root)
        if any(part.startswith("_") for part in rel.parts) or rel.parts[1] == "logs":
            continue
        out.setdefault(str(rel.parent), []).append(f)
    return out


def _stable(frame: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    frame = frame.select(columns)
    sortable = [c for c in columns if not isinstance(frame.schema[c], pl.List | pl.Struct | pl.Array)]
    return frame.sort(sortable, nulls_last=True) if sortable else frame


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument(
        "--rename", action="append", default=[], metavar="OLD=NEW", help="a text value renamed on purpose"
    )
    args = parser.parse_args()
    renames = dict(r.split("=", 1) for r in args.rename)
    old, new = _datasets(args.old), _datasets(args.new)
    differing = 0
    for key in sorted(set(old) | set(new)):
        if key not in old or key not in new:
            print(f"only in {'old' if key in old else 'new'}: {key}")
            differing += 1
            continue
        a = pl.concat([pl.read_parquet(f) for f in old[key]], how="diagonal_relaxed")
        b = pl.concat([pl.read_parquet(f) for f in new[key]], how="diagonal_relaxed")
        if renames:
            a = a.with_columns(pl.col(c).replace(renames) for c, t in a.schema.items() if t == pl.String)
        kept = [c for c in a.columns if not any(v in c for v in VOLATILE)]
        if set(kept) != {c for c in b.columns if not any(v in c for v in VOLATILE)}:
            print(f"columns differ: {key}: {sorted(set(a.columns) ^ set(b.columns))}")
            differing += 1
            continue
        x, y = _stable(a, kept), _stable(b, kept)
        if x.shape != y.shape or not x.equals(y):
            columns = (
                [c for c in kept if not x[c].equals(y[c])] if x.shape == y.shape else f"rows {x.height} vs {y.height}"
            )
            print(f"differs: {key}: {columns}")
            differing += 1
    print(f"datasets compared: {len(set(old) & set(new))}, differing: {differing}")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
