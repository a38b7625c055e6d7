"""The engine waits for its own server's socket, not for any socket on its port.

When a server is killed, its port is free for anyone: another JVM's random listening port can take it
while the restarted server fails to bind. An open port then proves nothing; ``engine.start`` and the
supervisor ask whether the process they started (or a child of it, as spark-submit starts the JVM)
listens there. Plain Python listeners play the server and the process that took its port.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING

import pytest

from airflow_iceberg_dml import engine
from airflow_iceberg_dml.engine_supervisor import COMMAND_FILE, Supervisor
from tests.conftest import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

#: Listens on the port given, says so, then waits to be killed.
LISTENER = """
import socket, sys, time
server = socket.socket()
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen()
print("listening", flush=True)
time.sleep(600)
"""
#: A server that fails to bind (it exits 3 after a second), as one whose port was taken would.
FAILS_TO_BIND = [sys.executable, "-c", "import sys, time; time.sleep(1); sys.exit(3)"]


def _listen(port: int, *, through_shell: bool = False) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", LISTENER, str(port)]
    if through_shell:  # a child listens, not the process started (spark-submit runs the JVM as one)
        command = ["bash", "-c", f"{shlex.join(command)}; true"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "listening"
    return process


def _stop(process: subprocess.Popen[str]) -> None:
    """Kill the process and its children (its own process group)."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    if process.stdout is not None:
        process.stdout.close()


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process listens on (not the one a test starts as the server)."""
    port = free_port()
    impostor = _listen(port)
    try:
        yield port
    finally:
        _stop(impostor)


def test_listens_counts_the_process_and_its_children_only(taken_port: int) -> None:
    assert engine.port_open("127.0.0.1", taken_port)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    port = free_port()
    server = _listen(port, through_shell=True)
    try:
        assert not engine.listens(bystander.pid, taken_port)
        assert engine.listens(server.pid, port)
        assert not engine.listens(server.pid, taken_port)
    finally:
        bystander.kill()
        bystander.wait()
        _stop(server)
    assert not engine.listens(server.pid, port)  # gone: no process, no socket


def test_start_does_not_take_another_process_socket_for_its_server(taken_port: int, tmp_path: Path) -> None:
    server = subprocess.Popen(FAILS_TO_BIND)
    with pytest.raises(RuntimeError, match=r"exited \(3\)"):
        engine._wait_until_listening(server, taken_port, 60, tmp_path / "server.log")


def _supervisor(folder: Path, port: int) -> Supervisor:
    folder.mkdir()
    (folder / COMMAND_FILE).write_text(json.dumps({"command": [], "log_path": str(folder / "server.log")}))
    state = engine.EngineState(0, "127.0.0.1", port, "iceberg", 0.0, str(folder / "server.log"), True)
    (folder / engine._STATE_FILE).write_text(json.dumps(asdict(state)))
    return Supervisor(folder)


def test_supervisor_does_not_take_another_process_socket_for_its_server(
    taken_port: int, tmp_path: Path
) -> None:
    supervisor = _supervisor(tmp_path / "taken", taken_port)
    assert not supervisor._wait_until_serving(subprocess.Popen(FAILS_TO_BIND))

    port = free_port()
    supervisor = _supervisor(tmp_path / "own", port)
    server = _listen(port, through_shell=True)
    try:
        assert supervisor._wait_until_serving(server)  # type: ignore[arg-type]
    finally:
        _stop(server)
