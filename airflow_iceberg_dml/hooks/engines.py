"""The engine seam: one small protocol for "run this job spec and give me its record", and one factory.

An engine is where a job's Spark code runs. Two ship with the package:

- :class:`~airflow_iceberg_dml.hooks.spark_submit.IcebergSparkSubmitHook`: a Spark application per
  job through spark-submit (local, standalone, YARN, Kubernetes); the default, for a ``spark``
  connection or none at all;
- :class:`~airflow_iceberg_dml.hooks.spark_connect.IcebergSparkConnectHook`: the same job as a client
  of a warm Spark Connect server, for a ``spark_connect`` connection.

The operators hold a :class:`SparkEngine` from :func:`engine_for` and never ask which one it is.
Adding an engine is one class that satisfies the protocol and one line in :data:`ENGINES`
(docs/engines.md states the contract).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_iceberg_dml.hooks.spark_connect import IcebergSparkConnectHook
from airflow_iceberg_dml.hooks.spark_submit import IcebergSparkSubmitHook

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pydantic import JsonValue

    from airflow_iceberg_dml.catalog_config import CatalogConfig
    from airflow_iceberg_dml.exceptions import IcebergDmlError
    from airflow_iceberg_dml.spec import JobRecord, JobSpec


class SparkEngine(Protocol):
    """What the operators need of an engine. Every method may be called from the Airflow worker only."""

    #: Key of the task state store under which a running job is kept for a later try. Renaming it
    #: strands the jobs that running tries stored under the old name.
    state_key: ClassVar[str]

    def submit(
        self,
        spec: JobSpec,
        catalog: CatalogConfig,
        name: str,
        on_started: Callable[[JsonValue], None] | None = None,
    ) -> JobRecord | None:
        """Run the job to its end. Returns its record, or None when the driver ran remotely and left
        none. Raises the package's error the job reported (its class and ``retryable`` flag kept).
        ``on_started`` is told, once, what a later try needs to find this job again (JSON)."""
        ...

    def reattach(self, stored: JsonValue) -> bool:
        """Deal with the job an earlier try stored with ``on_started``: wait for it, or stop it, so
        that this try plans from the table as that job left it. False when there was nothing this
        engine could do (nothing it understands was stored, or the job ran on another machine)."""
        ...

    def on_kill(self) -> None:
        """Stop the running job (Airflow killed the task)."""
        ...

    @property
    def remote_application_id(self) -> str | None:
        """The Spark application id of a job whose driver ran remotely (no record), when known."""
        ...

    def failure(self, error: Exception) -> IcebergDmlError:
        """The package error for an exception that escaped the engine itself (not a failure the job
        reported): retryable when the engine was unreachable or lost, with what to check."""
        ...


class EngineFactory(Protocol):
    """How the factory makes an engine: the Spark connection, the user's ``spark_conf``, and the
    settings the task adds for a Spark application of its own (OpenLineage's parent job)."""

    state_key: str

    def __call__(
        self,
        spark_conn_id: str,
        spark_conf: Mapping[str, Any] | None = None,
        task_spark_conf: Mapping[str, str] | None = None,
    ) -> SparkEngine: ...


#: Spark connection type -> engine. A connection of any other type, or none, runs through spark-submit.
ENGINES: dict[str, EngineFactory] = {
    IcebergSparkConnectHook.conn_type: IcebergSparkConnectHook,
}
#: The engine for a ``spark`` connection, an unknown type, or no connection at all.
DEFAULT_ENGINE: EngineFactory = IcebergSparkSubmitHook


def engine_type(spark_conn_id: str) -> EngineFactory:
    """The engine class the connection's type names (spark-submit when there is no such connection)."""
    try:
        conn_type = BaseHook.get_connection(spark_conn_id).conn_type
    except AirflowNotFoundException:
        return DEFAULT_ENGINE
    return ENGINES.get(conn_type or "", DEFAULT_ENGINE)


def engine_for(
    spark_conn_id: str,
    spark_conf: Mapping[str, Any] | None = None,
    task_spark_conf: Mapping[str, str] | None = None,
) -> SparkEngine:
    """The engine that runs jobs for ``spark_conn_id``; ``spark_conf`` wins over ``task_spark_conf``."""
    return engine_type(spark_conn_id)(spark_conn_id, spark_conf, task_spark_conf)


def known_engines() -> tuple[EngineFactory, ...]:
    """Every engine, default first: a retry looks for what an earlier try stored under each key."""
    return (DEFAULT_ENGINE, *ENGINES.values())
