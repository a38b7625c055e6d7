"""PySpark entrypoint for DELETE and UPDATE: ``spark-submit dml.py <spec.json>``.

The catalog configuration reaches Spark through the properties file that the hook passes to
spark-submit; this job only reads the spec. It validates everything it can before writing,
commits at most once, and writes a :class:`~airflow_iceberg_dml.spec.JobRecord` for Airflow.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.exceptions import (
    BranchNotFoundError,
    IcebergDmlError,
    InvalidExpressionError,
    InvalidPredicateError,
    SnapshotMismatchError,
    SparkJobError,
    TableNotFoundError,
    UnknownColumnError,
    WriteModeConflictError,
)
from airflow_iceberg_dml.jobs import sql
from airflow_iceberg_dml.spec import DmlSpec, JobKind, JobRecord, Outcome, Plan, SummaryKey, WriteMode

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import DataFrame, SparkSession

#: Prefix of the lines this job prints; the Airflow hook shows these at INFO, JVM noise at DEBUG.
LOG_PREFIX = "iceberg-dml | "
SNAPSHOT_PROPERTY_CONF = "spark.sql.iceberg.snapshot-property."
ICEBERG_DEFAULT_WRITE_MODE = WriteMode.COPY_ON_WRITE
_MODE_PROPERTY = {JobKind.DELETE: "write.delete.mode", JobKind.UPDATE: "write.update.mode"}


def log(message: str) -> None:
    print("\n".join(LOG_PREFIX + line for line in message.splitlines()), flush=True)


class _ProgressReporter(threading.Thread):
    """Prints the progress of active Spark stages every few seconds, only when it changed."""

    def __init__(self, spark: SparkSession, interval_s: float = 5.0) -> None:
        super().__init__(name="iceberg-dml-progress", daemon=True)
        self._tracker = spark.sparkContext.statusTracker()
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self._last: dict[int, tuple[int, int]] = {}

    def run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            for stage_id in self._tracker.getActiveStageIds():
                info = self._tracker.getStageInfo(stage_id)
                if info is None:
                    continue
                state = (info.numCompletedTasks, info.numTasks)
                if self._last.get(stage_id) != state:
                    self._last[stage_id] = state
                    log(f"progress: stage {stage_id} {state[0]}/{state[1]} tasks ({info.name})")

    def stop(self) -> None:
        self._stopped.set()


def _java_class_name(error: BaseException) -> str:
    java_exception = getattr(error, "java_exception", None)
    return str(java_exception.getClass().getName()) if java_exception is not None else ""


def _message(error: BaseException) -> str:
    """The error's own message, without the Java stack trace py4j appends."""
    java_exception = getattr(error, "java_exception", None)
    if java_exception is not None and not hasattr(error, "getCondition"):
        return str(java_exception.getMessage())
    return str(error).strip()


def _condition(error: BaseException) -> str:
    get_condition = getattr(error, "getCondition", None)
    return str(get_condition() or "") if callable(get_condition) else ""


class DmlJob:
    """Carries out one :class:`DmlSpec` on a running SparkSession."""

    def __init__(self, spark: SparkSession, spec: DmlSpec) -> None:
        self.spark = spark
        self.spec = spec
        self.app_id: str = spark.sparkContext.applicationId
        self.table_name = ".".join([spec.catalog, *sql.split_table_name(spec.table)])
        self.target = sql.table_identifier(spec.catalog, spec.table, spec.branch)
        self.ref = spec.branch or "main"
        self.where = self._bind(spec.where, InvalidPredicateError, "where")
        self.assignments = {
            column: self._bind(expression, InvalidExpressionError, f"set[{column!r}]")
            for column, expression in spec.assignments.items()
        }

    def _bind(self, text: str, error: type[IcebergDmlError], what: str) -> str:
        try:
            return sql.bind_parameters(text, self.spec.parameters)
        except KeyError as missing:
            raise error(f"{what}: parameter :{missing.args[0]} has no value in parameters.") from None
        except TypeError as bad:
            raise error(f"{what}: {bad}") from None

    # -- entry point -------------------------------------------------------------------------

    def run(self) -> JobRecord:
        spec = self.spec
        kind = spec.kind.value.upper()
        log(f"{kind} on {self.table_name} (ref {self.ref}), Spark application {self.app_id}")
        iceberg_table = self._load_table()
        head_before = self._head_snapshot_id(iceberg_table)
        if spec.expected_snapshot_id is not None and head_before != spec.expected_snapshot_id:
            raise SnapshotMismatchError(
                f"{self.table_name} (ref {self.ref}) is at snapshot {head_before}, not at the expected "
                f"snapshot {spec.expected_snapshot_id}: the table changed since the change was planned."
            )
        self._validate()
        if head_before is None:
            log("The table has no snapshot on this ref: nothing to change.")
            return self._record(Outcome.NOOP, Plan.NOOP, None, None)

        plan = self._plan()
        if plan is Plan.NOOP:
            log("The predicate is constant false: nothing to change.")
            return self._record(Outcome.NOOP, plan, None, None)
        if plan is Plan.TRUNCATE:
            statement = "truncate: drop every data and delete file (metadata-only)"
            log(f"Plan: {statement}")
            self._truncate(iceberg_table)
            write_mode = None
        elif plan is Plan.REWRITE:
            statement = sql.rewrite_query(self.table_name, head_before, self._columns(), spec.assignments)
            log(f"Plan: rewrite every row in one overwrite commit, no delete files\n{statement}")
            self._rewrite(
                sql.rewrite_query(self.table_name, head_before, self._columns(), self.assignments),
                head_before,
            )
            write_mode = None
        else:
            write_mode = self._resolve_write_mode(iceberg_table)
            statement = self._statement(spec.where, spec.assignments)
            log(f"Plan: row-level {write_mode.value}\n{statement}")
            self._execute(self._statement(self.where, self.assignments), plan)

        snapshot_id = self._find_commit(iceberg_table, head_before)
        if snapshot_id is None:
            log("No rows matched: Iceberg committed nothing.")
            return self._record(Outcome.NOOP, Plan.NOOP, write_mode, statement)
        log(f"Committed snapshot {snapshot_id} on {self.table_name} (ref {self.ref})")
        return self._record(Outcome.COMMITTED, plan, write_mode, statement, snapshot_id)

    def _record(
        self,
        outcome: Outcome,
        plan: Plan,
        write_mode: WriteMode | None,
        statement: str | None,
        snapshot_id: int | None = None,
    ) -> JobRecord:
        return JobRecord(
            outcome=outcome,
            spark_app_id=self.app_id,
            snapshot_id=snapshot_id,
            write_mode=write_mode.value if write_mode else None,
            plan=plan,
            statement=statement,
        )

    # -- table and validation ----------------------------------------------------------------

    def _load_table(self) -> Any:
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import AnalysisException

        jvm = self.spark._jvm
        assert jvm is not None, "the DML job needs classic (JVM) Spark, not Spark Connect"
        try:
            return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
                self.spark._jsparkSession, self.table_name
            )
        except (Py4JJavaError, AnalysisException) as error:
            if "NoSuchTable" in _java_class_name(error) or _condition(error).startswith(
                "TABLE_OR_VIEW_NOT_FOUND"
            ):
                raise TableNotFoundError(
                    f"Table {self.spec.table!r} does not exist in catalog {self.spec.catalog!r}."
                ) from None
            raise

    def _head_snapshot_id(self, iceberg_table: Any) -> int | None:
        iceberg_table.refresh()
        if self.spec.branch and iceberg_table.refs().get(self.spec.branch) is None:
            raise BranchNotFoundError(
                f"Branch {self.spec.branch!r} does not exist on {self.spec.table!r}; create it first "
                f"(ALTER TABLE ... CREATE BRANCH {self.spec.branch})."
            )
        snapshot = iceberg_table.snapshot(self.ref)
        return int(snapshot.snapshotId()) if snapshot is not None else None

    def _columns(self) -> list[str]:
        return list(self.spark.table(self.target).columns)

    def _validate(self) -> None:
        """Parse and analyse the predicate and expressions exactly as the change will, writing nothing."""
        spec = self.spec
        self._parse(self.where, InvalidPredicateError, f"where={spec.where!r}")
        columns = {column.lower() for column in self._columns()}
        for column, expression in self.assignments.items():
            if column.lower() not in columns:
                raise UnknownColumnError(
                    f"set: column {column!r} is not in table {spec.table!r} (columns: {sorted(columns)})."
                )
            self._parse(expression, InvalidExpressionError, f"set[{column!r}]={spec.assignments[column]!r}")
        self._analyse(sql.probe_query(self.target, self.where))
        if self.assignments:
            self._analyse(sql.probe_query(self.target, self.where, self.assignments), in_set=True)

    def _parse(self, text: str, error: type[IcebergDmlError], what: str) -> None:
        """Spark's own parser: exactly one expression, nothing after it (no second statement)."""
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import ParseException

        try:
            self.spark._jsparkSession.sessionState().sqlParser().parseExpression(text)
        except (ParseException, Py4JJavaError) as parse_error:
            raise error(f"{what} is not a valid Spark SQL expression: {_message(parse_error)}") from None

    def _analyse(self, query: str, in_set: bool = False) -> DataFrame:
        from pyspark.errors import AnalysisException

        where = "set expressions" if in_set else f"where={self.spec.where!r}"
        try:
            return self.spark.sql(query)
        except AnalysisException as error:
            condition = _condition(error)
            if condition.startswith("UNRESOLVED_COLUMN"):
                raise UnknownColumnError(f"{where}: unknown column. {error}") from None
            if condition.startswith(("TABLE_OR_VIEW_NOT_FOUND", "REQUIRES_SINGLE_PART_NAMESPACE")):
                raise TableNotFoundError(f"Table {self.spec.table!r} does not exist: {error}") from None
            if in_set:
                raise InvalidExpressionError(f"{where}: {error}") from None
            raise InvalidPredicateError(f"{where}: {error}") from None

    # -- planning --------------------------------------------------------------------------------

    def _plan(self) -> Plan:
        """Classify the predicate by what Spark's optimizer makes of it on this table."""
        probe = self._analyse(sql.probe_query(self.target, self.where))
        optimized = str(probe._jdf.queryExecution().optimizedPlan().toString())
        if "Filter " in optimized:
            return Plan.ROW_LEVEL
        if optimized.lstrip().startswith("LocalRelation <empty>"):
            return Plan.NOOP
        return Plan.TRUNCATE if self.spec.kind is JobKind.DELETE else Plan.REWRITE

    def _resolve_write_mode(self, iceberg_table: Any) -> WriteMode:
        """Which mode this change will use; set the table property when the table has none."""
        requested = self.spec.write_mode
        key = _MODE_PROPERTY[self.spec.kind]
        configured_text = iceberg_table.properties().get(key)
        configured = WriteMode(configured_text) if configured_text else None
        if requested is WriteMode.TABLE:
            return configured or ICEBERG_DEFAULT_WRITE_MODE
        if configured is None:
            log(
                f"Table property {key} is unset (Iceberg default: copy-on-write); "
                f"setting it to {requested.value}."
            )
            self.spark.sql(
                f"ALTER TABLE {sql.table_identifier(self.spec.catalog, self.spec.table)} "
                f"SET TBLPROPERTIES ('{key}' = '{requested.value}')"
            )
            return requested
        if configured is not requested:
            raise WriteModeConflictError(
                f"Table {self.spec.table!r} has {key}={configured.value} but "
                f"write_mode={requested.value} was requested. Pass write_mode='{configured.value}' or "
                "write_mode='table' to follow the table, or change the table property."
            )
        return requested

    def _statement(self, where: str, assignments: Mapping[str, str]) -> str:
        if self.spec.kind is JobKind.DELETE:
            return sql.delete_statement(self.target, where)
        return sql.update_statement(self.target, assignments, where)

    # -- writing ---------------------------------------------------------------------------------

    def _commit_properties(self, plan: Plan) -> dict[str, str]:
        return {**self.spec.snapshot_properties, SummaryKey.PLAN: plan.value}

    def _execute(self, statement: str, plan: Plan) -> None:
        # Session-wide settings: unset afterwards so that no later commit of this session inherits them.
        keys = [SNAPSHOT_PROPERTY_CONF + key for key in self._commit_properties(plan)]
        for key, value in zip(keys, self._commit_properties(plan).values(), strict=True):
            self.spark.conf.set(key, value)
        try:
            self.spark.sql(statement)
        finally:
            for key in keys:
                self.spark.conf.unset(key)

    def _truncate(self, iceberg_table: Any) -> None:
        """Drop every file in one metadata-only commit, tagged like every other commit of ours."""
        jvm = self.spark._jvm
        assert jvm is not None
        delete = iceberg_table.newDelete().deleteFromRowFilter(
            jvm.org.apache.iceberg.expressions.Expressions.alwaysTrue()
        )
        for key, value in self._commit_properties(Plan.TRUNCATE).items():
            delete = delete.set(key, value)
        delete = delete.set(SummaryKey.SPARK_APP_ID, self.app_id)
        if self.spec.branch:
            delete = delete.toBranch(self.spec.branch)
        delete.commit()

    def _rewrite(self, query: str, head_before: int) -> None:
        """Replace every row with its updated form in one overwrite; conflicts fail, never lose rows."""
        from pyspark.sql.functions import lit

        rows = self.spark.sql(query)
        writer = (
            rows.writeTo(self.table_name)
            .option("validate-from-snapshot-id", str(head_before))
            .option("isolation-level", "serializable")
        )
        if self.spec.branch:
            writer = writer.option("branch", self.spec.branch)
        for key, value in self._commit_properties(Plan.REWRITE).items():
            writer = writer.option(f"snapshot-property.{key}", value)
        writer.overwrite(lit(True))

    def _find_commit(self, iceberg_table: Any, head_before: int) -> int | None:
        """The snapshot this application committed on the ref since ``head_before``, if any."""
        iceberg_table.refresh()
        snapshot = iceberg_table.snapshot(self.ref)
        while snapshot is not None and int(snapshot.snapshotId()) != head_before:
            if snapshot.summary().get(SummaryKey.SPARK_APP_ID) == self.app_id:
                return int(snapshot.snapshotId())
            parent_id = snapshot.parentId()
            snapshot = iceberg_table.snapshot(int(parent_id)) if parent_id is not None else None
        return None


def _write_record(path: str | None, record: JobRecord) -> None:
    if not path:
        return
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(record.to_json())


def run_spec(spark: SparkSession, spec: DmlSpec) -> JobRecord:
    """Run one spec on ``spark`` and return its record; errors become a FAILED record."""
    progress = _ProgressReporter(spark)
    progress.start()
    try:
        return DmlJob(spark, spec).run()
    except IcebergDmlError as error:
        log(f"FAILED ({type(error).__name__}): {error}")
        return JobRecord(
            outcome=Outcome.FAILED,
            spark_app_id=spark.sparkContext.applicationId,
            error_type=type(error).__name__,
            error_message=str(error),
        )
    except Exception as error:  # noqa: BLE001 - any other failure is reported, with its trace
        traceback.print_exc()
        message = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        log(f"FAILED ({type(error).__name__}): {message}")
        return JobRecord(
            outcome=Outcome.FAILED,
            spark_app_id=spark.sparkContext.applicationId,
            error_type=SparkJobError.__name__,
            error_message=f"{type(error).__name__}: {message}",
        )
    finally:
        progress.stop()


def main(argv: list[str]) -> int:
    from pyspark.sql import SparkSession

    # PySpark logs every analysis error as a page of JSON; the job reports them in one line itself.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)

    if len(argv) != 1:
        print("usage: spark-submit dml.py <spec.json>", file=sys.stderr)
        return 2
    spec = DmlSpec.from_json(Path(argv[0]).read_text())
    started = time.monotonic()
    spark = SparkSession.builder.appName(f"iceberg-dml {spec.kind.value} {spec.table}").getOrCreate()
    try:
        record = run_spec(spark, spec)
        _write_record(spec.result_path, record)
    finally:
        spark.stop()
    log(f"Finished in {time.monotonic() - started:.1f}s: {record.outcome.value}")
    return 0 if record.outcome is not Outcome.FAILED else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
