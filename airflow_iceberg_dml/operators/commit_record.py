"""A DML task's commit, recorded in Airflow's task state store: exactly once after snapshot expiry.

A later try of a task instance (a retry, a clear, a day reprocessed by ``airflow backfill create
--reprocess-behavior completed``) finds that its change was applied by the run key in the commit's
snapshot summary. Expiring snapshots removes those summaries: once the table's maintenance has
expired the commit (5 days by default), the table no longer says that the change was applied, and a
change computed from the old values (``price = price * 0.92``) would be applied a second time.

So a DML task that commits also records the commit under its task instance in Airflow's task state
store (Airflow 3.3+; a clear keeps it), for as long as the DAG run exists. When a later try finds no
commit of its run key in the history, it reads that record: a recorded snapshot that the table's
metadata no longer has was expired, and the recorded result is returned, committing nothing. A recorded
snapshot still in the metadata but no longer on the ref was rolled back (or the ref was reset): the
change is applied again, as without a record. A record is of one table, named by its uuid (a table
renamed since is the same table; one dropped and created again under the same name is another), and
one ref.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from airflow.sdk.exceptions import AirflowRuntimeError

if TYPE_CHECKING:
    import logging

    from pydantic import JsonValue

    from airflow_iceberg_dml.operators.base import TaskStateStore
    from airflow_iceberg_dml.result import DmlResult

#: The task state store's key of the record.
COMMIT_RECORD_KEY = "airflow_iceberg_dml.commit"
#: What the record leaves out of the result: the table's health is read again when it is returned.
_NOT_RECORDED = frozenset({"health", "duration_s"})


@dataclass(frozen=True)
class CommitRecord:
    """Which table a commit changed (its uuid), the task's result (which names the ref) and the digest
    of the change it applied (:mod:`airflow_iceberg_dml.change_digest`; None: not recorded)."""

    table_uuid: str
    result: dict[str, Any]
    change: str | None = None

    def is_of(self, table_uuid: str, branch: str) -> bool:
        """Whether the record is of this table and ref."""
        return (self.table_uuid, self.result.get("branch")) == (table_uuid, branch)

    @property
    def snapshot_id(self) -> int:
        return int(self.result["snapshot_id"])

    def replayed(self, **now: Any) -> DmlResult:
        """The recorded result as a replay's: ``replayed``, with ``now``'s entries (the table's name,
        duration, health)."""
        return cast("DmlResult", {**self.result, "replayed": True, **now})


def record_commit(store: TaskStateStore | None, record: CommitRecord, log: logging.Logger | Any) -> None:
    """Keep ``record`` under the task instance, with no expiry of its own (it goes with the DAG run).

    A failure is a warning: the commit stands, and while its snapshot is in the table's history a
    later try finds it there."""
    if store is None:
        return
    from airflow.sdk.execution_time.context import NEVER_EXPIRE  # with the task state store (3.3+)

    result = {key: value for key, value in record.result.items() if key not in _NOT_RECORDED}
    value: JsonValue = {"table_uuid": record.table_uuid, "result": result, "change": record.change}
    try:
        store.set(COMMIT_RECORD_KEY, value, retention=NEVER_EXPIRE)
    except AirflowRuntimeError as error:
        log.warning(
            "Could not record commit %s in the task state store: %s. A later try of this task finds it "
            "only while the table's history has it.",
            record.result.get("snapshot_id"),
            error,
        )


def recorded_commit(store: TaskStateStore | None, log: logging.Logger | Any) -> CommitRecord | None:
    """The record an earlier try of this task instance left, or None (none, unreadable, or malformed)."""
    if store is None:
        return None
    try:
        value = store.get(COMMIT_RECORD_KEY)
    except AirflowRuntimeError as error:
        log.warning("Could not read the task state store: %s. No recorded commit is looked for.", error)
        return None
    if not isinstance(value, dict) or not isinstance(result := value.get("result"), dict):
        return None
    table_uuid = value.get("table_uuid")
    if not isinstance(table_uuid, str) or not result.get("snapshot_id"):
        return None
    change = value.get("change")
    return CommitRecord(table_uuid, dict(result), change if isinstance(change, str) else None)
