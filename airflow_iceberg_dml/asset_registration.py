"""Tasks that emit an event for one asset report their success one at a time on a worker host.

Airflow registers a task's asset events while it records the task's success (the Execution API's
state update, one database transaction). An event emitted through an asset alias creates the asset
when Airflow does not know it yet, and links the alias to it the first time. Neither insert is guarded
against a concurrent one (Airflow 3.3): when two tasks report such a first event at the same moment,
both insert the row, and the API server fails the one that loses the race (a unique violation: "Error
updating Task Instance state. Setting the task to failed."), although its change committed. The
operators emit through an alias (so that a change that committed nothing emits nothing), and the
tasks of one table tend to end together (a group commit settles several at once), so a backfill's
first runs met this.

So a task about to emit takes its turn on each asset it emits for, the moment its work is done, and
keeps it until Airflow has recorded its success: the turn is given back by a success (or failure)
callback, which the task runner calls once the state update has returned, or by the kernel when the
task's process ends. The next task of the asset on the host then finds the link in place. Only the
assets its alias does not resolve to yet need the turn (the operator asks Airflow first, with
:func:`airflow_iceberg_dml.compat.assets_of_alias`): once linked, reports cannot race, and the tasks of
a group commit, settled together, report at once instead of one after another. A task
waits at most ``REPORT_WAIT_S`` in all and then reports anyway (a process that ran a task without
its callbacks, such as a test calling ``execute``, keeps its turn until it exits). The turn is the
process's: tasks run in threads of one process share it.
"""

from __future__ import annotations

import fcntl
import hashlib
import random
import threading
import time
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.table_lock import Log, lock_folder, open_lock_file, try_lock

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path
    from typing import TextIO

#: The longest a task waits, in all, for the other tasks of its assets to report.
REPORT_WAIT_S = 30.0
#: The turns this process holds: a task run in-process after another keeps what that one took.
_HELD: dict[Path, TextIO] = {}
#: The turn is the process's: tasks run in threads of one process (``execute`` called by a benchmark
#: or a test) take it one at a time, so that one never waits for a turn its own process holds.
_TAKING = threading.Lock()


def report_lock_path(asset_uri: str) -> Path:
    """The file whose lock is the turn of the asset at ``asset_uri``, beside the tables' locks."""
    return lock_folder() / f"asset.{hashlib.sha256(asset_uri.encode()).hexdigest()[:24]}.report.lock"


def take_report_turn(
    asset_uris: Iterable[str], log: Log, *, wait_s: float = REPORT_WAIT_S
) -> Callable[[], None]:
    """Hold the turns of ``asset_uris`` (in one order, so two tasks never wait for each other) until
    the returned function is called; waits at most ``wait_s`` in all, then goes on without the rest."""
    started = time.monotonic()
    taken: list[Path] = []
    with _TAKING:
        for path in sorted({report_lock_path(uri) for uri in asset_uris}):
            if path in _HELD:
                continue
            handle = open_lock_file(path)
            while not try_lock(handle.fileno()):
                if time.monotonic() - started >= wait_s:
                    handle.close()
                    log.info(
                        "Reporting without the turn on %s: the task holding it has not reported.", path.name
                    )
                    return lambda: _give_back(taken)
                time.sleep(0.05 * random.uniform(0.5, 1.5))
            _HELD[path] = handle
            taken.append(path)
    if (waited := time.monotonic() - started) >= 0.5:
        log.info("Waited %.1f s for the tasks before this one to report their events for its tables.", waited)
    return lambda: _give_back(taken)


def _give_back(paths: list[Path]) -> None:
    for path in paths:
        if (handle := _HELD.pop(path, None)) is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            handle.close()
    paths.clear()


def give_back_after_report(operator: Any, give_back: Callable[[], None]) -> None:
    """Call ``give_back`` once ``operator``'s task has reported its state: on success or failure, after
    the user's callbacks (an earlier run's give-back, when the operator runs again in-process, is gone)."""
    for kind in ("on_success_callback", "on_failure_callback"):
        callbacks = getattr(operator, kind) or []
        callbacks = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
        setattr(
            operator, kind, [*(c for c in callbacks if not isinstance(c, _GiveBack)), _GiveBack(give_back)]
        )


class _GiveBack:
    """A task callback that gives the turns back."""

    def __init__(self, give_back: Callable[[], None]) -> None:
        self.give_back = give_back

    def __call__(self, context: Any) -> None:
        self.give_back()
