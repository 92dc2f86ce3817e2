"""Monitoring reads: what the monitoring, outcomes and pages read of the published partitions, aggregated in the
database where a partition could be large, and labels from a table people load."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from tasks.catalog import (
    CLASSIFICATION_GROUP_SCHEMA,
    CLASSIFICATION_SCHEMA,
    FORECAST_GROUP_SCHEMA,
    FORECAST_SCHEMA,
    FORECASTS,
    MODEL_HEALTH,
    PREDICTION_GROUP_SCHEMA,
    PREDICTION_SCHEMA,
    PREDICTIONS,
    SHADOW_FORECASTS,
    SHADOW_PREDICTIONS,
    Dataset,
)
from tasks.errors import LabelError
from tasks.sinks.warehouse.base import WarehouseBase
from tasks.sinks.warehouse.schema import OWN_TABLES, monitoring_dataset, table_columns, table_exists
from tasks.sinks.warehouse.session import PARTITION_KEY, quoted


@dataclass(frozen=True)
class _SqlTerm:
    """A SQL expression that `<`, `>=`, `&` and `|` combine into SQL text, so a rule written with
    Python's operators (tasks/prediction/decisions.py predict_straddling) runs in the database."""

    sql: str

    def __lt__(self, other: _SqlTerm) -> _SqlTerm:
        return _SqlTerm(f"{self.sql} < {other.sql}")

    def __ge__(self, other: _SqlTerm) -> _SqlTerm:
        return _SqlTerm(f"{self.sql} >= {other.sql}")

    def __and__(self, other: _SqlTerm) -> _SqlTerm:
        return _SqlTerm(f"({self.sql} AND {other.sql})")

    def __or__(self, other: _SqlTerm) -> _SqlTerm:
        return _SqlTerm(f"({self.sql} OR {other.sql})")


class StraddlingRule(Protocol):
    """Whether the interval [low, high] straddles one of the cut-offs, written with `<`, `>=`, `&` and `|` only (the
    prediction layer's rule, tasks/prediction/decisions.py predict_straddling): the caller passes it in, and the
    warehouse applies it to SQL terms."""

    def __call__(self, low: _SqlTerm, high: _SqlTerm, cutoffs: Iterable[_SqlTerm], *, none: _SqlTerm) -> _SqlTerm: ...


def _straddling_term(
    job: str, partition_date: Any, cutoffs: Sequence[float], straddling: StraddlingRule, *, low: str, high: str
) -> tuple[dict[str, Any], _SqlTerm]:
    """The partition's query parameters with one `$cut_i` per cut-off, and the SQL of "the interval [low, high]
    straddles a cut-off" (`straddling`, the prediction layer's own rule, written in SQL)."""
    params: dict[str, Any] = {"job": job, "partition_date": partition_date}
    for i, cut in enumerate(cutoffs):
        params[f"cut_{i}"] = float(cut)
    term = straddling(
        _SqlTerm(low),
        _SqlTerm(high),
        [_SqlTerm(f"CAST($cut_{i} AS DOUBLE PRECISION)") for i in range(len(cutoffs))],
        none=_SqlTerm("FALSE"),
    )
    return params, term


class MonitoringReads(WarehouseBase):
    """Reads of the published partitions and the monitoring tables; nothing here writes."""

    def previous_drift_histograms(self, job: str, partition_date: Any) -> list[dict[str, Any]]:
        """Drift histograms of the job's latest scored partition before `partition_date` (empty if none)."""
        if not self._exists():
            return []
        with self._session(write=False) as session:
            if not table_exists(session, "drift_histograms"):
                return []
            # A table from before kinds existed is read as it is (all numeric); the next write migrates it.
            kind = (
                "kind" if "kind" in table_columns(session, ["drift_histograms"])["drift_histograms"] else "NULL AS kind"
            )
            return session.rows(
                f"SELECT feature, edges, counts, nulls, {kind} FROM drift_histograms WHERE job = $job AND partition_date = "
                "(SELECT max(partition_date) FROM drift_histograms WHERE job = $job AND partition_date < $partition_date)",
                {"job": job, "partition_date": partition_date},
            )

    def monitoring_rows(self, table: str, *, job: str, first_date: Any, last_date: Any) -> pa.Table:
        """Rows of a monitoring table for the job's partitions from `first_date` to `last_date` inclusive."""
        dataset = monitoring_dataset(table)
        schema = dataset.schema
        columns = ", ".join(quoted(c) for c in schema.names)
        # The rows' key, but for the job all of them share.
        order = ", ".join(quoted(c) for c in dataset.keys if c != "job")
        return self._read_arrow(
            table,
            schema,
            f"SELECT {columns} FROM {quoted(table)} WHERE job = $job AND partition_date BETWEEN $first_date AND $last_date "
            f"ORDER BY {order}",
            {"job": job, "first_date": first_date, "last_date": last_date},
        )

    def partition_predictions(self, job: str, partition_date: Any, columns: Sequence[str]) -> pa.Table:
        """The named prediction columns of (job, partition_date); no rows when it was never published."""
        return self._partition_columns("predictions", PREDICTION_SCHEMA, job, partition_date, columns)

    def partition_forecasts(self, job: str, partition_date: Any, columns: Sequence[str]) -> pa.Table:
        """The named forecast columns of (job, partition_date) (a forecast job's `forecasts`); no rows when it was never published."""
        return self._partition_columns("forecasts", FORECAST_SCHEMA, job, partition_date, columns)

    def partition_classifications(self, job: str, partition_date: Any, columns: Sequence[str]) -> pa.Table:
        """The named classification columns of (job, partition_date) (a multiclass job's `classifications`); no rows when it was never published."""
        return self._partition_columns("classifications", CLASSIFICATION_SCHEMA, job, partition_date, columns)

    def _partition_columns(
        self, table: str, known: pa.Schema, job: str, partition_date: Any, columns: Sequence[str]
    ) -> pa.Table:
        unknown = [c for c in columns if c not in known.names]
        if unknown:
            raise ValueError(f"not {table} columns: {unknown}; known: {known.names}")
        schema = pa.schema([known.field(c) for c in columns])
        return self._read_arrow(
            table,
            schema,
            f"SELECT {', '.join(quoted(c) for c in columns)} FROM {quoted(table)} WHERE {PARTITION_KEY}",
            {"job": job, "partition_date": partition_date},
        )

    def partition_shadow_predictions(self, job: str, partition_date: Any) -> pa.Table:
        """The challenger's (entity_id, probability, model_version) of (job, partition_date); no rows without one."""
        schema = pa.schema([SHADOW_PREDICTIONS.schema.field(c) for c in ("entity_id", "probability", "model_version")])
        return self._read_arrow(
            "shadow_predictions",
            schema,
            f"SELECT entity_id, probability, model_version FROM shadow_predictions WHERE {PARTITION_KEY}",
            {"job": job, "partition_date": partition_date},
        )

    def partition_shadow_forecasts(self, job: str, partition_date: Any) -> pa.Table:
        """A forecast job's challenger's (entity_id, forecast, forecast_low, forecast_high, model_version) of
        (job, partition_date), in entity order; no rows without one."""
        columns = ("entity_id", "forecast", "forecast_low", "forecast_high", "model_version")
        return self._read_arrow(
            "shadow_forecasts",
            pa.schema([SHADOW_FORECASTS.schema.field(c) for c in columns]),
            f"SELECT {', '.join(columns)} FROM shadow_forecasts WHERE {PARTITION_KEY} ORDER BY entity_id",
            {"job": job, "partition_date": partition_date},
        )

    def labelled_shadow_rows(
        self, job: str, *, first_date: Any, last_date: Any, max_rows: int = 2_000_000
    ) -> tuple[pa.Table, int]:
        """The labelled rows of the job's partitions in the range that a challenger shadowed: (partition_date, entity_id,
        champion_version, challenger_version, outcome, champion, challenger), the last two the calibrated probabilities,
        ordered by partition and entity (the comparison's bootstrap draws by position); and how many there are.

        Beyond `max_rows` (a month of million-row nights) a sample of entities chosen by the md5 of their id is read:
        the same rows on both backends and on every re-run, and memory bounded."""
        schema = pa.schema(
            [
                ("partition_date", pa.date32()),
                ("entity_id", pa.string()),
                ("champion_version", pa.string()),
                ("challenger_version", pa.string()),
                ("outcome", pa.int16()),
                ("champion", pa.float64()),
                ("challenger", pa.float64()),
            ]
        )
        joined = (
            "FROM predictions p "
            "JOIN shadow_predictions s ON s.job = p.job AND s.partition_date = p.partition_date AND s.entity_id = p.entity_id "
            "JOIN outcome_labels l ON l.job = p.job AND l.partition_date = p.partition_date AND l.entity_id = p.entity_id "
            "WHERE p.job = $job AND p.partition_date BETWEEN $first_date AND $last_date AND l.outcome IS NOT NULL"
        )
        key = {"job": job, "first_date": first_date, "last_date": last_date}
        # Every table is created with the others; only a warehouse from before challengers lacks shadow_predictions.
        counted = self._read_rows("shadow_predictions", f"SELECT count(*) AS n {joined}", key)
        total = int(counted[0]["n"]) if counted else 0
        sampled = ""
        if total > max_rows:
            # 65 536 md5 buckets: the first four hex digits, compared as fixed-width lower-case text.
            sampled = f" AND substr(md5(p.entity_id), 1, 4) < '{min(65_535, 65_536 * max_rows // total):04x}'"
        return self._read_arrow(
            "shadow_predictions",
            schema,
            "SELECT p.partition_date, p.entity_id, p.model_version AS champion_version, s.model_version AS challenger_version, l.outcome, "
            f"p.probability AS champion, s.probability AS challenger {joined}{sampled} ORDER BY p.partition_date, p.entity_id",
            key,
        ), total

    def prediction_groups(
        self, job: str, partition_date: Any, cutoffs: Sequence[float], *, straddling: StraddlingRule
    ) -> pa.Table:
        """Predictions of (job, partition_date) counted by run_id, model_version, decision, rule_id,
        score and whether the interval straddles one of `cutoffs` (the caller's `straddling` rule), with their probability sum; the
        aggregation runs in the database, so nothing the size of the partition is loaded."""
        schema = PREDICTION_GROUP_SCHEMA
        params, straddles = _straddling_term(
            job, partition_date, cutoffs, straddling, low="probability_low", high="probability_high"
        )
        return self._read_arrow(
            "predictions",
            schema,
            f"SELECT run_id, model_version, decision, rule_id, score, ({straddles.sql}) AS straddling, "
            # An exact decimal sum: a float sum in parallel would differ in the last bits from
            # run to run, and recomputing monitoring must leave identical tables.
            f'count(*) AS "rows", CAST(sum(CAST(probability AS DECIMAL(38, 18))) AS DOUBLE PRECISION) AS probability_sum '
            f"FROM predictions WHERE {PARTITION_KEY} "
            "GROUP BY 1, 2, 3, 4, 5, 6",
            params,
        )

    def forecast_groups(
        self, job: str, partition_date: Any, cutoffs: Sequence[float], *, straddling: StraddlingRule
    ) -> pa.Table:
        """`prediction_groups` of a forecast job: its forecasts counted by run_id, model_version, decision,
        rule_id and whether the interval straddles one of `cutoffs`, with their forecast sum, in the database."""
        params, straddles = _straddling_term(
            job, partition_date, cutoffs, straddling, low="forecast_low", high="forecast_high"
        )
        return self._read_arrow(
            "forecasts",
            FORECAST_GROUP_SCHEMA,
            f"SELECT run_id, model_version, decision, rule_id, ({straddles.sql}) AS straddling, "
            # Exact, as the probabilities' sum above; 26 integer digits hold any partition's total of any unit.
            f'count(*) AS "rows", CAST(sum(CAST(forecast AS DECIMAL(38, 12))) AS DOUBLE PRECISION) AS forecast_sum '
            f"FROM forecasts WHERE {PARTITION_KEY} "
            "GROUP BY 1, 2, 3, 4, 5",
            params,
        )

    def classification_groups(
        self, job: str, partition_date: Any, cutoffs: Sequence[float], *, straddling: StraddlingRule
    ) -> pa.Table:
        """`prediction_groups` of a multiclass job: its classifications counted by run_id, model_version, decision,
        rule_id, predicted_class and whether the predicted class's interval straddles one of `cutoffs`, with the sum of
        the predicted class's probability, in the database."""
        params, straddles = _straddling_term(
            job, partition_date, cutoffs, straddling, low="probability_low", high="probability_high"
        )
        return self._read_arrow(
            "classifications",
            CLASSIFICATION_GROUP_SCHEMA,
            f"SELECT run_id, model_version, decision, rule_id, predicted_class, ({straddles.sql}) AS straddling, "
            # Exact, as the binary job's probability sum.
            f'count(*) AS "rows", CAST(sum(CAST(probability AS DECIMAL(38, 18))) AS DOUBLE PRECISION) AS probability_sum '
            f"FROM classifications WHERE {PARTITION_KEY} "
            "GROUP BY 1, 2, 3, 4, 5, 6",
            params,
        )

    def model_health_rows(self, job: str, first_date: Any, last_date: Any | None = None) -> pa.Table:
        """The published `model_health` rows of the job's partitions from `first_date` to `last_date`
        (default: that one partition); none for a partition never published."""
        schema = MODEL_HEALTH.schema
        columns = ", ".join(quoted(c) for c in schema.names)
        return self._read_arrow(
            MODEL_HEALTH.table,
            schema,
            f"SELECT {columns} FROM {quoted(MODEL_HEALTH.table)} WHERE job = $job AND partition_date BETWEEN $first_date "
            "AND $last_date ORDER BY partition_date, model_version, section, measure, item",
            {"job": job, "first_date": first_date, "last_date": first_date if last_date is None else last_date},
        )

    def quarantined_entities(self, job: str, partition_date: Any) -> pa.Table:
        """Entity ids of (job, partition_date) that were read but not scored (column `entity_id`)."""
        schema = pa.schema([("entity_id", pa.string())])
        return self._read_arrow(
            "quarantine",
            schema,
            f"SELECT DISTINCT entity_id FROM quarantine WHERE {PARTITION_KEY}",
            {"job": job, "partition_date": partition_date},
        )

    def prediction_counts(
        self,
        job: str,
        *,
        first_date: Any,
        last_date: Any,
        by: Sequence[str],
        dataset: Dataset = PREDICTIONS,
    ) -> pa.Table:
        """Prediction rows per distinct value of the `by` columns over a range of partitions (column `rows`);
        `dataset` FORECASTS counts a forecast job's rows."""
        if dataset not in (PREDICTIONS, FORECASTS):
            raise ValueError(f"count the rows of predictions or forecasts, got {dataset.name}")
        contract = dataset.schema
        unknown = [c for c in by if c not in contract.names]
        if unknown or not by:
            raise ValueError(f"group {dataset.name} by its columns, got {list(by)}; known: {contract.names}")
        schema = pa.schema([*(contract.field(c).with_nullable(True) for c in by), ("rows", pa.int64())])
        keys = ", ".join(quoted(c) for c in by)
        return self._read_arrow(
            dataset.table,
            schema,
            f'SELECT {keys}, count(*) AS "rows" FROM {quoted(dataset.table)} WHERE job = $job AND partition_date BETWEEN $first_date '
            f"AND $last_date GROUP BY {keys} ORDER BY {keys}",
            {"job": job, "first_date": first_date, "last_date": last_date},
        )

    def forecast_means(self, job: str, *, first_date: Any, last_date: Any) -> pa.Table:
        """A forecast job's published rows per partition and model version over a range, with their mean forecast,
        interval bounds, interval width and expected error: what its monitoring page draws before actuals land."""
        schema = pa.schema(
            [
                ("partition_date", pa.date32()),
                ("model_version", pa.string()),
                ("rows", pa.int64()),
                ("forecast_mean", pa.float64()),
                ("forecast_low_mean", pa.float64()),
                ("forecast_high_mean", pa.float64()),
                ("width_mean", pa.float64()),
                ("expected_error_mean", pa.float64()),
            ]
        )
        return self._read_arrow(
            FORECASTS.table,
            schema,
            'SELECT partition_date, model_version, count(*) AS "rows", avg(forecast) AS forecast_mean, '
            "avg(forecast_low) AS forecast_low_mean, avg(forecast_high) AS forecast_high_mean, "
            "avg(forecast_high - forecast_low) AS width_mean, avg(expected_error) AS expected_error_mean "
            f"FROM {quoted(FORECASTS.table)} WHERE job = $job AND partition_date BETWEEN $first_date AND $last_date "
            "GROUP BY partition_date, model_version ORDER BY partition_date, model_version",
            {"job": job, "first_date": first_date, "last_date": last_date},
        )

    def source_labels(
        self,
        table: str,
        *,
        job: str,
        partition_date: Any,
        entity_column: str,
        outcome_column: str,
        observed_date_column: str,
    ) -> pa.Table:
        """Labels of (job, partition_date) from a warehouse table people load, as entity_id, outcome, observed_date.

        The table needs `partition_date` and the three named columns; a `job` column, if present,
        selects the job's rows. Only plain lower-case names are accepted, and they are quoted.
        """
        if table in OWN_TABLES:
            raise LabelError(
                f"labels table {table!r} is one of the warehouse's own tables; load labels into another table"
            )
        wanted = {"entity_id": entity_column, "outcome": outcome_column, "observed_date": observed_date_column}
        for name in (table, *wanted.values()):
            try:
                quoted(name)
            except ValueError:
                raise LabelError(f"labels table {table!r}: {name!r} is not a plain lower-case SQL name") from None
        if not self._exists():
            raise LabelError(f"labels table {table!r}: there is no warehouse at {self.location}")
        with self._session(write=False) as session:
            present = {
                r["column_name"]
                for r in session.rows(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = $table "
                    "AND table_schema = current_schema()",
                    {"table": table},
                )
            }
            if not present:
                raise LabelError(f"labels table {table!r} does not exist in the warehouse {self.location}")
            missing = sorted({*wanted.values(), "partition_date"} - present)
            if missing:
                raise LabelError(f"labels table {table!r} lacks column(s) {missing}; it has {sorted(present)}")
            selected = ", ".join(f"{quoted(source)} AS {quoted(target)}" for target, source in wanted.items())
            where = "partition_date = $partition_date" + (" AND job = $job" if "job" in present else "")
            return session.arrow(
                f"SELECT {selected} FROM {quoted(table)} WHERE {where}", {"job": job, "partition_date": partition_date}
            )
