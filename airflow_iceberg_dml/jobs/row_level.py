"""What every row-level change job does around its statement (DELETE, UPDATE, MERGE): the table's
write mode and isolation level, the commit's summary entries, and finding its own commit."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.commits import CommitMarks, SnapshotRow, moved_only_by
from airflow_iceberg_dml.exceptions import SnapshotMismatchError, WriteModeConflictError
from airflow_iceberg_dml.jobs.runner import is_connect, log
from airflow_iceberg_dml.spec import IsolationLevel, RunKey, WriteMode

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.jobs.table_state import TableState
    from airflow_iceberg_dml.spec import DmlSpec, MergeSpec

SNAPSHOT_PROPERTY_CONF = "spark.sql.iceberg.snapshot-property."
ICEBERG_DEFAULT_WRITE_MODE = WriteMode.COPY_ON_WRITE


def resolve_write_mode(
    spark: SparkSession,
    state: TableState,
    properties: Mapping[str, str],
    operation: str,
    requested: WriteMode,
) -> WriteMode:
    """Which mode a change of ``operation`` (delete, update, merge) will use (:func:`write_mode_of`); the
    table's property ``write.<operation>.mode`` is set to ``requested`` when the table has none."""
    mode = write_mode_of(state.table, properties, operation, requested)
    key = f"write.{operation}.mode"
    if not properties.get(key) and requested is not WriteMode.TABLE:
        log(f"Table property {key} is unset (Iceberg default: copy-on-write); setting it to {mode.value}.")
        spark.sql(sql.set_table_property(state.identifier, key, mode.value))
    return mode


def write_mode_of(
    table: str, properties: Mapping[str, str], operation: str, requested: WriteMode
) -> WriteMode:
    """The mode a change of ``operation`` will use on a table of ``properties`` (``format-version``
    among them), or :class:`WriteModeConflictError` naming the way out, before anything is written: the
    table's property names the other mode, or merge-on-read on format version 1, which has no delete
    files (Spark would fail the statement, and a property set to it would fail other engines' changes)."""
    key = f"write.{operation}.mode"
    configured_text = properties.get(key)
    configured = WriteMode(configured_text) if configured_text else None
    if configured is not None and requested not in (WriteMode.TABLE, configured):
        raise WriteModeConflictError(
            f"Table {table!r} has {key}={configured.value} but "
            f"write_mode={requested.value} was requested. Pass write_mode='{configured.value}' or "
            "write_mode='table' to follow the table, or change the table property."
        )
    mode = (configured or ICEBERG_DEFAULT_WRITE_MODE) if requested is WriteMode.TABLE else requested
    if mode is WriteMode.MERGE_ON_READ and properties.get("format-version") == "1":
        raise WriteModeConflictError(
            f"Table {table!r} is format version 1, which has no delete files: a merge-on-read "
            f"{operation.upper()} cannot be written"
            + (f" (the table has {key}={mode.value})" if configured is mode else "")
            + ". Pass write_mode='copy-on-write', or upgrade the table: ALTER TABLE ... SET TBLPROPERTIES "
            "('format-version' = '2'). Nothing was changed."
        )
    return mode


def apply_isolation_level(
    spark: SparkSession,
    state: TableState,
    properties: Mapping[str, str],
    operation: str,
    level: IsolationLevel | None,
) -> None:
    """Set ``write.<operation>.isolation-level`` when a level is asked for and the table has another."""
    if level is None:
        return
    key = f"write.{operation}.isolation-level"
    if properties.get(key, IsolationLevel.SERIALIZABLE.value) != level.value:
        log(f"Setting table property {key}={level.value}")
        spark.sql(sql.set_table_property(state.identifier, key, level.value))


@contextmanager
def commit_summary(spark: SparkSession, properties: Mapping[str, str]) -> Iterator[None]:
    """Iceberg adds ``properties`` to the summary of the commits a SQL statement makes meanwhile.

    Session-wide settings: unset afterwards so that no later commit of this session inherits them.
    Over Spark Connect, all of them in one request each way (:func:`~airflow_iceberg_dml.compat.set_confs`).
    """
    settings = {SNAPSHOT_PROPERTY_CONF + key: value for key, value in properties.items()}
    set_all, unset_all = _conf_setters(spark)
    set_all(spark, settings)
    try:
        yield
    finally:
        unset_all(spark, settings)


def _conf_setters(spark: SparkSession) -> tuple[Callable[..., None], Callable[..., None]]:
    """How to set and unset session settings: for a Spark Connect session compat's ``set_confs`` and
    ``unset_confs`` (one request each); on classic Spark, where a setting is a local call, one per key.
    compat is imported for Spark Connect only (the worker's process): a spark-submit driver may have
    pyspark and this package only, not compat's own dependencies."""
    if is_connect(spark):
        from airflow_iceberg_dml.compat import set_confs, unset_confs

        return set_confs, unset_confs
    return _set_each, _unset_each


def _set_each(spark: SparkSession, settings: Mapping[str, str]) -> None:
    for key, value in settings.items():
        spark.conf.set(key, value)


def _unset_each(spark: SparkSession, keys: Iterable[str]) -> None:
    for key in keys:
        spark.conf.unset(key)


def find_own_commit(
    state: TableState, ref: str, head_before: int | None, job_id: str, app_id: str
) -> int | None:
    """The snapshot a job committed on ``ref`` since ``head_before``, if any: the one carrying its
    job id, else (a metadata-only delete that Spark planned by itself carries no property of ours)
    one that its Spark application committed with no job id."""
    state.refresh(after_own_commit=True)
    history, head = state.history(), state.head(ref)
    found = history.ours(head, CommitMarks(job_id=job_id), stop_at=head_before) or history.ours(
        head, CommitMarks(spark_app_id=app_id, untagged=True), stop_at=head_before
    )
    return found[0] if found else None


def earlier_commit(
    state: TableState, head: int | None, run_key: RunKey | None, exactly_once: bool
) -> int | None:
    """A commit of ``run_key`` (any try) in the history of ``head``, newest first (exactly once)."""
    if not exactly_once or run_key is None or head is None:
        return None
    earlier = state.history().ours(head, CommitMarks(run_key=run_key))
    return earlier[0] if earlier else None


def replay_line(state: TableState, run_key: RunKey | None, snapshot_id: int) -> str:
    """What a run that finds its own commit logs. A group commit may list the run with no row: it
    carried the waiting changes while this one matched none (the task ends as a no-op at its parent)."""
    carried = run_key is not None and run_key.group_rows(state.summary(snapshot_id)) == 0
    what = ", the waiting changes it carried; its own matched no row" if carried else ""
    return f"Run {run_key} already committed snapshot {snapshot_id}{what}: returning it, committing nothing."


def check_pinned_head(state: TableState, ref: str, head: int | None, spec: DmlSpec | MergeSpec) -> None:
    """Raise when the change was pinned (``expected_snapshot_id``) to a snapshot other than ``head``,
    unless only this run key's earlier tries have committed since (:func:`~.commits.moved_only_by`)."""
    expected, run_key = spec.expected_snapshot_id, spec.run_key
    if expected is None or head == expected:
        return
    if run_key is not None and moved_only_by(
        state.history().back_from(head), _parent_id, _summary, expected, CommitMarks(run_key=run_key)
    ):
        log(f"Since snapshot {expected}, only earlier tries of {run_key} have committed on {ref}.")
        return
    raise SnapshotMismatchError(
        f"{state.catalog}.{state.table} (ref {ref}) is at snapshot {head}, not at the expected "
        f"snapshot {expected}: the table changed since the change was planned."
    )


def _parent_id(row: SnapshotRow) -> int | None:
    return row.parent_id


def _summary(row: SnapshotRow) -> Mapping[str, str]:
    return row.summary
