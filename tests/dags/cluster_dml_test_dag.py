"""DAGs run by tests/cluster: a DELETE, a sensor waiting for its commit, an UPDATE pinned to it.

The DML tasks are those of ``dml_operators_test``; only the connections differ. ``cluster_dml_embedded``
keeps the embedded catalog (``iceberg_default``), ``cluster_dml_rest`` uses the Iceberg REST catalog
with its warehouse on S3 (``iceberg_rest``) and ends with a compaction that folds the delete files
back into data files. Both submit to the ``spark_cluster`` connection.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from airflow_iceberg_dml.sensors.snapshot import IcebergSnapshotSensor


def _cluster_dml_dag(dag_id: str, catalog_conn_id: str, *, compact: bool) -> DAG:
    with DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        params={"table": "tests.cluster_orders"},
    ) as dag:
        delete = IcebergDeleteOperator(
            task_id="delete",
            table="{{ params.table }}",
            where="customer_id = :customer",
            parameters={"customer": 7},
            catalog_conn_id=catalog_conn_id,
            spark_conn_id="spark_cluster",
        )
        wait = IcebergSnapshotSensor(
            task_id="wait_for_delete",
            table="{{ params.table }}",
            catalog_conn_id=catalog_conn_id,
            run_key={"dag_id": dag_id, "task_id": "delete", "run_id": "{{ run_id }}", "map_index": -1},
            poke_interval=1,
            timeout=120,
        )
        update = IcebergUpdateOperator(
            task_id="update",
            table="{{ params.table }}",
            where="status = 'O' AND order_id <= 30",
            set={"status": "'X'", "amount": "amount + 1"},
            expected_snapshot_id="{{ ti.xcom_pull(task_ids='wait_for_delete')['snapshot_id'] }}",
            catalog_conn_id=catalog_conn_id,
            spark_conn_id="spark_cluster",
        )
        delete >> wait >> update
        if compact:
            update >> IcebergCompactionOperator(
                task_id="compact",
                table="{{ params.table }}",
                catalog_conn_id=catalog_conn_id,
                spark_conn_id="spark_cluster",
                force=True,
                rewrite_all=True,
            )
    return dag


embedded_dag = _cluster_dml_dag("cluster_dml_embedded", "iceberg_default", compact=False)
rest_dag = _cluster_dml_dag("cluster_dml_rest", "iceberg_rest", compact=True)
