"""A Spark Connect session of a job: its URL, opening it, what a later try keeps of it, and how long its
client keeps retrying a server it cannot reach."""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow.sdk import Connection
    from pydantic import JsonValue
    from pyspark.sql.connect.session import SparkSession

#: PySpark's Spark Connect client logger, and the variable that turns it on (PySpark's own rule).
_CLIENT_LOGGER, _CLIENT_LOG_LEVEL_ENV = "pyspark.sql.connect.logging", "SPARK_CONNECT_LOG_LEVEL"
#: How long a job's client keeps retrying a server it cannot reach before the task fails (seconds);
#: the connection's ``unreachable_timeout`` extra overrides it. PySpark's own default is minutes.
DEFAULT_UNREACHABLE_TIMEOUT_S = 30.0
#: PySpark's default retry policy: the first wait and how it grows (its ``DefaultPolicy``).
_FIRST_WAIT_MS, _WAIT_GROWTH, _WAIT_JITTER_MS = 50, 4, 500


class _ReadConnection(SparkConnectHook):
    """The provider's hook on a connection already read: its ``get_connection`` is a lookup per call
    (from a task, a request to Airflow's API server or to a secrets backend)."""

    def __init__(self, connection: Connection) -> None:
        super().__init__(connection.conn_id)
        self._connection = connection

    def get_connection(self, conn_id: str) -> Connection:  # type: ignore[override]  # needs the instance
        return self._connection


def connection_url(connection: Connection) -> str:
    """The Spark Connect URL of ``connection`` as the Spark provider builds it (token included)."""
    return _ReadConnection(connection).get_connection_url()


@dataclass(frozen=True)
class ConnectSession:
    """A job's session on a Spark Connect server, as stored for a later try (no secret in it)."""

    server: str
    session_id: str

    @classmethod
    def from_json(cls, value: JsonValue) -> ConnectSession | None:
        if not isinstance(value, dict) or not {"server", "session_id"} <= value.keys():
            return None
        return cls(server=str(value["server"]), session_id=str(value["session_id"]))

    def to_json(self) -> dict[str, JsonValue]:
        return dict(asdict(self))


def version_mismatch(client: str, server: str) -> str | None:
    """Why a PySpark client of version ``client`` should not drive a server of version ``server``.

    Spark Connect keeps its protocol compatible within a minor release; across minor releases plans
    and errors change shape, so a mismatch is refused before anything is sent.
    """
    if client.split(".")[:2] == server.split(".")[:2]:
        return None
    return (
        f"The Spark Connect server runs Spark {server} but this worker's PySpark client is {client}. "
        f"Install pyspark-client=={server.rsplit('.', 1)[0]}.* on the worker, or run a {client} server."
    )


def open_session(url: str) -> SparkSession:
    """A new session on the Spark Connect server at ``url`` (or the one its ``session_id`` names).

    Opened with Spark Connect's own builder: PySpark's ``SparkSession.builder.remote(url)`` would
    switch the whole process to Spark Connect until the session stops (an environment variable that
    ``pyspark.sql.functions`` and the next builder read), so that classic sessions this process may
    still start would build Connect columns. The jobs pick their functions per session
    (:func:`airflow_iceberg_dml.jobs.runner.functions`).
    """
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from airflow_iceberg_dml.compat import without_finalizer_close

    quiet_client_log()
    session = ConnectSession.builder.remote(url).create()
    without_finalizer_close(session)  # whoever opens it stops it (see compat)
    return session


def quiet_client_log() -> None:
    """Keep PySpark's Spark Connect client logger off, as PySpark does, unless SPARK_CONNECT_LOG_LEVEL
    turns it on.

    Airflow's logging configuration turns every logger that exists back on (``dictConfig`` keeping
    existing loggers enables them). On, that logger writes every error reply at ERROR, with a copy on
    stderr, and every ReleaseExecute that reaches the server after the session ended at WARNING: each
    task's log would show errors, although the jobs expect some (the constant-predicate probe is an
    analysis error) and report the ones that matter themselves.
    """
    if _CLIENT_LOG_LEVEL_ENV not in os.environ:
        logging.getLogger(_CLIENT_LOGGER).disabled = True


@contextmanager
def connect_session(url: str, unreachable_s: float = DEFAULT_UNREACHABLE_TIMEOUT_S) -> Iterator[SparkSession]:
    """:func:`open_session`, giving up on a lost server within ``unreachable_s``, and stopped (released
    on the server) when the block ends.

    The bound matters beyond the wait: a client still retrying when a supervisor has started the server
    again would open its session on the new server, where nobody releases it.
    """
    from airflow_iceberg_dml.compat import bound_connect_retries

    session = open_session(url)
    bound_connect_retries(session, *retry_schedule(unreachable_s))
    try:
        yield session
    finally:
        bound_connect_retries(session, *retry_schedule(0))  # a server that is gone is not waited for again
        session.stop()


def retry_schedule(budget_s: float) -> tuple[int, int]:
    """(retries, longest wait in ms) of a client that gives up on an unreachable server within
    ``budget_s``: PySpark's growing waits, jitter included, capped so that their sum stays within it."""
    budget_ms = max(0.0, budget_s * 1000)
    longest = int(min(10_000, max(_FIRST_WAIT_MS, budget_ms / 4)))
    retries, spent, wait = 0, 0.0, float(_FIRST_WAIT_MS)
    while True:
        wait_ms = min(wait, longest)
        jitter = _WAIT_JITTER_MS if wait_ms >= 2000 else 0
        if spent + wait_ms + jitter > budget_ms:
            return retries, longest
        spent += wait_ms + jitter
        retries += 1
        wait *= _WAIT_GROWTH
