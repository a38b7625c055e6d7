"""Group commit: the task whose turn it is on a table applies the waiting tasks' changes with its own.

Changes of one table take turns (:mod:`airflow_iceberg_dml.table_lock`), and on a table whose files mix
the changed keys each change is a pass over those files and a commit. A backfill's changes differ in
their rows only (the same UPDATE of another day), so while one runs, the next ones wait with nothing
to do. Here they say what they would change: a waiting task leaves an *offer* beside the table's lock
file, and the task that gets the turn *claims* the offers that match its own change and hands them to
its job, which applies them all in one statement and one commit (when their rows do not overlap); it
first waits a moment for the table's tasks still planning (:mod:`airflow_iceberg_dml.group_arrival`).
The commit's summary names every run key with the rows its change matched, so that each claimed task,
when its own turn comes, finds the commit as its own in the table's history and commits nothing.

A backfill's run often has a DELETE and an UPDATE of the same day. On a table whose MERGE is
merge-on-read (``write.merge.mode``), the two kinds mix: an offer also carries a *mix key* (its group
key without the kind and ``set``), and the claiming task takes the waiting DELETEs and the UPDATEs of
one ``set`` with it, as long as no DELETE's predicate reads a column the UPDATEs set. Its job applies
them in one MERGE, as if the UPDATEs came first.

An offer is a small JSON file locked (``flock``) by the waiting task's process for as long as it
waits: a claim takes only offers whose lock is held, so a task that died waiting is never applied,
and its offer is removed. A claimed task whose change is not in the table when its turn comes (the
claiming task failed, or its job left the change out) runs its change itself. What a killed task
leaves in the folder (its claimed offer, or a staging file it never put up) is removed by a later claim.
A claiming job whose own change matches no row still commits the claimed changes that match rows; one
that commits nothing (none matches a row) puts the claimed offers back on offer: the next task whose
turn it is claims them, rather than each applying its change alone.

Once the claiming job has committed, the claimed offers are marked *settled*: their tasks stop waiting
for a turn they no longer need, read their rows from the commit without it, and end. A change that the
job found matching no row is settled whether or not it committed, says at which snapshot, and its task
ends as a no-op there. Only a settled task whose change the commit does not hold for another reason (the
job left it out) waits for its turn, to apply it alone.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_iceberg_dml.group_keys import GroupOffer, reads_any
from airflow_iceberg_dml.spec import GroupMember, JobKind, Outcome, RunKey

if TYPE_CHECKING:
    from pathlib import Path

    from airflow_iceberg_dml.spec import JobRecord

#: At most this many changes in one commit (the claiming task's own included).
MAX_GROUP = 32
#: In a claiming job's record: the claimed changes it found matching no row, and at which snapshot.
UNMATCHED = "group_unmatched"
#: In a settled offer: the snapshot at which the claiming job found no row matching the change.
UNMATCHED_AT = "unmatched_at"


def queue_folder(lock_file: Path) -> Path:
    """Where the offers to the table of ``lock_file`` are: a folder beside it."""
    return lock_file.with_name(lock_file.name + ".offers")


@dataclass
class LockedFile:
    """A file in a table's queue folder that a live task holds locked (an offer, or an arrival:
    :mod:`airflow_iceberg_dml.group_arrival`): written whole and locked before it appears under its name,
    so it is never taken for a dead task's (:func:`alive`); the lock lasts until it is taken down."""

    folder: Path
    name: str = field(default_factory=lambda: uuid.uuid4().hex)
    _handle: Any = None
    suffix: ClassVar[str] = ""

    @property
    def path(self) -> Path:
        return self.folder / f"{self.name}{self.suffix}"

    def put_up(self, text: str = "") -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with suppress(PermissionError):
            os.chmod(self.folder, 0o1777)
        staging = self.folder / f".{self.name}.tmp"
        handle = staging.open("w")
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        handle.write(text)
        handle.flush()
        os.replace(staging, self.path)
        self._handle = handle

    def take_down(self, *others: Path) -> None:
        """Remove the file (and ``others`` beside it); the lock goes with the file handle."""
        for path in (self.path, *others):
            with suppress(FileNotFoundError):
                path.unlink()
        if self._handle is not None:
            self._handle.close()
            self._handle = None


@dataclass
class Offer(LockedFile):
    """One waiting task's change, on offer to the task whose turn it is."""

    suffix: ClassVar[str] = ".json"

    @property
    def claimed_path(self) -> Path:
        return self.folder / f"{self.name}.claimed"

    @property
    def settled_path(self) -> Path:
        return self.folder / f"{self.name}.settled"

    def post(self, offer: GroupOffer) -> None:
        """Put the offer up (:meth:`LockedFile.put_up`)."""
        member = offer.member
        entry = {
            "key": offer.key,
            "mix": offer.mix,
            "run_key": member.run_key.group_entry(0),
            "where": member.where,
            "kind": member.kind.value if member.kind else None,
            "assignments": dict(member.assignments),
            "change": member.change,
        }
        self.put_up(json.dumps(entry))

    def claimed(self) -> bool:
        """Whether a task whose turn it was took this change into its job (ask once the turn is ours, or
        once :meth:`settled`)."""
        return self.claimed_path.exists() or self.settled_path.exists()

    def settled(self) -> bool:
        """Whether the job of the task that claimed this change has ended well (its commit, when it
        applied the change, is in the table): no need to wait for a turn to find out."""
        return self.settled_path.exists()

    def unmatched_at(self) -> int | None:
        """The snapshot at which the job that settled this change found no row matching it; None when it
        applied the change, left it out for another reason, or has not settled it."""
        try:
            offer = json.loads(self.settled_path.read_text())
        except (OSError, ValueError):
            return None
        snapshot_id = offer.get(UNMATCHED_AT) if isinstance(offer, dict) else None
        return int(snapshot_id) if snapshot_id is not None else None

    def withdraw(self) -> None:
        """Take the offer down, claimed or not."""
        self.take_down(self.claimed_path, self.settled_path)


def claim(
    folder: Path, key: str, limit: int = MAX_GROUP - 1, *, mixing: GroupOffer | None = None
) -> list[GroupMember]:
    """The changes on offer in ``folder`` that share ``key``, at most ``limit``, oldest first; each is
    marked claimed. Call it only while holding the table's turn. Offers of dead tasks are removed.

    ``mixing``, the claiming task's own offer with its mix key, also takes changes of the other kind
    that share that key (:class:`_Mix` says which).
    """
    if not folder.is_dir():
        return []
    _sweep(folder)
    offers = sorted(folder.glob("*.json"), key=_age)
    mix = _Mix(mixing) if mixing is not None and mixing.mix is not None else None
    members: list[GroupMember] = []
    for path in offers:
        if len(members) >= limit:
            break
        read = _live_offer(path)
        if read is None:
            continue
        offer, member = read
        # Mixing, a change of the claiming task's kind joins only when it could join by a mix key too:
        # the group may become one MERGE (a change with a subquery has none: see group_keys.mix_key).
        same = offer["key"] == key and (mix is None or (offer.get("mix") == mix.key and mix.fits(member)))
        if not same and (mix is None or not mix.takes(offer, member)):
            continue
        with suppress(FileNotFoundError):  # withdrawn meanwhile: its task stopped waiting
            os.replace(path, path.with_suffix(".claimed"))
            members.append(member)
            if mix is not None:
                mix.add(offer, member)
    return members


class _Mix:
    """Which changes of the other kind join a group: those of the same mix key, every UPDATE of one
    ``set`` (the first one's), and no DELETE whose predicate reads a column the UPDATEs set. Applied in
    one MERGE, each change then matches the rows it would match with the UPDATEs applied first, and
    the rows of every change are as its task counted them (the job checks again)."""

    def __init__(self, own: GroupOffer) -> None:
        self.key = own.mix
        self.keys: dict[JobKind | None, str] = {}
        self.sets: set[str] = set()
        self.deletes: list[str] = []
        self.add({"key": own.key}, own.member)

    def takes(self, offer: dict[str, Any], member: GroupMember) -> bool:
        """Whether the change joins by its mix key."""
        same_set = self.keys.get(member.kind, offer["key"]) == offer["key"]
        return offer.get("mix") == self.key and same_set and self.fits(member)

    def fits(self, member: GroupMember) -> bool:
        """Whether no DELETE predicate reads a column set, the change's own included."""
        if member.kind is JobKind.UPDATE:
            return not any(reads_any(where, member.assignments) for where in self.deletes)
        return not reads_any(member.where, self.sets)

    def add(self, offer: dict[str, Any], member: GroupMember) -> None:
        self.keys.setdefault(member.kind, offer["key"])
        self.sets.update(member.assignments)
        if member.kind is JobKind.DELETE:
            self.deletes.append(member.where)


def settle(folder: Path, members: list[GroupMember], record: JobRecord | None) -> None:
    """Tell the tasks whose changes ``members`` are that the claiming job ended well, as its ``record``
    says (call it while holding the turn). When it committed, their claimed offers are marked settled,
    and they stop waiting for a turn. The offer of a change the job found matching no row is settled
    too, whether the job committed or not, and says at which snapshot (:meth:`Offer.unmatched_at`).
    When the job committed nothing (no change it counted matched a row), or ran remotely and reports
    nothing, the other offers go back on offer, for the next task whose turn it is to claim."""
    committed = record is not None and record.outcome is Outcome.COMMITTED
    unmatched = unmatched_changes(record) if record is not None else {}
    wanted = {member.run_key for member in members}
    for path in folder.glob("*.claimed"):
        read = _read(path)
        if read is None or read[1].run_key not in wanted:
            continue
        with suppress(FileNotFoundError):  # withdrawn meanwhile: its task stopped waiting
            if read[1].run_key in unmatched:
                with path.open("r+") as offer:  # its task reads it once it is settled, below
                    offer.write(json.dumps({**read[0], UNMATCHED_AT: unmatched[read[1].run_key]}))
                    offer.truncate()
            settled = committed or read[1].run_key in unmatched
            os.replace(path, path.with_suffix(".settled" if settled else ".json"))


def unmatched_changes(record: JobRecord) -> dict[RunKey, int]:
    """The claimed changes a job found matching no row, and the snapshot it counted them at."""
    found = record.details.get(UNMATCHED) or {}
    return {RunKey.of_group_entry(entry): int(found["snapshot_id"]) for entry in found.get("run_keys", [])}


def _sweep(folder: Path) -> None:
    """Remove what dead tasks left: a claimed offer whose task was killed while it waited, and a staging
    file whose poster was killed before it put the offer up (older than a minute: a live poster locks
    its staging file just after creating it). A live task holds the lock of either file."""
    stale = [p for p in folder.glob(".*.tmp") if _age(p) < time.time() - 60]
    leftovers = [*folder.glob("*.claimed"), *folder.glob("*.settled"), *stale]
    for path in leftovers:
        alive(path)


def alive(path: Path) -> bool:
    """Whether a live process holds the lock of the file at ``path``; a dead one's file is removed."""
    if held(path):
        return True
    with suppress(FileNotFoundError):
        path.unlink()
    return False


def held(path: Path) -> bool:
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


def _live_offer(path: Path) -> tuple[dict[str, Any], GroupMember] | None:
    """The offer at ``path`` and its change when its task still waits; a dead task's offer (its lock
    free) is removed."""
    if not alive(path):  # the task that offered it is gone
        return None
    return _read(path)


def _read(path: Path) -> tuple[dict[str, Any], GroupMember] | None:
    """The offer at ``path`` and its change (None: unreadable, or gone)."""
    try:
        offer = json.loads(path.read_text())
        run_key = RunKey.of_group_entry(offer["run_key"])
        kind = JobKind(offer["kind"]) if offer.get("kind") else None
        assignments = {
            str(column): str(value) for column, value in dict(offer.get("assignments") or {}).items()
        }
        change = offer.get("change")
        member = GroupMember(run_key, str(offer["where"]), kind, assignments, change and str(change))
        return offer, member
    except FileNotFoundError:  # withdrawn meanwhile: its task stopped waiting
        return None
    except (ValueError, KeyError, TypeError):
        return None
