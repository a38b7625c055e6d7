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
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

from airflow.providers.apache.spark.hooks.spark_submit import DEFAULT_SPARK_BINARY, SparkSubmitHook
from airflow.sdk import BaseHook, Connection
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

from airflow_iceberg_dml import runtime
from airflow_iceberg_dml.compat import SparkSubmitHookCompat
from airflow_iceberg_dml.exceptions import SparkJobError
from airflow_iceberg_dml.hooks.local_process import JOB_FOLDER_PREFIX, LocalProcess
from airflow_iceberg_dml.hooks.submit_command import (
    SubmitOutputLog,
    bundled_spark_binary,
    check_deploy_mode,
    escape_property,
    job_environment,
    package_zip,
    properties_file_text,
    spark_master,
    spark_properties,
    write_private,
)
from airflow_iceberg_dml.spec import JobRecord, JobSpec, Outcome

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from airflow.sdk.types import Logger
    from pydantic import JsonValue

    from airflow_iceberg_dml.catalog_config import CatalogConfig
    from airflow_iceberg_dml.exceptions import IcebergDmlError

__all__ = [
    "DEFAULT_LOCAL_MASTER",
    "IcebergSparkSubmitHook",
    "LocalProcess",
    "SubmitOutputLog",
    "bundled_spark_binary",
    "check_deploy_mode",
    "escape_property",
    "job_environment",
    "package_zip",
    "properties_file_text",
    "spark_master",
    "spark_properties",
    "write_private",
]

DEFAULT_LOCAL_MASTER = "local[*]"


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
        if conn_id == self.requested_conn_id and self._default_master:
            # The caller found no connection: a stand-in on the local master lets the provider apply its
            # own defaults without logging that it falls back to yarn.
            self.log.info("No Spark connection %r: running on %s", conn_id, self._default_master)
            return Connection(conn_id=conn_id, conn_type="spark", host=self._default_master)
        return super().get_connection(conn_id)


class IcebergSparkSubmitHook(BaseHook):
    """The spark-submit engine: submits the packaged PySpark job for a job spec and returns its record.

    :param spark_conn_id: A ``spark`` connection (master, deploy mode, binary, queue ...). When it
        does not exist, the job runs on ``local[*]``.
    :param spark_conf: Extra Spark configuration; it goes into the private properties file, never
        onto the command line.
    :param task_spark_conf: Settings the task adds for its own Spark application (OpenLineage's parent
        job); ``spark_conf`` wins over them.
    """

    state_key: ClassVar[str] = "iceberg_dml_spark_submit"

    def __init__(
        self,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        task_spark_conf: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.spark_conn_id = spark_conn_id
        self.spark_conf = {**(task_spark_conf or {}), **(spark_conf or {})}
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
        on_started: Callable[[JsonValue], None] | None = None,
    ) -> JobRecord | None:
        """Run the job. Returns its record, or None when the driver ran remotely (cluster mode).

        Raises the job's own error class when it reported one (see :mod:`~airflow_iceberg_dml.exceptions`).
        ``on_started`` is told the spark-submit process (:class:`LocalProcess` as JSON) as soon as it
        runs, for a later try to :meth:`reattach`; an error it raises is logged, not raised.
        """
        master, deploy_mode, binary = self._connection_fields()
        if master is not None:
            check_deploy_mode(master, deploy_mode)
        remote_driver = deploy_mode == "cluster"
        artifacts = runtime.DEFAULT_ARTIFACTS + (runtime.S3_ARTIFACTS if catalog.uses_s3 else ())
        jars = runtime.spark_jars(artifacts)
        self.log.info("%s", jars.describe())
        with tempfile.TemporaryDirectory(prefix=JOB_FOLDER_PREFIX, dir=runtime.temp_dir()) as folder_name:
            folder = Path(folder_name)
            result_path = None if remote_driver else folder / "result.json"
            spec = replace(spec, result_path=str(result_path) if result_path else None)
            spec_path = folder / "spec.json"
            write_private(spec_path, spec.to_json())
            properties_path = folder / "spark.properties"
            properties = self._properties(catalog, master, remote_driver)
            properties.update(jars.spark_conf(properties))
            write_private(properties_path, properties_file_text(properties))
            # A remote driver gets the spec shipped with the application, by file name.
            self._submit_hook = submit_hook = _RoutedSparkSubmitHook(
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
            return self._run(submit_hook, spec.application, result_path, folder / "tmp")

    def _properties(self, catalog: CatalogConfig, master: str | None, remote_driver: bool) -> dict[str, str]:
        local = master is None or master.startswith("local")
        return spark_properties(
            catalog,
            self.spark_conf,
            local_python=sys.executable if local else None,
            # In client mode the driver runs here: it needs this interpreter, which has pyspark.
            driver_python=None if remote_driver else sys.executable,
            quiet=not self.log.isEnabledFor(logging.DEBUG),
        )

    def _run(
        self,
        submit_hook: _RoutedSparkSubmitHook,
        application_name: str,
        result_path: Path | None,
        jvm_tmp: Path,
    ) -> JobRecord | None:
        """spark-submit the packaged job, then read the record it left (a failure it reported wins).
        Its JVM's temporary files go in ``jvm_tmp``, in the job's folder, and with it, killed or not."""
        submit_error: AirflowException | None = None
        environment = job_environment(os.environ)
        runtime.keep_jvm_tmp_in(environment, jvm_tmp)
        try:
            application = resources.files("airflow_iceberg_dml.jobs") / application_name
            submit_hook.submit(str(application), env=environment)
        except AirflowException as error:
            submit_error = error
        record = self._read_record(result_path)
        if record is not None and record.outcome is Outcome.FAILED:
            raise record.error() from submit_error
        if submit_error is not None:
            raise self.failure(submit_error) from submit_error
        return record

    def failure(self, error: Exception) -> IcebergDmlError:
        """spark-submit itself failed (no record said why): retryable, with spark-submit's message."""
        return SparkJobError(f"spark-submit failed: {error}")

    @property
    def remote_application_id(self) -> str | None:
        """The application id spark-submit printed for a remote driver (YARN, Kubernetes), if any."""
        return self._submit_hook.remote_application_id if self._submit_hook is not None else None

    def _announce(self, on_started: Callable[[JsonValue], None], folder: Path) -> Callable[[int], None]:
        def started(pid: int) -> None:
            process = LocalProcess.of(pid, folder)
            if process is None:
                return
            try:
                on_started(process.to_json())
            except Exception as error:  # noqa: BLE001 - the job is running: never orphan it over this
                self.log.warning("Could not record spark-submit (pid %s) for a later try: %s", pid, error)

        return started

    def reattach(self, stored: JsonValue) -> bool:
        """Wait here for the spark-submit an earlier try started (stored by ``on_started``) and clean up
        after it, so that this try plans from the table as that job left it.

        A process that ran on another machine cannot be waited for: this try then starts its own job,
        and the run key keeps the change to one commit.
        """
        process = LocalProcess.from_json(stored)
        if process is None:
            return False
        if not process.is_here():
            self.log.info(
                "The earlier try's spark-submit (pid %s) ran on %s, not on this machine: this try cannot "
                "wait for it and starts its own job (the run key keeps a change to one commit).",
                process.pid,
                process.host,
            )
            return False
        record = self.wait_for(process)
        if record is None:
            self.log.info("The earlier try's job (pid %s) left no result.", process.pid)
            return True
        self.log.info(
            "The earlier try's job (pid %s) ended: %s%s.",
            process.pid,
            record.outcome.value,
            f" ({record.error_type}: {record.error_message})" if record.error_type else "",
        )
        return True

    def wait_for(self, process: LocalProcess, poll_interval: float = 1.0) -> JobRecord | None:
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
