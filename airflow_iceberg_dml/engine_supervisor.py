"""The local engine's supervisor: it starts the Spark Connect server and starts it again when it dies.

``engine.start`` runs ``python -m airflow_iceberg_dml.engine_supervisor <engine folder>`` detached;
the supervisor runs the server command that ``start`` wrote to ``server.command.json`` as its child.
When the server exits while nobody asked it to stop (killed, out of memory, crashed), the supervisor
starts it again on the same port after a second; a server that exits before it accepts connections
(a bad setting, the port taken) is started again after a pause that doubles (up to a minute), and
after ``MAX_FAILED_STARTS`` such starts in a row the supervisor gives up. After a restart it runs the
warm-up's first part, so that the next task does not pay for loading Iceberg's classes; not its rounds,
which would take the CPU from the tasks Airflow retries then (:mod:`.engine_warmup`). Tasks need nothing: each
job opens a new session (no channel or session is kept between jobs), so the first task after the
restart simply finds the server again.

``server.json`` says which server runs now (pid, start time, how many restarts so far), for
``status`` and for whoever needs the server's own pid; ``supervisor.log`` says what happened.
SIGTERM (``engine.stop``) stops the server, then the supervisor.

The server's JVM keeps its temporary files in ``tmp/`` beside them (its ``java.io.tmpdir``: Spark's
scratch folders unless ``spark.local.dir`` says otherwise, the SQLite driver's native library, the
sessions' artifacts). A server that stops cleans them up; one killed outright cannot, and the folder
is emptied before the next server starts, so that a server that dies and restarts for hours leaves
nothing behind in the system's temporary folder.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

COMMAND_FILE = "server.command.json"
SERVER_FILE = "server.json"
LOG_FILE = "supervisor.log"
TMP_DIR = "tmp"
#: How the log says that the warm-up of a (re)started server ended.
WARMED, WARM_UP_FAILED = "warmed up server", "warm-up failed for server"
#: Starts in a row that end before the server accepts connections (a bad setting, a port taken)
#: after which the supervisor gives up.
MAX_FAILED_STARTS = 8
MAX_PAUSE_S = 60.0


@dataclass(frozen=True)
class ServerProcess:
    """The server the supervisor runs now."""

    pid: int
    started_at: float
    restarts: int


def read_server(folder: Path) -> ServerProcess | None:
    path = folder / SERVER_FILE
    try:
        return ServerProcess(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def pause_after(failed_starts: int) -> float:
    """Seconds to wait before starting again: 1 s after a server that served, then doubling with each
    start in a row that failed before serving, up to a minute."""
    return min(MAX_PAUSE_S, 2.0**failed_starts)


def last_words(folder: Path) -> str | None:
    """The supervisor log's last line (why it stopped restarting the server, when it has)."""
    path = folder / LOG_FILE
    lines = path.read_text().splitlines() if path.is_file() else []
    return lines[-1] if lines else None


def fresh_tmp(folder: Path) -> Path:
    """The server's temporary folder, emptied of what a server before it left (none runs now)."""
    tmp = folder / TMP_DIR
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


class Supervisor:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        spec: dict[str, Any] = json.loads((folder / COMMAND_FILE).read_text())
        self.command: list[str] = spec["command"]
        self.server_log = Path(spec["log_path"])
        self.stopping = False
        self.child: subprocess.Popen[bytes] | None = None

    def say(self, message: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with (self.folder / LOG_FILE).open("a") as log:
            log.write(f"{stamp} {message}\n")

    def stop(self, *_: object) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()

    def spawn(self, restarts: int) -> subprocess.Popen[bytes]:
        if restarts:  # the server before it is dead: what it left in its folder goes
            fresh_tmp(self.folder)
        with self.server_log.open("ab") as log:
            child = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        state = ServerProcess(child.pid, time.time(), restarts)
        (self.folder / SERVER_FILE).write_text(json.dumps(asdict(state)))
        self.say(
            f"server started, pid {child.pid} (restart {restarts})"
            if restarts
            else f"server started, pid {child.pid}"
        )
        return child

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        restarts = failed_starts = 0
        while True:
            started = time.monotonic()
            self.child = self.spawn(restarts)
            served = self._wait_until_serving(self.child)
            if served and restarts:
                threading.Thread(target=self._warm, args=(self.child.pid,), daemon=True).start()
            code = self.child.wait()
            if self.stopping:
                self.say(f"server stopped (exit {code}); supervisor exits")
                return 0
            failed_starts = 0 if served else failed_starts + 1
            if failed_starts >= MAX_FAILED_STARTS:
                self.say(f"server exited {failed_starts} times in a row before it served; giving up")
                return 1
            pause = pause_after(failed_starts)
            lived = time.monotonic() - started
            self.say(f"server died (exit {code}) after {lived:.0f} s; starting it again in {pause:.0f} s")
            deadline = time.monotonic() + pause
            while time.monotonic() < deadline and not self.stopping:
                time.sleep(0.2)
            if self.stopping:
                return 0
            restarts += 1

    def _wait_until_serving(self, child: subprocess.Popen[bytes]) -> bool:
        """Whether the server came to accept connections (False: it exited before, or a stop came)."""
        from airflow_iceberg_dml import engine

        state = engine.read_state(self.folder)
        while child.poll() is None and not self.stopping:
            if state is None:
                state = engine.read_state(self.folder)  # start() writes it once the first server listens
            elif engine.listens(child.pid, state.port):
                return True
            time.sleep(0.5)
        return False

    def _warm(self, pid: int) -> None:
        """Warm the new server up (a failed warm-up only costs the next task the time it would have saved)."""
        from airflow_iceberg_dml import engine, engine_warmup

        state = engine.read_state(self.folder)
        if state is None:
            return
        try:
            engine_warmup.warm_up(state, self.folder)
            self.say(f"{WARMED} pid {pid}")
        except Exception as error:  # noqa: BLE001 - the server runs; the warm-up was only a head start
            first_line = (str(error).splitlines() or [""])[0][:200]
            self.say(f"{WARM_UP_FAILED} pid {pid}: {type(error).__name__}: {first_line}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m airflow_iceberg_dml.engine_supervisor <engine folder>", file=sys.stderr)
        return 2
    return Supervisor(Path(args[0])).run()


if __name__ == "__main__":
    raise SystemExit(main())
