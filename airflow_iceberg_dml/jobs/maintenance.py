"""Table maintenance: ``spark-submit maintenance.py <spec.json>``, or :func:`run_spec` over Spark Connect.

Runs the procedures of a :class:`~airflow_iceberg_dml.spec.MaintenanceSpec` in order and writes a
:class:`~airflow_iceberg_dml.spec.JobRecord` whose ``details`` hold each procedure's output columns
under Iceberg's own names.

The three procedures that commit a snapshot (``rewrite_data_files``,
``rewrite_position_delete_files``, ``rewrite_manifests``) run through Iceberg's Spark actions, the
code the ``CALL`` procedures wrap: only the actions take snapshot summary properties (the
procedures ignore ``spark.sql.iceberg.snapshot-property.*``), and every commit must carry the run
key. ``expire_snapshots`` and ``remove_orphan_files`` commit no snapshot and run as ``CALL``
statements. Every procedure's equivalent ``CALL`` statement is logged and recorded.

Over Spark Connect there is no JVM to reach: every procedure runs as its ``CALL`` statement. Those
commits carry no property of ours, so the job names as its own the snapshots that the server's
Spark application committed on the table while the job ran and that no job of ours tagged.

A rewrite that loses to a concurrent commit (the concurrent change is never lost) is planned again
from the new table state by the one conflict policy (:mod:`airflow_iceberg_dml.conflicts`).
"""

from __future__ import annotations

import sys
import time
import uuid
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import procedures, sql
from airflow_iceberg_dml.commits import CommitMarks
from airflow_iceberg_dml.conflicts import ConflictRetry
from airflow_iceberg_dml.exceptions import InvalidMaintenanceOptionError, UnknownColumnError
from airflow_iceberg_dml.jobs import spark_internals
from airflow_iceberg_dml.jobs.maintenance_errors import bad_input, unusable_where
from airflow_iceberg_dml.jobs.runner import (
    application_id,
    error_condition,
    error_message,
    functions,
    is_connect,
    log,
    run_job,
    run_main,
)
from airflow_iceberg_dml.jobs.table_state import TableState
from airflow_iceberg_dml.spec import (
    MAINTENANCE_PROCEDURE_KEY,
    CompactionStrategy,
    ExpireSnapshotsCall,
    JobRecord,
    MaintenanceSpec,
    Outcome,
    ProcedureCall,
    RemoveOrphanFilesCall,
    RewriteDataFilesCall,
    RewriteManifestsCall,
    RewritePositionDeleteFilesCall,
    SummaryKey,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

#: remove_orphan_files can list many files; the record keeps this many of them (and the count).
MAX_LISTED_ORPHANS = 1000


class MaintenanceJob:
    """Carries out one :class:`MaintenanceSpec` on a running SparkSession."""

    def __init__(self, spark: SparkSession, spec: MaintenanceSpec) -> None:
        self.spark = spark
        self.spec = spec
        self.app_id = application_id(spark)
        self.table_name = ".".join([spec.catalog, *sql.split_table_name(spec.table)])
        self.target = sql.table_identifier(spec.catalog, spec.table)
        self.state = TableState(spark, spec.catalog, spec.table)
        self.conflict_retries = 0
        #: Over Spark Connect the procedures run as CALL statements (no JVM to reach).
        self.connect = is_connect(spark)
        #: Marks this job's commits (the actions take it; CALL statements take none).
        self.job_id = uuid.uuid4().hex

    # -- entry point -------------------------------------------------------------------------

    def run(self) -> JobRecord:
        spec = self.spec
        names = ", ".join(call.procedure.value for call in spec.calls)
        log(f"Maintenance of {self.table_name} ({names}), Spark application {self.app_id}")
        for call in spec.calls:
            procedures.validate_call(call)
        self.state.refresh()
        table = (
            None
            if self.connect
            else spark_internals.java_table(self.spark, self.table_name, spec.table, spec.catalog)
        )
        self._validate_against_table()
        head_before = self.state.head()
        outputs: dict[str, dict[str, Any]] = {}
        statements: list[str] = []
        durations: dict[str, float] = {}
        for call in spec.calls:
            name = call.procedure.value
            statement = procedures.call_statement(spec.catalog, spec.table, call)
            statements.append(statement)
            started = time.monotonic()
            self.state.refresh()
            if self.state.head() is None and not isinstance(call, RemoveOrphanFilesCall):
                log(f"{name}: the table has no snapshot; nothing to do.")
                outputs[name] = {"skipped": "the table has no snapshot"}
                continue
            log(f"{name}:\n{statement}")
            outputs[name] = self._run_call(call, table)
            durations[name] = round(time.monotonic() - started, 3)
            log(f"{name} finished in {durations[name]:.1f}s: {_short(outputs[name])}")
        commits = self._find_commits(head_before)
        changed = bool(commits) or _deleted_files(outputs) > 0
        if commits:
            log(f"Committed snapshot(s) {', '.join(map(str, commits))} on {self.table_name}")
        return JobRecord(
            outcome=Outcome.COMMITTED if changed else Outcome.NOOP,
            spark_app_id=self.app_id,
            snapshot_id=commits[0] if commits else None,
            statement="\n\n".join(statements),
            details={
                "outputs": outputs,
                "commits": commits,
                "conflict_retries": self.conflict_retries,
                "durations_s": durations,
            },
        )

    # -- table and validation ----------------------------------------------------------------

    def _validate_against_table(self) -> None:
        """Sort order columns, and the ``where`` filters, resolved against the table, writing nothing."""
        columns = {column.lower() for column in self.state.columns()}
        for call in self.spec.calls:
            if isinstance(call, RewriteDataFilesCall):
                if call.sort_order is not None:
                    order = procedures.parse_sort_order(call.sort_order)
                    missing = [c for c in order.columns if c.lower() not in columns]
                    if missing:
                        raise UnknownColumnError(
                            f"sort_order={call.sort_order!r}: column(s) {missing} not in table "
                            f"{self.spec.table!r}."
                        )
                elif call.strategy is CompactionStrategy.SORT and _unsorted(self.state.properties()):
                    raise InvalidMaintenanceOptionError(
                        "strategy='sort' without sort_order needs a table sort order, and "
                        f"{self.spec.table!r} has none: pass sort_order (e.g. 'col ASC' or 'zorder(a, b)') "
                        "or set one with ALTER TABLE ... WRITE ORDERED BY."
                    )
            if isinstance(call, RewriteDataFilesCall | RewritePositionDeleteFilesCall) and call.where:
                self._filter(call.where)

    def _filter(self, where: str) -> Any:
        """The Iceberg expression of a Spark SQL predicate, as ``rewrite_data_files`` converts it.

        Over Spark Connect the predicate is analysed against the table here, and converted by the
        ``CALL`` procedure itself. A predicate Spark accepts but cannot convert (a function of a
        column) is named as bad input by :func:`.maintenance_errors.bad_input`, on either engine.
        """
        from pyspark.errors import AnalysisException, ParseException

        errors: tuple[type[Exception], ...] = (AnalysisException, ParseException)
        try:
            if self.connect:
                self.spark.table(self.target).where(functions(self.spark).expr(where)).schema  # noqa: B018
                return None
            from py4j.protocol import Py4JJavaError

            errors = (*errors, Py4JJavaError)
            return spark_internals.iceberg_filter(self.spark, self.target, where)
        except errors as error:
            if error_condition(error).startswith("UNRESOLVED_COLUMN"):
                raise UnknownColumnError(f"where={where!r}: unknown column. {error_message(error)}") from None
            raise unusable_where(where, error_message(error)) from None

    # -- procedures --------------------------------------------------------------------------------

    def _run_call(self, call: ProcedureCall, table: Any) -> dict[str, Any]:
        if self.connect and isinstance(
            call, RewriteDataFilesCall | RewritePositionDeleteFilesCall | RewriteManifestsCall
        ):
            if isinstance(call, RewritePositionDeleteFilesCall) and self._no_position_deletes(call):
                return {"skipped": "no position delete file remains"}
            return self._with_conflict_retries(call.procedure.value, None, lambda: self._call_rewrite(call))
        if isinstance(call, RewriteDataFilesCall):
            return self._with_conflict_retries(
                call.procedure.value, table, lambda: self._rewrite_data(call, table)
            )
        if isinstance(call, RewritePositionDeleteFilesCall):
            if self._no_position_deletes(call):
                return {"skipped": "no position delete file remains"}
            return self._with_conflict_retries(
                call.procedure.value, table, lambda: self._rewrite_position_deletes(call, table)
            )
        if isinstance(call, RewriteManifestsCall):
            return self._with_conflict_retries(
                call.procedure.value, table, lambda: self._rewrite_manifests(call, table)
            )
        if isinstance(call, ExpireSnapshotsCall):
            row = self._call(call).collect()[0]
            return {key: int(value) for key, value in row.asDict().items()}
        rows = self._call(call).collect()
        locations = [str(row["orphan_file_location"]) for row in rows]
        return {
            "orphan_file_count": len(locations),
            "orphan_file_location": locations[:MAX_LISTED_ORPHANS],
            "dry_run": call.dry_run,
        }

    def _no_position_deletes(self, call: RewritePositionDeleteFilesCall) -> bool:
        """Whether ``call`` asks to be skipped and no position delete file remains."""
        if not call.only_if_delete_files_remain:
            return False
        self.state.refresh()
        head = self.state.history().get(self.state.head())
        summary = head.summary if head is not None else {}
        if int(summary.get("total-position-deletes") or 0) == 0:
            log("rewrite_position_delete_files: no position delete file remains; skipped.")
            return True
        return False

    def _call(self, call: ProcedureCall) -> Any:
        return self.spark.sql(procedures.call_statement(self.spec.catalog, self.spec.table, call))

    def _call_rewrite(self, call: ProcedureCall) -> dict[str, Any]:
        """A rewrite as its ``CALL`` statement (Spark Connect): the procedure's one row of counts."""
        row = self._call(call).collect()[0]
        return {key: int(value) for key, value in row.asDict().items()}

    def _commit_properties(self, call: ProcedureCall) -> dict[str, str]:
        return {
            **self.spec.snapshot_properties,
            MAINTENANCE_PROCEDURE_KEY: call.procedure.value,
            SummaryKey.SPARK_APP_ID: self.app_id,
            SummaryKey.JOB_ID: self.job_id,
        }

    def _tagged(self, action: Any, call: ProcedureCall) -> Any:
        for key, value in self._commit_properties(call).items():
            action = action.snapshotProperty(key, value)
        return action

    def _options(self, action: Any, options: dict[str, str]) -> Any:
        for key, value in options.items():
            action = action.option(key, value)
        return action

    def _actions(self) -> Any:
        return spark_internals.spark_actions(self.spark)

    def _rewrite_data(self, call: RewriteDataFilesCall, table: Any) -> dict[str, Any]:
        action = self._actions().rewriteDataFiles(table)
        order = procedures.parse_sort_order(call.sort_order) if call.sort_order else None
        if call.strategy is CompactionStrategy.BINPACK:
            action = action.binPack()
        elif order is not None and order.zorder:
            action = action.zOrder(spark_internals.java_strings(self.spark, order.zorder))
        elif order is not None:
            action = action.sort(spark_internals.sort_order(self.spark, table, order.fields))
        else:
            action = action.sort()
        if call.where:
            action = action.filter(self._filter(call.where))
        action = self._tagged(self._options(action, dict(call.options)), call)
        result = action.execute()
        return {
            "rewritten_data_files_count": int(result.rewrittenDataFilesCount()),
            "added_data_files_count": int(result.addedDataFilesCount()),
            "rewritten_bytes_count": int(result.rewrittenBytesCount()),
            "failed_data_files_count": int(result.failedDataFilesCount()),
            "removed_delete_files_count": int(result.removedDeleteFilesCount()),
        }

    def _rewrite_position_deletes(self, call: RewritePositionDeleteFilesCall, table: Any) -> dict[str, Any]:
        action = self._actions().rewritePositionDeletes(table)
        if call.where:
            action = action.filter(self._filter(call.where))
        result = self._tagged(self._options(action, dict(call.options)), call).execute()
        return {
            "rewritten_delete_files_count": int(result.rewrittenDeleteFilesCount()),
            "added_delete_files_count": int(result.addedDeleteFilesCount()),
            "rewritten_bytes_count": int(result.rewrittenBytesCount()),
            "added_bytes_count": int(result.addedBytesCount()),
        }

    def _rewrite_manifests(self, call: RewriteManifestsCall, table: Any) -> dict[str, Any]:
        action = self._actions().rewriteManifests(table)
        if call.use_caching is not None:
            action = action.option("use-caching", str(call.use_caching).lower())
        result = self._tagged(action, call).execute()
        return {
            "rewritten_manifests_count": len(list(result.rewrittenManifests())),
            "added_manifests_count": len(list(result.addedManifests())),
        }

    def _with_conflict_retries(
        self, name: str, table: Any, attempt: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """Run a rewrite; plan it again from the new table state when it lost to a concurrent commit,
        or when partial progress left files that could not be rewritten (one budget for both)."""
        retries = self.spec.conflict_retries
        totals: dict[str, Any] = {}

        def once(number: int) -> dict[str, Any]:
            if number > 1:
                self.conflict_retries += 1
            if table is not None:
                table.refresh()  # the Java table the action plans from: see the new head
            output = attempt()
            for key, value in output.items():
                totals[key] = value if key == "failed_data_files_count" else totals.get(key, 0) + value
            return output

        policy = ConflictRetry(retries)
        for number in range(1, retries + 2):
            output = policy.run(once, what=f"{name}: the rewrite", log=log)
            failed = int(output.get("failed_data_files_count", 0))
            if not failed:
                return totals
            if number > retries or self.conflict_retries >= retries:
                log(f"{name}: {failed} data files could not be rewritten (partial progress); left as is.")
                return totals
            self.conflict_retries += 1
            log(
                f"{name}: {failed} data files could not be rewritten (partial progress: a group failed or "
                f"conflicted). Planning again for them (retry {self.conflict_retries} of {retries})."
            )
            policy = ConflictRetry(retries - self.conflict_retries)
        return totals

    # -- commits ---------------------------------------------------------------------------------------

    def _find_commits(self, head_before: int | None) -> list[int]:
        """Snapshots this job committed since ``head_before``, newest first: tagged with its job id, or
        over Spark Connect, committed by the server's application with no job id (see the module)."""
        self.state.refresh()
        if self.connect:
            marks = CommitMarks(spark_app_id=self.app_id, untagged=True)
        else:
            marks = CommitMarks(job_id=self.job_id, maintenance=True)
        return self.state.history().ours(self.state.head(), marks, stop_at=head_before)


def _unsorted(properties: dict[str, str]) -> bool:
    """Whether the table has no sort order (Iceberg shows it as the ``sort-order`` property)."""
    return properties.get("sort-order", "").strip() in ("", "[]", "unsorted")


def _short(output: dict[str, Any]) -> str:
    shown = {key: value for key, value in output.items() if key != "orphan_file_location"}
    return ", ".join(f"{key}={value}" for key, value in shown.items())


def _deleted_files(outputs: dict[str, dict[str, Any]]) -> int:
    """Files that expiry or orphan removal deleted (not counting a dry run)."""
    expired = outputs.get("expire_snapshots", {})
    deleted = sum(value for key, value in expired.items() if key.startswith("deleted_"))
    orphans = outputs.get("remove_orphan_files", {})
    if orphans and not orphans.get("dry_run"):
        deleted += int(orphans.get("orphan_file_count", 0))
    return int(deleted)


def run_spec(spark: SparkSession, spec: MaintenanceSpec) -> JobRecord:
    """Run one spec on ``spark`` and return its record; errors become a FAILED record."""
    return run_job(spark, lambda: MaintenanceJob(spark, spec).run(), lambda error: bad_input(spec, error))


def _app_name(spec: MaintenanceSpec) -> str:
    return f"iceberg-maintenance {'+'.join(call.procedure.value for call in spec.calls)} {spec.table}"


def main(argv: list[str]) -> int:
    return run_main(argv, MaintenanceSpec.from_json, _app_name, run_spec)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
