"""A group commit in the job: waiting tasks' changes applied with this one, in one statement and one commit.

The operator hands the job the changes it claimed (:mod:`airflow_iceberg_dml.group_commit`): same
kind, table, branch and ``set`` expressions as this job's, other rows. At the head snapshot the job
counts, in one pass, the rows each predicate matches and the rows more than one matches. It applies
them together only when no row is matched twice (then one statement changes each row exactly as the
changes one after another would); otherwise, or when the count itself fails, this job's change is
applied alone, and each claimed task applies its own in its turn. A claimed change that is already in
the table (its run key committed) or that matches no row is left out. The commit's summary lists the
run key and rows of every change it applied (``airflow-iceberg-dml.group``), so that each task, and
any later try of it, finds the commit as its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.commits import CommitMarks
from airflow_iceberg_dml.jobs.runner import error_message, log
from airflow_iceberg_dml.spec import SummaryKey

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.jobs.table_state import TableState
    from airflow_iceberg_dml.spec import DmlSpec, GroupMember


@dataclass(frozen=True)
class Group:
    """The changes one commit applies: this job's first."""

    where: str
    """Every applied change's predicate, or-ed (parameters bound)."""
    entries: tuple[dict[str, Any], ...]
    """Run key and rows of each applied change, as the commit's summary lists them."""

    @property
    def own_rows(self) -> int:
        rows: int = self.entries[0]["rows"]
        return rows

    def summary(self) -> dict[str, str]:
        return {SummaryKey.GROUP: json.dumps(list(self.entries), sort_keys=True)}


class GroupCommit:
    """The group-commit side of :class:`~airflow_iceberg_dml.jobs.dml.DmlJob`."""

    spark: SparkSession
    spec: DmlSpec
    state: TableState
    where: str

    if TYPE_CHECKING:

        def _snapshot_source(self, head: int) -> str: ...  # DmlImpact's

    def _gather(self, head: int) -> Group | None:
        """The changes to apply at ``head``, this job's first; None to apply this job's alone."""
        assert self.spec.run_key is not None  # the operator groups only changes with a run key
        history = self.state.history()  # read once for every waiting change
        waiting = [
            member
            for member in self.spec.group
            if not history.ours(head, CommitMarks(run_key=member.run_key))
        ]
        counts = self._count_each(head, waiting)
        if counts is None:
            return None
        own, *rows, overlap = counts
        if overlap:
            log(
                f"Group commit: {overlap} row(s) match more than one of the {len(waiting) + 1} changes: "
                "applying this change alone; the others follow in their own turns."
            )
            return None
        applied = [(member, count) for member, count in zip(waiting, rows, strict=True) if count > 0]
        skipped = len(self.spec.group) - len(applied)
        log(
            f"Group commit: this change matches {own} row(s); {len(applied)} waiting change(s) "
            f"match {sum(count for _, count in applied)} more"
            + (f" ({skipped} left out: already committed, or matching no row)" if skipped else "")
        )
        return Group(
            where=sql.any_of([self.where, *(member.where for member, _ in applied)]),
            entries=(
                self.spec.run_key.group_entry(own),
                *(member.run_key.group_entry(count) for member, count in applied),
            ),
        )

    def _count_each(self, head: int, waiting: list[GroupMember]) -> list[int] | None:
        """Rows each predicate matches at ``head`` (this job's first), then the rows matched twice;
        None when a waiting change's predicate cannot be evaluated (its own task will say why)."""
        wheres = [self.where, *(member.where for member in waiting)]
        query = sql.group_count_query(self._snapshot_source(head), wheres)
        try:
            row = self.spark.sql(query).collect()[0]
        except Exception as error:  # noqa: BLE001 - the waiting changes stay with their own tasks
            log(
                f"Group commit: the waiting changes could not be counted ({error_message(error)}); "
                "applying this change alone."
            )
            return None
        return [int(value) for value in row]
