"""A group commit in the job: waiting tasks' changes applied with this one, in one statement and one commit.

The operator hands the job the changes it claimed (:mod:`airflow_iceberg_dml.group_commit`): same
table, branch and commit settings as this job's, other rows; of the same kind and ``set`` expressions,
or, on a table whose ``write.merge.mode`` is merge-on-read, DELETEs and UPDATEs of one ``set`` mixed.
At the head snapshot the job counts, in one pass, the rows each predicate matches and the rows two
changes of one kind both match. It applies them together only when there is no such row (then one
statement changes each row exactly as the changes one after another would, the UPDATEs first, as no
DELETE's predicate reads a column they set); otherwise, or when the count itself fails, this job's
change is applied alone, and each claimed task applies its own in its turn. A claimed change that is
already in the table (its run key committed) or that matches no row is left out; the job's record
names the ones matching no row (no grouped predicate reads a column the UPDATEs set, so the commit
cannot make them match one), and their tasks end as no-ops, without a job of their own. When this job's
own change matches no row, the commit still applies the claimed changes that match rows, listing this
one with none (its task's result is a no-op); when no change matches a row, nothing is committed.
One kind is one DELETE or UPDATE statement; mixed kinds are one MERGE of the table with a constant row
(delete where a DELETE matches, update where an UPDATE does). The commit's summary lists the run key
and rows of every change it applied, and its kind when they are mixed (``airflow-iceberg-dml.group``),
so that each task, and any later try of it, finds the commit as its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.commits import CommitMarks
from airflow_iceberg_dml.group_commit import UNMATCHED
from airflow_iceberg_dml.group_keys import MERGE_MODE, reads_any
from airflow_iceberg_dml.jobs.dml_impact import counts_by_change
from airflow_iceberg_dml.jobs.runner import error_message, log
from airflow_iceberg_dml.spec import GroupMember, JobKind, SummaryKey, WriteMode

if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import ModuleType

    from pyspark.sql import DataFrame, SparkSession

    from airflow_iceberg_dml.jobs.table_state import TableState
    from airflow_iceberg_dml.spec import DmlSpec


@dataclass(frozen=True)
class Group:
    """The changes one commit applies: this job's first."""

    where: str
    """Every applied change's predicate, or-ed (parameters bound)."""
    entries: tuple[dict[str, Any], ...]
    """Run key and rows of each applied change, as the commit's summary lists them."""
    deletes: str | None = None
    """When the group mixes kinds: the DELETEs' predicates, or-ed."""
    updates: str | None = None
    """When the group mixes kinds: the UPDATEs' predicates, or-ed."""
    assignments: Mapping[str, str] = field(default_factory=dict)
    """When the group mixes kinds: the UPDATEs' ``set`` (one for all, parameters bound)."""
    unmatched: tuple[dict[str, Any], ...] = ()
    """Run key of each waiting change that matches no row (none of the applied changes can make it
    match one: no grouped predicate reads a column the UPDATEs set), so nothing is left to apply."""

    @property
    def own_rows(self) -> int:
        rows: int = self.entries[0]["rows"]
        return rows

    @property
    def mixed(self) -> bool:
        return self.deletes is not None

    def summary(self) -> dict[str, str]:
        return {SummaryKey.GROUP: json.dumps(list(self.entries), sort_keys=True)}

    def details(self, head: int) -> dict[str, Any]:
        """What the job's record tells the operator: the waiting changes that match no row at ``head``."""
        if not self.unmatched:
            return {}
        return {UNMATCHED: {"snapshot_id": head, "run_keys": list(self.unmatched)}}

    def merge(self, target: str) -> str:
        """The MERGE that applies a group of mixed kinds to ``target``."""
        if self.deletes is None or self.updates is None:
            raise ValueError("a group of one kind is one DELETE or UPDATE, not a MERGE")
        return sql.mixed_group_statement(target, self.deletes, self.updates, self.assignments)


class GroupCommit:
    """The group-commit side of :class:`~airflow_iceberg_dml.jobs.dml.DmlJob`."""

    spark: SparkSession
    spec: DmlSpec
    state: TableState
    functions: ModuleType
    where: str
    assignments: dict[str, str]

    if TYPE_CHECKING:

        def _snapshot_rows(self, head: int) -> DataFrame: ...  # DmlImpact's

    def _gather(self, head: int) -> Group | None:
        """The changes to apply at ``head``, this job's first; None to apply this job's alone."""
        assert self.spec.run_key is not None  # the operator groups only changes with a run key
        history = self.state.history()  # read once for every waiting change
        waiting = self._mixable(
            [
                member
                for member in self.spec.group
                if not history.ours(head, CommitMarks(run_key=member.run_key))
            ]
        )
        kinds = [self.spec.kind, *(member.kind or self.spec.kind for member in waiting)]
        counts = self._count_each(head, waiting, kinds)
        if counts is None:
            return None
        own, *rows, overlap = counts
        if overlap:
            log(
                f"Group commit: {overlap} row(s) match more than one of the {len(waiting) + 1} changes of "
                "one kind: applying this change alone; the others follow in their own turns."
            )
            return None
        counted = list(zip(waiting, rows, strict=True))
        applied = [(member, count) for member, count in counted if count > 0]
        unmatched = tuple(member.run_key.group_entry(0) for member, count in counted if count == 0)
        skipped = len(self.spec.group) - len(applied) - len(unmatched)
        log(
            f"Group commit: this change matches {own} row(s); {len(applied)} waiting change(s) "
            f"match {sum(count for _, count in applied)} more"
            + (f"; {len(unmatched)} match no row (nothing to apply)" if unmatched else "")
            + (f" ({skipped} left out: already committed, or of the other kind)" if skipped else "")
        )
        change = self.spec.snapshot_properties.get(SummaryKey.CHANGE)
        this = GroupMember(self.spec.run_key, self.where, change=change)
        group = self._group_of([(this, own), *applied])
        return replace(group, unmatched=unmatched)

    def _group_of(self, applied: list[tuple[GroupMember, int]]) -> Group:
        """The group of ``applied`` (this job's change first): one MERGE when it mixes kinds."""
        own = self.spec.kind
        kinds = [member.kind or own for member, _ in applied]
        mixed = len(set(kinds)) > 1
        entries = tuple(
            member.run_key.group_entry(count, kind if mixed else None, member.change)
            for (member, count), kind in zip(applied, kinds, strict=True)
        )
        where = sql.any_of([member.where for member, _ in applied])
        if not mixed:
            return Group(where=where, entries=entries)
        updates = [
            (member, kind) for (member, _), kind in zip(applied, kinds, strict=True) if kind is JobKind.UPDATE
        ]
        deletes = [
            member.where for (member, _), kind in zip(applied, kinds, strict=True) if kind is JobKind.DELETE
        ]
        first = updates[0][0]
        return Group(
            where=where,
            entries=entries,
            deletes=sql.any_of(deletes),
            updates=sql.any_of([member.where for member, _ in updates]),
            assignments=self.assignments if own is JobKind.UPDATE else dict(first.assignments),
        )

    def _mixable(self, waiting: list[GroupMember]) -> list[GroupMember]:
        """``waiting`` without the changes of the other kind when they cannot be mixed with this one:
        the table's MERGE is not merge-on-read, the UPDATEs' ``set`` differ, or a DELETE's predicate reads
        a column the UPDATEs set (the operator claims none of those; the table may have changed since)."""
        own = self.spec.kind
        others = [member for member in waiting if (member.kind or own) is not own]
        if not others:
            return waiting
        changes = [
            (own, self.where, self.assignments),
            *((m.kind or own, m.where, m.assignments) for m in waiting),
        ]
        updates = [assignments for kind, _, assignments in changes if kind is JobKind.UPDATE]
        sets = {json.dumps(dict(assignments), sort_keys=True) for assignments in updates}
        columns = [column for assignments in updates for column in assignments]
        mode = self.state.properties().get(MERGE_MODE)
        if mode != WriteMode.MERGE_ON_READ.value:
            reason = f"the table's {MERGE_MODE} is {mode or 'unset'}, not merge-on-read"
        elif len(sets) > 1:
            reason = "the UPDATEs set different expressions"
        elif any(reads_any(where, columns) for kind, where, _ in changes if kind is JobKind.DELETE):
            reason = "a DELETE's predicate reads a column the UPDATEs set"
        else:
            return waiting
        log(
            f"Group commit: {len(others)} waiting change(s) of the other kind left out ({reason}); "
            "they follow in their own turns."
        )
        return [member for member in waiting if (member.kind or own) is own]

    def _count_each(self, head: int, waiting: list[GroupMember], kinds: list[JobKind]) -> list[int] | None:
        """Rows each predicate matches at ``head`` (this job's first), then the rows matched by two of
        one kind; None when a waiting change's predicate cannot be evaluated (its own task will say why)."""
        wheres = [self.where, *(member.where for member in waiting)]
        try:
            counts = counts_by_change(
                self._snapshot_rows(head), self.functions, wheres, [kind.value for kind in kinds]
            )
            row = counts.collect()[0]
        except Exception as error:  # noqa: BLE001 - the waiting changes stay with their own tasks
            log(
                f"Group commit: the waiting changes could not be counted ({error_message(error)}); "
                "applying this change alone."
            )
            return None
        return [int(value) for value in row]
