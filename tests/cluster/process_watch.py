"""Watch, while a DAG runs, what the Spark processes show of the catalog's secrets through /proc.

A background thread samples every process of the machine a few times a second: no command line
may hold a secret. The processes of the job itself (the spark-submit JVM and the Python driver,
below this test process, and the executors, below the worker) are classified and looked at more
closely: their environment (apart from the Airflow connection variables the Airflow worker itself
holds) and the properties file that spark-submit reads.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.cluster.servers import (
    children_by_parent,
    command_line,
    descendants,
    listening_addresses,
    process_ids,
    read_proc,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

SPARK_SUBMIT = "spark-submit"
PYTHON_DRIVER = "python driver"
EXECUTOR = "executor"
_PROPERTIES_FILE = re.compile(rb"--properties-file\x00([^\x00]+)")


def classify(cmdline: bytes) -> str | None:
    """Which part of a Spark job a command line belongs to, if any.

    The spark-submit script runs a launcher JVM to build the real command, then execs the
    SparkSubmit JVM (the driver JVM in client mode): only that last one counts as spark-submit.
    """
    program = Path(cmdline.split(b"\0", 1)[0].decode(errors="replace")).name
    if b"org.apache.spark.deploy.SparkSubmit" in cmdline:
        is_jvm = program == "java" and b"org.apache.spark.launcher.Main" not in cmdline
        return SPARK_SUBMIT if is_jvm else None
    if b"CoarseGrainedExecutorBackend" in cmdline:
        return EXECUTOR
    if b"airflow_iceberg_dml/jobs/" in cmdline:
        return PYTHON_DRIVER
    return None


@dataclass(frozen=True)
class PropertiesFile:
    path: Path
    mode: int
    holds_secrets: frozenset[str]


class ProcessWatch(threading.Thread):
    """Samples /proc until stopped; ``leaks`` lists every place a secret was seen."""

    def __init__(
        self,
        secrets: Mapping[str, str],
        own_roots: Iterable[int],
        executor_roots: Iterable[int],
        interval_s: float = 0.5,
    ) -> None:
        super().__init__(name="process-watch", daemon=True)
        self._secrets = {name: value.encode() for name, value in secrets.items()}
        self._own_roots = list(own_roots)
        self._executor_roots = list(executor_roots)
        self._interval_s = interval_s
        #: Processes already running (a session's SparkSession or warm engine that an earlier test
        #: started, both SparkSubmit JVMs): not the watched DAG's jobs, so never counted as one.
        self._before = frozenset(process_ids())
        self._stopped = threading.Event()
        #: Job processes seen, by kind: pid -> command line.
        self.seen: dict[str, dict[int, str]] = {}
        self.leaks: list[str] = []
        self.properties_files: dict[Path, PropertiesFile] = {}
        #: Addresses the job processes listened on, by kind.
        self.listening: dict[str, set[str]] = {}
        self.samples = 0

    def run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            self.sample()

    def stop(self) -> None:
        self._stopped.set()
        self.join()
        self.sample()

    def _holds(self, data: bytes) -> list[str]:
        return [name for name, secret in self._secrets.items() if secret in data]

    def sample(self) -> None:
        self.samples += 1
        children = children_by_parent()
        job_processes = descendants(self._own_roots, children) | descendants(self._executor_roots, children)
        kinds: dict[int, str] = {}
        for pid in process_ids():
            cmdline = read_proc(pid, "cmdline")
            for name in self._holds(cmdline):
                self.leaks.append(f"{name} on the command line of {pid}: {command_line(pid)[:300]}")
            kind = classify(cmdline) if pid in job_processes and pid not in self._before else None
            if kind is None:
                continue
            kinds[pid] = kind
            self.seen.setdefault(kind, {})[pid] = command_line(pid)
            self._check_environment(pid, kind)
            match = _PROPERTIES_FILE.search(cmdline)
            if kind == SPARK_SUBMIT and match:
                self._look_at_properties_file(Path(match.group(1).decode()))
        for pid, addresses in listening_addresses(kinds).items():
            self.listening.setdefault(kinds[pid], set()).update(addresses)

    def _check_environment(self, pid: int, kind: str) -> None:
        for entry in read_proc(pid, "environ").split(b"\0"):
            # The Airflow worker holds its connections in AIRFLOW_CONN_*; children inherit them.
            if entry.startswith(b"AIRFLOW_CONN_"):
                continue
            for name in self._holds(entry):
                variable = entry.split(b"=", 1)[0].decode(errors="replace")
                self.leaks.append(f"{name} in the environment of the {kind} ({pid}): {variable}")

    def _look_at_properties_file(self, path: Path) -> None:
        if path in self.properties_files:
            return
        try:
            mode = path.stat().st_mode & 0o777
            text = path.read_bytes()
        except OSError:
            return
        self.properties_files[path] = PropertiesFile(path, mode, frozenset(self._holds(text)))


def _files_under(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    # os.walk ignores folders that vanish while it walks (other processes clean up their own).
    for folder, _, names in os.walk(path):
        for name in names:
            yield Path(folder) / name


def files_holding(secrets: Mapping[str, str], paths: Iterable[Path], max_bytes: int = 64 << 20) -> list[str]:
    """Files at or under ``paths`` that contain one of ``secrets`` (jars skipped: they are libraries)."""
    found = []
    needles = {name: value.encode() for name, value in secrets.items()}
    for root in paths:
        for path in _files_under(root):
            if path.is_symlink() or path.suffix == ".jar":
                continue
            try:
                if path.stat().st_size > max_bytes:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            found += [f"{name} in {path}" for name, needle in needles.items() if needle in data]
    return found
