"""Runs one job spec as a real Spark application through spark-submit.

Everything secret (catalog credentials, S3 keys) and the whole Spark configuration travel in a
``--properties-file`` that only the owner can read and that is removed afterwards; the command
line carries the master, the jars, the packaged job and the path of the spec file.

A spark-submit that outlives its Airflow task (the worker was killed, the job went on) can be found
again by a later try on the same machine: :class:`LocalProcess` names it, and
:meth:`IcebergSparkSubmitHook.reattach` waits for it and cleans up after it.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from airflow.providers.apache.spark.hooks.spark_submit import (
    ALLOWED_SPARK_BINARIES,
    DEFAULT_SPARK_BINARY,
    SparkSubmitHook,
)
from airflow.sdk import BaseHook, Connection
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

import airflow_iceberg_dml
from airflow_iceberg_dml import runtime
from airflow_iceberg_dml.catalog_config import ICEBERG_EXTENSIONS, CatalogConfig
from airflow_iceberg_dml.compat import SparkSubmitHookCompat
from airflow_iceberg_dml.exceptions import SparkJobError
from airflow_iceberg_dml.spec import LOG_PREFIX, JobRecord, JobSpec, Outcome

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from airflow.sdk.types import Logger
    from pydantic import JsonValue

DEFAULT_LOCAL_MASTER = "local[*]"
_FOLDER_PREFIX = "iceberg-dml-"
#: Spark settings that would make spark-submit return before a remote driver has finished.
_WAIT_FOR_APPLICATION = (
    "spark.yarn.submit.waitAppCompletion",
    "spark.kubernetes.submission.waitAppCompletion",
)
_PROC = Path("/proc")

# Lines of spark-submit output shown at INFO besides the job's own: problems, and the lines the
# Spark provider parses for application and driver ids (it needs to see them to kill the job).
_SHOWN = re.compile(
    r"\b(ERROR|FATAL|Exception|Traceback)\b"
    r"|application_\d|driver-\d|pod name:|spark-app-selector|[Ee]xit code:"
)


def escape_property(text: str) -> str:
    """Escape a key or value for a Java ``.properties`` file."""
    escaped = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    escaped = escaped.replace("=", "\\=").replace(":", "\\:").replace("#", "\\#").replace("!", "\\!")
    return "\\ " + escaped[1:] if escaped.startswith(" ") else escaped


def properties_file_text(properties: Mapping[str, str]) -> str:
    return "".join(f"{escape_property(k)}={escape_property(v)}\n" for k, v in sorted(properties.items()))


def spark_properties(
    catalog: CatalogConfig,
    spark_conf: Mapping[str, Any] | None = None,
    *,
    local_python: str | None = None,
    driver_python: str | None = None,
    quiet: bool = True,
) -> dict[str, str]:
    """The whole Spark configuration of a job: Iceberg, the catalog, then the user's own conf.

    ``local_python`` is the interpreter of the driver and the executors (``local[*]``);
    ``driver_python`` that of the driver only (client deploy mode: the driver runs on this machine,
    the executors elsewhere keep their own Python).
    """
    user = {key: str(value) for key, value in (spark_conf or {}).items()}
    for key in _WAIT_FOR_APPLICATION:
        if user.get(key, "true").strip().lower() == "false":
            raise ValueError(
                f"spark_conf sets {key}=false, but the task reads the job's commit when spark-submit "
                "returns, so spark-submit must wait for the application: remove it."
            )
    extensions = [ICEBERG_EXTENSIONS]
    if user.get("spark.sql.extensions"):
        extensions += [
            e for e in user.pop("spark.sql.extensions").split(",") if e and e != ICEBERG_EXTENSIONS
        ]
    properties = {
        "spark.sql.extensions": ",".join(extensions),
        **catalog.spark_properties(),
    }
    if quiet:
        properties["spark.ui.showConsoleProgress"] = "false"
    if local_python:
        properties["spark.pyspark.python"] = local_python
    if local_python or driver_python:
        properties["spark.pyspark.driver.python"] = str(local_python or driver_python)
    properties.update(user)
    return properties


def check_deploy_mode(master: str, deploy_mode: str | None) -> None:
    """Refuse, before anything is submitted, a deploy mode that Spark refuses for this job."""
    if deploy_mode == "cluster" and master.startswith("spark://"):
        raise ValueError(
            f"The Spark connection asks for cluster deploy mode on the standalone master {master}, "
            "but Spark standalone does not run Python applications in cluster mode. Set the "
            "connection's deploy-mode extra to client (the driver then runs on the Airflow worker), "
            "or use cluster mode on YARN or Kubernetes."
        )


#: Environment variables that may hold Airflow's secrets (connections, variables, configuration such
#: as the metadata database URL or the Fernet key); the Spark job needs none of them.
_AIRFLOW_SECRET_ENV_PREFIXES = ("AIRFLOW_CONN_", "AIRFLOW_VAR_", "AIRFLOW__")


def job_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of spark-submit: this process's, without Airflow's connections and config."""
    return {key: value for key, value in environ.items() if not key.startswith(_AIRFLOW_SECRET_ENV_PREFIXES)}


def package_zip(folder: Path) -> Path:
    """Zip this package's Python sources so that a remote driver and the executors can import it."""
    root = Path(airflow_iceberg_dml.__file__).parent
    target = folder / "airflow_iceberg_dml.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for source in sorted(root.rglob("*.py")):
            archive.write(source, Path("airflow_iceberg_dml") / source.relative_to(root))
    return target


def write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)


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
        is_job_folder = folder.name.startswith(_FOLDER_PREFIX) and (folder / "spec.json").is_file()
        return folder if folder.is_dir() and is_job_folder else None


class SubmitOutputLog:
    """The Spark provider hook's logger, with spark-submit's output routed by line.

    The job's own lines (its prefix removed), problems and the lines the provider parses for ids go
    to INFO; the rest of the driver log goes to DEBUG. The provider logs each output line as it is, at
    INFO and with no arguments; its own messages carry arguments and pass through unchanged.
    """

    def __init__(self, logger: Logger) -> None:
        self._logger = logger
        self._in_traceback = False

    def route(self, line: str) -> str | None:
        """What an output line shows at INFO, or None when it belongs at DEBUG."""
        if line.startswith(LOG_PREFIX):
            return line[len(LOG_PREFIX) :]
        if self._in_traceback or _SHOWN.search(line):
            self._in_traceback = self._in_traceback or "Traceback" in line
            return line
        return None

    def info(self, event: Any, *args: Any, **kw: Any) -> Any:
        if args or kw or not isinstance(event, str):
            return self._logger.info(event, *args, **kw)
        shown = self.route(event.rstrip())
        if shown is None:
            return self._logger.debug("%s", event)
        return self._logger.info(shown)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


class _RoutedSparkSubmitHook(SparkSubmitHookCompat, SparkSubmitHook):
    """SparkSubmitHook that defaults to ``local[*]``, JVM noise at DEBUG (:class:`SubmitOutputLog`)."""

    def __init__(
        self,
        *,
        default_master: str | None,
        on_started: Callable[[int], None] | None = None,
        **kwargs: Any,
    ) -> None:
        self._default_master = default_master
        self._output_log: SubmitOutputLog | None = None
        super().__init__(on_spawned=on_started, **kwargs)

    @property
    def log(self) -> Logger:
        if self._output_log is None:
            self._output_log = SubmitOutputLog(super().log)
        return cast("Logger", self._output_log)

    def get_connection(self, conn_id: str) -> Connection:  # type: ignore[override]  # needs the instance
        if conn_id == self._conn_id and self._default_master:
            # The caller found no connection: a stand-in on the local master lets the provider apply its
            # own defaults without logging that it falls back to yarn.
            self.log.info("No Spark connection %r: running on %s", conn_id, self._default_master)
            return Connection(conn_id=conn_id, conn_type="spark", host=self._default_master)
        return super().get_connection(conn_id)


def spark_master(conn: Connection) -> str:
    """The master URL of a ``spark`` connection, by the Spark provider's rule.

    Made in the UI, the host holds the whole URL (``spark://host``, ``local[*]``); made from a URI
    (``spark://host:7077``), the scheme is the connection type and the host is only the host name.
    """
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    return f"{master}:{conn.port}" if conn.port else master


def bundled_spark_binary(binary: str) -> str | None:
    """The pyspark wheel's own ``binary`` when none is on PATH (Airflow runs outside the venv), else None."""
    if binary not in ALLOWED_SPARK_BINARIES or shutil.which(binary) is not None:
        return None  # on PATH, or refused by the provider with its own message
    import pyspark

    bundled = Path(pyspark.__file__).parent / "bin" / binary
    return str(bundled) if bundled.is_file() else None


class IcebergSparkSubmitHook(BaseHook):
    """Submits the packaged PySpark job for a job spec and returns its :class:`JobRecord`.

    :param spark_conn_id: A ``spark`` connection (master, deploy mode, binary, queue ...). When it
        does not exist, the job runs on ``local[*]``.
    :param spark_conf: Extra Spark configuration; it goes into the private properties file, never
        onto the command line.
    """

    def __init__(
        self, spark_conn_id: str = "spark_default", spark_conf: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__()
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self._submit_hook: _RoutedSparkSubmitHook | None = None
        self._reattached: LocalProcess | None = None

    def _connection_fields(self) -> tuple[str | None, str | None, str]:
        """(master, deploy mode, spark binary) of the Spark connection; (None, None, default) without one."""
        try:
            conn = self.get_connection(self.spark_conn_id)
        except AirflowNotFoundException:
            return None, None, DEFAULT_SPARK_BINARY
        extra = conn.extra_dejson
        return spark_master(conn), extra.get("deploy-mode"), extra.get("spark-binary", DEFAULT_SPARK_BINARY)

    def submit(
        self,
        spec: JobSpec,
        catalog: CatalogConfig,
        name: str,
        on_started: Callable[[LocalProcess], None] | None = None,
    ) -> JobRecord | None:
        """Run the job. Returns its record, or None when the driver ran remotely (cluster mode).

        Raises the job's own error class when it reported one (see :mod:`~airflow_iceberg_dml.exceptions`).
        ``on_started`` is told the spark-submit process as soon as it runs (to store it for a later
        try: :meth:`reattach`); an error it raises is logged, not raised, so the job goes on.
        """
        master, deploy_mode, binary = self._connection_fields()
        if master is not None:
            check_deploy_mode(master, deploy_mode)
        remote_driver = deploy_mode == "cluster"
        artifacts = runtime.DEFAULT_ARTIFACTS + (runtime.S3_ARTIFACTS if catalog.uses_s3 else ())
        jars = runtime.spark_jars(artifacts)
        self.log.info("%s", jars.describe())
        with tempfile.TemporaryDirectory(prefix=_FOLDER_PREFIX, dir=runtime.temp_dir()) as folder_name:
            folder = Path(folder_name)
            result_path = None if remote_driver else folder / "result.json"
            spec = replace(spec, result_path=str(result_path) if result_path else None)
            spec_path = folder / "spec.json"
            write_private(spec_path, spec.to_json())
            properties_path = folder / "spark.properties"
            local = master is None or master.startswith("local")
            properties = spark_properties(
                catalog,
                self.spark_conf,
                local_python=sys.executable if local else None,
                # In client mode the driver runs here: it needs this interpreter, which has pyspark.
                driver_python=None if remote_driver else sys.executable,
                quiet=not self.log.isEnabledFor(logging.DEBUG),
            )
            properties.update(jars.spark_conf(properties))
            write_private(properties_path, properties_file_text(properties))
            # A remote driver gets the spec shipped with the application, by file name.
            self._submit_hook = _RoutedSparkSubmitHook(
                default_master=None if master is not None else DEFAULT_LOCAL_MASTER,
                on_started=None if on_started is None else self._announce(on_started, folder),
                conn_id=self.spark_conn_id,
                spark_binary=bundled_spark_binary(binary),
                name=name,
                jars=",".join(jars.jars) or None,
                py_files=str(package_zip(folder)),
                files=str(spec_path) if remote_driver else None,
                properties_file=str(properties_path),
                application_args=[spec_path.name if remote_driver else str(spec_path)],
            )
            submit_error: AirflowException | None = None
            try:
                application = resources.files("airflow_iceberg_dml.jobs") / spec.application
                self._submit_hook.submit(str(application), env=job_environment(os.environ))
            except AirflowException as error:
                submit_error = error
            record = self._read_record(result_path)
        if record is not None and record.outcome is Outcome.FAILED:
            raise record.error() from submit_error
        if submit_error is not None:
            raise SparkJobError(f"spark-submit failed: {submit_error}") from submit_error
        return record

    @property
    def remote_application_id(self) -> str | None:
        """The application id spark-submit printed for a remote driver (YARN, Kubernetes), if any."""
        return self._submit_hook.remote_application_id if self._submit_hook is not None else None

    def _announce(self, on_started: Callable[[LocalProcess], None], folder: Path) -> Callable[[int], None]:
        def started(pid: int) -> None:
            process = LocalProcess.of(pid, folder)
            if process is None:
                return
            try:
                on_started(process)
            except Exception as error:  # noqa: BLE001 - the job is running: never orphan it over this
                self.log.warning("Could not record spark-submit (pid %s) for a later try: %s", pid, error)

        return started

    def reattach(self, process: LocalProcess, poll_interval: float = 1.0) -> JobRecord | None:
        """Wait for the spark-submit of an earlier try, then remove its folder (and its properties file).

        Returns the record the job left, or None when it left none (it died first, or its driver ran
        remotely). ``process`` must be on this machine (:meth:`LocalProcess.is_here`).
        """
        if process.is_running():
            self.log.info(
                "Re-attaching to spark-submit (pid %s) that an earlier try started; waiting for it to "
                "finish (its output went to that try's log).",
                process.pid,
            )
            self._reattached = process
            started = time.monotonic()
            next_note = 60.0
            while process.is_running():
                time.sleep(poll_interval)
                if time.monotonic() - started >= next_note:
                    self.log.info("spark-submit (pid %s) still running after %.0fs.", process.pid, next_note)
                    next_note += 60
            self._reattached = None
            self.log.info(
                "spark-submit (pid %s) finished after %.1fs.", process.pid, time.monotonic() - started
            )
        folder = process.job_folder()
        if folder is None:
            return None
        record = self._read_record(folder / "result.json")
        shutil.rmtree(folder, ignore_errors=True)
        return record

    @staticmethod
    def _read_record(path: Path | None) -> JobRecord | None:
        if path is None or not path.is_file():
            return None
        return JobRecord.from_json(path.read_text())

    def on_kill(self) -> None:
        """Stop the Spark application (the process, or the YARN/Kubernetes/standalone driver)."""
        if self._reattached is not None and self._reattached.is_running():
            self.log.info("Sending SIGTERM to spark-submit (pid %s)", self._reattached.pid)
            os.kill(self._reattached.pid, signal.SIGTERM)
        if self._submit_hook is not None:
            self._submit_hook.on_kill()
