"""Provider metadata, registered under the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_iceberg_dml import __version__

_CONFIG: dict[str, Any] = {
    "iceberg_dml": {
        "description": "Settings of the airflow-iceberg-dml provider.",
        "options": {
            "erasure_report_location": {
                "description": (
                    "Folder (a local path or a URI the catalog's storage can write) where every "
                    "IcebergEraseOperator writes its reports, unless the task gives report_location. "
                    "Default: _erasure_reports at the root of the catalog's warehouse."
                ),
                "version_added": "0.1.0",
                "type": "string",
                "example": "s3://privacy-audit/erasure-reports",
                "default": None,
            },
            "preload_task_modules": {
                "description": (
                    "Import the modules the package's tasks need (the operators, pyiceberg, the Spark "
                    "Connect client) in the scheduler before its LocalExecutor forks its workers, so that "
                    "each task process inherits them instead of importing them: about 1.7 s less CPU "
                    "per DML task on the benchmark machine. The scheduler's memory grows by what they "
                    "take once (about 150 MiB), shared with the workers. Only a scheduler whose "
                    "executor forks is affected."
                ),
                "version_added": "0.1.0",
                "type": "boolean",
                "example": "False",
                "default": "True",
            },
            "hold_task_output_until_exit": {
                "description": (
                    "Start, with each of the package's tasks, a small process that holds the task's "
                    "output open until the task process has exited. Airflow's task supervisor otherwise "
                    "can find the process not yet exited when its output ends, and sleep "
                    "[workers] min_heartbeat_interval (5 s) before it frees the executor's slot: half "
                    "the DML tasks of a backfill did. Linux 5.3 or later; elsewhere nothing is started."
                ),
                "version_added": "0.1.0",
                "type": "boolean",
                "example": "False",
                "default": "True",
            },
        },
    }
}


#: Every module of ``operators/`` that defines an operator (tests/test_structure.py checks the list).
_OPERATOR_MODULES = (
    "airflow_iceberg_dml.operators.base",
    "airflow_iceberg_dml.operators.dml",
    "airflow_iceberg_dml.operators.dml_turn",
    "airflow_iceberg_dml.operators.delete",
    "airflow_iceberg_dml.operators.update",
    "airflow_iceberg_dml.operators.merge",
    "airflow_iceberg_dml.operators.overwrite",
    "airflow_iceberg_dml.operators.compaction",
    "airflow_iceberg_dml.operators.maintenance_base",
    "airflow_iceberg_dml.operators.maintenance",
    "airflow_iceberg_dml.operators.erase",
    "airflow_iceberg_dml.operators.check",
)


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
        "config": _CONFIG,
        "operators": [
            {
                "integration-name": "Apache Iceberg DML",
                "python-modules": list(_OPERATOR_MODULES),
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
