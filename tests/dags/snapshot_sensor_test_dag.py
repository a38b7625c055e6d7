"""DAG run by tests/test_snapshot_sensor.py: a deferrable snapshot sensor, through Airflow's deferral."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_iceberg_dml.sensors.snapshot import IcebergSnapshotSensor

with DAG(
    "snapshot_sensor_deferred_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": "tests.sensor", "batch": "b-1", "after": None},
) as dag:
    wait = IcebergSnapshotSensor(
        task_id="wait",
        table="{{ params.table }}",
        newer_than_snapshot_id="{{ params.after }}",
        operations="append",
        summary={"batch": "{{ params.batch }}"},
        deferrable=True,
        poke_interval=0.5,
        timeout=300,
    )

    @task
    def pinned(match: dict) -> int:
        """What a downstream DML task would pass as ``expected_snapshot_id``."""
        return int(match["snapshot_id"])

    pinned(wait.output)
