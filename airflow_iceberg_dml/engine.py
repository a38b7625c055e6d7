"""A local warm engine: a Spark Connect server with this package's jars and the embedded catalog.

``python -m airflow_iceberg_dml.engine start|status|stop`` (``make engine``, ``make engine-status``,
``make engine-stop``) runs one Spark Connect server on loopback, so that tasks whose Spark
connection is of type ``spark_connect`` send their jobs to it instead of starting a Spark
application each. The server runs from the PySpark wheel (which ships the Connect server) with the
Iceberg runtime, the Iceberg SQL extensions and the embedded catalog configured, reads its settings
from a private properties file and logs to ``$AIRFLOW_ICEBERG_DML_HOME/engine/server.log``.

Point the Spark connection at it::

    export AIRFLOW_CONN_SPARK_DEFAULT='spark-connect://127.0.0.1:15002'

For a cluster, run Spark's own ``start-connect-server.sh`` with the same jars and settings (see
docs/engines.md); this module is the single-machine default.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_iceberg_dml import engine_supervisor, runtime
from airflow_iceberg_dml.catalog_config import CatalogConfig, embedded_properties
from airflow_iceberg_dml.engine_warmup import WARM_ROUNDS, warm_up
from airflow_iceberg_dml.hooks.spark_submit import (
    job_environment,
    properties_file_text,
    spark_properties,
    write_private,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_HOST = "127.0.0.1"
#: Spark Connect's own default port.
DEFAULT_PORT = 15002
DEFAULT_CATALOG_CONN_ID = "iceberg_default"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_STATE_FILE = "engine.json"


@dataclass(frozen=True)
class EngineState:
    """A running engine, as ``start`` leaves it on disk for ``status`` and ``stop``."""

    pid: int
    host: str
    port: int
    catalog: str
    started_at: float
    log_path: str
    #: Whether ``pid`` is the supervisor's (which restarts the server), not the server's own.
    supervised: bool = False
    #: The server's web UI, on loopback, where ``status`` counts its live sessions.
    ui_port: int | None = None

    @property
    def url(self) -> str:
        return f"sc://{self.host}:{self.port}"

    @property
    def connection_uri(self) -> str:
        """The Airflow connection URI of a ``spark_connect`` connection to this engine."""
        return f"spark-connect://{self.host}:{self.port}"


def engine_dir(home: Path | None = None) -> Path:
    return (home or runtime.default_home()) / "engine"


def read_state(folder: Path) -> EngineState | None:
    path = folder / _STATE_FILE
    if not path.is_file():
        return None
    return EngineState(**json.loads(path.read_text()))


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.is_file() and stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z")


def resident_memory_bytes(pid: int) -> int | None:
    """The server's resident memory (``VmRSS``), None when it is not running or not readable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` or one of its descendants listens on ``port``. An open port alone is not
    enough: while a server fails to bind, another process may hold the port (a JVM's random one)."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return False
    for process in processes:
        try:
            sockets = process.net_connections("inet")
        except psutil.Error:
            continue
        if any(s.status == psutil.CONN_LISTEN and s.laddr and s.laddr.port == port for s in sockets):
            return True
    return False


def server_properties(
    catalog: CatalogConfig,
    host: str,
    port: int,
    conf: Mapping[str, str] | None = None,
    ui_port: int | None = None,
) -> dict[str, str]:
    """The server's whole configuration: Iceberg, the catalog, the jars, where it listens, then ``conf``."""
    properties = spark_properties(catalog, conf)
    ui = (
        {"spark.ui.enabled": "false"}
        if ui_port is None
        else {"spark.ui.enabled": "true", "spark.ui.port": str(ui_port)}
    )
    properties.update(
        {
            "spark.connect.grpc.binding.address": host,
            "spark.connect.grpc.binding.port": str(port),
            "spark.ui.enabled": properties.get("spark.ui.enabled", ui["spark.ui.enabled"]),
            "spark.ui.port": properties.get("spark.ui.port", ui.get("spark.ui.port", "4040")),
            "spark.master": properties.get("spark.master", "local[*]"),
            "spark.app.name": properties.get("spark.app.name", "iceberg-dml-engine"),
        }
    )
    return properties


def server_command(properties_path: Path, jars: runtime.SparkJars) -> list[str]:
    """spark-submit of the Connect server that ships with the installed PySpark."""
    spark_submit = runtime.bundled_spark_home() / "bin" / "spark-submit"
    command = [str(spark_submit), "--class", SERVER_CLASS, "--properties-file", str(properties_path)]
    if jars.jars:
        command += ["--jars", ",".join(jars.jars)]
    return [*command, "spark-internal"]


def _spawn(command: list[str], log_path: Path, host: str) -> subprocess.Popen[bytes]:
    """Start the server process (or its supervisor), detached from this command, its output appended
    to ``log_path``, its temporary files in the engine folder's ``tmp/``."""
    environment = job_environment(os.environ)
    environment.setdefault("SPARK_HOME", str(runtime.bundled_spark_home()))
    environment["PYSPARK_PYTHON"] = sys.executable
    runtime.keep_jvm_tmp_in(environment, engine_supervisor.fresh_tmp(log_path.parent))
    if host in ("127.0.0.1", "localhost"):
        environment["SPARK_LOCAL_IP"] = "127.0.0.1"  # the web UI on loopback too, like the server
    with log_path.open("ab") as log_file:
        return subprocess.Popen(
            command,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=environment,
            start_new_session=True,  # outlives this command, and a Ctrl-C in the terminal
        )


def _wait_until_listening(
    process: subprocess.Popen[bytes], port: int, timeout_s: float, log_path: Path
) -> None:
    deadline = time.monotonic() + timeout_s
    while not listens(process.pid, port):
        if process.poll() is not None:
            raise RuntimeError(f"The Spark Connect server exited ({process.returncode}); see {log_path}.")
        if time.monotonic() > deadline:
            process.terminate()
            raise RuntimeError(
                f"The Spark Connect server did not listen within {timeout_s:.0f}s; see {log_path}."
            )
        time.sleep(0.5)


def start(
    *,
    home: Path | None = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    catalog: CatalogConfig | None = None,
    conf: Mapping[str, str] | None = None,
    warm: bool = True,
    warm_rounds: int = WARM_ROUNDS,
    timeout_s: float = 300.0,
    supervise: bool = True,
) -> EngineState:
    """Start the engine (or return the one already running from ``home``), ready for jobs.

    ``catalog`` defaults to the embedded one under ``home``; ``warm`` runs a catalog query and a small
    DELETE and UPDATE on a scratch table first, so that the first task does not pay for loading
    Iceberg's classes, then ``warm_rounds`` rounds of the package's own jobs of a grouped change, so that
    the first changes do not run while the JVM compiles their code (:mod:`.engine_warmup`).
    ``supervise`` runs the server under :mod:`.engine_supervisor`, which starts it again when it dies.
    """
    folder = engine_dir(home)
    running = read_state(folder)
    if running is not None and is_alive(running.pid):
        return running
    if port_open(host, port):
        raise RuntimeError(f"Port {host}:{port} is already in use: pass another --port.")
    folder.mkdir(parents=True, exist_ok=True)
    base = home or runtime.default_home()
    catalog = catalog or CatalogConfig.from_properties(DEFAULT_CATALOG_CONN_ID, embedded_properties(base))
    artifacts = runtime.DEFAULT_ARTIFACTS + (runtime.S3_ARTIFACTS if catalog.uses_s3 else ())
    jars = runtime.spark_jars(artifacts)
    ui_port = ui_port_beside(host, port)
    properties = server_properties(catalog, host, port, conf, ui_port)
    properties.update(jars.spark_conf(properties))
    properties_path = folder / "server.properties"
    write_private(properties_path, properties_file_text(properties))
    log_path = folder / "server.log"
    command = server_command(properties_path, jars)
    if supervise:
        (folder / engine_supervisor.COMMAND_FILE).write_text(
            json.dumps({"command": command, "log_path": str(log_path)})
        )
        command = [sys.executable, "-m", "airflow_iceberg_dml.engine_supervisor", str(folder)]
    process = _spawn(command, folder / ("supervisor.out" if supervise else "server.log"), host)
    state = EngineState(process.pid, host, port, catalog.name, time.time(), str(log_path), supervise, ui_port)
    _wait_until_listening(process, port, timeout_s, log_path)
    (folder / _STATE_FILE).write_text(json.dumps(asdict(state)))
    if warm:
        warm_up(state, folder, warm_rounds)
    return state


def ui_port_beside(host: str, server_port: int) -> int:
    """A free port for the web UI, never ``server_port``: that one is free too until the server binds it
    (after a restart on the same port, the system may hand it out here), and a web UI there would answer
    the server's clients and pass for the server."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        found = int(probe.getsockname()[1])
        if found != server_port:
            return found
        with socket.socket() as other:  # the probe holds ``server_port``: this one gets another port
            other.bind((host, 0))
            return int(other.getsockname()[1])


def server_pid(state: EngineState, folder: Path) -> int:
    """The pid of the Spark Connect server itself (the supervisor's child when supervised)."""
    running = engine_supervisor.read_server(folder) if state.supervised else None
    return running.pid if running else state.pid


def live_sessions(state: EngineState) -> tuple[int, int] | None:
    """(sessions online, requests running) as the server's web UI counts them; None when unknown."""
    if state.ui_port is None:
        return None
    try:
        with urllib.request.urlopen(f"http://{state.host}:{state.ui_port}/connect/", timeout=5) as page:
            text = page.read().decode("utf-8", "replace")
    except OSError:
        return None
    found = re.search(r"(\d+)\s*session\(s\) are online,\s*running\s*(\d+)", text)
    return (int(found.group(1)), int(found.group(2))) if found else None


def stop(home: Path | None = None, timeout_s: float = 30.0) -> EngineState | None:
    """Stop the engine started from ``home``; returns what was stopped (None: nothing ran)."""
    folder = engine_dir(home)
    state = read_state(folder)
    if state is None:
        return None
    server = server_pid(state, folder)
    for pid in dict.fromkeys((state.pid, server)):  # the supervisor first: it must not start another
        if is_alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while is_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if is_alive(pid):
                os.kill(pid, signal.SIGKILL)
    (folder / _STATE_FILE).unlink(missing_ok=True)
    return state


def _duration(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m{whole % 60:02d}s"


def describe(state: EngineState | None, folder: Path | None = None) -> tuple[bool, str]:
    """(running, a few lines on the engine) for ``status``: uptime, restarts, memory, live sessions."""
    if state is None:
        return False, "Spark Connect engine: not running (start it with: make engine)"
    folder = folder or engine_dir()
    if not is_alive(state.pid):
        said = engine_supervisor.last_words(folder) if state.supervised else None
        return False, (
            f"Spark Connect engine: not running (pid {state.pid} has exited; log: {state.log_path})"
            + (f"\n  the supervisor's last line: {said}" if said else "")
        )
    server = engine_supervisor.read_server(folder) if state.supervised else None
    pid = server.pid if server else state.pid
    memory = resident_memory_bytes(pid)
    sessions = live_sessions(state)
    lines = [
        f"Spark Connect engine: running at {state.url}"
        + ("" if port_open(state.host, state.port) else " (not accepting connections yet)"),
        f"  server pid {pid}, up {_duration(time.time() - (server or state).started_at)}"
        + (f", resident memory {memory / 2**20:.0f} MiB" if memory else ""),
        f"  live sessions {sessions[0]}, requests running {sessions[1]}"
        if sessions
        else "  live sessions: unknown (the server's web UI is off)",
        f"  supervised by pid {state.pid} since {_duration(time.time() - state.started_at)} ago; "
        f"restarts: {server.restarts if server else 0}"
        if state.supervised
        else "  not supervised: nothing restarts it if it dies",
        f"  catalog {state.catalog!r}; log {state.log_path}",
        f"  use it: export AIRFLOW_CONN_SPARK_DEFAULT='{state.connection_uri}'",
    ]
    return True, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_iceberg_dml.engine", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", choices=["start", "status", "stop"])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--no-warm", action="store_true", help="do not warm the server up after start")
    parser.add_argument(
        "--warm-rounds",
        type=int,
        default=WARM_ROUNDS,
        metavar="N",
        help=f"rounds of a grouped change's jobs the warm-up runs (default {WARM_ROUNDS}; 0: load the "
        "classes only)",
    )
    parser.add_argument(
        "--no-supervise", action="store_true", help="run the server alone: nothing restarts it if it dies"
    )
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting for the server"
    )
    args = parser.parse_args(argv)
    if args.command == "start":
        conf = dict(item.split("=", 1) for item in args.conf)
        started = time.monotonic()
        state = start(
            host=args.host,
            port=args.port,
            conf=conf,
            warm=not args.no_warm,
            warm_rounds=args.warm_rounds,
            supervise=not args.no_supervise,
        )
        print(f"Ready in {time.monotonic() - started:.1f}s.")
        print(describe(state)[1])
        return 0
    if args.command == "stop":
        stopped = stop()
        print(f"Stopped the engine (pid {stopped.pid})." if stopped else "No engine was running.")
        return 0
    running, text = describe(read_state(engine_dir()))
    print(text)
    return 0 if running else 3


if __name__ == "__main__":
    raise SystemExit(main())
