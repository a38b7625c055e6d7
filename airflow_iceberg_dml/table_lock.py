"""One writer per table on a worker host: the tasks that change one table take turns.

Iceberg's commits are optimistic. Two row-level changes on one table that started from the same
snapshot conflict whenever they touch a common data file, even when their rows differ (a concurrent
writer's delete file "can apply to records matching" the other's predicate). On a table whose files
mix the changed keys, every concurrent change conflicts with every other, and each re-plan re-runs
the whole change only to collide again: eight writers on one table exhaust any sensible retry budget.

So the operators take turns per table for their Spark jobs: an exclusive ``flock`` on a file named
after the catalog and the table, in a folder every task on the host shares. A waiting task polls about
every 50 ms, with a little jitter (a poll is two system calls; on a busy table the next task takes the
turn, and the tasks a job applied learn it, within tens of milliseconds), and says in its log, every
``report_every`` seconds, whom it waits for. The lock belongs to the task's process: when that process
dies, however it dies, the kernel releases it, so a killed task never leaves a table locked. Turns cost
little: concurrent changes of one table cannot commit in parallel anyway (Iceberg serializes commits),
and without turns each loser pays for its whole change again (``bench/bench_writers.py``: about as
fast as racing at 8 writers, 1.45x and 1.76x at 16 and 32, and no writer lost where racing lost 1, 5
and 14).

Across worker hosts the file is not shared; an Airflow pool of one slot per table gives the same
turns there (docs/reliability.md), and the job's own conflict re-plans stay as the last resort.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import random
import re
import socket
import tempfile
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

#: Where the lock files are; every task on the host must see the same folder.
LOCK_FOLDER_ENV = "AIRFLOW_ICEBERG_DML_LOCK_FOLDER"
DEFAULT_LOCK_FOLDER = Path(tempfile.gettempdir()) / "airflow-iceberg-dml-table-locks"
#: A task that waited at least this long for its turn says how long in its log (a shorter wait is none).
MIN_WAIT_LOGGED_S = 0.01


class Log(Protocol):
    """What the turn says in the task log (Airflow's task logger, or ``logging``'s)."""

    def info(self, event: Any, *args: Any, **kw: Any) -> Any: ...


def lock_folder() -> Path:
    """``$AIRFLOW_ICEBERG_DML_LOCK_FOLDER``, else ``airflow-iceberg-dml-table-locks`` in the temp folder."""
    configured = os.environ.get(LOCK_FOLDER_ENV)
    return Path(configured) if configured else DEFAULT_LOCK_FOLDER


def lock_path(catalog_uri: str, table: str, folder: Path | None = None) -> Path:
    """The lock file of ``table`` in the catalog at ``catalog_uri``: one per table, whatever its
    connection is named (two connections to one catalog share it)."""
    digest = hashlib.sha256(f"{catalog_uri}\n{table}".encode()).hexdigest()[:24]
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", table)
    return (folder or lock_folder()) / f"{readable}.{digest}.lock"


@contextmanager
def table_turn(
    path: Path,
    holder: str,
    log: Log,
    *,
    poll_s: float = 0.05,
    report_every: float = 30.0,
    give_up: Callable[[], bool] | None = None,
) -> Iterator[float | None]:
    """Hold the table's lock at ``path`` for the ``with`` block; yields the seconds waited for it, or
    None when ``give_up()`` (asked while waiting) said the turn is no longer needed: the block then
    runs without the lock.

    ``holder`` (who takes it: the run key) is written into the file for the tasks that wait.
    """
    started = time.monotonic()
    with open_lock_file(path) as handle:
        reported = started
        while not try_lock(handle.fileno()):
            if give_up is not None and give_up():
                yield None
                return
            now = time.monotonic()
            if now - reported >= report_every:
                reported = now
                log.info(
                    "Waiting %.0f s for the turn on %s, held by %s.", now - started, path.name, _held_by(path)
                )
            time.sleep(poll_s * random.uniform(0.5, 1.5))
        waited = time.monotonic() - started
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{holder} (pid {os.getpid()} on {socket.gethostname()})\n")
            handle.flush()
            yield waited
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def open_lock_file(path: Path) -> TextIO:
    """The lock file at ``path``, opened (and made, with its folder, usable by every user of the host)."""
    if not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        _share(path.parent, 0o1777)
    handle = path.open("a+")
    _share(path, 0o666)
    return handle


def try_lock(fd: int) -> bool:
    """Take the exclusive ``flock`` of ``fd`` if nothing else holds it; whether it was taken."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _held_by(path: Path) -> str:
    try:
        return path.read_text().strip() or "another task"
    except OSError:
        return "another task"


def _share(path: Path, mode: int) -> None:
    """Let tasks of other users on the host take turns too; a file of another owner is left as it is."""
    with suppress(PermissionError):
        os.chmod(path, mode)
