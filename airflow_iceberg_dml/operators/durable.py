"""Durable re-attach: a retry waits for the spark-submit that its killed predecessor left running.

As soon as spark-submit starts, the operator records the process (:class:`LocalProcess`) in
Airflow's task state store (Airflow 3.3+). When the worker dies while the job goes on, the next
try of the task finds the record; on the same machine it waits for that job instead of starting a
second one, and removes its private folder; the operator then goes on from the table as that job
left it (the DML operators return its commit through the run key).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from airflow.sdk.exceptions import AirflowRuntimeError

from airflow_iceberg_dml.hooks.spark_submit import IcebergSparkSubmitHook, LocalProcess

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airflow.sdk import Context
    from airflow.sdk.types import Logger
    from pydantic import JsonValue

    from airflow_iceberg_dml.catalog_config import CatalogConfig
    from airflow_iceberg_dml.spec import JobRecord, JobSpec

#: Task state store key of the running spark-submit. Renaming it strands the processes that
#: running tries have stored under the old name.
SPARK_SUBMIT_STATE_KEY = "iceberg_dml_spark_submit"


class TaskStateStore(Protocol):
    """What the operators use of Airflow's ``context["task_state_store"]``."""

    def get(self, key: str, default: JsonValue = None) -> JsonValue: ...

    def set(self, key: str, value: JsonValue) -> None: ...

    def delete(self, key: str) -> None: ...


class DurableSubmitMixin:
    """Operator side of durable re-attach, for operators that run one job through the spark-submit hook."""

    if TYPE_CHECKING:
        log: Logger
        durable: bool
        spark_conn_id: str
        spark_conf: Mapping[str, Any] | None
        _spark_hook: IcebergSparkSubmitHook | None

    def _task_state_store(self, context: Context) -> TaskStateStore | None:
        """Airflow's task state store (3.3+) when ``durable``; None otherwise."""
        if not self.durable:
            return None
        store = context.get("task_state_store")
        if store is None:
            self.log.debug("No task state store (Airflow 3.3+): a retry cannot re-attach to this job.")
        return store

    def _submit(
        self, spec: JobSpec, catalog: CatalogConfig, name: str, store: TaskStateStore | None
    ) -> JobRecord | None:
        """Run the job through a new spark-submit hook, its process recorded in ``store`` meanwhile."""
        self._spark_hook = IcebergSparkSubmitHook(self.spark_conn_id, self.spark_conf)
        try:
            return self._spark_hook.submit(
                spec, catalog, name=name, on_started=None if store is None else partial(_remember, store)
            )
        finally:
            self._forget(store)

    def _forget(self, store: TaskStateStore | None) -> None:
        if store is None:
            return
        try:
            store.delete(SPARK_SUBMIT_STATE_KEY)
        except AirflowRuntimeError as error:
            self.log.warning("Could not clear the task state store's %r: %s", SPARK_SUBMIT_STATE_KEY, error)

    def _reattach(self, store: TaskStateStore | None) -> bool:
        """Wait for the spark-submit an earlier try left running here; True when there was one."""
        if store is None:
            return False
        try:
            process = LocalProcess.from_json(store.get(SPARK_SUBMIT_STATE_KEY))
        except AirflowRuntimeError as error:
            self.log.warning("Could not read the task state store: %s. Not re-attaching.", error)
            return False
        if process is None:
            return False
        if not process.is_here():
            self.log.info(
                "The earlier try's spark-submit (pid %s) ran on %s, not on this machine: this try cannot "
                "wait for it and starts its own job (the run key keeps a change to one commit).",
                process.pid,
                process.host,
            )
            self._forget(store)
            return False
        self._spark_hook = IcebergSparkSubmitHook(self.spark_conn_id, self.spark_conf)
        record = self._spark_hook.reattach(process)
        self._forget(store)
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


def _remember(store: TaskStateStore, process: LocalProcess) -> None:
    store.set(SPARK_SUBMIT_STATE_KEY, process.to_json())
