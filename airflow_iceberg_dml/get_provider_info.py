"""Provider metadata, registered under the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_iceberg_dml import __version__


def get_provider_info() -> dict[str, Any]:
    # The `iceberg`, `spark` and `spark_connect` connection types belong to the official Iceberg and
    # Spark providers (dependencies of this one); registering them again would clash, so the hooks
    # below reuse them and "connection-types" stays empty.
    return {
        "package-name": "airflow-iceberg-dml",
        "name": "Iceberg row-level DML",
        "description": "Row-level DELETE, UPDATE and maintenance of Apache Iceberg tables, run on Spark.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Apache Iceberg DML",
                "external-doc-url": "https://iceberg.apache.org/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "Apache Iceberg DML",
                "python-modules": [
                    "airflow_iceberg_dml.operators.base",
                    "airflow_iceberg_dml.operators.dml",
                    "airflow_iceberg_dml.operators.delete",
                    "airflow_iceberg_dml.operators.update",
                    "airflow_iceberg_dml.operators.compaction",
                    "airflow_iceberg_dml.operators.maintenance_base",
                    "airflow_iceberg_dml.operators.maintenance",
                    "airflow_iceberg_dml.operators.erase",
                ],
            }
        ],
        "hooks": [
            {
                "integration-name": "Apache Iceberg DML",
                "python-modules": [
                    "airflow_iceberg_dml.hooks.catalog",
                    "airflow_iceberg_dml.hooks.engines",
                    "airflow_iceberg_dml.hooks.spark_submit",
                    "airflow_iceberg_dml.hooks.spark_connect",
                    "airflow_iceberg_dml.hooks.snapshot_watch",
                    "airflow_iceberg_dml.hooks.erasure_storage",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "Apache Iceberg DML",
                "python-modules": ["airflow_iceberg_dml.sensors.snapshot"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Apache Iceberg DML",
                "python-modules": ["airflow_iceberg_dml.triggers.snapshot"],
            }
        ],
        "connection-types": [],
    }
