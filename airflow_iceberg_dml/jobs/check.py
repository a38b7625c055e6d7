"""Data-quality checks: ``spark-submit check.py <spec.json>``, or :func:`run_spec` on a Spark Connect session.

The job resolves the snapshot once (the head of the branch, or the spec's ``snapshot_id``) and counts
every check against ``<table> VERSION AS OF <snapshot id>``, never against the moving head: the counts
are of one snapshot, which a following change can pin (``expected_snapshot_id``). Every check is
parsed and analysed before any data is read. ``row_condition``, ``not_null`` and ``row_count`` share
one aggregate scan; each ``unique`` check groups the rows by its key; each ``sql`` check runs its own
query. Nothing is committed. See :class:`~airflow_iceberg_dml.spec.Check` for what each kind counts.
"""

from __future__ import annotations

import math
import sys
from contextlib import contextmanager
from decimal import Decimal
from functools import reduce
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.exceptions import (
    IcebergDmlError,
    InvalidCheckError,
    SnapshotNotFoundError,
    UnknownColumnError,
)
from airflow_iceberg_dml.jobs.runner import (
    application_id,
    error_condition,
    error_summary,
    functions,
    is_input_error,
    log,
    probe_row,
    run_job,
    run_main,
)
from airflow_iceberg_dml.jobs.table_state import TableState, worker_catalog
from airflow_iceberg_dml.metadata_columns import may_have_subquery
from airflow_iceberg_dml.spec import CheckKind, CheckSpec, JobRecord, Outcome
from airflow_iceberg_dml.specs.common import with_table

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from pyspark.sql import Column, DataFrame, SparkSession

    from airflow_iceberg_dml.spec import Check

#: The kinds counted together in one aggregate scan of the snapshot.
_AGGREGATED = (CheckKind.ROW_CONDITION, CheckKind.NOT_NULL, CheckKind.ROW_COUNT)
#: Spark types a ``sql`` check may return (its value must still be a whole number >= 0).
_NUMBER_TYPES = ("byte", "short", "integer", "long", "decimal", "float", "double")


def row_count_failing(rows: int, min_rows: int | None, max_rows: int | None) -> int:
    """How far ``rows`` is outside ``min_rows`` .. ``max_rows``: 0 inside, else the distance to the range."""
    below = min_rows - rows if min_rows is not None and rows < min_rows else 0
    above = rows - max_rows if max_rows is not None and rows > max_rows else 0
    return below + above


def whole_number(value: object) -> int | None:
    """``value`` as an int when it is a whole number (an integer, or a float or decimal without a
    fraction); None otherwise (NULL, a boolean, a fraction, NaN)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)
    return None


def failing_count(check: Check, value: object) -> int:
    """The value a ``sql`` check's query returned, as its failing count; InvalidCheckError unless a
    whole number >= 0."""
    number = whole_number(value)
    if number is None or number < 0:
        raise InvalidCheckError(
            f"{check.label}: the query returned {value!r}, not a failing count (a whole number >= 0); "
            "0 passes. Wrap a sum in coalesce(..., 0) for a snapshot with no matching rows."
        )
    return number


class CheckJob:
    """Counts the failing rows of each check of one :class:`CheckSpec` on a running SparkSession."""

    def __init__(self, spark: SparkSession, spec: CheckSpec) -> None:
        self.spark = spark
        self.spec = spec
        self.app_id = application_id(spark)
        self.functions = functions(spark)
        self.state = TableState(spark, spec.catalog, spec.table, worker_catalog(spec.catalog), in_driver=True)
        self.ref = spec.branch or "main"
        self.table_name = ".".join([spec.catalog, *sql.split_table_name(spec.table)])
        #: Each check's text with its parameters bound (condition, or query with the pinned table).
        self.texts: dict[str, str] = {}
        #: Each unique / not_null check's columns, as the table spells them.
        self.columns: dict[str, list[str]] = {}

    def run(self) -> JobRecord:
        texts = [check.query or check.condition or "" for check in self.spec.checks]
        if any(may_have_subquery(text) for text in texts):  # its other tables are named as the table is
            self.spark.catalog.setCurrentCatalog(self.spec.catalog)
        snapshot_id = self._snapshot()
        log(
            f"Checks of {self.table_name} (ref {self.ref}) at snapshot {snapshot_id}, "
            f"Spark application {self.app_id}: {', '.join(check.label for check in self.spec.checks)}"
        )
        version = self.state.version(snapshot_id, self.ref)
        source = self.spark.sql(sql.snapshot_query(self.state.identifier, version, "*"))
        pinned = f"{self.state.identifier} {sql.as_of(version)}"
        for check in self.spec.checks:
            self._prepare(check, source, pinned)
        counts = self._aggregate(source, [c for c in self.spec.checks if c.kind in _AGGREGATED])
        for check in self.spec.checks:
            if check.kind is CheckKind.UNIQUE:
                counts[check.name] = self._unique(check, source)
            elif check.kind is CheckKind.SQL:
                counts[check.name] = self._sql(check)
        results = {}
        for check in self.spec.checks:
            results[check.name] = {**counts[check.name], "passed": counts[check.name]["failing"] == 0}
            log(_result_line(check, results[check.name]))
        failed = [name for name, result in results.items() if not result["passed"]]
        log(
            f"{len(results) - len(failed)} of {len(results)} check(s) passed at snapshot {snapshot_id}"
            + (f"; failed: {', '.join(failed)}" if failed else "")
        )
        return JobRecord(
            outcome=Outcome.CHECKED,
            spark_app_id=self.app_id,
            details={"snapshot_id": snapshot_id, "checks": results},
        )

    def _snapshot(self) -> int:
        """The one snapshot every check reads: ``snapshot_id``, else the head of the branch."""
        self.state.refresh()  # a missing table is named before anything else
        head = self.state.head(self.ref)  # and so is a missing branch
        wanted = self.spec.snapshot_id
        if wanted is not None:
            if self.state.history().get(wanted) is None:
                raise SnapshotNotFoundError(
                    f"Snapshot {wanted} is not in {self.table_name} (a wrong id, or expired): "
                    "nothing to check."
                )
            return wanted
        if head is None:
            raise SnapshotNotFoundError(
                f"{self.table_name} has no snapshot on ref {self.ref}: the table was never written, so "
                "there is no data to check (and no snapshot a following change could pin)."
            )
        return head

    # -- before reading any data: every check parsed and analysed ----------------------------------------

    def _prepare(self, check: Check, source: DataFrame, pinned: str) -> None:
        if check.kind in (CheckKind.UNIQUE, CheckKind.NOT_NULL):
            self.columns[check.name] = self._resolve_columns(check, source.columns)
        elif check.kind is CheckKind.ROW_CONDITION:
            self.texts[check.name] = self._bind(check, check.condition or "")
            self._analyse_condition(check, source)
        elif check.kind is CheckKind.SQL:
            bound = self._bind(check, check.query or "")
            self.texts[check.name] = with_table(bound, pinned)
            self._analyse_query(check)

    def _bind(self, check: Check, text: str) -> str:
        try:
            return sql.bind_parameters(text, self.spec.parameters)
        except KeyError as missing:
            raise InvalidCheckError(
                f"{check.label}: parameter :{missing.args[0]} has no value in parameters."
            ) from None
        except TypeError as bad:
            raise InvalidCheckError(f"{check.label}: {bad}") from None

    def _resolve_columns(self, check: Check, table_columns: Sequence[str]) -> list[str]:
        by_lower = {column.lower(): column for column in table_columns}
        unknown = [column for column in check.columns if column.lower() not in by_lower]
        if unknown:
            raise UnknownColumnError(
                f"{check.label}: column(s) {unknown} not in {self.table_name} at the checked snapshot "
                f"(columns: {list(table_columns)})."
            )
        return [by_lower[column.lower()] for column in check.columns]

    def _analyse_condition(self, check: Check, source: DataFrame) -> None:
        """The condition resolved against the snapshot's rows: one boolean, deterministic expression."""
        what = f"{check.label}: condition={check.condition!r}"
        with self._naming_analysis_errors(check, what):
            condition = self.functions.expr(self.texts[check.name])
            data_type = source.select(condition.alias("holds")).schema["holds"].dataType
            # PySpark cannot ask whether an expression is deterministic; the analyser insists on it in a
            # join condition, on either engine (as DML validation does).
            probe = probe_row(self.spark)
            source.join(probe, condition.isNull()).schema  # noqa: B018 - analysed, never run
        if data_type.typeName() != "boolean":
            raise InvalidCheckError(f"{what} is of type {data_type.simpleString()}, not a boolean condition.")

    def _analyse_query(self, check: Check) -> None:
        """The query resolved as one relation of one numeric column."""
        what = f"{check.label}: query={check.query!r}"
        with self._naming_analysis_errors(check, what):
            fields = self._query(check).schema.fields
        types = [field.dataType.typeName() for field in fields]
        if len(types) != 1 or types[0] not in _NUMBER_TYPES:
            shown = ", ".join(f"{field.name} {field.dataType.simpleString()}" for field in fields)
            raise InvalidCheckError(
                f"{what} must return one numeric column (the failing count), not: {shown}."
            )

    def _query(self, check: Check) -> DataFrame:
        return self.spark.sql(sql.subquery(self.texts[check.name], "check"))

    @contextmanager
    def _naming_analysis_errors(self, check: Check, what: str) -> Iterator[None]:
        """Spark's parse and analysis errors on a check's text as the package's non-retryable errors."""
        from pyspark.errors import AnalysisException

        try:
            yield
        except AnalysisException as error:  # ParseException is one
            condition = error_condition(error)
            problem = error_summary(error)
            if condition.startswith("UNRESOLVED_COLUMN"):
                raise UnknownColumnError(f"{what}: unknown column. {problem}") from None
            if condition.startswith("INVALID_NON_DETERMINISTIC_EXPRESSIONS"):
                raise InvalidCheckError(
                    f"{what}: non-deterministic functions (rand(), uuid(), ...) are not allowed: a check "
                    "must count the same rows every time it runs."
                ) from None
            raise InvalidCheckError(f"{what}: {problem}") from None

    # -- the scans --------------------------------------------------------------------------------------

    def _aggregate(self, source: DataFrame, checks: list[Check]) -> dict[str, dict[str, Any]]:
        """One scan of the snapshot: the row count and each row_condition / not_null check's count."""
        if not checks:
            return {}
        functions = self.functions
        failing = {check.name: self._failing_row(check) for check in checks}
        counted = [
            functions.count_if(row_fails).alias(f"check_{index}")
            for index, row_fails in enumerate(failing.values())
            if row_fails is not None
        ]
        with self._naming_data_errors(checks):
            row = source.agg(functions.count(functions.lit(1)).alias("rows"), *counted).collect()[0]
        rows = int(row["rows"])
        counts: dict[str, dict[str, Any]] = {}
        for index, check in enumerate(checks):
            if check.kind is CheckKind.ROW_COUNT:
                found = row_count_failing(rows, check.min_rows, check.max_rows)
                counts[check.name] = {"kind": check.kind.value, "failing": found, "rows": rows}
            else:
                counts[check.name] = {"kind": check.kind.value, "failing": int(row[f"check_{index}"])}
        return counts

    def _failing_row(self, check: Check) -> Column | None:
        """Whether a row fails ``check`` (never NULL); None for row_count, which counts no row."""
        functions = self.functions
        if check.kind is CheckKind.ROW_CONDITION:
            holds: Column = functions.expr(self.texts[check.name])
            return ~holds.eqNullSafe(functions.lit(True))
        if check.kind is CheckKind.NOT_NULL:
            nulls: list[Column] = [
                functions.col(sql.quote_identifier(column)).isNull() for column in self.columns[check.name]
            ]
            return reduce(lambda a, b: a | b, nulls)
        return None

    def _unique(self, check: Check, source: DataFrame) -> dict[str, Any]:
        """The rows whose key (no NULL in it) is on more than one row, and how many such keys."""
        functions = self.functions
        keys = [functions.col(sql.quote_identifier(column)) for column in self.columns[check.name]]
        repeated = (
            source.where(reduce(lambda a, b: a & b, [key.isNotNull() for key in keys]))
            .groupBy(*keys)
            .agg(functions.count(functions.lit(1)).alias("key_rows"))
            .where(functions.col("key_rows") > 1)
        )
        totals = repeated.agg(
            functions.coalesce(functions.sum("key_rows"), functions.lit(0)).alias("failing"),
            functions.count(functions.lit(1)).alias("keys"),
        )
        with self._naming_data_errors([check]):
            row = totals.collect()[0]
        return {"kind": check.kind.value, "failing": int(row["failing"]), "duplicate_keys": int(row["keys"])}

    def _sql(self, check: Check) -> dict[str, Any]:
        with self._naming_data_errors([check]):
            rows = self._query(check).limit(2).collect()
        if len(rows) != 1:
            raise InvalidCheckError(
                f"{check.label}: the query returned {'no row' if not rows else 'more than one row'}; it must "
                "return exactly one row holding the failing count."
            )
        return {"kind": check.kind.value, "failing": failing_count(check, rows[0][0])}

    @contextmanager
    def _naming_data_errors(self, checks: Sequence[Check]) -> Iterator[None]:
        """A failure on the data a check's text meets (a cast that fails, a division by zero) named as
        bad input of those checks; anything else (the cluster, the storage) passes through."""
        try:
            yield
        except IcebergDmlError:
            raise
        except Exception as error:
            if not is_input_error(error):
                raise
            problem = error_summary(error)
            named = ", ".join(check.label for check in checks)
            raise InvalidCheckError(f"{named} failed on the data: {problem}") from None


def _result_line(check: Check, result: dict[str, Any]) -> str:
    extra = ""
    if "rows" in result:
        low, high = check.min_rows, check.max_rows
        wanted = (
            f"{low} .. {high}"
            if low is not None and high is not None
            else f"at least {low}"
            if low is not None
            else f"at most {high}"
            if high is not None
            else "any number"
        )
        extra = f" ({result['rows']} row(s); wanted: {wanted})"
    elif "duplicate_keys" in result:
        extra = f" ({result['duplicate_keys']} repeated key(s))"
    verdict = "passed" if result["passed"] else "FAILED"
    return f"{check.label}: {verdict}, {result['failing']} failing{extra}"


def run_spec(spark: SparkSession, spec: CheckSpec) -> JobRecord:
    """Run one spec on ``spark`` and return its record; errors become a FAILED record."""
    return run_job(spark, lambda: CheckJob(spark, spec).run())


def main(argv: list[str]) -> int:
    return run_main(argv, CheckSpec.from_json, lambda spec: f"iceberg-check {spec.table}", run_spec)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
