"""The Spark Connect server the benchmarks start (``airflow_iceberg_dml.engine``, as ``make engine`` runs it),
what they measure of it (cold start, resident memory, live heap), the ``bench_engine`` connection that
points tasks at it, and the trace of a job that runs over it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.spec import LOG_PREFIX
from bench.common import format_bytes, format_seconds, log
from bench.deployment import free_port
from bench.engine_changes import SPARK_CONN_ID
from bench.probes import Call, record_calls, stamp_job_lines

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from airflow_iceberg_dml import engine as engine_module
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from bench.probes import SubmitTrace

_CONN_ENV = f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}"


@dataclass
class ConnectTrace:
    """One job over Spark Connect: the hook's ``submit`` and session-opening calls, the job's own lines."""

    submits: list[Call]
    opens: list[Call]
    lines: list[tuple[float, str]]

    def line_time(self, prefix: str) -> float:
        for stamp, line in self.lines:
            if line.startswith(prefix):
                return stamp
        raise LookupError(f"no job line starts with {prefix!r}; the job's log lines have changed")


@contextmanager
def trace_connect_jobs() -> Iterator[ConnectTrace]:
    """Record the Connect hook's calls and when each of the job's lines is logged, inside the block.

    The hook hands the job's lines to the task log through ``jobs.runner.log_to``; the wrapper
    stamps each line on its way, behaviour unchanged.
    """
    from airflow_iceberg_dml.hooks import spark_connect
    from airflow_iceberg_dml.hooks.spark_connect import IcebergSparkConnectHook

    with (
        stamp_job_lines() as lines,
        record_calls(IcebergSparkConnectHook, "submit") as submits,
        record_calls(spark_connect, "open_session") as opens,
    ):
        yield ConnectTrace(submits, opens, lines)


@dataclass(frozen=True)
class JobTimes:
    """A job's time seen from its task: the hook's ``submit`` call, when the job logged each of the lines
    asked for, what the hook did before the job (spark-submit: until its process started; Connect: until
    the session opened) and the session's start, to the first of those lines."""

    call: Call
    lines: list[float]
    prepare: float
    session: float


def job_times(
    submits: list[SubmitTrace], connect: ConnectTrace, starts: Sequence[str], *, on_spark_submit: bool
) -> JobTimes:
    """The one job a task ran, on spark-submit (``submits``) or on Spark Connect (``connect``): when it
    logged the first line starting with each of ``starts`` (the package's job lines, without the prefix
    spark-submit's output gives them)."""
    if on_spark_submit:
        (traced,) = submits
        job, call = traced.process, traced.call
        lines = [job.line_time(LOG_PREFIX + start) for start in starts]
        return JobTimes(call, lines, job.started - call.started, lines[0] - job.started)
    (call,), (opened,) = connect.submits, connect.opens
    lines = [connect.line_time(start) for start in starts]
    return JobTimes(call, lines, opened.started - call.started, lines[0] - opened.started)


@contextmanager
def engine_connection(uri: str | None) -> Iterator[None]:
    """``bench_engine`` as a ``spark_connect`` connection to ``uri``, or undefined (spark-submit)."""
    previous = os.environ.pop(_CONN_ENV, None)
    if uri is not None:
        os.environ[_CONN_ENV] = uri
    try:
        yield
    finally:
        os.environ.pop(_CONN_ENV, None)
        if previous is not None:
            os.environ[_CONN_ENV] = previous


def _jcmd() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "jcmd" if java_home else None
    if candidate is not None and candidate.is_file():
        return str(candidate)
    return shutil.which("jcmd")


def live_heap_bytes(pid: int) -> int | None:
    """The server JVM's heap in use right after a full GC (``jcmd GC.run``, ``GC.heap_info``).

    Resident memory rarely shrinks once the JVM has grown its heap, so the live heap is what tells a
    leak from a heap that grew; None when ``jcmd`` is missing or fails.
    """
    jcmd = _jcmd()
    if jcmd is None:
        return None
    try:
        subprocess.run([jcmd, str(pid), "GC.run"], capture_output=True, check=True, timeout=120)
        info = subprocess.run(
            [jcmd, str(pid), "GC.heap_info"], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"used (\d+)K", info)
    return int(match.group(1)) * 1024 if match else None


@dataclass
class Server:
    """The benchmark's Connect server and what was measured of it."""

    state: engine_module.EngineState
    home: Path
    listening_seconds: float
    warm_up_seconds: float
    #: Label -> (resident memory, live heap after a full GC), in bytes.
    memory: dict[str, dict[str, int | None]]

    def record_memory(self, label: str, heap: bool = True) -> None:
        from airflow_iceberg_dml import engine

        rss = engine.resident_memory_bytes(self.state.pid)
        self.memory[label] = {
            "rss_bytes": rss,
            "live_heap_bytes": live_heap_bytes(self.state.pid) if heap else None,
        }
        log(
            f"server memory {label}: RSS {format_bytes(rss or 0)}"
            + (f", live heap {format_bytes(self.memory[label]['live_heap_bytes'] or 0)}" if heap else "")
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "url": self.state.url,
            "listening_seconds": self.listening_seconds,
            "warm_up_seconds": self.warm_up_seconds,
            "cold_start_seconds": self.listening_seconds + self.warm_up_seconds,
            "memory": self.memory,
        }


def start_server(hook: IcebergCatalogHook) -> Server:
    """A Connect server on a free loopback port with the embedded catalog the tables live in; timed.

    ``engine.start(warm=True)`` as ``make engine`` runs it; a thread notes when the port first
    accepts connections, which splits the cold start into the server's own start and its warm-up.
    """
    import threading

    from airflow_iceberg_dml import engine

    home = Path(tempfile.mkdtemp(prefix="bench-engine-"))
    port = free_port()
    listening: list[float] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if engine.port_open(engine.DEFAULT_HOST, port):
                listening.append(time.perf_counter())
                return
            done.wait(0.1)

    watcher = threading.Thread(target=watch, name="bench-engine-port", daemon=True)
    started = time.perf_counter()
    watcher.start()
    try:
        state = engine.start(home=home, host=engine.DEFAULT_HOST, port=port, catalog=hook.catalog_config)
    finally:
        done.set()
        watcher.join()
    ready = time.perf_counter()
    listened = (listening[0] if listening else ready) - started
    log(
        f"Connect server {state.url} (pid {state.pid}): ready after {format_seconds(ready - started)} "
        f"(listening after {format_seconds(listened)}, then warm-up); log {state.log_path}"
    )
    server = Server(state, home, listened, ready - started - listened, {})
    server.record_memory("after start")
    return server


def stop_server(server: Server, keep_log: bool) -> None:
    from airflow_iceberg_dml import engine

    engine.stop(server.home)
    if keep_log:
        log(f"server log kept: {server.state.log_path}")
    else:
        shutil.rmtree(server.home, ignore_errors=True)
