"""One read of a snapshot's manifests for the tasks of a host that report the table's health at once.

Every DELETE and UPDATE reports the table's health after its change (:mod:`airflow_iceberg_dml.health`),
which reads the head snapshot's manifests in the task's process, and a table's manifests grow by one or
two with each commit until a compaction rewrites them. A group commit
(:mod:`airflow_iceberg_dml.group_commit`) ends up to 32 tasks of one table at once, on the same
snapshot, and each would read all of them. A snapshot's manifests never change, so the first task
to read them writes the live files it found to a file beside the tables' locks, while it holds a lock
of that snapshot; the other tasks wait for the lock and read the file.

The files are short-lived and private: readable by their owner only (a partition's values can be
personal data), used within :data:`MAX_AGE_S` of being written, and removed after that by the next
task that writes one. Anything that goes wrong here (a full disk, a file another user owns) falls
back to reading the manifests.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from contextlib import suppress
from dataclasses import asdict
from typing import TYPE_CHECKING

from airflow_iceberg_dml.health_report import FileEntry, FileKind
from airflow_iceberg_dml.table_lock import lock_folder, open_lock_file, try_lock

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from pyiceberg.table import Table

#: How long after it was written a snapshot's file is used, and then kept at most.
MAX_AGE_S = 60.0
#: The longest a task waits for another to read the manifests before it reads them itself.
WAIT_S = 30.0
FOLDER = "manifest-entries"

Entries = tuple[list[FileEntry], int]


def shared_file_entries(table: Table, read: Callable[[Table], Entries]) -> Entries:
    """``read(table)`` (the live files of the head snapshot and its number of manifests), or what another
    task of this host read for the same snapshot within :data:`MAX_AGE_S`."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return read(table)
    folder = lock_folder() / FOLDER
    key = f"{table.metadata.table_uuid}.{snapshot.snapshot_id}"
    path = folder / f"{key}.{os.getuid()}.json"
    found = _load(path)
    if found is not None:
        return found
    try:
        lock = open_lock_file(folder / f"{key}.lock")
    except OSError:
        return read(table)
    with lock:
        deadline = time.monotonic() + WAIT_S
        while not try_lock(lock.fileno()) and time.monotonic() < deadline:
            time.sleep(0.01)
        found = _load(path)  # written while this task waited for the lock
        if found is not None:
            return found
        found = read(table)
        with suppress(OSError):
            _store(path, *found)
    with suppress(OSError):
        _sweep(folder)
    return found


def _load(path: Path) -> Entries | None:
    """The entries written to ``path`` within :data:`MAX_AGE_S`; None when there are none."""
    try:
        if time.time() - path.stat().st_mtime > MAX_AGE_S:
            return None
        stored = json.loads(path.read_text())
        entries = [FileEntry(**{**entry, "kind": FileKind(entry["kind"])}) for entry in stored["entries"]]
        return entries, int(stored["manifests"])
    except (OSError, ValueError, KeyError, TypeError):  # none, unreadable or of another version: read again
        return None


def _store(path: Path, entries: list[FileEntry], manifests: int) -> None:
    """Write ``path`` whole (under another name first), readable by its owner only."""
    staging = path.with_name(f".{uuid.uuid4().hex}.tmp")
    descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump({"manifests": manifests, "entries": [asdict(entry) for entry in entries]}, handle)
    os.replace(staging, path)


def _sweep(folder: Path) -> None:
    """Remove the files older than :data:`MAX_AGE_S` (another user's stay: the folder is sticky)."""
    oldest = time.time() - MAX_AGE_S
    for path in folder.iterdir():
        with suppress(OSError):
            if path.stat().st_mtime < oldest:
                path.unlink()
