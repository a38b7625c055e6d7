"""Tasks on their way to a table's turn: the task whose turn it is waits a moment for their offers.

Tasks of a backfill start in waves: a commit that applied many waiting changes ends as many tasks at
once, and the scheduler fills the executor slots they free with the next runs' tasks within a second or
two. A task of the wave takes a few tenths of a second (its DAG file, the catalog, its plan) before its
change is on offer (:mod:`airflow_iceberg_dml.group_commit`); a task that gets the turn in that time
would commit its change alone, for a whole job's time, while the wave waits behind it. So a DML task
that can be grouped says it is arriving as soon as its execution starts (an :class:`Arrival`), until its
offer is up, and the task whose turn it is waits, at most :data:`ARRIVAL_WAIT_S`, while any task of the
table is arriving, then claims the offers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from airflow_iceberg_dml.group_commit import LockedFile, alive

if TYPE_CHECKING:
    from pathlib import Path

#: The longest the task whose turn it is waits for the tasks of the table that are still arriving.
ARRIVAL_WAIT_S = 0.5


@dataclass
class Arrival(LockedFile):
    """A task of the table that has started and not yet put its change on offer (it is planning): a file
    its process locks, as an offer's, taken down once the offer is up or the task has ended. Tasks start in
    waves (a commit that applied many changes frees as many executor slots at once), and the task whose
    turn it is waits a moment for the wave's offers (:func:`wait_for_arrivals`) rather than commit alone."""

    suffix: ClassVar[str] = ".arriving"


def wait_for_arrivals(
    folder: Path, bound_s: float = ARRIVAL_WAIT_S, poll_s: float = 0.02
) -> tuple[float, int]:
    """While tasks of the table are arriving (:class:`Arrival`), wait, at most ``bound_s``; returns the
    seconds waited and the most tasks seen arriving. A dead task's arrival is removed."""
    started = time.monotonic()
    most = 0
    while folder.is_dir() and time.monotonic() - started < bound_s:
        live = [path for path in folder.glob("*.arriving") if alive(path)]
        most = max(most, len(live))
        if not live:
            break
        time.sleep(poll_s)
    return time.monotonic() - started, most
