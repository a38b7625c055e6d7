"""Where a backfill's CPU goes: the machine's, and each process's of the deployment, from start to stop.

A process's CPU time here is its own (user + system) and, where it has waited for children that ended,
theirs (Linux's ``cutime`` and ``cstime``): a LocalExecutor worker supervises each task it runs in a
forked child and waits for it, so the task processes that ended during the backfill count in their
worker's children, and those still running count as processes of their own. The roles:

- ``engine``: the warm engine's server (the supervisor and the JVM under it);
- ``scheduler``: the scheduler's own process (its loop, the executor's queue);
- ``supervisors``: the scheduler's children, the LocalExecutor's workers, each supervising its tasks
  (the task's log lines, heartbeats, its requests to the API server on its behalf);
- ``tasks``: the task processes (the DAG file's parse, the operator's work);
- ``api_server``, ``dag_processor``: those processes and their children;
- ``postgres``: the metadata database's server and its backends;
- ``other``: the rest of the machine (this benchmark's own polling, the kernel, anything else running).

The engine's server's CPU is also split by the JVM threads that spent it (:data:`SERVER_PARTS`: Spark's
tasks, the JIT compilers, garbage collection, the driver), its threads read every second
(:class:`ThreadCpu`): a thread that ends between two readings keeps what it had spent at the last. The
readings' own CPU (about 5 ms per 40 threads read) counts in ``other``, a few milliseconds per change.
"""

from __future__ import annotations

import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

ROLE_LABELS = {
    "engine": "warm engine's server",
    "scheduler": "scheduler",
    "supervisors": "executor workers",
    "tasks": "task processes",
    "api_server": "API server",
    "dag_processor": "DAG processor",
    "postgres": "PostgreSQL",
    "other": "other",
}
ROLES = tuple(ROLE_LABELS)
#: The JVM's threads that are not the driver's, by the start of their names (Linux keeps 15 characters).
THREAD_KINDS = {
    "tasks": ("Executor task l",),
    "jit": ("C1 CompilerThre", "C2 CompilerThre"),
    "gc": ("GC Thread", "G1 ", "VM Thread"),
}
#: Where the server's CPU went: those kinds, then the driver (every other thread, and the ones gone).
SERVER_PARTS = (*THREAD_KINDS, "driver")
PART_LABELS = {
    "tasks": "Spark's tasks (reading and writing the files)",
    "jit": "the JIT compilers (C1 and C2)",
    "gc": "garbage collection (and the VM thread's safepoints)",
    "driver": "the driver (each statement's parsing, analysis, planning, scheduling, commit; RPCs)",
}
#: The same, short, for a table's column headers.
PART_HEADERS = {
    "tasks": "Spark's tasks",
    "jit": "JIT compilers",
    "gc": "garbage collection",
    "driver": "the driver",
}


def _own(process: Any) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _ended_children(process: Any) -> float:
    times = process.cpu_times()
    return float(getattr(times, "children_user", 0.0) + getattr(times, "children_system", 0.0))


def _tree(pid: int | None) -> float:
    """A process's CPU, its live descendants' and the ended children it waited for; 0 when gone."""
    import psutil

    total = 0.0
    if pid is None:
        return total
    with suppress(psutil.Error):
        root = psutil.Process(pid)
        for process in [root, *root.children(recursive=True)]:
            with suppress(psutil.Error):
                total += _own(process) + _ended_children(process)
    return total


def _scheduler(pid: int | None) -> dict[str, float]:
    """The scheduler's CPU split into its own, its workers' (supervisors) and their tasks'."""
    import psutil

    split = {"scheduler": 0.0, "supervisors": 0.0, "tasks": 0.0}
    if pid is None:
        return split
    with suppress(psutil.Error):
        root = psutil.Process(pid)
        split["scheduler"] = _own(root)
        split["supervisors"] = _ended_children(root)  # a worker that ended, with what it waited for
        for worker in root.children():
            with suppress(psutil.Error):
                split["supervisors"] += _own(worker)
                split["tasks"] += _ended_children(worker)
                for task in worker.children(recursive=True):
                    with suppress(psutil.Error):
                        split["tasks"] += _own(task) + _ended_children(task)
    return split


def thread_cpu_seconds(pid: int) -> dict[int, tuple[str, float]]:
    """Thread id to (kind in THREAD_KINDS, or "driver"; CPU seconds) for each live thread of process
    ``pid`` and its descendants: psutil's times, and the thread's name from Linux's ``/proc``."""
    import psutil

    threads: dict[int, tuple[str, float]] = {}
    with suppress(psutil.Error):
        root = psutil.Process(pid)
        for process in [root, *root.children(recursive=True)]:
            with suppress(psutil.Error):
                for thread in process.threads():
                    with suppress(OSError):  # gone since
                        name = Path(f"/proc/{process.pid}/task/{thread.id}/comm").read_text().strip()
                        kind = next(
                            (k for k, starts in THREAD_KINDS.items() if name.startswith(starts)), "driver"
                        )
                        threads[thread.id] = (kind, thread.user_time + thread.system_time)
    return threads


def server_parts(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], total: float
) -> dict[str, float]:
    """``total`` CPU seconds split by SERVER_PARTS between two readings of :func:`thread_cpu_seconds`: a
    thread born between them counts from zero; what the threads gone meanwhile spent is the driver's
    (the server's operations run each on a thread of its own)."""
    parts = dict.fromkeys(THREAD_KINDS, 0.0)
    for thread, (kind, seconds) in after.items():
        if kind in parts:
            parts[kind] += seconds - before.get(thread, (kind, 0.0))[1]
    return {**parts, "driver": total - sum(parts.values())}


class ThreadCpu:
    """The threads of process ``pid`` (and its descendants), read by :func:`thread_cpu_seconds` now and
    every ``every_s`` seconds on a thread of its own until :meth:`stop`: the first reading and each
    thread's last, so that threads gone before the stop still count what they spent up to a reading."""

    def __init__(self, pid: int, every_s: float = 1.0) -> None:
        self._pid, self._every_s = pid, every_s
        self.first = thread_cpu_seconds(pid)
        self.last = dict(self.first)
        self._stopped = threading.Event()
        self._reader = threading.Thread(target=self._read, name="thread-cpu", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._stopped.wait(self._every_s):
            self.last.update(thread_cpu_seconds(self._pid))

    def stop(self, total: float) -> dict[str, float]:
        """``total`` (the process tree's CPU seconds since the first reading) split by SERVER_PARTS."""
        self._stopped.set()
        self._reader.join()
        self.last.update(thread_cpu_seconds(self._pid))
        return server_parts(self.first, self.last, total)


def postmaster_pid(port: int) -> int | None:
    """The PostgreSQL server listening on ``port`` (its postmaster: a ``postgres`` process whose
    command line names the port), or None."""
    import psutil

    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = process.info["cmdline"] or []
        if process.info["name"] == "postgres" and f"-p {port}" in " ".join(cmdline):
            return int(process.pid)
    return None


class CpuUse:
    """The machine's CPU time in use (every process) and each role's (module docstring), from
    construction to :meth:`stop`.

    :param pids: The root process of each role that has one (``engine``, ``scheduler``, ``api_server``,
        ``dag_processor``, ``postgres``); a missing or None role counts nothing.
    """

    def __init__(self, pids: dict[str, int | None]) -> None:
        import psutil

        self._psutil = psutil
        self._pids = pids
        engine = pids.get("engine")
        self._engine_threads = ThreadCpu(engine) if engine is not None else None
        self._began = (time.monotonic(), self._machine(), self._roles())

    def _machine(self) -> float:
        times = self._psutil.cpu_times()
        return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))

    def _roles(self) -> dict[str, float]:
        roles = {
            role: _tree(self._pids.get(role))
            for role in ("engine", "api_server", "dag_processor", "postgres")
        }
        roles.update(_scheduler(self._pids.get("scheduler")))
        return roles

    def stop(self) -> dict[str, Any]:
        """``machine_cpu_share`` and ``engine_cpu_share`` (1.0: every core busy the whole time),
        ``cpu_seconds``: each role's CPU seconds (``machine`` for the whole), and with an engine,
        ``engine_cpu_seconds``: its CPU seconds by SERVER_PARTS."""
        wall, machine, roles = self._began
        capacity = (time.monotonic() - wall) * (self._psutil.cpu_count() or 1)
        used = self._machine() - machine
        now = self._roles()
        seconds = {role: max(0.0, now[role] - roles[role]) for role in now}
        seconds["other"] = max(0.0, used - sum(seconds.values()))
        seconds["machine"] = used
        parts = self._engine_threads.stop(seconds["engine"]) if self._engine_threads else None
        return {
            "machine_cpu_share": used / capacity,
            "engine_cpu_share": seconds["engine"] / capacity,
            "cpu_seconds": seconds,
            **({"engine_cpu_seconds": parts} if parts is not None else {}),
        }


def per_change(seconds: dict[str, float], changes: int) -> dict[str, float]:
    """Each role's CPU seconds per change, in the order of :data:`ROLES`."""
    return {role: seconds.get(role, 0.0) / max(changes, 1) for role in ROLES}
