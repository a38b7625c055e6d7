"""Group commit: the task whose turn it is on a table applies the waiting tasks' changes with its own.

Changes of one table take turns (:mod:`airflow_iceberg_dml.table_lock`), and on a table whose files mix
the changed keys each change is a pass over those files and a commit. A backfill's changes differ in
their rows only (the same UPDATE of another day), so while one runs, the next ones wait with nothing
to do. Here they say what they would change: a waiting task leaves an *offer* beside the table's lock
file, and the task that gets the turn *claims* the offers that match its own change and hands them to
its job, which applies them all in one statement and one commit (when their rows do not overlap). The
commit's summary names every run key with the rows its change matched, so that each claimed task,
when its own turn comes, finds the commit as its own in the table's history and commits nothing.

An offer is a small JSON file locked (``flock``) by the waiting task's process for as long as it
waits: a claim takes only offers whose lock is held, so a task that died waiting is never applied,
and its offer is removed. A claimed task whose change is not in the table when its turn comes (the
claiming task failed, or its job left the change out) runs its change itself. What a killed task
leaves in the folder (its claimed offer, or a staging file it never put up) is removed by a later claim.

Once the claiming job has committed, the claimed offers are marked *settled*: their tasks stop waiting
for a turn they no longer need, read their rows from the commit without it, and end. Only a settled
task whose change the commit does not hold (the job left it out) waits for its turn, to apply it alone.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.spec import DmlSpec, GroupMember, JobKind, RunKey, SummaryKey, WriteMode

if TYPE_CHECKING:
    from pathlib import Path

#: At most this many changes in one commit (the claiming task's own included).
MAX_GROUP = 32
#: Summary entries that tell the tries of one run apart; every other entry must agree to group.
_PER_RUN_KEYS = {
    SummaryKey.DAG_ID,
    SummaryKey.TASK_ID,
    SummaryKey.RUN_ID,
    SummaryKey.MAP_INDEX,
    SummaryKey.TRY_NUMBER,
}


def group_key(spec: DmlSpec) -> str | None:
    """What a change must share with others to be applied in one commit with them; None when it
    cannot be grouped.

    A change can be grouped when it is a plain merge-on-read DELETE or UPDATE with a run key and
    exactly once: no dry run, guard, audit or expected snapshot (those are about one change's own
    commit), and, for an UPDATE, no ``set`` column read by its predicate (applied together, the
    changes must select the same rows as applied one after another).
    """
    if (
        spec.dry_run
        or spec.guards.active
        or spec.audits.queries
        or spec.expected_snapshot_id is not None
        or spec.run_key is None
        or not spec.commit_policy.exactly_once
        or spec.write_mode is not WriteMode.MERGE_ON_READ
        or spec.group
    ):
        return None
    try:
        where = bound_where(spec)
        assignments = {
            column: sql.bind_parameters(expression, spec.parameters)
            for column, expression in spec.assignments.items()
        }
    except (KeyError, TypeError):  # the job names the problem when the change runs alone
        return None
    if spec.kind is JobKind.UPDATE and any(_mentions(where, column) for column in assignments):
        return None
    shared = {
        "kind": spec.kind.value,
        "catalog": spec.catalog,
        "table": spec.table,
        "branch": spec.branch,
        "assignments": assignments,
        "commit_policy": [spec.commit_policy.conflict_retries, spec.commit_policy.isolation_level],
        "snapshot_properties": {
            key: value for key, value in spec.snapshot_properties.items() if key not in _PER_RUN_KEYS
        },
        "version": spec.version,
    }
    return json.dumps(shared, sort_keys=True, default=str)


def bound_where(spec: DmlSpec) -> str:
    """The change's predicate, its parameters bound (``KeyError``/``TypeError`` as in the job)."""
    return sql.bind_parameters(spec.where, spec.parameters)


def _mentions(text: str, column: str) -> bool:
    """Whether ``column`` appears in ``text`` as a word (string literals included: never a false no)."""
    return re.search(rf"(?<![\w$]){re.escape(column)}(?![\w$])", text, re.IGNORECASE) is not None


def queue_folder(lock_file: Path) -> Path:
    """Where the offers to the table of ``lock_file`` are: a folder beside it."""
    return lock_file.with_name(lock_file.name + ".offers")


@dataclass
class Offer:
    """One waiting task's change, on offer to the task whose turn it is."""

    folder: Path
    name: str = field(default_factory=lambda: uuid.uuid4().hex)
    _handle: Any = None

    @property
    def path(self) -> Path:
        return self.folder / f"{self.name}.json"

    @property
    def claimed_path(self) -> Path:
        return self.folder / f"{self.name}.claimed"

    @property
    def settled_path(self) -> Path:
        return self.folder / f"{self.name}.settled"

    def post(self, key: str, member: GroupMember) -> None:
        """Put the offer up: written whole and locked before it appears under its name."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with suppress(PermissionError):
            os.chmod(self.folder, 0o1777)
        staging = self.folder / f".{self.name}.tmp"
        handle = staging.open("w")
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        handle.write(
            json.dumps({"key": key, "run_key": member.run_key.group_entry(0), "where": member.where})
        )
        handle.flush()
        os.replace(staging, self.path)
        self._handle = handle

    def claimed(self) -> bool:
        """Whether a task whose turn it was took this change into its job (ask once the turn is ours, or
        once :meth:`settled`)."""
        return self.claimed_path.exists() or self.settled_path.exists()

    def settled(self) -> bool:
        """Whether the job of the task that claimed this change has ended well (its commit, when it
        applied the change, is in the table): no need to wait for a turn to find out."""
        return self.settled_path.exists()

    def withdraw(self) -> None:
        """Take the offer down, claimed or not; the lock goes with the file handle."""
        for path in (self.path, self.claimed_path, self.settled_path):
            with suppress(FileNotFoundError):
                path.unlink()
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def claim(folder: Path, key: str, limit: int = MAX_GROUP - 1) -> list[GroupMember]:
    """The changes on offer in ``folder`` that share ``key``, at most ``limit``, oldest first; each is
    marked claimed. Call it only while holding the table's turn. Offers of dead tasks are removed."""
    if not folder.is_dir():
        return []
    _sweep(folder)
    offers = sorted(folder.glob("*.json"), key=_age)
    members: list[GroupMember] = []
    for path in offers:
        if len(members) >= limit:
            break
        member = _live_offer(path, key)
        if member is None:
            continue
        with suppress(FileNotFoundError):  # withdrawn meanwhile: its task stopped waiting
            os.replace(path, path.with_suffix(".claimed"))
            members.append(member)
    return members


def settle(folder: Path, members: list[GroupMember]) -> None:
    """Tell the tasks whose changes ``members`` are that the claiming job ended well: their claimed
    offers are marked settled, and they stop waiting for a turn (call it while holding the turn)."""
    wanted = {member.run_key for member in members}
    for path in folder.glob("*.claimed"):
        member = _member(path)
        if member is not None and member.run_key in wanted:
            with suppress(FileNotFoundError):  # withdrawn meanwhile: its task stopped waiting
                os.replace(path, path.with_suffix(".settled"))


def _sweep(folder: Path) -> None:
    """Remove what dead tasks left: a claimed offer whose task was killed while it waited, and a staging
    file whose poster was killed before it put the offer up (older than a minute: a live poster locks
    its staging file just after creating it). A live task holds the lock of either file."""
    stale = [p for p in folder.glob(".*.tmp") if _age(p) < time.time() - 60]
    leftovers = [*folder.glob("*.claimed"), *folder.glob("*.settled"), *stale]
    for path in leftovers:
        if not _held(path):
            with suppress(FileNotFoundError):
                path.unlink()


def _held(path: Path) -> bool:
    """Whether a live process holds the lock of the file at ``path`` (gone: as good as held)."""
    try:
        handle = path.open()
    except FileNotFoundError:
        return True
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            return True
        return False


def _age(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _live_offer(path: Path, key: str) -> GroupMember | None:
    """The offer at ``path`` when its task still waits and its change shares ``key``; a dead task's
    offer (its lock free) is removed."""
    if not _held(path):  # the task that offered it is gone
        with suppress(FileNotFoundError):
            path.unlink()
        return None
    return _member(path, key)


def _member(path: Path, key: str | None = None) -> GroupMember | None:
    """The change of the offer at ``path`` (None: unreadable, gone, or of another key than ``key``)."""
    try:
        offer = json.loads(path.read_text())
        entry = offer["run_key"]
        run_key = RunKey(entry["dag_id"], entry["task_id"], entry["run_id"], int(entry["map_index"]))
        return GroupMember(run_key, str(offer["where"])) if key in (None, offer["key"]) else None
    except FileNotFoundError:  # withdrawn meanwhile: its task stopped waiting
        return None
    except (ValueError, KeyError, TypeError):
        return None
