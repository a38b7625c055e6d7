"""What a DML task does around its turn on the table: an earlier commit of its run key (and whether a
pinned head moved only by it), and group commit.

Before the turn, the task asks the table whether its run key committed already (exactly once). While
it waits, its change is on offer to the task whose turn it is (:mod:`airflow_iceberg_dml.group_commit`).
Once the turn is its own, either a task before it applied the change (its run key is in a commit's
group: the result is read from that commit), or it claims the changes still on offer and its job
applies them with its own. A task whose claimed change was settled while it waited reads its result
from the commit without waiting for the turn, or, when that task's job found no row matching the
change, ends as a no-op.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.commits import CommitMarks, moved_only_by
from airflow_iceberg_dml.exceptions import ChangedRunError
from airflow_iceberg_dml.group_arrival import Arrival, wait_for_arrivals
from airflow_iceberg_dml.group_commit import claim, queue_folder
from airflow_iceberg_dml.group_keys import GroupOffer, engine_of, group_offer
from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_dml.operators.base import BaseIcebergSparkJobOperator, JobPlan, JobRun, Turn, run_key
from airflow_iceberg_dml.operators.commit_record import CommitRecord, record_commit, recorded_commit
from airflow_iceberg_dml.result import DmlResult, health_payload, summary_of
from airflow_iceberg_dml.spec import DmlSpec, JobRecord, MergeSpec, Outcome, Plan, SummaryKey, WriteMode
from airflow_iceberg_dml.specs.common import applied_changes
from airflow_iceberg_dml.table_lock import MIN_WAIT_LOGGED_S, lock_path

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from airflow_iceberg_dml.health import HealthReport


def at_pinned_head(table: Table, spec: DmlSpec | MergeSpec, head: Snapshot | None) -> bool:
    """Whether a change may start from ``head``: no pin, the pinned snapshot, or only earlier tries of
    its run key committed since (:func:`~airflow_iceberg_dml.commits.moved_only_by`; a change applied
    again, ``exactly_once=False``)."""
    expected = spec.expected_snapshot_id
    if expected is None or (head.snapshot_id if head else None) == expected:
        return True
    if spec.run_key is None:
        return False
    walk = IcebergCatalogHook.ancestors(table, head)
    return moved_only_by(walk, _parent_id, summary_of, expected, CommitMarks(run_key=spec.run_key))


def _parent_id(snapshot: Snapshot) -> int | None:
    return snapshot.parent_snapshot_id


def parent_of(table: Table, snapshot: Snapshot | None) -> Snapshot | None:
    """The parent of ``snapshot`` while the table's history still has it."""
    if snapshot is None or snapshot.parent_snapshot_id is None:
        return None
    return table.snapshot_by_id(snapshot.parent_snapshot_id)


class DmlTurn(BaseIcebergSparkJobOperator[int | None, DmlResult]):
    """The DML operators' side of the turn: exactly once before it, group commit in it."""

    branch: str | None
    #: Whether the table's MERGE is merge-on-read (read when planning): then this task's change can be
    #: applied with waiting changes of the other kind, in one MERGE.
    merge_on_read_merge: bool = False
    #: This task on its way to the table's turn, until its change is on offer (group_arrival.py).
    _arrival: Arrival | None = None
    #: The uuid of the table whose commit the task records (commit_record.py); None: no record.
    _commit_table_uuid: str | None = None
    #: The digest of this try's change (change_digest.py), recorded with its commit.
    _change: str | None = None

    if TYPE_CHECKING:

        def to_result(self, record: JobRecord | None, **read_back: Any) -> DmlResult: ...

    def arriving(self, run: JobRun) -> AbstractContextManager[object]:
        if not (self.group_commit and self.one_writer_per_table):
            return nullcontext()
        return self._arriving(run)

    @contextmanager
    def _arriving(self, run: JobRun) -> Iterator[None]:
        path = lock_path(run.catalog_hook.catalog_config.properties["uri"], self.table)
        self._arrival = Arrival(queue_folder(path))
        self._arrival.put_up()
        try:
            yield
        finally:
            self._arrival.take_down()

    def group_offer(self, planned: JobPlan[int | None]) -> GroupOffer | None:
        if self._arrival is not None:  # the offer goes up next, or none does: either way, it has arrived
            self._arrival.take_down()
        spec = planned.spec
        if not isinstance(spec, DmlSpec):
            return None
        engine = engine_of(self.spark_conn_id, self.spark_conf)
        return group_offer(spec, merge_on_read_merge=self.merge_on_read_merge, engine=engine)

    def on_turn(
        self, run: JobRun, planned: JobPlan[int | None], turn: Turn
    ) -> JobPlan[int | None] | DmlResult:
        if turn.offer is None or turn.folder is None or turn.own is None:
            return planned
        spec = planned.spec
        assert isinstance(spec, DmlSpec)  # group_offer offers nothing else
        if (unmatched_at := turn.offer.unmatched_at()) is not None:
            return self._unmatched(run, unmatched_at)
        if turn.offer.claimed():
            table = run.catalog_hook.load_table(self.table)
            applied = self._replay(run, table, spec, planned.before, grouped=True)
            if applied is not None:
                return applied
            self.log.info(
                "A task before this one took this change into its group, but the table has no commit of it "
                "(that task failed, or its job left the change out): applying it on its own."
            )
        turn.offer.withdraw()
        if not turn.held:  # settled while it waited: the turn is taken next, with nothing on offer
            return planned
        waited, arriving = wait_for_arrivals(turn.folder)
        if arriving and waited >= MIN_WAIT_LOGGED_S:
            self.log.info("Group commit: waited %.2f s for %d arriving task(s).", waited, arriving)
        members = turn.claimed = claim(turn.folder, turn.own.key, mixing=turn.own)
        if not members:
            return planned
        self.log.info(
            "Group commit: applying %d waiting change(s) with this one, in one commit: %s",
            len(members),
            "; ".join(str(member.run_key) for member in members),
        )
        return JobPlan(replace(spec, group=tuple(members)), planned.before)

    def _unmatched(self, run: JobRun, snapshot_id: int) -> DmlResult:
        """The no-op result of a change that the job of the task that claimed it found matching no row at
        ``snapshot_id``: no job and no commit of its own (its own job would have found no more)."""
        self.log.info(
            "Group commit: the task that took this change into its group found no row matching it at "
            "snapshot %s: nothing to change, nothing committed.",
            snapshot_id,
        )
        table = run.catalog_hook.load_table(self.table)
        return self.to_result(
            JobRecord(outcome=Outcome.NOOP, plan=Plan.NOOP),
            head_before=snapshot_id,
            duration_s=run.elapsed(),
            health=self._health_after(run.catalog_hook, table),
        )

    def _replay(
        self,
        run: JobRun,
        table: Table,
        spec: DmlSpec | MergeSpec,
        head_id: int | None,
        *,
        grouped: bool = False,
    ) -> DmlResult | None:
        """The result of a commit of this run key already in the table, or None: an earlier try's
        (exactly once), or, ``grouped``, the commit of the task that applied this change with its own."""
        if not spec.commit_policy.exactly_once or spec.dry_run or spec.run_key is None:
            return None
        self._commit_table_uuid = str(table.metadata.table_uuid)  # the commit is recorded (report)
        self._change = spec.snapshot_properties.get(SummaryKey.CHANGE)
        earlier = run.catalog_hook.find_run_commits(table, spec.run_key, spec.branch)
        if not earlier:
            return None if grouped else self._recorded(run, table, spec)
        summary = summary_of(earlier[0])
        self._same_change(spec, spec.run_key.change_in(summary), earlier[0].snapshot_id)
        if grouped:
            self.log.info(
                "Group commit: snapshot %s applied this change (%s row(s)) with %s other change(s).",
                earlier[0].snapshot_id,
                spec.run_key.group_rows(summary),
                max(applied_changes(summary) - 1, 0),
            )
            record = JobRecord(
                outcome=Outcome.COMMITTED,
                snapshot_id=earlier[0].snapshot_id,
                plan=Plan.ROW_LEVEL,
                write_mode=WriteMode.MERGE_ON_READ.value,
            )
        else:
            carried = spec.run_key.group_rows(summary) == 0  # result.committed_result: a no-op at the parent
            self.log.info(
                "Run %s already committed snapshot %s (try %s)%s: returning its result, committing nothing.",
                spec.run_key,
                earlier[0].snapshot_id,
                summary.get(SummaryKey.TRY_NUMBER),
                ", the waiting changes it carried; its own matched no row" if carried else "",
            )
            record = JobRecord(outcome=Outcome.REPLAYED, snapshot_id=earlier[0].snapshot_id)
        return self.to_result(
            record,
            snapshot=earlier[0],
            parent=parent_of(table, earlier[0]),
            head_before=head_id,
            duration_s=run.elapsed(),
            health=self._health_after(run.catalog_hook, table),
            run_key=run_key(run.context),
        )

    def _recorded(self, run: JobRun, table: Table, spec: DmlSpec | MergeSpec) -> DmlResult | None:
        """The result an earlier try recorded in the task state store, when the commit it names was
        expired from the table's history (:mod:`airflow_iceberg_dml.operators.commit_record`)."""
        if getattr(run.context["ti"], "try_number", None) == 1:  # no earlier try: nothing to read
            return None
        record = recorded_commit(run.context.get("task_state_store"), self.log)
        branch = spec.branch or "main"
        if record is None or not record.is_of(str(self._commit_table_uuid), branch):
            return None
        if table.snapshot_by_id(record.snapshot_id) is not None:
            self.log.info(
                "An earlier try of run %s committed snapshot %s, which is no longer on %s (the ref was "
                "rolled back or reset): applying the change again.",
                spec.run_key,
                record.snapshot_id,
                branch,
            )
            return None
        self._same_change(spec, record.change, record.snapshot_id)
        self.log.info(
            "Run %s committed snapshot %s at %s; the table's history no longer has it (its snapshots were "
            "expired): returning the result recorded in Airflow's task state store, committing nothing.",
            spec.run_key,
            record.snapshot_id,
            record.result.get("committed_at"),
        )
        self._commit_table_uuid = None  # recorded already: nothing to record again
        health = health_payload(self._health_after(run.catalog_hook, table))
        return record.replayed(table=self.table, duration_s=run.elapsed(), health=health)

    def _same_change(self, spec: DmlSpec | MergeSpec, recorded: str | None, snapshot_id: int) -> None:
        """Raise :class:`ChangedRunError` when the run key's commit recorded another change than this
        try's (:mod:`airflow_iceberg_dml.change_digest`; a commit that recorded none is taken as is)."""
        own = spec.snapshot_properties.get(SummaryKey.CHANGE)
        if recorded is None or own is None or recorded == own:
            return
        parts = "source, on, clauses" if isinstance(spec, MergeSpec) else "where, set"
        raise ChangedRunError(
            f"Run {spec.run_key} committed snapshot {snapshot_id} to {self.table} in an earlier try, with "
            f"another change than this try's: its {parts} or parameter values changed since. Nothing was "
            "written. To apply this change on top of the earlier one, run the task with "
            "exactly_once=False; to keep the table as the earlier try left it, restore the task's earlier "
            "definition (or mark this task instance successful)."
        )

    def report(self, run: JobRun, result: DmlResult) -> None:
        """Record the commit in the task state store (exactly once past snapshot expiry), then report it."""
        if self._commit_table_uuid is not None and not result["noop"] and result["snapshot_id"]:
            record = CommitRecord(self._commit_table_uuid, dict(result), self._change)
            record_commit(run.context.get("task_state_store"), record, self.log)
        super().report(run, result)

    def _health_after(self, catalog_hook: IcebergCatalogHook, table: Table) -> HealthReport | None:
        """The table's health from its metadata (main's head), or None when it cannot be read."""
        try:
            return catalog_hook.health(table)
        except Exception as error:  # noqa: BLE001 - the change stands; its health is informative only
            self.log.warning("Could not read the health of %s after the change: %s", self.table, error)
            return None
