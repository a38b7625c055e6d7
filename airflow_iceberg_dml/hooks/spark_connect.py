"""Runs one job spec as a Spark Connect client from the Airflow worker, in a session of its own.

A ``spark_connect`` connection (the Spark provider's type: host, port, token, TLS, user) names a
long-running Spark Connect server. Instead of starting a Spark application per task, the job's code
(:mod:`airflow_iceberg_dml.jobs.dml`, :mod:`~airflow_iceberg_dml.jobs.maintenance`) runs here and
sends its plans to that server: no JVM starts, so a small change costs seconds.

Each job gets a new server session (``SparkSession.builder.remote(...).create()``): its settings
(the catalog, when the server does not define it, and the commit tags), temporary views and
running operations are its own, and the session is released when the job ends, whatever happens.
The session id is reported as soon as the session exists (``on_started``), so that a retry after a
killed worker can interrupt what that session still runs before it plans again
(:meth:`IcebergSparkConnectHook.reattach`); the run key keeps the change to one commit either way.

Secrets: the connection's token travels in the connection URL to the server only, and catalog
credentials in the session's settings over the same channel; neither is logged, put on a command
line or returned.
"""

from __future__ import annotations

import importlib
import socket
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.sdk import BaseHook

from airflow_iceberg_dml.catalog_config import ICEBERG_EXTENSIONS
from airflow_iceberg_dml.compat import bound_connect_retries, get_confs, set_confs
from airflow_iceberg_dml.conflicts import ENGINE_RESTARTED, engine_unreachable, lost_engine_cause
from airflow_iceberg_dml.exceptions import (
    SparkConnectServerError,
    SparkConnectUnavailableError,
    SparkJobError,
)
from airflow_iceberg_dml.hooks.connect_session import (
    DEFAULT_UNREACHABLE_TIMEOUT_S,
    ConnectSession,
    connect_session,
    connection_url,
    open_session,
    retry_schedule,
    version_mismatch,
)
from airflow_iceberg_dml.jobs.runner import APPLICATION_ID, remember_application_id
from airflow_iceberg_dml.spec import Outcome

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from airflow.sdk import Connection
    from pydantic import JsonValue
    from pyspark.sql.connect.session import SparkSession

    from airflow_iceberg_dml.catalog_config import CatalogConfig
    from airflow_iceberg_dml.exceptions import IcebergDmlError
    from airflow_iceberg_dml.spec import JobRecord, JobSpec

__all__ = [
    "CONN_TYPE",
    "DEFAULT_PORT",
    "DEFAULT_UNREACHABLE_TIMEOUT_S",
    "ConnectSession",
    "IcebergSparkConnectHook",
    "connect_session",
    "open_session",
    "retry_schedule",
    "version_mismatch",
]

CONN_TYPE = SparkConnectHook.conn_type
#: Spark Connect's port when the connection names none.
DEFAULT_PORT = 15002


def _job_runner(application: str) -> Callable[[Any, Any], JobRecord]:
    """The ``run_spec`` of the job a spec names: the module spark-submit runs as a driver, imported."""
    name = application.removesuffix(".py")
    if not name.isidentifier():
        raise ValueError(f"No job runs {application!r} over Spark Connect.")
    run_spec: Callable[[Any, Any], JobRecord] = importlib.import_module(
        f"airflow_iceberg_dml.jobs.{name}"
    ).run_spec
    return run_spec


class IcebergSparkConnectHook(BaseHook):
    """The warm engine: runs a job spec over Spark Connect and returns its :class:`JobRecord`.

    :param spark_conn_id: A ``spark_connect`` connection: host (``sc://`` optional), port, token
        (the password field), user id (the login field), ``use_ssl`` extra.
    :param spark_conf: Spark SQL settings for the job's session (``spark.sql.*`` runtime settings; a
        server-wide setting such as ``spark.executor.memory`` belongs to the server's start).
    :param task_spark_conf: Ignored: the task's ``spark.openlineage.*`` settings are read by a
        listener when a Spark application starts, and one server runs the jobs of many tasks; the
        task's own lineage events name the job's commit.
    """

    conn_type = CONN_TYPE
    conn_name_attr = "spark_conn_id"
    default_conn_name = "spark_connect_default"
    hook_name = "Iceberg DML over Spark Connect"
    state_key: ClassVar[str] = "iceberg_dml_spark_connect"

    def __init__(
        self,
        spark_conn_id: str,
        spark_conf: Mapping[str, Any] | None = None,
        task_spark_conf: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.spark_conn_id = spark_conn_id
        self.spark_conf = {key: str(value) for key, value in (spark_conf or {}).items()}
        self._session: SparkSession | None = None

    # -- sessions ---------------------------------------------------------------------------------

    @cached_property
    def _connection(self) -> Connection:
        """The connection, read once: a job reads its URL and extra in its turn on the table."""
        return self.get_connection(self.spark_conn_id)

    def unreachable_timeout(self) -> float:
        """Seconds the job's client retries a server it cannot reach (extra ``unreachable_timeout``)."""
        extra = self._connection.extra_dejson
        value = extra.get("unreachable_timeout", DEFAULT_UNREACHABLE_TIMEOUT_S)
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise SparkConnectServerError(
                f"Connection {self.spark_conn_id!r}: unreachable_timeout={value!r} is not a number of "
                "seconds."
            ) from None
        if seconds < 0:
            raise SparkConnectServerError(
                f"Connection {self.spark_conn_id!r}: unreachable_timeout must be >= 0."
            )
        return seconds

    def _bound(self, spark: SparkSession, budget_s: float) -> None:
        retries, longest = retry_schedule(budget_s)
        if not bound_connect_retries(spark, retries, longest):
            self.log.warning(
                "This PySpark cannot bound its Spark Connect retries: a lost server takes minutes."
            )

    def _url(self, session_id: str | None = None) -> tuple[str, str]:
        """(connection URL, token included: never log it; the server as ``host:port`` for the log)."""
        url = connection_url(self._connection)
        server = url.removeprefix("sc://").split("/", 1)[0]
        if session_id is not None:
            url = f"{url};session_id={session_id}"  # the provider's URL ends in "/" or its parameters
        return url, server

    def _server(self) -> str:
        """The server as ``host:port``, or what the connection lacks (for an error message)."""
        try:
            return self._url()[1]
        except Exception as error:  # noqa: BLE001 - the message names the connection either way
            return f"(no address: {str(error)[:100]})"

    def _check_reachable(self, server: str, timeout_s: float = 10.0) -> None:
        """Fail at once, and retryably, when nothing listens where the connection points.

        PySpark's client retries an unreachable server with a growing backoff for minutes; a task is
        better failed now and retried by Airflow with its own policy.
        """
        host, separator, port = server.rpartition(":")
        if not separator:
            host, port = server, ""
        try:
            socket.create_connection((host.strip("[]"), int(port or DEFAULT_PORT)), timeout=timeout_s).close()
        except OSError as error:
            raise SparkConnectUnavailableError(
                f"The Spark Connect server {server} (connection {self.spark_conn_id!r}) cannot be reached: "
                f"{error}. Is it running? The local engine starts with: python -m "
                "airflow_iceberg_dml.engine start"
            ) from None

    def _prepare_session(self, spark: SparkSession, server: str, catalog: CatalogConfig) -> None:
        """Refuse a server this client cannot drive, or one without Iceberg, before sending any job; then
        use the server's catalog of this name, else register the connection's for this session, and set
        the task's ``spark_conf``. The server's settings are read in one request, the application id with
        them (the job asks for it next): every job opens a session of its own, while the table's turn is
        held, and a catalog has a dozen properties, set in one request too."""
        import pyspark

        problem = version_mismatch(pyspark.__version__, spark.version)  # a lost server: the caller says so
        if problem:
            raise SparkConnectServerError(problem)
        key = f"spark.sql.catalog.{catalog.name}"
        settings = get_confs(spark, ["spark.sql.extensions", key, APPLICATION_ID])
        if ICEBERG_EXTENSIONS not in (settings["spark.sql.extensions"] or "").split(","):
            raise SparkConnectServerError(
                f"The Spark Connect server {server} was started without Iceberg: its "
                f"spark.sql.extensions does not include {ICEBERG_EXTENSIONS}. Start it with the "
                "iceberg-spark-runtime jar for its Spark version and that extension (python -m "
                "airflow_iceberg_dml.engine start does both)."
            )
        if app_id := settings[APPLICATION_ID]:
            remember_application_id(spark, app_id)
        if settings[key]:
            self.log.info("Catalog %r: the one the Spark Connect server defines.", catalog.name)
        else:
            self.log.info(
                "Catalog %r: registered for this session from the catalog connection.", catalog.name
            )
            set_confs(spark, catalog.spark_properties())
        if not self.spark_conf:
            return
        try:
            set_confs(spark, self.spark_conf)
        except Exception:
            self._name_refused_setting(spark)
            raise

    def _name_refused_setting(self, spark: SparkSession) -> None:
        """Set ``spark_conf`` one key at a time, to name the one the session refuses (never retried)."""
        for name, value in self.spark_conf.items():
            try:
                spark.conf.set(name, value)
            except Exception as error:  # noqa: BLE001 - named with the setting, never retried
                raise SparkConnectServerError(
                    f"spark_conf {name!r} cannot be set in a Spark Connect session ({str(error)[:200]}); "
                    "set it when the server starts."
                ) from None

    # -- running a job ------------------------------------------------------------------------------

    def submit(
        self,
        spec: JobSpec,
        catalog: CatalogConfig,
        name: str,
        on_started: Callable[[JsonValue], None] | None = None,
    ) -> JobRecord:
        """Run the job in a new session; returns its record, raises the job's own error class.

        ``on_started`` is told the session (:class:`ConnectSession` as JSON) once it exists, for a
        later try to :meth:`reattach`; an error it raises is logged, not raised.
        """
        from airflow_iceberg_dml.jobs.runner import log_to, lost_engine, quiet_analysis_errors
        from airflow_iceberg_dml.jobs.table_state import metadata_through

        run_spec = _job_runner(spec.application)
        quiet_analysis_errors()
        url, server = self._url()
        budget = self.unreachable_timeout()
        self._check_reachable(server)
        spark = open_session(url)
        self._bound(spark, budget)
        self._session = spark
        lost: BaseException | None = None
        try:
            session = ConnectSession(server=server, session_id=spark.session_id)
            self.log.info("Spark Connect: job %s in session %s on %s", name, session.session_id, server)
            if on_started is not None:
                try:
                    on_started(session.to_json())
                except Exception as error:  # noqa: BLE001 - the job is about to run: never lose it over this
                    self.log.warning("Could not record the Spark Connect session for a later try: %s", error)
            try:
                self._prepare_session(spark, server, catalog)
            except Exception as error:
                if not engine_unreachable(error):
                    raise
                lost = lost_engine(error, "before the job's first statement")
            else:
                with log_to(self.log.info), metadata_through(catalog):
                    record = run_spec(spark, spec)
        finally:
            self._session = None
            self._release(spark)
        if lost is None and record.outcome is Outcome.FAILED:
            failure = record.error()
            if not isinstance(failure, SparkConnectUnavailableError):
                raise failure
            lost = failure
        if lost is not None:
            self._release_again(session)
            raise self._lost(server, budget, lost) from lost
        return record

    def _release_again(self, session: ConnectSession) -> None:
        """Release ``session`` by its id from a new client, once the job's own client has stopped.

        A client that lost its server keeps retrying within its budget; when a supervisor has started
        the server again meanwhile, a retried request opens the session there under the same id, and
        the job's own release may have been refused or sent before it. Releasing an id the server does
        not hold changes nothing.
        """
        try:
            url, _ = self._url(session.session_id)
            spark = open_session(url)
        except Exception as error:  # noqa: BLE001 - nothing to release on a server that cannot be reached
            self.log.debug(
                "Could not reach the server again to release session %s: %s", session.session_id, error
            )
            return
        self._release(spark)

    def _lost(self, server: str, budget: float, cause: BaseException) -> SparkConnectUnavailableError:
        """The task's error for an engine lost under its job (before its first statement or while it
        ran, as ``cause`` says): gone for the whole budget, or restarted."""
        what = (  # ``cause`` is the job's own error (jobs/runner.py's lost_engine)
            ENGINE_RESTARTED
            if ENGINE_RESTARTED in str(cause)
            else f"it did not answer for {budget:g}s, the connection's unreachable_timeout"
        )
        return SparkConnectUnavailableError(
            f"The Spark Connect engine at {server} (connection {self.spark_conn_id!r}) was lost under "
            f"the job ({what}). A retry applies the change once: a commit that landed first is found by its "
            "run key. Check the engine with `make engine-status` (python -m airflow_iceberg_dml.engine "
            "status), or the server's own status on a cluster."
        )

    def _release(self, spark: SparkSession) -> None:
        """End the session on the server: anything it still runs is interrupted there."""
        self._bound(spark, 0)  # a server that is gone is not waited for again
        try:
            spark.stop()
        except Exception as error:  # noqa: BLE001 - the server drops idle sessions by itself
            self.log.debug("Releasing the Spark Connect session failed: %s", error)

    @property
    def remote_application_id(self) -> str | None:
        """None: every job over Spark Connect leaves its record, with the server's application id."""
        return None

    def failure(self, error: Exception) -> IcebergDmlError:
        """The server could not be reached or was lost (retryable, with what to check), or failed."""
        first_line = (str(error).splitlines() or [""])[0][:300]
        if engine_unreachable(error):
            return SparkConnectUnavailableError(
                f"The Spark Connect server {self._server()} (connection {self.spark_conn_id!r}) was lost: "
                f"{lost_engine_cause(error)}. Check it with `make engine-status` (python -m "
                "airflow_iceberg_dml.engine status)."
            )
        return SparkJobError(
            f"The job failed on the Spark Connect server: {type(error).__name__}: {first_line}"
        )

    def reattach(self, stored: JsonValue) -> bool:
        """Interrupt whatever the session an earlier try stored still runs, and release it.

        The earlier try's commit, if it landed, is then found by its run key like any other.
        """
        session = ConnectSession.from_json(stored)
        if session is None:
            return False
        self.interrupt(session)
        return True

    def interrupt(self, session: ConnectSession) -> list[str]:
        """Interrupt what ``session`` still runs and release it; the ids of the operations interrupted
        (none when the session had ended)."""
        try:
            url, server = self._url(session.session_id)
            spark = open_session(url)
        except Exception as error:  # noqa: BLE001 - nothing to interrupt when it cannot be reached
            self.log.info("The earlier try's Spark Connect session %s: %s", session.session_id, error)
            return []
        try:
            interrupted = [str(operation) for operation in spark.interruptAll()]
        except Exception as error:  # noqa: BLE001 - a released or expired session runs nothing
            self.log.info(
                "The earlier try's Spark Connect session %s has ended (%s).",
                session.session_id,
                str(error).splitlines()[0][:200],
            )
            self._release(spark)  # this client's channel, at least
            return []
        self.log.info(
            "The earlier try's Spark Connect session %s on %s: %s; releasing it.",
            session.session_id,
            server,
            f"interrupted {len(interrupted)} running operation(s)" if interrupted else "nothing running",
        )
        self._release(spark)
        return interrupted

    def on_kill(self) -> None:
        """Interrupt every operation of the job's session; releasing it follows as the job unwinds."""
        spark = self._session
        if spark is None:
            return
        try:
            interrupted = spark.interruptAll()
            self.log.info("Interrupted %d Spark Connect operation(s).", len(interrupted))
        except Exception as error:  # noqa: BLE001 - the session may already be gone
            self.log.warning("Could not interrupt the Spark Connect session: %s", error)
