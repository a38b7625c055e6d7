"""Walking a ref's history for a snapshot filter: only the commits new since the last walk are read."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.snapshot_info import SnapshotInfo

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    # Only named in annotations: snapshot_filter re-exports this module's names.
    from airflow_iceberg_dml.snapshot_filter import SnapshotFilter


@dataclass(frozen=True)
class WatchState:
    """Where a watch stands: the last head walked from, and matches not yet reported.

    Plain JSON via :meth:`to_dict`, so that an asset watcher can keep it across triggerer restarts.
    """

    #: The ref head the last walk started from (None before the first walk, or while the ref is empty).
    head_snapshot_id: int | None = None
    #: Whether that head is ``newer_than_snapshot_id`` or one of its descendants (always True without it).
    head_after_boundary: bool = False
    #: Matching commits found and not yet reported, oldest first.
    pending: tuple[SnapshotInfo, ...] = ()
    #: True once a walk has happened: later walks only look at snapshots newer than ``head_snapshot_id``.
    started: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values; :meth:`from_dict` reads them back to an equal state."""
        return {
            "head_snapshot_id": self.head_snapshot_id,
            "head_after_boundary": self.head_after_boundary,
            "pending": [snapshot.to_dict() for snapshot in self.pending],
            "started": self.started,
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> WatchState:
        return cls(
            head_snapshot_id=payload.get("head_snapshot_id"),
            head_after_boundary=bool(payload.get("head_after_boundary")),
            pending=tuple(SnapshotInfo.from_dict(item) for item in payload.get("pending") or ()),
            started=bool(payload.get("started")),
        )

    def take(self, count: int) -> tuple[tuple[SnapshotInfo, ...], WatchState]:
        """The oldest ``count`` pending matches, and the state without them."""
        return self.pending[:count], WatchState(
            head_snapshot_id=self.head_snapshot_id,
            head_after_boundary=self.head_after_boundary,
            pending=self.pending[count:],
            started=self.started,
        )


@dataclass(frozen=True)
class WalkResult:
    """What one walk found, and the state to start the next walk from."""

    state: WatchState
    #: Snapshots looked at by this walk (the cost of the poll, in snapshots).
    walked: int
    #: Newly found matches (oldest first); also appended to ``state.pending``.
    new_matches: tuple[SnapshotInfo, ...]


class _Stop(Enum):
    """Where a walk down a ref's history stopped."""

    PREVIOUS = "previous"
    """At the head the last walk started from: everything older was seen then."""
    BOUNDARY = "boundary"
    """At ``newer_than_snapshot_id``: everything older is outside the filter."""
    ROOT = "root"
    """At the oldest snapshot kept: neither was met on the way."""


def _collect(
    lineage: Iterable[SnapshotInfo], previous_head: int | None, boundary: int | None
) -> tuple[list[SnapshotInfo], _Stop, int]:
    """The snapshots newer than the previous head or the boundary, newest first; where the walk
    stopped; how many snapshots it looked at."""
    collected: list[SnapshotInfo] = []
    walked = 0
    for snapshot in lineage:
        walked += 1
        if previous_head is not None and snapshot.snapshot_id == previous_head:
            return collected, _Stop.PREVIOUS, walked
        if boundary is not None and snapshot.snapshot_id == boundary:
            return collected, _Stop.BOUNDARY, walked
        collected.append(snapshot)
    return collected, _Stop.ROOT, walked


def walk(
    lineage: Iterable[SnapshotInfo],
    head_snapshot_id: int | None,
    state: WatchState,
    snapshot_filter: SnapshotFilter,
    *,
    previous_lineage: Callable[[int], set[int]] | None = None,
) -> WalkResult:
    """Examine the commits on a ref that are new since ``state``, newest first, and record the matches.

    ``lineage`` yields the ref's head and its ancestors, newest first; it is consumed lazily and only
    down to the first snapshot already seen (the previous head) or to ``newer_than_snapshot_id``, so a
    poll costs the number of new commits, not the length of the history. When the previous head is not
    an ancestor of the new one (the ref was rolled back or replaced), the walk goes on to the boundary
    or the root, and ``previous_lineage(previous_head)`` (the ids that were on the ref before) keeps
    commits already seen from counting twice.
    """
    boundary = snapshot_filter.newer_than_snapshot_id
    previous_head = state.head_snapshot_id if state.started else None
    collected, stop, walked = _collect(lineage, previous_head, boundary)
    if stop is _Stop.PREVIOUS:
        after_boundary = state.head_after_boundary
        candidates = collected if after_boundary else []
    else:
        after_boundary = boundary is None or stop is _Stop.BOUNDARY
        candidates = collected if after_boundary else []
        if previous_head is not None and candidates and previous_lineage is not None:
            # The ref moved to another line of history: drop what was on the ref before.
            seen = previous_lineage(previous_head)
            candidates = [snapshot for snapshot in candidates if snapshot.snapshot_id not in seen]
    if head_snapshot_id is None:
        after_boundary = boundary is None

    already = {snapshot.snapshot_id for snapshot in state.pending}
    new_matches = tuple(
        snapshot
        for snapshot in reversed(candidates)
        if snapshot.snapshot_id not in already and snapshot_filter.matches(snapshot)
    )
    return WalkResult(
        state=WatchState(
            head_snapshot_id=head_snapshot_id,
            head_after_boundary=after_boundary,
            pending=state.pending + new_matches,
            started=True,
        ),
        walked=walked,
        new_matches=new_matches,
    )


def baseline(head_snapshot_id: int | None) -> WatchState:
    """A state that treats the current history as seen: only later commits count (asset watchers)."""
    return WatchState(head_snapshot_id=head_snapshot_id, head_after_boundary=True, started=True)
