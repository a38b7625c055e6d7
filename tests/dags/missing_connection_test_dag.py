"""DAGs run by tests/test_catalog_connection.py: every kind of task, given a mistyped catalog connection, or
a table name that renders without its namespace or names no table, or a branch that does not exist."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.check import IcebergCheckOperator
from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.maintenance import (
    IcebergExpireSnapshotsOperator,
    IcebergRemoveOrphanFilesOperator,
)
from airflow_iceberg_dml.operators.merge import IcebergMergeOperator
from airflow_iceberg_dml.operators.overwrite import IcebergOverwriteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from airflow_iceberg_dml.sensors.snapshot import IcebergSnapshotSensor

#: One letter off ``iceberg_default``. It used to mean the embedded catalog under another catalog name, so an
#: empty one: an operator said the table did not exist, a sensor waited for its timeout.
MISTYPED_CONN_ID = "iceberg_defualt"
TABLE = "tests.missing_connection"

with DAG(
    "missing_connection_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
) as dag:
    IcebergDeleteOperator(task_id="delete", table=TABLE, where="id < 2", catalog_conn_id=MISTYPED_CONN_ID)
    IcebergCompactionOperator(task_id="compact", table=TABLE, catalog_conn_id=MISTYPED_CONN_ID)
    IcebergSnapshotSensor(
        task_id="wait", table=TABLE, catalog_conn_id=MISTYPED_CONN_ID, poke_interval=1, timeout=60
    )

with DAG(
    "rendered_table_name_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
    params={"table": TABLE},
) as rendered_name_dag:
    rendered = "{{ params.table }}"
    IcebergDeleteOperator(task_id="delete", table=rendered, where="id < 2")
    IcebergUpdateOperator(task_id="update", table=rendered, where="id < 2", set={"id": "id + 100"})
    IcebergMergeOperator(
        task_id="merge",
        table=rendered,
        source_table=TABLE,
        on="t.id = s.id",
        clauses=[{"when": "matched", "then": "delete"}],
    )
    IcebergOverwriteOperator(task_id="overwrite", table=rendered, where="id < 2", source_table=TABLE)
    IcebergCompactionOperator(task_id="compact", table=rendered)
    IcebergExpireSnapshotsOperator(task_id="expire", table=rendered)
    IcebergRemoveOrphanFilesOperator(task_id="orphans", table=rendered)
    IcebergCheckOperator(
        task_id="check", table=rendered, checks={"some": {"kind": "row_count", "min_rows": 1}}
    )
    IcebergSnapshotSensor(task_id="wait", table=rendered, on_missing="fail", poke_interval=1, timeout=60)

with DAG(
    "rendered_branch_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
    params={"branch": "main"},
) as rendered_branch_dag:
    branch = "{{ params.branch }}"
    IcebergDeleteOperator(task_id="delete", table=TABLE, where="id < 2", branch=branch)
    IcebergUpdateOperator(
        task_id="update", table=TABLE, where="id < 2", set={"id": "id + 100"}, branch=branch
    )
    IcebergMergeOperator(
        task_id="merge",
        table=TABLE,
        source_table=TABLE,
        on="t.id = s.id",
        clauses=[{"when": "matched", "then": "delete"}],
        branch=branch,
    )
    IcebergOverwriteOperator(
        task_id="overwrite", table=TABLE, where="id < 2", source_table=TABLE, branch=branch
    )
    IcebergCheckOperator(
        task_id="check", table=TABLE, checks={"some": {"kind": "row_count", "min_rows": 1}}, branch=branch
    )
    IcebergSnapshotSensor(
        task_id="wait", table=TABLE, ref=branch, on_missing="fail", poke_interval=1, timeout=60
    )
