"""Keep a task's output open until its process has exited, so that Airflow's supervisor frees its slot.

Airflow 3's task supervisor (task SDK 1.3) reads a task process's stdout, stderr, log channel and
requests through sockets. Each time it wakes it asks whether the process has exited (``waitpid`` without
waiting); once every socket has reached end-of-file it waits in ``select`` with no socket left, for
``[workers] min_heartbeat_interval`` (5 s by default), before it asks again. The kernel closes an exiting
process's files before its parent can collect it, so a supervisor that wakes at the last end-of-file can
find the process not yet exited and sleep the whole interval. Meanwhile the executor's slot stays taken
and the scheduler does not learn that the task finished. In two backfills at ``--max-active-runs 8``
without the watcher, 22 and 30 of 60 DML tasks lost about 5.1 s that way; no-op tasks, 4 to 18 in 60
(docs/benchmarks.md, "A task's slot held after its end").

:func:`hold_output_until_exit` starts a small watcher process that inherits the task's stdout and stderr
and exits when the task process has exited: it waits on a pidfd, which becomes readable only once the
process can be collected. The supervisor's last end-of-file then comes after the exit, and its check
finds the process gone. It does so only where the process's stdout is a Unix socket whose peer is its
parent (Airflow's supervisor), on Linux 5.3 or later; anywhere else (``dag.test()``, a terminal) it
starts nothing. The plugin's listener (``plugin.py``) calls it when one of the package's tasks starts
running; ``[iceberg_dml] hold_task_output_until_exit = False`` turns it off.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import subprocess
import sys
from typing import Any

log = logging.getLogger(__name__)

#: The watcher: wait until the process named by the first argument has exited, then exit. A process that
#: is already gone (or a kernel without pidfds) makes it exit at once.
WATCHER = (
    "import os, select, sys\n"
    "try:\n"
    "    pidfd = os.pidfd_open(int(sys.argv[1]))\n"
    "except OSError:\n"
    "    sys.exit(0)\n"
    "select.select([pidfd], [], [])\n"
)

CONFIG_OPTION = ("iceberg_dml", "hold_task_output_until_exit")

_state: dict[str, Any] = {"watcher": None}


def enabled() -> bool:
    """Whether the configuration asks for the watcher (on by default)."""
    from airflow.configuration import conf

    return conf.getboolean(*CONFIG_OPTION, fallback=True)


def output_read_by_parent(fd: int = 1) -> bool:
    """Whether ``fd`` is a Unix socket whose peer is this process's parent (how Airflow's supervisor
    reads a task's output)."""
    try:
        with socket.socket(fileno=os.dup(fd)) as output:
            if output.family != socket.AF_UNIX:
                return False
            credentials = output.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return False
    peer_pid: int = struct.unpack("3i", credentials)[0]
    return peer_pid == os.getppid()


def hold_output_until_exit() -> bool:
    """Start the watcher, once per process, when this process's output is read by its parent through a
    socket; whether a watcher runs."""
    if _state["watcher"] is not None:
        return True
    if not hasattr(os, "pidfd_open") or not output_read_by_parent():
        return False
    try:
        _state["watcher"] = subprocess.Popen(
            # -I -S: no environment, no site packages: a bare interpreter starts in milliseconds.
            [sys.executable, "-I", "-S", "-c", WATCHER, str(os.getpid())],
            stdin=subprocess.DEVNULL,  # stdout and stderr inherited: what it holds open
            close_fds=True,
        )
    except OSError as error:  # no interpreter to start (an embedded one): the task runs as before
        log.warning("airflow-iceberg-dml: could not start the task's exit watcher: %s", error)
        return False
    return True
