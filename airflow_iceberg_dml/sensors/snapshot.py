"""IcebergSnapshotSensor: wait for the exact Iceberg commit a task depends on."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from airflow_iceberg_dml import lineage
from airflow_iceberg_dml.exceptions import (
    BranchNotFoundError,
    CatalogUnavailableError,
    IcebergDmlError,
    InvalidSnapshotFilterError,
    TableNotFoundError,
    error_from_record,
)
from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_dml.snapshot_filter import SnapshotFilter, SnapshotMatch, snapshot_match
from airflow_iceberg_dml.sql import is_template, split_table_name
from airflow_iceberg_dml.triggers.snapshot import (
    IcebergSnapshotTrigger,
    MissingPolicy,
    SnapshotTriggerStatus,
    TriggerMode,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context
    from pyiceberg.table import Table

    from airflow_iceberg_dml.hooks.snapshot_watch import SnapshotWatcher
    from airflow_iceberg_dml.spec import RunKey


class IcebergSnapshotSensor(lineage.IcebergLineageMixin, BaseSensorOperator):
    """Wait until commits matching every given condition are on a branch or tag of an Iceberg table.

    Commits already in the history count: a sensor that starts after the commit it waits for succeeds at
    the first poke. Returns (XCom) a :class:`~airflow_iceberg_dml.snapshot_filter.SnapshotMatch`: the
    newest matching commit's ``snapshot_id``, ``sequence_number``, ``operation``, ``timestamp_ms``,
    ``committed_at`` and ``summary``, and all ``count`` matching commits under ``snapshots``, oldest first.
    Pass ``snapshot_id`` to a DML operator's ``expected_snapshot_id`` to change exactly that snapshot.

    A poll costs one catalog pointer read while the table does not move (one SQL query on a SQL catalog,
    a conditional loadTable on a REST catalog); when it moves, only the new snapshots are walked.

    :param table: ``namespace.table``. (templated)
    :param catalog_conn_id: ``iceberg`` connection. ``iceberg_default`` with no such connection is the
        embedded SQLite catalog; any other id must exist, or the sensor fails at its first poke, without
        retries (``CatalogConnectionNotFoundError``).
    :param ref: Branch or tag to watch (``main`` by default). (templated)
    :param newer_than_snapshot_id: Only commits made after this snapshot on ``ref`` (its descendants),
        e.g. ``"{{ ti.xcom_pull('delete')['snapshot_id'] }}"``. An id that is not in the table fails the
        sensor. (templated)
    :param committed_after: Only commits strictly after this instant: a timezone-aware datetime, an ISO
        8601 string or epoch milliseconds, e.g. ``"{{ data_interval_end }}"``. (templated)
    :param operations: Only these operations: ``append``, ``overwrite``, ``delete``, ``replace``; a list
        or a comma-separated string (a DELETE that group commit applied with UPDATEs is in an
        ``overwrite`` commit). (templated)
    :param summary: Snapshot summary entries that must be present with these exact values, e.g.
        ``{"batch-id": "{{ params.batch }}"}``. (templated)
    :param run_key: Only the commit of this Airflow run key, as this package's operators write it on every
        commit: ``{"dag_id": ..., "task_id": ..., "run_id": ..., "map_index": -1}``. (templated)
    :param min_added_records: Only commits that added at least this many rows. (templated)
    :param min_deleted_records: Only commits that removed at least this many live rows (merge-on-read
        deletes, copy-on-write rewrites and truncates alike). (templated)
    :param count: How many matching commits to wait for. (templated)
    :param on_missing: ``wait`` (default): while the table or ref does not exist, keep waiting with a log
        line per poke; ``fail``: fail at once.
    :param deferrable: Wait in the triggerer instead of a worker slot (default:
        ``[operators] default_deferrable``). The sensor pokes once, then defers.

    ``poke_interval``, ``timeout``, ``soft_fail``, ``mode`` (``poke``/``reschedule``),
    ``exponential_backoff`` and ``max_wait`` work as on every sensor, deferred too. While the catalog
    cannot be reached, the sensor keeps waiting with a warning per poke, until ``timeout``.
    """

    template_fields: Sequence[str] = (
        "table",
        "ref",
        "newer_than_snapshot_id",
        "committed_after",
        "operations",
        "summary",
        "run_key",
        "min_added_records",
        "min_deleted_records",
        "count",
    )
    ui_color = "#b8e0f0"
    #: Lineage: the table is this task's input (at the matched snapshot), never its output.
    lineage_writes = False

    def __init__(
        self,
        *,
        table: str,
        catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
        ref: str | None = None,
        newer_than_snapshot_id: int | str | None = None,
        committed_after: Any = None,
        operations: str | Sequence[str] | None = None,
        summary: Mapping[str, str] | None = None,
        run_key: RunKey | Mapping[str, Any] | None = None,
        min_added_records: int | str | None = None,
        min_deleted_records: int | str | None = None,
        count: int | str = 1,
        on_missing: MissingPolicy | str = MissingPolicy.WAIT,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not is_template(table):
            split_table_name(table)  # a malformed name fails when the DAG is parsed, as for the operators
        self.table = table
        self.catalog_conn_id = catalog_conn_id
        self.ref = ref
        self.newer_than_snapshot_id = newer_than_snapshot_id
        self.committed_after = committed_after
        self.operations = operations
        self.summary = summary
        self.run_key = run_key
        self.min_added_records = min_added_records
        self.min_deleted_records = min_deleted_records
        self.count = count
        self.on_missing = on_missing
        self.deferrable = deferrable
        self._watcher: SnapshotWatcher | None = None

    def _snapshot_filter(self) -> SnapshotFilter:
        try:
            return SnapshotFilter.build(
                ref=self.ref,
                newer_than_snapshot_id=self.newer_than_snapshot_id,
                committed_after=self.committed_after,
                operations=self.operations,
                summary=self.summary,
                run_key=self.run_key,
                min_added_records=self.min_added_records,
                min_deleted_records=self.min_deleted_records,
                count=self.count,
            )
        except InvalidSnapshotFilterError as error:
            # Bad input: retrying cannot help.
            raise AirflowFailException(f"InvalidSnapshotFilterError: {error}") from error

    def _policy(self) -> MissingPolicy:
        try:
            return MissingPolicy(self.on_missing)
        except ValueError:
            raise AirflowFailException(
                f"on_missing={self.on_missing!r} must be one of {[p.value for p in MissingPolicy]}."
            ) from None

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        # Deferrable: one poke here (often the commit is already there), then hand over to the triggerer.
        try:
            done = self.poke(context)
        except AirflowFailException as error:
            if self.soft_fail or self.never_fail:
                raise AirflowSkipException(f"Skipping (soft_fail/never_fail): {error}") from error
            raise
        if not done:
            self._defer()
        return done.xcom_value

    def _defer(self) -> None:
        snapshot_filter = self._snapshot_filter()
        self.defer(
            trigger=IcebergSnapshotTrigger(
                table=self.table,
                catalog_conn_id=self.catalog_conn_id,
                mode=TriggerMode.WAIT,
                poll_interval=self.poke_interval,
                exponential_backoff=self.exponential_backoff,
                max_wait=self.max_wait.total_seconds() if self.max_wait else None,
                on_missing=self._policy(),
                **snapshot_filter.to_dict(),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def poke(self, context: Context) -> PokeReturnValue:
        from airflow_iceberg_dml.hooks.snapshot_watch import SnapshotWatcher

        snapshot_filter = self._snapshot_filter()
        policy = self._policy()
        if self._watcher is None or self._watcher.snapshot_filter != snapshot_filter:
            hook = IcebergCatalogHook(self.catalog_conn_id)
            self._watcher = SnapshotWatcher(lambda: hook.catalog, self.table, snapshot_filter)
            self.log.info("Waiting for commits on %s: %s", self.table, snapshot_filter.describe())
        watcher = self._watcher
        try:
            result = watcher.poll()
        except CatalogUnavailableError as error:
            self.log.warning("%s; poking again later.", error)
            return PokeReturnValue(False)
        except (TableNotFoundError, BranchNotFoundError) as error:
            if policy is MissingPolicy.FAIL:
                raise AirflowFailException(f"{type(error).__name__}: {error}") from error
            self.log.info("%s Waiting (on_missing=wait).", error)
            return PokeReturnValue(False)
        except IcebergDmlError as error:
            raise AirflowFailException(f"{type(error).__name__}: {error}") from error
        if result.changed:
            self.log.info(
                "Head of %s is %s: %d snapshot(s) walked, %d match(es) so far of %d wanted.",
                snapshot_filter.ref,
                result.head_snapshot_id,
                result.walked,
                len(result.pending),
                snapshot_filter.count,
            )
        if len(result.pending) < snapshot_filter.count:
            return PokeReturnValue(False)
        match = snapshot_match(self.table, snapshot_filter.ref, watcher.take(snapshot_filter.count))
        self._log_match(match)
        return PokeReturnValue(True, match)

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> SnapshotMatch:
        """Resume after the trigger's one event: return the match, or fail with the trigger's error."""
        status = event.get("status")
        if status == SnapshotTriggerStatus.MATCHED:
            match = cast("SnapshotMatch", {key: event[key] for key in SnapshotMatch.__annotations__})
            self._log_match(match)
            return match
        error_type = str(event.get("error_type"))
        message = f"{error_type}: {event.get('message')}"
        error = error_from_record(error_type, message)
        if type(error).__name__ == error_type and not error.retryable:
            # A condition the user must fix (missing table with on_missing="fail", unknown snapshot id).
            raise AirflowFailException(message)
        raise AirflowException(message)

    def lineage_facets(
        self, names: lineage.TableDatasetName, table: Table | None, result: Mapping[str, Any] | None
    ) -> OperatorLineage[Any, Any]:
        """The table as input, at the newest matched snapshot once the sensor has matched."""
        if result is None:
            return super().lineage_facets(names, table, result)
        inputs, _ = lineage.table_datasets(
            names, table, input_version=result["snapshot_id"], output_version=None, output=False
        )
        return lineage.operator_lineage(inputs, [])

    def _remember_lineage(self) -> None:
        """Read the table once, on a match, for the lineage events (only when OpenLineage is on)."""
        if not lineage.openlineage_enabled():
            return
        hook = IcebergCatalogHook(self.catalog_conn_id)
        try:
            self.remember_lineage_table(hook, hook.load_table(self.table))
        except IcebergDmlError as error:  # lineage is informative: it never fails the sensor
            self.log.info("No lineage for %s: %s", self.table, error)

    def _log_match(self, match: SnapshotMatch) -> None:
        self._lineage_result = match
        self._remember_lineage()
        self.log.info(
            "Matched %d commit(s) on %s (%s); newest: snapshot %s (%s, sequence number %s, committed %s).",
            len(match["snapshots"]),
            match["table"],
            match["ref"],
            match["snapshot_id"],
            match["operation"],
            match["sequence_number"],
            match["committed_at"],
        )
