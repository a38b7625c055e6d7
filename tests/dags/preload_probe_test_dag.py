"""A task that says which of the package's task modules its process had loaded when it began.

The DAG file imports nothing of the package, pyiceberg or PySpark, and the task looks at
``sys.modules`` before it imports anything itself: what it finds loaded, its process inherited from
the LocalExecutor worker it was forked from, and that worker from the scheduler (preload.py).
"""

from __future__ import annotations

import sys

import pendulum
from airflow.sdk import DAG, task

DAG_ID = "iceberg_preload_probe"

with DAG(DAG_ID, schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")):

    @task
    def loaded_at_start() -> dict[str, bool]:
        loaded = set(sys.modules)
        from airflow_iceberg_dml.preload import task_modules

        return {name: name in loaded for name in task_modules()}

    loaded_at_start()
