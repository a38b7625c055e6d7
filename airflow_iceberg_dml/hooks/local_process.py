"""A spark-submit process on this machine, named so that a later try can find it again."""

from __future__ import annotations

import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import JsonValue

#: Every job's private folder (spec, properties file, record) starts with this.
JOB_FOLDER_PREFIX = "iceberg-dml-"
_PROC = Path("/proc")


def _boot_id() -> str:
    return (_PROC / "sys/kernel/random/boot_id").read_text().strip()


def _process_state(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) of a process, or None when it is gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (command) state ppid ...": the command may hold spaces and parentheses.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


@dataclass(frozen=True)
class LocalProcess:
    """A spark-submit process on one machine, named so that a later try can tell it is the same one.

    The pid alone is not enough (pids are reused): the process's start time and the machine's boot id
    make the name unique. ``folder`` is the job's private folder (spec, properties file, record).
    """

    host: str
    boot_id: str
    pid: int
    start_ticks: int
    folder: str

    @classmethod
    def of(cls, pid: int, folder: Path) -> LocalProcess | None:
        """Name a running process; None where the machine has no ``/proc`` (re-attach is then off)."""
        state = _process_state(pid)
        if state is None:
            return None
        return cls(socket.gethostname(), _boot_id(), pid, state[1], str(folder))

    @classmethod
    def from_json(cls, value: JsonValue) -> LocalProcess | None:
        """Read back what :meth:`to_json` stored; None for anything else."""
        try:
            return cls(**value) if isinstance(value, dict) else None  # type: ignore[arg-type]
        except TypeError:
            return None

    def to_json(self) -> dict[str, JsonValue]:
        return dict(asdict(self))

    def is_here(self) -> bool:
        """Whether this is the machine (and the same boot) the process ran on."""
        return _PROC.is_dir() and self.host == socket.gethostname() and self.boot_id == _boot_id()

    def is_running(self) -> bool:
        state = _process_state(self.pid)
        return state is not None and state[1] == self.start_ticks and state[0] != "Z"

    def job_folder(self) -> Path | None:
        """The job's own folder, when the stored path still looks like one (it is about to be removed)."""
        folder = Path(self.folder)
        is_job_folder = folder.name.startswith(JOB_FOLDER_PREFIX) and (folder / "spec.json").is_file()
        return folder if folder.is_dir() and is_job_folder else None
