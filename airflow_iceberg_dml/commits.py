"""Which commits a run made, and the walk back to the snapshot it started from.

Both sides ask these questions: the Airflow worker (pyiceberg) before it submits a job (has this
run key committed already?) and after (which snapshot is the job's?), and the Spark job itself
(exactly once, and finding its own commit). This module answers them once, for both. It imports
neither Airflow, nor pyiceberg, nor PySpark: each side reads a snapshot's id, its parent's id and
its summary its own way (pyiceberg's ancestry helpers, or Iceberg's ``snapshots`` metadata table)
and hands them here.

A commit is ours when its summary carries every mark asked for:

- the run key (``airflow.dag-id``, ``airflow.task-id``, ``airflow.run-id``, ``airflow.map-index``):
  every commit this package makes through a row-level write, a rewrite or a truncate; a group commit
  also lists the run key of every change it applied (``airflow-iceberg-dml.group``), and is each one's;
- the Spark application id (``spark.app.id`` from Spark's writes, ``app-id`` from Iceberg on every
  commit): every commit Spark makes, including a metadata-only delete that Spark plans by itself
  and that carries no custom property;
- the job id (``airflow-iceberg-dml.job-id``): every commit one job run tagged, whichever the engine
  (on a Spark Connect server, one application id is shared by the jobs of every task);
- no job id at all (``untagged``): with the application id, a commit Spark made for a job without
  any property of ours (a metadata-only delete, a ``CALL`` procedure over Spark Connect);
- the maintenance procedure key (``airflow-iceberg-dml.procedure``): commits of the maintenance job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from airflow_iceberg_dml.spec import MAINTENANCE_PROCEDURE_KEY, RunKey, SummaryKey

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

Snapshot = TypeVar("Snapshot")


@dataclass(frozen=True)
class CommitMarks:
    """What a commit's summary must carry to be a given run's. Marks left as None are not asked."""

    run_key: RunKey | None = None
    spark_app_id: str | None = None
    job_id: str | None = None
    untagged: bool = False
    maintenance: bool = False

    def __post_init__(self) -> None:
        if self.run_key is None and self.spark_app_id is None and self.job_id is None:
            raise ValueError(
                "CommitMarks needs a run key, a job id or a Spark application id: nothing else is ours."
            )

    def carried_by(self, summary: Mapping[str, str]) -> bool:
        """Whether a snapshot with this summary is one of ours."""
        if self.run_key is not None and not self.run_key.matches(summary):
            return False
        if self.spark_app_id is not None and self.spark_app_id not in (
            summary.get(SummaryKey.SPARK_APP_ID),
            summary.get(SummaryKey.APP_ID),
        ):
            return False
        if self.job_id is not None and summary.get(SummaryKey.JOB_ID) != self.job_id:
            return False
        if self.untagged and SummaryKey.JOB_ID in summary:
            return False
        return not self.maintenance or bool(summary.get(MAINTENANCE_PROCEDURE_KEY))


def walk_back(
    head: Snapshot | None,
    parent_of: Callable[[Snapshot], Snapshot | None],
    snapshot_id: Callable[[Snapshot], int],
    stop_at: int | None = None,
) -> Iterator[Snapshot]:
    """``head`` and its ancestors, newest first, down to ``stop_at`` (excluded) or where history ends.

    ``stop_at`` is the head a run started from: the walk costs the number of newer snapshots, not the
    table's history. When ``stop_at`` is not an ancestor (it was expired, or the ref was reset), the
    walk goes on to the oldest snapshot still in the metadata.
    """
    snapshot = head
    seen: set[int] = set()
    while snapshot is not None:
        current = snapshot_id(snapshot)
        if current == stop_at or current in seen:
            return
        seen.add(current)
        yield snapshot
        snapshot = parent_of(snapshot)


def ours(
    snapshots: Iterable[Snapshot], summary_of: Callable[[Snapshot], Mapping[str, str]], marks: CommitMarks
) -> list[Snapshot]:
    """The snapshots among ``snapshots`` (kept in their order) that carry ``marks``."""
    return [snapshot for snapshot in snapshots if marks.carried_by(summary_of(snapshot))]


def moved_only_by(
    walk: Iterable[Snapshot],
    parent_id: Callable[[Snapshot], int | None],
    summary_of: Callable[[Snapshot], Mapping[str, str]],
    pinned: int,
    marks: CommitMarks,
) -> bool:
    """Whether the history of a head (``walk``: the head and its ancestors, newest first) reaches the
    ``pinned`` snapshot through commits that all carry ``marks``: a run's earlier tries. Then nothing
    but that run has changed the table since the snapshot it was pinned to."""
    for snapshot in walk:
        if not marks.carried_by(summary_of(snapshot)):
            return False
        if parent_id(snapshot) == pinned:
            return True
    return False


@dataclass(frozen=True)
class SnapshotRow:
    """One snapshot as the job side reads it from Iceberg's ``snapshots`` metadata table."""

    snapshot_id: int
    parent_id: int | None
    summary: Mapping[str, str]
    operation: str | None = None
    """``append``, ``overwrite``, ``delete`` or ``replace`` (a rewrite that changes no row)."""


class SnapshotHistory:
    """A table's snapshots by id, as rows of its ``snapshots`` metadata table (the job side's view)."""

    def __init__(self, rows: Iterable[SnapshotRow]) -> None:
        self._by_id = {row.snapshot_id: row for row in rows}

    def get(self, snapshot_id: int | None) -> SnapshotRow | None:
        return None if snapshot_id is None else self._by_id.get(snapshot_id)

    def back_from(self, head: int | None, stop_at: int | None = None) -> Iterator[SnapshotRow]:
        """The snapshot ``head`` and its ancestors, newest first, down to ``stop_at`` (excluded)."""
        return walk_back(self.get(head), lambda row: self.get(row.parent_id), _row_id, stop_at)

    def ours(self, head: int | None, marks: CommitMarks, stop_at: int | None = None) -> list[int]:
        """Ids of the commits on the history of ``head`` (down to ``stop_at``) that carry ``marks``."""
        return [row.snapshot_id for row in ours(self.back_from(head, stop_at), _row_summary, marks)]


def _row_id(row: SnapshotRow) -> int:
    return row.snapshot_id


def _row_summary(row: SnapshotRow) -> Mapping[str, str]:
    return row.summary
