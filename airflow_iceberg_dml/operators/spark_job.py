"""One lifecycle for every operator that runs a Spark job: DELETE, UPDATE, and table maintenance.

:class:`BaseIcebergSparkJobOperator` owns the order of things, the same for every job kind::

    execute
      bad input fails the task (operators/failures.py), anything retryable is raised as it is
      re-attach: wait for the spark-submit an earlier try left running here, or interrupt its
                 Spark Connect session (task state store)
      load the table (IcebergCatalogHook)
      plan(context, table)        -> the operator: a job spec (build_spec), or a result with no job
      submit                      -> the engine the Spark connection names: IcebergSparkSubmitHook
                                     (a Spark application per job) or IcebergSparkConnectHook (the
                                     same job as a client of a warm Spark Connect server); its
                                     process or session kept in the task state store
      collect(record)             -> the operator: the table's history read back, then to_result
      report(result)              -> the operator: asset event, log lines

Each operator supplies a public, pure ``build_spec(context, table)`` (the typed spec of
:mod:`airflow_iceberg_dml.spec`, validating its input) and ``to_result(record, ...)`` (the task's
XCom value from the job's record and the snapshots read back), and ``plan`` / ``collect`` around
them for the reads they need. Which commits are this run's is answered by
:mod:`airflow_iceberg_dml.commits` (:meth:`BaseIcebergSparkJobOperator.find_commits`).

Durable re-attach uses Airflow's task state store as documented (``context["task_state_store"]``:
``get``, ``set``, ``delete``), not ``ResumableJobMixin``: the mixin stores an external id that
``submit_job`` returns before polling starts, and polls that id from any machine. spark-submit
through the Spark provider's hook returns only when the job has ended, and a spark-submit process
can only be waited for on its own machine: what a retry needs is that process (pid, start time,
boot id, private folder), stored the moment it spawns, which the hook reports through a callback.
Over Spark Connect a retry needs the earlier session's id, to interrupt what it still runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from airflow.sdk import BaseHook, BaseOperator
from airflow.sdk.exceptions import AirflowNotFoundException, AirflowRuntimeError

from airflow_iceberg_dml.commits import CommitMarks
from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_dml.hooks.spark_connect import ConnectSession, IcebergSparkConnectHook, is_spark_connect
from airflow_iceberg_dml.hooks.spark_submit import IcebergSparkSubmitHook, LocalProcess
from airflow_iceberg_dml.operators.failures import bad_input_fails_the_task
from airflow_iceberg_dml.spec import RunKey
from airflow_iceberg_dml.sql import split_table_name

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from airflow.sdk import Context
    from pydantic import JsonValue
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from airflow_iceberg_dml.spec import JobRecord, JobSpec

BeforeT = TypeVar("BeforeT")
ResultT = TypeVar("ResultT")

#: Task state store key of the running spark-submit. Renaming it strands the processes that
#: running tries have stored under the old name.
SPARK_SUBMIT_STATE_KEY = "iceberg_dml_spark_submit"
#: Task state store key of the job's Spark Connect session (same caveat).
SPARK_CONNECT_STATE_KEY = "iceberg_dml_spark_connect"


def is_template(value: object) -> bool:
    """Whether ``value`` is a Jinja template still to be rendered."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def run_key(context: Context) -> RunKey:
    """The run key of the task instance in ``context``: dag, task, run, map index (not the try)."""
    ti = context["ti"]
    return RunKey(ti.dag_id, ti.task_id, ti.run_id, ti.map_index if ti.map_index is not None else -1)


def commit_properties(context: Context, own: Mapping[str, str] | None = None) -> dict[str, str]:
    """The summary entries of every commit the job makes: ``own``, then the run key and the try."""
    return {**(own or {}), **run_key(context).summary_properties(context["ti"].try_number)}


class TaskStateStore(Protocol):
    """What the operators use of Airflow's ``context["task_state_store"]``."""

    def get(self, key: str, default: JsonValue = None) -> JsonValue: ...

    def set(self, key: str, value: JsonValue) -> None: ...

    def delete(self, key: str) -> None: ...


@dataclass(frozen=True)
class JobPlan(Generic[BeforeT]):
    """A job to submit, and what the worker read of the table before it (the head, the health)."""

    spec: JobSpec
    before: BeforeT


class BaseIcebergSparkJobOperator(BaseOperator, Generic[BeforeT, ResultT]):
    """Base of every operator that runs an Iceberg job on Spark: through spark-submit, or over Spark Connect.

    :param table: ``namespace.table`` in the catalog of ``catalog_conn_id``. (templated)
    :param catalog_conn_id: ``iceberg`` connection; also the catalog name unless its extra ``catalog-name``
        names it. ``iceberg_default`` with no such connection is the embedded SQLite catalog; any other id
        must exist (``CatalogConnectionNotFoundError``, no retry).
    :param spark_conn_id: Which engine runs the job. A ``spark`` connection: a Spark application per
        job through spark-submit (with no such connection, ``local[*]``). A ``spark_connect``
        connection: the same job as a client of that Spark Connect server, in a session of its own
        (no JVM start per task; see docs/engines.md).
    :param spark_conf: Extra Spark configuration for this job (kept off the command line). Over
        Spark Connect, session settings only (``spark.sql.*``).
    :param durable: When True (default) and Airflow has a task state store (Airflow 3.3+), the
        spark-submit process (or the Spark Connect session) is recorded there as soon as it starts.
        A retry on the same machine whose earlier try's worker died while that spark-submit went on
        re-attaches: it waits for that job instead of starting another, removes its private folder,
        then goes on from the table as that job left it. Over Spark Connect, a retry on any machine
        interrupts what the earlier try's session still runs, then goes on the same way.
    """

    template_fields: Sequence[str] = ("table",)
    #: The Spark application is named ``<prefix>-<dag_id>-<task_id>``.
    application_name_prefix: ClassVar[str] = "iceberg"

    def __init__(
        self,
        *,
        table: str,
        catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        durable: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not is_template(table):
            split_table_name(table)  # a malformed name fails when the DAG is parsed
        self.table = table
        self.catalog_conn_id = catalog_conn_id
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf
        self.durable = durable
        self._spark_hook: IcebergSparkSubmitHook | None = None
        self._connect_hook: IcebergSparkConnectHook | None = None

    # -- what each operator supplies ----------------------------------------------------------------

    def plan(
        self, context: Context, catalog_hook: IcebergCatalogHook, table: Table, started: float
    ) -> JobPlan[BeforeT] | ResultT:
        """The job to run (its spec from ``build_spec``), or the task's result when none is needed."""
        raise NotImplementedError

    def collect(
        self,
        context: Context,
        catalog_hook: IcebergCatalogHook,
        plan: JobPlan[BeforeT],
        record: JobRecord | None,
        started: float,
    ) -> ResultT:
        """The task's result once the job ended: the table read back, then ``to_result``.

        ``record`` is the job's own report, None when its driver ran remotely.
        """
        raise NotImplementedError

    def report(self, context: Context, result: ResultT) -> None:
        """Tell the world about the result (asset events, log lines); nothing by default."""

    def job_spark_conf(self, context: Context) -> dict[str, str]:
        """Spark settings this task adds for a spark-submit job (OpenLineage's parent job, when the
        operator reports lineage); ``spark_conf`` wins over them. Nothing by default."""
        return {}

    # -- the lifecycle ---------------------------------------------------------------------------------

    def execute(self, context: Context) -> ResultT:
        started = time.monotonic()
        with bad_input_fails_the_task():
            catalog_hook = IcebergCatalogHook(self.catalog_conn_id)
            store = self._task_state_store(context)
            self._reattach(store)  # what follows sees the table as that earlier job left it
            table = catalog_hook.load_table(self.table)
            planned = self.plan(context, catalog_hook, table, started)
            if isinstance(planned, JobPlan):
                ti = context["ti"]
                name = f"{self.application_name_prefix}-{ti.dag_id}-{ti.task_id}"
                record = self._submit(planned.spec, catalog_hook, name, store, context)
                result = self.collect(context, catalog_hook, planned, record, started)
            else:
                result = planned
            self.report(context, result)
            return result

    def find_commits(
        self,
        catalog_hook: IcebergCatalogHook,
        table: Table,
        key: RunKey,
        branch: str | None = None,
        since: int | None = None,
    ) -> list[Snapshot]:
        """This run's commits on ``branch`` after snapshot ``since``, newest first, from the table's
        history: the ones carrying the run key, else (a metadata-only delete that Spark planned by
        itself carries none) the ones of the Spark application a remote driver ran as."""
        commits = catalog_hook.find_commits(table, CommitMarks(run_key=key), branch, stop_at=since)
        application_id = self._spark_hook.remote_application_id if self._spark_hook else None
        if commits or not application_id:
            return commits
        by_application = CommitMarks(spark_app_id=application_id)
        return catalog_hook.find_commits(table, by_application, branch, stop_at=since)

    def on_kill(self) -> None:
        """Stop the Spark application of this task, or interrupt its Spark Connect operations."""
        if self._spark_hook is not None:
            self._spark_hook.on_kill()
        if self._connect_hook is not None:
            self._connect_hook.on_kill()

    # -- spark-submit, and re-attach through the task state store ------------------------------------------

    def _task_state_store(self, context: Context) -> TaskStateStore | None:
        """Airflow's task state store (3.3+) when ``durable``; None otherwise."""
        if not self.durable:
            return None
        store = context.get("task_state_store")
        if store is None:
            self.log.debug("No task state store (Airflow 3.3+): a retry cannot re-attach to this job.")
        return store

    def uses_spark_connect(self) -> bool:
        """Whether ``spark_conn_id`` names a Spark Connect server (else: spark-submit)."""
        try:
            conn = BaseHook.get_connection(self.spark_conn_id)
        except AirflowNotFoundException:
            return False
        return is_spark_connect(conn.conn_type)

    def _submit(
        self,
        spec: JobSpec,
        catalog_hook: IcebergCatalogHook,
        name: str,
        store: TaskStateStore | None,
        context: Context,
    ) -> JobRecord | None:
        """Run the job on the engine of ``spark_conn_id``, its process or session recorded in ``store``."""
        hook: IcebergSparkConnectHook | IcebergSparkSubmitHook
        if self.uses_spark_connect():
            # No spark.openlineage.* here: a listener reads them when the server starts, and one
            # server runs the jobs of many tasks; the task's own events name the job's commit.
            hook = self._connect_hook = IcebergSparkConnectHook(self.spark_conn_id, self.spark_conf)
            key = SPARK_CONNECT_STATE_KEY
        else:
            conf = {**self.job_spark_conf(context), **(self.spark_conf or {})}
            hook = self._spark_hook = IcebergSparkSubmitHook(self.spark_conn_id, conf)
            key = SPARK_SUBMIT_STATE_KEY
        try:
            return hook.submit(
                spec,
                catalog_hook.catalog_config,
                name=name,
                on_started=None if store is None else partial(_remember, store, key),
            )
        finally:
            self._forget(store, key)

    def _forget(self, store: TaskStateStore | None, key: str) -> None:
        if store is None:
            return
        try:
            store.delete(key)
        except AirflowRuntimeError as error:
            self.log.warning("Could not clear the task state store's %r: %s", key, error)

    def _reattach(self, store: TaskStateStore | None) -> bool:
        """Deal with the job an earlier try left: wait for its spark-submit here, or interrupt its Spark
        Connect session; True when there was one."""
        if store is None:
            return False
        try:
            process = LocalProcess.from_json(store.get(SPARK_SUBMIT_STATE_KEY))
            session = ConnectSession.from_json(store.get(SPARK_CONNECT_STATE_KEY))
        except AirflowRuntimeError as error:
            self.log.warning("Could not read the task state store: %s. Not re-attaching.", error)
            return False
        if session is not None:
            IcebergSparkConnectHook(self.spark_conn_id, self.spark_conf).reattach(session)
            self._forget(store, SPARK_CONNECT_STATE_KEY)
            return True
        if process is None:
            return False
        if not process.is_here():
            self.log.info(
                "The earlier try's spark-submit (pid %s) ran on %s, not on this machine: this try cannot "
                "wait for it and starts its own job (the run key keeps a change to one commit).",
                process.pid,
                process.host,
            )
            self._forget(store, SPARK_SUBMIT_STATE_KEY)
            return False
        self._spark_hook = IcebergSparkSubmitHook(self.spark_conn_id, self.spark_conf)
        record = self._spark_hook.reattach(process)
        self._forget(store, SPARK_SUBMIT_STATE_KEY)
        if record is None:
            self.log.info("The earlier try's job (pid %s) left no result.", process.pid)
        else:
            self.log.info(
                "The earlier try's job (pid %s) ended: %s%s.",
                process.pid,
                record.outcome.value,
                f" ({record.error_type}: {record.error_message})" if record.error_type else "",
            )
        return True


def _remember(store: TaskStateStore, key: str, job: LocalProcess | ConnectSession) -> None:
    store.set(key, job.to_json())
