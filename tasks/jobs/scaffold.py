"""`score init`: a job scaffolded from a sample partition, to review before a model is registered.

From the sample's columns it proposes a job spec with declared features (tasks/features/declared.py)
and a Great Expectations suite of guards profiled from the same rows (tasks/guards/suite.py):

- a column is boolean only where its type, its values or its name say so: a polars Boolean, text that
  is one true and one false word (yes/no, true/false, y/n, any case), or 0/1 numbers under an is_/has_
  name; any other number is numeric, however few values its sample held (a count seen only as 0 and 1
  is still a count, and a later 2 must score); text with few distinct values is categorical, its
  categories most frequent first; anything else (ids, free text, dates) is left out, with a comment
  saying why. Each guess carries its evidence (`ColumnProfile.guess`) into the review notes and
  `score init`'s output;
- every column must exist with its type (fail); a feature's column without nulls in the sample
  must stay without (quarantine); numbers outside the sample's p0.1..p99.9 widened by a tenth of that
  range and by the sample's own extremes are clipped to that range and scored (repair: clip, counted
  as guard_repair: a range profiled from a sample is a guess, and a rare real value is no reason to
  leave a row unscored); low-cardinality strings must be a value the
  sample had (quarantine); an entity id with one evident shape must keep it (quarantine). Columns
  that are no feature get no row guard: they cannot harm a score.

Each feature's reason code gets its plain name (`label:`, from the column name) and texts that say which
way its value lies: one text per value for at most MAX_BY_VALUE distinct values or a category, a cut
between two observed whole numbers next to the median for a count (so "1 or less" is true of a row at
the median 1), low/high around the training median for a measurement.

The label column (never a feature, never guarded) proposes the job's target kind (`proposed_target`): 1/0,
booleans (true is the event), or two values of which `--positive` names the event a binary job, whose starter
rules cut at twice the sample's event rate; text with 3 or more values, or
3 to MAX_CLASS_CODES whole numbers, a multiclass job, its classes sorted (as numbers when all are whole numbers),
whose starter rules send a close call between the two likeliest classes to a person; more non-negative whole
numbers a count, other numbers a regression, whose starter rules cut the forecast's interval at the sample's
90th percentile of the label. `--kind` asks for a kind instead, checked against the column.

The spec is written as text, with a `# review:` comment on every proposal, and is validated (and
the suite compiled) before anything is written. The sample passes its own suite by construction,
except for rows with an infinite number or a missing or repeated id.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import yaml

from tasks.contracts import FeatureKind
from tasks.errors import JobSpecError, LabelError, PartitionError
from tasks.features.config import FALSE_VALUES, FEATURE_NAME_PATTERN, TRUE_VALUES
from tasks.guards import load_guard_suite
from tasks.jobspec import NAME_PATTERN, JobSpec, UniqueKeyLoader
from tasks.prediction.class_labels import predict_binary_label_events, predict_class_label_text
from tasks.prediction.config import TargetKind
from tasks.prediction.words import predict_feature_label
from tasks.settings import Settings

MAX_CATEGORIES = 30
"""More distinct strings than this make a column an id or free text, not a category (nor, as a label, classes)."""
MAX_CLASS_CODES = 10
"""Whole numbers in a label with at most this many distinct values (3 or more) read as class codes, more as a count:
a fault code 0..3 is a class, units sold 0..37 a quantity. `--kind count` or `--kind multiclass` settles it either way."""
CLOSE_CALL_MARGIN = 0.1
"""A multiclass job's starter rules send rows whose predicted class leads the runner-up by less than this to a person."""
MAX_BY_VALUE = 5
"""A numeric feature with at most this many distinct values in the sample gets one reason text per value."""
QUANTILES = (0.001, 0.999)
MARGIN = 1.0
"""Share of the p0.1..p99.9 range added on each side of a `between` guard."""
SMALL_COUNT = 20
"""A whole-number column from 0 to at most this in the sample reads as a small count: its guard allows 0 to ten times its
largest value, and its reason texts cut between values, never one text per value the sample happened to hold."""
FEATURE_VERSION = "1.0.0"
_TRUE_WORDS = tuple(w for w in TRUE_VALUES if not w.isdigit())
_FALSE_WORDS = tuple(w for w in FALSE_VALUES if not w.isdigit())
"""Text that says yes or no in words: text "1"/"0" is a code, as a 0/1 integer is no evidence of a flag."""
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}
_TOKEN = r"[0-9]+|[A-Z]+|[a-z]+|[^0-9A-Za-z]+"
_LABEL_NAME = r"(?i)^(y|label|target|outcome|response|churn|churned)$|(^|[_\W])(label|target|outcome)($|[_\W])"
"""A column name that says outcome: without --label-column, init warns that such a column became a feature."""


@dataclass(frozen=True)
class ColumnProfile:
    """What the sample says about one raw column, and what the scaffold makes of it."""

    column: str
    dtype: pl.DataType
    rows: int
    nulls: int
    kind: FeatureKind | None = None
    """The feature's kind; None when the column is no feature (the entity, or see `left_out`)."""
    feature: str | None = None
    values: tuple[Any, ...] = ()
    """Distinct values, most frequent first, of a boolean or categorical column; sorted, of a numeric one with few (MAX_BY_VALUE)."""
    shares: tuple[float, ...] = ()
    bounds: tuple[float, float] | None = None
    observed: dict[str, float] = field(default_factory=dict)
    id_regex: str | None = None
    left_out: str = ""
    guess: str = ""
    """The kind the scaffold guessed and the evidence for it, in words, for the review notes and `score init`."""
    cut: tuple[float, float] | None = None
    """A count's two adjacent observed values to cut its reason texts between: the sample's median (the lower
    middle, an observed value) and the next value above it; the two values below the top when the median is the top."""


@dataclass(frozen=True)
class ScaffoldedJob:
    """The files `score init` wrote and what it proposed in them."""

    job: str
    spec_path: Path
    suite_path: Path
    sample_files: tuple[Path, ...]
    rows: int
    features: dict[str, FeatureKind]
    left_out: dict[str, str]
    guesses: dict[str, str]
    """Each feature's raw column → the kind guessed for it and the evidence, in words."""
    expectations: int
    base_probability: float | None
    kind: TargetKind = "binary"
    target: TargetProposal | None = None
    """What the label column proposed; None without --label-column."""
    feature_version: str = FEATURE_VERSION
    label_like: tuple[str, ...] = ()
    """Without --label-column: feature columns whose name says outcome (`target`, `churned`, ...), which the model would
    learn the answer from if one is the label."""


def _sample(path: Path) -> tuple[pl.DataFrame, tuple[Path, ...]]:
    if not path.exists():
        raise PartitionError(
            f"sample {path} does not exist; give a partition folder of Parquet files or one Parquet file"
        )
    files = (path,) if path.is_file() else tuple(sorted(path.rglob("*.parquet")))
    if not files:
        raise PartitionError(f"sample folder {path} holds no .parquet file")
    frames = []
    for file in files:
        try:
            frames.append(pl.read_parquet(file))
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise PartitionError(
                f"sample file {file} is not a readable Parquet file: {' '.join(str(exc).split())[:200]}"
            ) from None
    try:
        frame = pl.concat(frames, how="vertical_relaxed")
    except pl.exceptions.PolarsError as exc:
        raise PartitionError(
            f"the files of sample {path} do not share one schema: {' '.join(str(exc).split())[:200]}"
        ) from None
    if frame.height == 0:
        raise PartitionError(f"sample {path} has no rows")
    return frame, files


def _missing(series: pl.Series) -> int:
    return series.null_count() + (int(series.is_nan().sum()) if series.dtype.is_float() else 0)


def _nice_bounds(
    low: float, high: float, lowest: float, highest: float, *, integer: bool, non_negative: bool
) -> tuple[float, float]:
    """[low, high] widened to contain [lowest, highest], rounded outward to a readable step."""
    low, high = min(low, lowest), max(high, highest)
    if non_negative:
        low = max(low, 0.0)
    span = high - low
    step = 10.0 ** (math.floor(math.log10(span)) - 1) if span > 0 else 1.0
    if integer:
        step = max(step, 1.0)
    digits = max(0, -math.floor(math.log10(step)))
    lo, hi = round(math.floor(low / step) * step, digits), round(math.ceil(high / step) * step, digits)
    lo = lo - step if lo > lowest else lo
    hi = hi + step if hi < highest else hi
    return (int(lo), int(hi)) if integer else (lo, hi)


def _between(series: pl.Series) -> tuple[tuple[float, float], dict[str, float]]:
    present = series.drop_nulls()
    present = present.filter(present.is_finite()) if present.dtype.is_float() else present
    p_low, p_high = (float(present.quantile(q, interpolation="linear")) for q in QUANTILES)
    lowest, highest = float(present.min()), float(present.max())
    if series.dtype.is_integer() and lowest >= 0 and highest <= SMALL_COUNT:
        # A small count: a sample's largest value says little of the next night's (a sample of 0s and 1s does not make 2
        # wrong), so the bound only stops what no count of this size is: negatives and an order of magnitude above.
        return (0, int(max(10.0, 10.0 * highest))), {"p0.1": p_low, "p99.9": p_high, "min": lowest, "max": highest}
    margin = MARGIN * (p_high - p_low) if p_high > p_low else max(MARGIN * abs(p_high), 1.0)
    bounds = _nice_bounds(
        p_low - margin, p_high + margin, lowest, highest, integer=series.dtype.is_integer(), non_negative=lowest >= 0
    )
    return bounds, {"p0.1": p_low, "p99.9": p_high, "min": lowest, "max": highest}


def _id_regex(series: pl.Series) -> str | None:
    """`^…$` that every value of a string column matches, when all values share one shape of runs of
    digits, upper- and lower-case letters and other characters; constant letters and separators stay
    literal (`C-`, `APP-`), digits become `\\d{n}` (or `{m,n}`). None when no single shape is evident."""
    values = series.drop_nulls().unique()
    if values.len() < 2:
        return None
    shapes = values.str.replace_all("[0-9]+", "9").str.replace_all("[A-Z]+", "A").str.replace_all("[a-z]+", "a")
    if shapes.n_unique() != 1:
        return None
    tokens = values.str.extract_all(_TOKEN)
    width = tokens.list.len().max()
    parts = []
    for i in range(width):
        token = tokens.list.get(i)
        first = token[0]
        lengths = token.str.len_chars()
        low, high = lengths.min(), lengths.max()
        repeat = f"{{{low}}}" if low == high else f"{{{low},{high}}}"
        if first.isdigit():
            parts.append(rf"\d{repeat}")
        elif token.n_unique() == 1:
            parts.append(re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", first))
        elif first.isupper():
            parts.append(f"[A-Z]{repeat}")
        else:
            parts.append(f"[a-z]{repeat}")
    if all(not p.startswith(("\\d", "[")) for p in parts):
        return None
    pattern = "^" + "".join(parts) + "$"
    return pattern if bool(values.str.contains(pattern).all()) else None


def _feature_name(column: str, taken: set[str]) -> str:
    if re.fullmatch(FEATURE_NAME_PATTERN, column) and column not in taken:
        return column
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", column)[:120]
    base = base if re.match(r"[A-Za-z_]", base) else f"_{base}"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


def _counted(series: pl.Series) -> tuple[tuple[Any, ...], tuple[float, ...]]:
    counts = series.drop_nulls().value_counts(name="n").sort(["n", series.name], descending=[True, False])
    total = counts["n"].sum()
    return tuple(counts[series.name].to_list()), tuple(n / total for n in counts["n"].to_list())


def _flag_name(column: str) -> bool:
    """Whether the column's name says it holds a yes/no flag (`is_member`, `hasCar`, `HAS_DEBT`)."""
    return re.match(r"(?i)(is|has)_", column) is not None or re.match(r"(is|has)[A-Z]", column) is not None


def _count_cut(values: pl.Series) -> tuple[float, float]:
    """Two adjacent observed values with rows on both sides: the median (the lower middle, so an observed value) and
    the next one above it; when the median is the largest value, the two largest."""
    distinct = values.unique().sort()
    median = float(values.quantile(0.5, interpolation="lower"))
    at = int(distinct.search_sorted(median))
    at = min(at, distinct.len() - 2)
    return float(distinct[at]), float(distinct[at + 1])


def _range_text(values: pl.Series) -> str:
    lowest, highest = values.min(), values.max()
    return f"{lowest:.6g}" if lowest == highest else f"{lowest:.6g}–{highest:.6g}"


def _profile(series: pl.Series, *, taken: set[str]) -> ColumnProfile:
    """The column's kind, from what its type, its values or its name say, with that evidence in `guess`."""
    base = {"column": series.name, "dtype": series.dtype, "rows": series.len(), "nulls": _missing(series)}
    present = series.drop_nulls()
    if series.dtype == pl.Null or present.len() == 0:
        return ColumnProfile(**base, left_out="no value in the sample, so its kind is unknown")
    rows = f"{present.len():,} sample rows"
    if series.dtype == pl.Boolean:
        values, shares = _counted(series)
        return ColumnProfile(
            **base,
            kind="boolean",
            feature=_feature_name(series.name, taken),
            values=values,
            shares=shares,
            guess="boolean (the column's type is Boolean)",
        )
    if series.dtype.is_numeric():
        if series.dtype.is_float() and not present.is_finite().any():
            return ColumnProfile(**base, left_out="no finite value in the sample, so its range is unknown")
        finite = present.filter(present.is_finite()) if series.dtype.is_float() else present
        distinct = finite.unique()
        if set(distinct.to_list()) <= {0, 1} and _flag_name(series.name):
            # Both values, though the sample may have held one: a flag's other value is no surprise tomorrow.
            return ColumnProfile(
                **base,
                kind="boolean",
                feature=_feature_name(series.name, taken),
                values=(0, 1),
                guess=f"boolean (the name {series.name} starts as a flag's does, is_/has_, and its values are {_range_text(distinct)} in {rows})",
            )
        bounds, observed = _between(series)
        whole = series.dtype.is_integer() or bool((finite == finite.round(0)).all())
        what = (
            "integer" if series.dtype.is_integer() else f"{series.dtype}, whole numbers" if whole else f"{series.dtype}"
        )
        count = " count" if whole and float(finite.min()) >= 0 else ""
        guess = f"numeric{count} ({what}, values {_range_text(finite)} in {rows}, {distinct.len()} distinct"
        if whole and distinct.len() <= 2:
            guess += "; not a boolean: an integer column's sample is no evidence, a later row may hold 2"
        elif whole and distinct.len() <= MAX_CATEGORIES:
            guess += "; not categorical: a number keeps its order and a later value the sample lacked still scores"
        return ColumnProfile(
            **base,
            kind="numeric",
            feature=_feature_name(series.name, taken),
            bounds=bounds,
            observed=observed,
            values=tuple(sorted(distinct.to_list())) if distinct.len() <= MAX_BY_VALUE else (),
            cut=_count_cut(finite) if whole and distinct.len() > MAX_BY_VALUE else None,
            guess=guess + ")",
        )
    if series.dtype in (pl.String, pl.Categorical) or isinstance(series.dtype, pl.Enum):
        text = series.cast(pl.String)
        values, shares = _counted(text)
        words = {str(v).strip().lower() for v in values}
        if len(words) == 2 and len(values) == 2 and words & set(_TRUE_WORDS) and words & set(_FALSE_WORDS):
            return ColumnProfile(
                **base,
                kind="boolean",
                feature=_feature_name(series.name, taken),
                values=values,
                shares=shares,
                guess=f"boolean (text values {_shown(list(values))} in {rows})",
            )
        if text.drop_nulls().str.contains(r"^\s*\d{4}-\d{2}-\d{2}([T ][\d:.]+)?\s*$").all():
            # A CSV read without date parsing keeps dates as text; as categories they would quarantine every new day.
            return ColumnProfile(
                **base,
                left_out="dates stored as text (a new day is a value no model saw): derive a feature from it in a Python feature module",
            )
        if len(values) <= MAX_CATEGORIES and len(values) <= max(2, present.len() // 2):
            return ColumnProfile(
                **base,
                kind="categorical",
                feature=_feature_name(series.name, taken),
                values=values,
                shares=shares,
                guess=f"categorical (text, {len(values)} distinct values in {rows}, at most {MAX_CATEGORIES} make categories)",
            )
        numeric_text = text.drop_nulls().str.contains(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$").all()
        why = (
            "numbers stored as text: cast the column upstream to make it a numeric feature"
            if numeric_text
            else f"{len(values)} distinct strings, too many for categories (an id or free text): "
            "derive a feature from it in a Python feature module"
        )
        return ColumnProfile(**base, left_out=why)
    return ColumnProfile(
        **base,
        left_out=f"type {series.dtype}: declared features read numbers, booleans and categories; use a Python feature module",
    )


def column_profiles(frame: pl.DataFrame, *, entity_column: str, label_column: str | None) -> list[ColumnProfile]:
    """A profile of every column of the sample but the label's, in the sample's order."""
    taken: set[str] = set()
    profiles = []
    for name in frame.columns:
        if name == label_column:
            continue
        series = frame.get_column(name)
        if name == entity_column:
            id_regex = _id_regex(series.cast(pl.String)) if series.dtype == pl.String else None
            profiles.append(
                ColumnProfile(
                    column=name, dtype=series.dtype, rows=series.len(), nulls=_missing(series), id_regex=id_regex
                )
            )
            continue
        profile = _profile(series, taken=taken)
        if profile.feature:
            taken.add(profile.feature)
        profiles.append(profile)
    return profiles


# --- the expectation suite ------------------------------------------------------------------------


def _expectation(
    etype: str, column: str, action: str, review: str = "", *, repair: str | None = None, **kwargs: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"guard": {"action": action, **({"repair": repair} if repair else {})}}
    if review:
        meta["review"] = review
    return {"type": etype, "kwargs": {"column": column, **kwargs}, "meta": meta}


def _allowed_values(p: ColumnProfile) -> list[Any]:
    """The values a set guard allows: the sample's; for a yes/no text column in every case too, since the feature reads
    them trimmed and lower-cased (a `y` tomorrow after a sample of `Y`s is the same answer, not a new value)."""
    values = [_plain(v) for v in p.values]
    if p.kind != "boolean" or p.dtype != pl.String:
        return values
    return list(dict.fromkeys(w for v in values for w in (v, str(v).lower(), str(v).upper(), str(v).capitalize())))


def _type_expectation(profile: ColumnProfile) -> dict[str, Any] | None:
    dtype, column = profile.dtype, profile.column
    if dtype.is_numeric():
        # Both: a column of integers arrives as floats once a writer fills a null with NaN.
        return _expectation("expect_column_values_to_be_in_type_list", column, "fail", type_list=["int64", "float64"])
    if dtype == pl.String:
        return _expectation("expect_column_values_to_be_of_type", column, "fail", type_="str")
    if dtype == pl.Boolean:
        return _expectation("expect_column_values_to_be_of_type", column, "fail", type_="bool")
    return None


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def profiled_suite(job: str, profiles: list[ColumnProfile], *, entity_column: str, sample: Path) -> dict[str, Any]:
    """The Great Expectations 1.x suite profiled from the sample, each expectation with its `meta.guard` action."""
    expectations: list[dict[str, Any]] = []
    for p in profiles:
        expectations.append(
            _expectation("expect_column_to_exist", p.column, "fail", f"guessed {p.guess}" if p.guess else "")
        )
        typed = _type_expectation(p)
        if typed is not None:
            expectations.append(typed)
        if p.column == entity_column:
            expectations.append(
                _expectation(
                    "expect_column_values_to_not_be_null",
                    p.column,
                    "quarantine",
                    "a row without an id cannot be scored or matched to its outcome",
                )
            )
        elif p.nulls == 0 and p.kind is not None:
            expectations.append(
                _expectation(
                    "expect_column_values_to_not_be_null",
                    p.column,
                    "quarantine",
                    f"the sample had no missing value in {p.rows} rows; delete this if missing values are expected "
                    "(the model sees them as missing), or repair with a default",
                )
            )
        if p.id_regex:
            expectations.append(
                _expectation(
                    "expect_column_values_to_match_regex",
                    p.column,
                    "quarantine",
                    "every id in the sample has this shape; widen the pattern if other shapes are valid",
                    regex=p.id_regex,
                )
            )
        if p.bounds is not None:
            observed = ", ".join(f"{k} {v:.6g}" for k, v in p.observed.items())
            expectations.append(
                _expectation(
                    "expect_column_values_to_be_between",
                    p.column,
                    "repair",
                    f"sample {observed}; the bounds widen p0.1..p99.9 by that whole range each side (a small count: 0 to ten times "
                    "its largest value), so they catch broken values, not the next night's rare real ones. A value outside "
                    "is clipped to the nearer bound and the row scored, counted as guard_repair in the fallback report: "
                    "clipping changes the model's input, so the row scores as if its value were the bound. To leave such "
                    "rows unscored instead, change the action to quarantine (one word); set the bounds to the range the "
                    "model may score",
                    repair="clip",
                    min_value=p.bounds[0],
                    max_value=p.bounds[1],
                )
            )
        if p.kind in ("boolean", "categorical") and p.dtype != pl.Boolean:
            expectations.append(
                _expectation(
                    "expect_column_values_to_be_in_set",
                    p.column,
                    "quarantine",
                    "the values of the sample; an unlisted value would be a missing feature. Add the valid values, "
                    "or repair with a default",
                    value_set=_allowed_values(p),
                )
            )
        if p.column == entity_column:
            expectations.append(
                {
                    "type": "expect_column_values_to_be_unique",
                    "kwargs": {"column": p.column},
                    "meta": {"guard": {"action": "quarantine_all"}},
                }
            )
    return {
        "name": job,
        "expectations": expectations,
        "meta": {
            "guard_contract": (
                "Each expectation's meta.guard.action is repair (with repair=default|clip), quarantine or fail; the entity "
                "key's uniqueness (expect_column_values_to_be_unique) takes keep_first, quarantine_all or fail; see tasks/guards/suite.py."
            ),
            "scaffolded_from": str(sample),
        },
        "notes": (
            f"Feature guards of the {job} job, profiled by `score init` from {sample}. Review each expectation's "
            "meta.review and its action before the first run; this suite decides what a scorable row looks like."
        ),
    }


# --- the job spec ---------------------------------------------------------------------------------


def _scalar(value: Any) -> str:
    """A YAML scalar that reads back as `value`: plain when it is safe, JSON-quoted otherwise."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    text = str(value)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text, ensure_ascii=False)


def _flow(items: list[Any]) -> str:
    return "[" + ", ".join(_scalar(v) for v in items) + "]"


def _number_text(value: float) -> str:
    """A number as a reader writes it: whole numbers without `.0` or an exponent, others as Python prints them."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _reason_variant(p: ColumnProfile, label: str) -> tuple[str, str]:
    """Which variant a feature's reason code takes (by_value, by_cut or by_band) and its YAML flow value; every
    text is true of the values it is given for."""
    q = _scalar
    if p.kind == "boolean":
        return "by_value", f"{{true: {q(f'{label}: yes')}, false: {q(f'{label}: no')}}}"
    if p.kind == "categorical":
        return "by_value", "{" + ", ".join(f"{q(v)}: {q(f'{label} is {v}')}" for v in p.values) + "}"
    if p.values and p.dtype.is_integer() and len(p.values) >= 2:
        # One text per value the sample held, but as ranges: the next night's value beyond them (a 3 after a sample of
        # 0s and 1s) still gets a text that is true of it, and one below the smallest too unless that is a count's 0.
        values = [int(v) for v in p.values]
        first = f"{label} is {values[0]}" + ("" if values[0] == 0 else " or less")
        texts = [first, *(f"{label} is {v}" for v in values[1:-1]), f"{label} is {values[-1]} or more"]
        return "by_cut", f"{{cuts: {_flow([v + 0.5 for v in values[:-1]])}, texts: {_flow(texts)}}}"
    if p.values:
        return "by_value", "{" + ", ".join(f"{q(v)}: {q(f'{label} is {_number_text(v)}')}" for v in p.values) + "}"
    if p.cut is not None:
        low, high = p.cut
        if p.dtype.is_integer():
            # Whole numbers only: a value below low + 0.5 is at most `low`, any other at least low + 1.
            texts = [f"{label} is {_number_text(low)} or less", f"{label} is {_number_text(low + 1)} or more"]
            return "by_cut", f"{{cuts: [{low + 0.5!r}], texts: {_flow(texts)}}}"
        # Whole numbers in a float column: a later fraction may arrive, so cut at the next observed value itself.
        texts = [f"{label} is below {_number_text(high)}", f"{label} is {_number_text(high)} or more"]
        return "by_cut", f"{{cuts: [{float(high)!r}], texts: {_flow(texts)}}}"
    return "by_band", f"{{low: {q(f'{label} is low')}, high: {q(f'{label} is high')}}}"


def _reason_code_lines(features: list[ColumnProfile]) -> list[str]:
    """One reason code per feature: its plain name from the column name, a default text (a missing value, or a value
    no variant covers) and texts that say where the row's value lies."""
    q = _scalar
    kept = [p.column for p in features if predict_feature_label(p.column) == p.column and p.column.isupper()]
    lines = [
        "    # review: `label` is the feature's plain name on pages and cards, made from the column name; the texts say where",
        "    #   the row's value lies: by_value one text per value (a category, yes/no, or a number with at most "
        f"{MAX_BY_VALUE} values in the sample),",
        '    #   by_cut a cut between two whole numbers the sample held, next to its median (the median\'s side says "or less"),',
        '    #   by_band "low" at or below the model\'s training median, "high" above it. `text` is for a missing value or',
        "    #   one no variant covers. Rewrite them in the job's words: they are what the reader of a decision sees.",
    ]
    if kept:
        shown = ", ".join(kept[:10]) + (f" and {len(kept) - 10} more" if len(kept) > 10 else "")
        lines.append(
            f"    # review: {shown} kept as {'a code' if len(kept) == 1 else 'codes'} (nothing better is known from the name): "
            "give each a `label` in words."
        )
    lines.append("    codes:")
    for i, p in enumerate(features, start=1):
        label = predict_feature_label(p.column)
        variant, value = _reason_variant(p, label)
        lines += [
            f"      {q(p.feature)}:",
            f"        code: R{i:02d}",
            f"        label: {q(label)}",
            f"        text: {q(label)}",
            f"        {variant}: {value}",
        ]
    return lines


def _feature_line(p: ColumnProfile) -> str:
    fields = [f"name: {_scalar(p.feature)}"]
    if p.feature != p.column:
        fields.append(f"source: {_scalar(p.column)}")
    if p.kind != "numeric":
        fields.append(f"kind: {p.kind}")
    if p.kind == "categorical":
        fields.append(f"categories: {_flow(list(p.values))}")
    if p.kind == "boolean" and p.dtype == pl.String:
        words = [str(v) for v in p.values]
        truthy = [w for w in words if w.strip().lower() in TRUE_VALUES]
        falsy = [w for w in words if w.strip().lower() in FALSE_VALUES]
        note = f"; {_scalar(truthy[0])} → 1, {_scalar(falsy[0])} → 0"
    elif p.kind == "categorical":
        note = f"; most frequent first ({p.shares[0]:.0%} {_scalar(p.values[0])})"
    else:
        note = ""
    nulls = f"{p.nulls} missing of {p.rows}" if p.nulls else "none missing"
    return f"    - {{{', '.join(fields)}}}  # review: {p.guess}; {nulls}{note}"


@dataclass(frozen=True)
class TargetProposal:
    """The job's target kind, proposed from the label column (or asked for with --kind), and what the
    scaffold derives from the column's values: a binary job's event rate, a forecast job's cut-off."""

    kind: TargetKind
    why: str
    """What in the column made the kind, in words (`units holds non-negative whole numbers, 0 to 37`)."""
    asked: bool = False
    """Whether --kind named it, rather than the column's values suggesting it."""
    rate: tuple[float, int, int] | None = None
    """A binary job's event rate, events and labelled rows."""
    cutoff: float | None = None
    """A forecast job's placeholder cut-off: the sample's 90th percentile of the label."""
    cutoff_note: str = ""
    labelled: int = 0
    classes: tuple[str, ...] = ()
    """A multiclass job's classes as the spec names them, in the scaffold's order (see `_class_order`)."""
    class_shares: tuple[float, ...] = ()
    """Each class's share of the sample's labelled rows, in the order of `classes`."""
    numeric: bool = False
    """Whether the label column holds numbers (a multiclass job's class codes could then be a count instead)."""
    positive: str | None = None
    """A binary job's event as the label's value when it is not 1/0 (`--positive`), and the other value (`negative`)."""
    negative: str | None = None


CUTOFF_QUANTILE = 0.9
"""The sample's quantile of the label a forecast job's placeholder rules cut at: the high tenth acts."""


def _shown(values: list[Any]) -> str:
    return ", ".join(f"{v:g}" if isinstance(v, float) else repr(v) if isinstance(v, str) else str(v) for v in values)


def _forecast_cutoff(values: np.ndarray, *, count: bool, label_column: str) -> tuple[float, str]:
    """The sample's 90th percentile of the label as a readable number (a whole number for counts, three
    significant digits otherwise), moved above the sample's minimum when that is where it falls."""
    quantile = float(np.quantile(values, CUTOFF_QUANTILE, method="higher" if count else "linear"))
    cut = quantile if count else float(f"{quantile:.3g}")
    note = (
        f"the {CUTOFF_QUANTILE * 100:.0f}th percentile of {label_column} in the sample's {len(values):,} labelled rows"
    )
    lowest = float(values.min())
    if cut <= lowest:
        # A cut at the minimum would act on every row (a count forecast is never below 0).
        above = np.unique(values[values > lowest])
        if above.size:
            cut = float(above[0])
            note = (
                f"the smallest {label_column} above the sample's minimum {lowest:g}, since its "
                f"{CUTOFF_QUANTILE * 100:.0f}th percentile is that minimum"
            )
    return (int(cut) if count else cut), note


def proposed_target(
    frame: pl.DataFrame,
    label_column: str,
    *,
    kind: str | None,
    where: str,
    positive: str | None = None,
) -> TargetProposal:
    """The target kind of a job labelled by `label_column` of `frame`: the kind `kind` asks for, checked
    against the column, or the one its values suggest. 1/0 or booleans are binary, and so are two values of which
    `positive` is the event; non-negative whole numbers (more than two values) a count; other numbers a regression.
    Two values other than 1/0 without `positive`, text, and values that do not fit the asked kind are a LabelError:
    one line saying what the column holds."""
    labels = frame.get_column(label_column).drop_nulls()
    if labels.dtype.is_float():
        labels = labels.filter(labels.is_not_nan())
    if labels.len() == 0:
        raise LabelError(f"{where}: label column {label_column!r} has no value, so the job's target cannot be proposed")
    if positive is not None:
        return _positive_target(labels, label_column, kind=kind, where=where, positive=positive)
    if labels.dtype == pl.Boolean:
        labels = labels.cast(pl.Int8)
    option = f"--kind {kind}: " if kind else ""
    if not labels.dtype.is_numeric():
        values, _ = _counted(labels.cast(pl.String))
        if kind in ("regression", "count"):
            raise LabelError(
                f"{option}{where}: label column {label_column!r} holds text ({_shown(list(values[:3]))}), not numbers: cast it to numbers upstream"
            )
        if kind == "multiclass" or (kind is None and 3 <= len(values) <= MAX_CATEGORIES):
            return _multiclass_target(labels, label_column, where, option, asked=kind is not None, numeric=False)
        if len(values) == 2:
            raise _two_values(label_column, labels, where, option, numeric=False)
        raise LabelError(
            f"{option}{where}: label column {label_column!r} holds text ({len(values)} values, e.g. {_shown(list(values[:3]))}): "
            + (
                "too many to be guessed as classes: pass --kind multiclass if each value is a class; "
                if len(values) > MAX_CATEGORIES
                else ""
            )
            + "a binary job's outcome is 1 (the event) or 0, or two values with --positive naming the event; "
            "a forecast job's (--kind regression or count) a number"
        )
    numbers = labels.cast(pl.Float64).to_numpy()
    if not np.isfinite(numbers).all():
        raise LabelError(
            f"{where}: label column {label_column!r} holds infinite values, e.g. {_shown(numbers[~np.isfinite(numbers)][:3].tolist())}"
        )
    distinct = np.unique(numbers)
    zero_one = bool(np.isin(distinct, (0.0, 1.0)).all())
    whole = bool((numbers == np.round(numbers)).all())
    described = f"{numbers.min():g} to {numbers.max():g} ({distinct.size} distinct values)"
    if kind == "multiclass" and not whole:
        wrong = numbers[numbers != np.round(numbers)]
        raise LabelError(
            f"{option}{where}: label column {label_column!r} holds fractional values ({wrong.size:,} rows, e.g. {_shown(wrong[:3].tolist())}); "
            "a class is a name or a whole-number code: pass --kind regression to forecast the number"
        )
    if kind == "multiclass" or (kind is None and whole and 3 <= distinct.size <= MAX_CLASS_CODES):
        return _multiclass_target(labels, label_column, where, option, asked=kind is not None, numeric=True)
    if kind == "binary" or (kind is None and zero_one):
        if not zero_one:
            if distinct.size == 2:
                raise _two_values(label_column, labels, where, option, numeric=kind is None)
            raise LabelError(
                f"{option}{where}: label column {label_column!r} must hold 1 (the event) and 0 (not), got "
                f"{_shown(labels.unique().sort().head(5).to_list())} ({labels.dtype})"
                + ("; pass --kind multiclass if each value is a class" if whole and distinct.size >= 3 else "")
            )
        events = int(numbers.sum())
        return TargetProposal(
            "binary",
            f"{label_column} holds 1 (the event, {events:,} rows) and 0 ({numbers.size - events:,} rows)",
            asked=kind is not None,
            rate=(events / numbers.size, events, numbers.size),
            labelled=numbers.size,
        )
    if kind is None and distinct.size == 2:
        raise _two_values(label_column, labels, where, option, numeric=True)
    nonnegative = bool(numbers.min() >= 0)
    if kind == "count" and not (whole and nonnegative):
        wrong = numbers[(numbers < 0) | (numbers != np.round(numbers))]
        what = " and ".join(
            w for w, bad in (("negative", (wrong < 0).any()), ("fractional", (wrong != np.round(wrong)).any())) if bad
        )
        raise LabelError(
            f"{option}{where}: label column {label_column!r} holds {what} values ({wrong.size:,} rows, e.g. {_shown(wrong[:3].tolist())}); "
            "a count is a non-negative whole number: pass --kind regression"
        )
    proposed: TargetKind = kind if kind is not None else ("count" if whole and nonnegative else "regression")  # type: ignore[assignment]
    shape = (
        "non-negative whole numbers"
        if whole and nonnegative
        else "whole numbers, some negative"
        if whole
        else "numbers with fractions" + (", some negative" if not nonnegative else "")
    )
    cutoff, note = _forecast_cutoff(numbers, count=proposed == "count", label_column=label_column)
    return TargetProposal(
        proposed,
        f"{label_column} holds {shape}, {described}",
        asked=kind is not None,
        cutoff=cutoff,
        cutoff_note=note,
        labelled=numbers.size,
    )


def _class_order(names: list[str]) -> list[str]:
    """Class names sorted as numbers when every one is a whole number (`2` before `10`), as text otherwise: the
    order of scikit-learn's `classes_` and of a label encoder, so a model trained on this sample likely shares it."""
    if all(re.fullmatch(r"[-+]?\d+", n.strip()) for n in names):
        return sorted(names, key=lambda n: (int(n), n))
    return sorted(names)


def _multiclass_target(
    labels: pl.Series, label_column: str, where: str, option: str, *, asked: bool, numeric: bool
) -> TargetProposal:
    """A multiclass job's target from its label column: the classes as the labels' text (a whole number without its
    `.0`), sorted by `_class_order`, with their shares of the labelled rows; fewer than 3 values are a LabelError."""
    text = predict_class_label_text(labels)
    counts = text.value_counts(name="n")
    found = dict(zip(counts[text.name].to_list(), counts["n"].to_list(), strict=True))
    if len(found) < 3:
        held = " and ".join(
            f"{_shown([v])} ({n / text.len():.0%})" for v, n in sorted(found.items(), key=lambda kv: -kv[1])
        )
        raise LabelError(
            f"{option}{where}: label column {label_column!r} holds {len(found)} value{'s' if len(found) != 1 else ''}, {held}: a multiclass "
            "job needs at least 3 classes"
            + (
                "; two values are a binary job: leave out --kind and say which is the event with --positive"
                if len(found) == 2
                else ""
            )
        )
    empty = [v for v in found if not v.strip()]
    if empty:
        raise LabelError(
            f"{option}{where}: label column {label_column!r} holds an empty class name on {found[empty[0]]:,} rows: name the class or leave the rows out"
        )
    classes = _class_order(list(found))
    shown = (", ".join(classes[:5]) if numeric else _shown(classes[:5])) + (", …" if len(classes) > 5 else "")
    what = f"{len(classes)} whole numbers ({shown})" if numeric else f"{len(classes)} text values ({shown})"
    return TargetProposal(
        "multiclass",
        f"{label_column} holds {what}",
        asked=asked,
        labelled=text.len(),
        classes=tuple(classes),
        class_shares=tuple(found[c] / text.len() for c in classes),
        numeric=numeric,
    )


def _two_values(label_column: str, labels: pl.Series, where: str, option: str, *, numeric: bool) -> LabelError:
    # Guessing which of two values is the event would silently invert every probability, decision and reason when wrong.
    problem = predict_binary_label_events(labels, positive=None).problem
    return LabelError(
        f"{option}{where}: label column {label_column!r} {problem}"
        + (", or pass --kind count or --kind regression if it is a quantity to forecast" if numeric else "")
    )


def _positive_target(
    labels: pl.Series, label_column: str, *, kind: str | None, where: str, positive: str
) -> TargetProposal:
    """A binary job whose event is the label value `positive` (`--positive`), the one other value of the sample its
    non-event; a third value, a `positive` the sample does not hold, or a kind that is not binary is a LabelError."""
    if kind not in (None, "binary"):
        raise LabelError(
            f"--positive names a binary job's event; --kind {kind} reads the label as "
            + ("the class name" if kind == "multiclass" else "the actual number")
            + ": drop --positive"
        )
    read = predict_binary_label_events(labels, positive=positive)
    if read.problem is not None:
        raise LabelError(f"--positive {positive}: {where}: label column {label_column!r} {read.problem}")
    text = predict_class_label_text(labels)
    values = sorted(set(text.to_list()))
    events = int(read.events.sum())
    if events == 0:
        raise LabelError(
            f"--positive {positive}: {where}: label column {label_column!r} has values {values}, none of them {positive!r}"
        )
    event = text.filter(read.events == 1)[0]
    others = [v for v in values if v != event]
    negative = others[0] if others else None
    held = f"{event!r} (the event, {events:,} rows)" + (
        f" and {negative!r} ({labels.len() - events:,} rows)" if negative else ""
    )
    return TargetProposal(
        "binary",
        f"{label_column} holds {held}, as --positive named the event",
        asked=kind is not None,
        rate=(events / labels.len(), events, labels.len()),
        labelled=labels.len(),
        positive=event,
        negative=negative,
    )


def _event_words(label_column: str | None, target: TargetProposal | None) -> str:
    return f"{label_column} = {target.positive if target is not None and target.positive is not None else 1}"


def _base_probability(rate: float) -> float:
    # The spec needs 0 < p < 1: a sample without (or with only) events still gets a valid, visibly extreme value.
    return min(max(round(rate, 4), 0.0001), 0.9999)


def _decision_lines(*decisions: tuple[str, str, bool]) -> list[str]:
    """The prediction's `decisions` section: each decision's plain name and whether it acts on the entity."""
    return [
        "  decisions:",
        "    # review: each decision's plain name on pages and the card, in the job's words; `action: true` marks the decisions",
        "    #   that act on the entity (their precision and recall are measured on outcomes). Rename them with the rules.",
        *(f"    {name}: {{label: {_scalar(label)}, action: {_scalar(action)}}}" for name, label, action in decisions),
    ]


def _binary_prediction(label_column: str | None, target: TargetProposal | None) -> list[str]:
    """A binary job's prediction section: the event, its score scale, three rules around twice the base rate."""
    if target is not None and target.rate is not None:
        rate, events, labelled = target.rate
        base = _base_probability(rate)
        base_note = f"the rate of {_event_words(label_column, target)} in the sample ({events} of {labelled} rows)"
    else:
        base, base_note = 0.1, "a placeholder: no --label-column was given"
    cut = min(0.5, max(0.01, round(2 * base, 2)))
    cut_note = (
        "twice the base probability"
        if cut == round(2 * base, 2)
        else (
            "twice the base probability, capped at 0.5" if cut == 0.5 else "twice the base probability, at least 0.01"
        )
    )
    q = _scalar
    event = _event_words(label_column, target) if label_column else "the event"
    return [
        "prediction:",
        f"  event: {q(event)}  # review: the event the probability is about, in words (e.g. buys within 30 days)",
        "  interval_level: 0.90",
        "  score:",
        "    # score = 50 + points_to_double_odds * log2(odds / base_odds), clipped to 0..100",
        "    # review: the score's name and what a higher score means, in the job's words, as pages and the card print them",
        "    #   (e.g. name: propensity score, higher: more likely to buy).",
        "    name: score",
        f"    higher: {q(f'more likely: {event}')}",
        f"    # review: base_probability (the probability at score 50) is {base_note}.",
        f"    base_probability: {base}",
        "    points_to_double_odds: 10",
        "  rules:",
        f"    # review: the cut-off {cut} is a placeholder ({cut_note}): set the probability at which the business acts,",
        "    #   and name the decisions after its actions (e.g. contact, send_offer, inspect).",
        "    # Every row must match exactly one rule; loading the spec proves it, so edit the three together.",
        "    - id: ACT",
        "      description: Even the low end of the interval reaches the cut-off.",
        f"      when: {{probability_low: {{ge: {cut}}}}}",
        "      decision: act",
        "    - id: REVIEW_UNCERTAIN",
        "      description: The interval straddles the cut-off; a person decides.",
        f"      when: {{probability_low: {{lt: {cut}}}, probability_high: {{ge: {cut}}}}}",
        "      decision: manual_review",
        "    - id: NO_ACTION",
        "      description: Even the high end of the interval is below the cut-off.",
        f"      when: {{probability_high: {{lt: {cut}}}}}",
        "      decision: no_action",
        *_decision_lines(
            ("act", "Act", True), ("manual_review", "A person decides", False), ("no_action", "No action", False)
        ),
        "  reasons:",
        "    top_k: 3",
        "    for_decisions: [act, manual_review]",
        "    no_reason_code: R00",
        f"    no_reason_text: {q(f'No single factor made {event} more likely.')}",
        "    # review: one code per feature; a row's reasons are the features that pushed it most toward the event.",
    ]


def _forecast_prediction(label_column: str | None, target: TargetProposal) -> list[str]:
    """A forecast job's prediction section: the interval's level, three rules around a high cut-off on the
    interval (act / a person decides / nothing to do), reasons for the rows that act or need a person."""
    if target.cutoff is not None:
        cut, cut_note = target.cutoff, target.cutoff_note
    else:
        cut, cut_note = 1, "no --label-column was given"
    return [
        "prediction:",
        "  # review: the prediction interval's level: forecast_low..forecast_high should hold the actual value this often",
        "  #   (registration fits the interval on the hold-out and prints its coverage on rows that fitted nothing).",
        "  interval_level: 0.90",
        "  rules:",
        f"    # review: the cut-off {cut} is a placeholder ({cut_note}):",
        "    #   set the forecast at which the business acts, and name the decisions after its actions (e.g. add_capacity).",
        "    # Every row must match exactly one rule; loading the spec proves it, so edit the three together.",
        "    - id: HIGH_FORECAST",
        "      description: Even the low end of the interval reaches the cut-off.",
        f"      when: {{forecast_low: {{ge: {cut}}}}}",
        "      decision: act",
        "    - id: REVIEW_UNCERTAIN",
        "      description: The interval straddles the cut-off; a person decides.",
        f"      when: {{forecast_low: {{lt: {cut}}}, forecast_high: {{ge: {cut}}}}}",
        "      decision: manual_review",
        "    - id: NO_ACTION",
        "      description: Even the high end of the interval is below the cut-off.",
        f"      when: {{forecast_high: {{lt: {cut}}}}}",
        "      decision: no_action",
        *_decision_lines(
            ("act", "Act", True), ("manual_review", "A person decides", False), ("no_action", "No action", False)
        ),
        "  reasons:",
        "    top_k: 3",
        "    for_decisions: [act, manual_review]",
        '    # review: one code per feature; a row\'s reasons read "<text> raised the forecast" or "<text> lowered the',
        '    #   forecast" (codes <code>_UP, <code>_DOWN), so the text names the feature as the reader knows it.',
    ]


def _target_lines(label_column: str | None, target: TargetProposal | None) -> list[str]:
    if target is None:
        return []
    source = f"as --kind {target.kind} asked; {target.why}" if target.asked else f"proposed because {target.why}"
    if target.kind == "multiclass":
        return _multiclass_target_lines(label_column, target, source)
    if target.kind == "binary":
        return [
            "target:",
            f"  # review: binary, {source}: the job scores the probability of the event.",
            "  #   For a quantity to forecast scaffold again with `score init --force --kind regression` (or count).",
            "  kind: binary",
        ]
    what = (
        [
            "  #   A count's forecasts and intervals never go below 0. To forecast any number instead (fractions, below 0),",
            "  #   scaffold again with `score init --force --kind regression`: the prediction section differs.",
        ]
        if target.kind == "count"
        else [
            "  #   A regression forecasts any number: its forecasts and intervals are not held at or above 0, as a count's are."
        ]
    )
    return [
        "target:",
        f"  # review: {target.kind}, {source}.",
        *what,
        f"  kind: {target.kind}",
        f"  name: {_scalar(_words(label_column or 'outcome'))}  # review: what is forecast, in words, as pages print it (e.g. units sold)",
        '  unit: ""  # review: the unit pages print after a forecast (e.g. units, EUR)',
    ]


def _multiclass_target_lines(label_column: str | None, target: TargetProposal, source: str) -> list[str]:
    """A multiclass job's target: its kind, its name in words and its classes, with the order to check."""
    order = "as numbers" if all(re.fullmatch(r"[-+]?\d+", c.strip()) for c in target.classes) else "as text"
    shares = ", ".join(f"{c} {share:.1%}" for c, share in zip(target.classes, target.class_shares, strict=True))
    lines = [
        "target:",
        f"  # review: multiclass, {source}: the job chooses one class per row, with its probability.",
    ]
    if target.numeric:
        lines.append(
            "  #   If the numbers are a quantity rather than codes, scaffold again with `score init --force --kind count`."
        )
    return [
        *lines,
        "  kind: multiclass",
        f"  name: {_scalar(_words(label_column or 'class'))}  # review: what is classified, in words, as pages print it (e.g. fault type)",
        f"  # review: the classes, sorted {order}: this order MUST be the model's class order (its output i is classes[i]),",
        "  #   e.g. scikit-learn's `clf.classes_`, or the codes 0..K-1 you trained XGBoost or LightGBM with (`score features`",
        "  #   writes the outcome as the index into this list). Registration refuses an order its hold-out contradicts.",
        f"  #   Shares in the sample's {target.labelled:,} labelled rows: {shares}.",
        f"  classes: {_flow(list(target.classes))}",
    ]


def _multiclass_prediction() -> list[str]:
    """A multiclass job's prediction section: a close call between the two likeliest classes goes to a person, every
    other row is acted on as its class says; reasons for the rows a person sees."""
    cut = CLOSE_CALL_MARGIN
    return [
        "prediction:",
        "  # review: the level of the interval around the predicted class's probability (probability_low..probability_high).",
        "  interval_level: 0.90",
        "  rules:",
        f"    # review: the margin {cut} is a placeholder: a row whose predicted class leads the runner-up by less than it goes",
        "    #   to a person. Rules test the predicted class (`class: name` or `class: [a, b]`), probability, probability_low,",
        "    #   probability_high and margin; add the actions of your classes before the catch-all, e.g.",
        "    #   {id: STOP, when: {class: leak, probability: {ge: 0.5}}, decision: stop}, and name decisions after actions.",
        "    # Every row must match exactly one rule; loading the spec proves it. The last rule, without `when`, is the catch-all.",
        "    - id: REVIEW_CLOSE_CALL",
        "      description: The two likeliest classes are close; a person decides.",
        f"      when: {{margin: {{lt: {cut}}}}}",
        "      decision: manual_review",
        "    - id: ACT_ON_CLASS",
        "      description: The predicted class leads clearly; act on it.",
        "      decision: act",
        *_decision_lines(("manual_review", "A person decides", False), ("act", "Act on the class", True)),
        "  reasons:",
        "    top_k: 3",
        "    for_decisions: [manual_review]",
        "    # review: one code per feature; a row's reasons are the features that pushed it most toward its predicted class",
        "    #   (exact contributions), so the text names the feature as the reader knows it.",
    ]


def _words(name: str) -> str:
    return re.sub(r"[_.\-]+", " ", name).strip() or name


def job_spec_text(
    job: str,
    profiles: list[ColumnProfile],
    *,
    entity_column: str,
    label_column: str | None,
    sample: Path,
    target: TargetProposal | None,
    kind: TargetKind = "binary",
) -> str:
    """The job spec as commented YAML: declared features, the target's kind, a starter rule table, one reason
    code per feature. `target` is what the label column proposed (None without one); `kind` the job's kind then."""
    kind = target.kind if target is not None else kind
    forecasts = kind in ("regression", "count")
    classifies = kind == "multiclass"
    features = [p for p in profiles if p.kind is not None]
    left_out = [p for p in profiles if p.kind is None and p.column != entity_column]
    q = _scalar
    lines = [
        f"# Job {job}, scaffolded by `score init` from {sample}.",
        "# Every value below is a proposal from that sample: read each `# review:` line, then register a",
        "# model trained on exactly these features (FEATURE_VERSION = features.version) before the first run.",
        f"name: {job}",
        f"description: {q(f'Scaffolded from {sample.name}; say what the job ' + ('forecasts.' if forecasts else 'classifies.' if classifies else 'scores.'))}"
        "  # review: one sentence for the model card",
        f"entity_column: {q(entity_column)}",
        f"expectation_suite: {job}.json  # the guards, profiled from the same sample: review its meta.review notes",
        "features:",
        "  # FEATURE_VERSION: a registered model must declare this version; bump it whenever a column below changes.",
        f'  version: "{FEATURE_VERSION}"',
        "  # numeric: the number as it is, missing stays missing; add `clip: [low, high]` to bound it.",
        f"  # boolean: {'/'.join(TRUE_VALUES)} → 1, {'/'.join(FALSE_VALUES)} → 0 (any case), anything else missing;",
        "  #   `true_values: [...]` / `false_values: [...]` replace those words.",
        "  # categorical: the code is the position in `categories`, an unlisted value is missing; append new",
        "  #   categories at the end (and bump the version), never reorder them under a trained model.",
        "  # review: the kinds were guessed from the sample's values; the order is the model's input order.",
        "  columns:",
        *(_feature_line(p) for p in features),
    ]
    if left_out:
        lines.append(
            "  # Left out (no feature; add one by hand or use a Python `feature_module` instead of `features`):"
        )
        lines += [f"  #   {p.column}: {p.left_out}" for p in left_out]
    if target is None and (forecasts or classifies):
        target = TargetProposal(kind, "no --label-column was given", asked=True)
    lines += [
        *_target_lines(label_column, target),
        "model:",
        "  # review: the registry name of the model trained on these features (data/models/<name>/).",
        f"  name: {job}",
        "  version: champion   # an alias: `score register` never moves it (but sets it for the first version); `score promote JOB N` does",
        *(
            _forecast_prediction(label_column, target)
            if forecasts
            else _multiclass_prediction()
            if classifies
            else _binary_prediction(label_column, target)
        ),
        *_reason_code_lines(features),
        "limits:",
        "  # Largest shares of a partition's rows the guards may repair / quarantine before the run fails.",
        "  max_repaired_share: 0.20",
        "  max_quarantined_share: 0.05",
        "monitoring:",
        "  labels:",
        f"    # review: outcomes arrive as data/labels/{job}/date=D/*.parquet with these columns "
        + (
            f"(the actual {_words(label_column or 'outcome')} of each scored entity)."
            if forecasts
            else "(the class each scored entity turned out to be, one of target.classes)."
            if classifies
            else _binary_outcome_note(target)
        ),
        f"    entity_column: {q(entity_column)}",
    ]
    if label_column:
        lines.append(f"    outcome_column: {q(label_column)}")
    else:
        lines.append(
            "    outcome_column: outcome  # review: no --label-column was given; name the labels' outcome column"
        )
    if target is not None and target.positive is not None:
        # Always quoted: YAML reads an unquoted Yes, No or 2 as a boolean or a number.
        lines.append(
            f"    positive: {json.dumps(target.positive, ensure_ascii=False)}  # the label value that is the event (read as 1)"
        )
        if target.negative is not None:
            lines.append(
                f"    negative: {json.dumps(target.negative, ensure_ascii=False)}  # the other value (read as 0); "
                "any third value in a hold-out or labels file is refused"
            )
    lines.append("    observed_date_column: observed_date")
    sliced = [p.column for p in features if p.kind == "categorical"]
    if classifies:
        lines += [
            "  # review: a multiclass job's slices are not monitored yet; candidates from the categorical features: "
            + (", ".join(sliced) or "none"),
            "  slices: []",
        ]
        return "\n".join(lines) + "\n"
    lines += [
        "  # review: each value of these columns gets its own decision mix and, once actuals land, its own realized error."
        if forecasts
        else "  # review: each value of these columns gets its own decision mix, expected event rate and score PSI,",
        *(
            ()
            if forecasts
            else ("  #   tested against the trailing window with the false discovery rate controlled (`slice_fdr`).",)
        ),
        f"  slices: {_flow(sliced)}",
    ]
    return "\n".join(lines) + "\n"


def _binary_outcome_note(target: TargetProposal | None) -> str:
    if target is None or target.positive is None:
        return "(1: the event happened)."
    other = f", {json.dumps(target.negative, ensure_ascii=False)}: it did not" if target.negative is not None else ""
    return f"({json.dumps(target.positive, ensure_ascii=False)}: the event happened{other})."


def _refused_name(job: str) -> None:
    if not re.fullmatch(NAME_PATTERN, job):
        raise JobSpecError(
            f"job name {job[:80]!r} is not allowed: use lower-case letters, digits and _ (at most 64), starting with a letter"
        )


def scaffolded_job(
    job: str,
    *,
    sample: Path,
    entity_column: str,
    label_column: str | None,
    settings: Settings,
    force: bool = False,
    kind: TargetKind | None = None,
    positive: str | None = None,
) -> ScaffoldedJob:
    """Write `jobs/<job>.yaml` and `expectations/<job>.json` profiled from the sample partition.

    The target's kind is `kind`, checked against the label column, or the one the label column's values
    suggest (`proposed_target`); binary without either. Refuses (JobSpecError) to overwrite either file
    unless `force`; a missing sample or column is a PartitionError listing the columns the sample has, a
    label column that fits no kind (or not `kind`) a LabelError. `positive` is the label value that is a binary job's
    event (`--positive`), written to monitoring.labels. Both files are validated before either is written.
    """
    _refused_name(job)
    if kind == "multiclass" and label_column is None:
        raise LabelError("--kind multiclass needs --label-column: the label column's values name the classes")
    if positive is not None and label_column is None:
        raise LabelError(f"--positive {positive} names the event among the label's values: give --label-column too")
    spec_path, suite_path = settings.jobs_dir / f"{job}.yaml", settings.expectations_dir / f"{job}.json"
    existing = [str(p) for p in (spec_path, suite_path) if p.exists()]
    if existing and not force:
        raise JobSpecError(
            f"job {job!r} already has {' and '.join(existing)}; pass --force to overwrite, or choose another name"
        )
    frame, files = _sample(sample)
    for option, column in (("--entity-column", entity_column), ("--label-column", label_column)):
        if column is not None and column not in frame.columns:
            raise PartitionError(
                f"{option} {column!r} is not a column of sample {sample}; its columns: {', '.join(frame.columns)}"
            )
    if label_column == entity_column:
        raise PartitionError(f"--label-column {label_column!r} is the entity column; name the column with the outcome")
    profiles = column_profiles(frame, entity_column=entity_column, label_column=label_column)
    if not any(p.kind for p in profiles):
        raise PartitionError(
            f"sample {sample} has no column that can be a declared feature besides {entity_column!r}"
            + (f" and {label_column!r}" if label_column else "")
            + "; "
            + "; ".join(f"{p.column}: {p.left_out}" for p in profiles if p.left_out)
        )
    target = (
        proposed_target(frame, label_column, kind=kind, where=f"sample {sample}", positive=positive)
        if label_column
        else None
    )
    spec_text = job_spec_text(
        job,
        profiles,
        entity_column=entity_column,
        label_column=label_column,
        sample=sample,
        target=target,
        kind=kind or "binary",
    )
    suite = profiled_suite(job, profiles, entity_column=entity_column, sample=sample)
    suite_text = json.dumps(suite, indent=2, ensure_ascii=False) + "\n"
    # A scaffold that did not load would be a bug here, not the user's to debug: prove both load first.
    JobSpec.model_validate(yaml.load(spec_text, Loader=UniqueKeyLoader))  # noqa: S506  (a SafeLoader subclass)
    with tempfile.TemporaryDirectory() as scratch:
        probe = Path(scratch) / suite_path.name
        probe.write_text(suite_text, encoding="utf-8")
        load_guard_suite(probe, entity_column=entity_column)
    spec_path.write_text(spec_text, encoding="utf-8")
    suite_path.write_text(suite_text, encoding="utf-8")
    return ScaffoldedJob(
        job=job,
        spec_path=spec_path,
        suite_path=suite_path,
        sample_files=files,
        rows=frame.height,
        features={p.feature: p.kind for p in profiles if p.feature and p.kind},
        left_out={p.column: p.left_out for p in profiles if p.left_out},
        guesses={p.column: p.guess for p in profiles if p.guess},
        expectations=len(suite["expectations"]),
        base_probability=None if target is None or target.rate is None else _base_probability(target.rate[0]),
        kind=target.kind if target is not None else kind or "binary",
        target=target,
        label_like=()
        if label_column
        else tuple(p.column for p in profiles if p.kind and re.search(_LABEL_NAME, p.column)),
    )
