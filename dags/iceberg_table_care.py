"""Nightly care of one Iceberg table: health check, compaction when needed, snapshot expiry, orphans.

1. ``health_check`` reads the table's health from its metadata only (pyiceberg, no Spark, no data
   file): delete files and deleted rows per partition, small files, manifests, snapshots,
   metadata.json size. It logs the findings and goes on to ``compact`` only when the table needs it;
   otherwise ``compact`` shows as skipped.
2. ``compact`` folds the delete files into the data files and compacts small files
   (``rewrite_data_files``, then ``rewrite_position_delete_files``, and ``rewrite_manifests`` when
   there are too many manifests), in one Spark application. It checks the health again itself and
   returns a no-op result when another run already compacted.
3. ``expire_snapshots`` removes the snapshots older than ``snapshot_max_age`` beyond the newest
   ``retain_last``; a no-op without Spark when none is that old.
4. ``remove_orphan_files`` deletes files no snapshot references that are older than
   ``orphan_min_age`` (never less than 3 days: a running write's files are not referenced yet).
   Set ``orphans_list_only`` to only list them.

The table defaults to the quickstart's ``demo.orders``; trigger with ``{"table": "ns.name"}`` for
another one, or map the tasks over several tables. ``make example DAG=iceberg_table_care`` runs it once
on ``demo.orders`` (after ``make demo``).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_iceberg_dml.health import HealthThresholds
from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
from airflow_iceberg_dml.operators.maintenance import (
    IcebergExpireSnapshotsOperator,
    IcebergRemoveOrphanFilesOperator,
)
from airflow_iceberg_dml.spec import MaintenanceProcedure

#: One set of thresholds for the branch and the compaction task: the defaults (Amoro's triggers, plus
#: compaction once half of a partition's data files carry delete files).
THRESHOLDS = HealthThresholds()

with DAG(
    "iceberg_table_care",
    description="Nightly Iceberg table care: compaction when needed, snapshot expiry, orphan files",
    schedule="0 3 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params={
        "table": Param("demo.orders", type="string", description="namespace.table"),
        "where": Param("", type="string", description="Only compact files matching this predicate"),
        "snapshot_max_age": Param("5d", type="string", description="Expire snapshots older than this"),
        "retain_last": Param(10, type="integer", minimum=1, description="Always keep this many snapshots"),
        "orphan_min_age": Param("3d", type="string", description="Only orphans older than this (>= 3d)"),
        "orphans_list_only": Param(False, type="boolean", description="List orphans, delete nothing"),
    },
    tags=["iceberg", "example", "maintenance"],
) as dag:

    @task.branch
    def health_check(**context: object) -> str:
        """Read the table's health from metadata; go to compaction only when it needs it."""
        params = context["params"]
        assert isinstance(params, dict)
        report = IcebergCatalogHook().health(params["table"], THRESHOLDS)
        print(f"{report.table}: {report.describe()} (checked in {report.check_duration_s:.3f}s)")
        for procedure, reasons in report.reasons.items():
            print(f"  needs {procedure.value}: {'; '.join(reasons)}")
        for warning in report.warnings:
            print(f"  warning: {warning}")
        needs = {MaintenanceProcedure.REWRITE_DATA_FILES, MaintenanceProcedure.REWRITE_MANIFESTS}
        return "compact" if report.needs_any(needs) else "expire_snapshots"

    compact = IcebergCompactionOperator(
        task_id="compact",
        table="{{ params.table }}",
        where="{{ params.where }}",
        partial_progress=True,
        health_thresholds=THRESHOLDS,
        snapshot_properties={"maintenance": "nightly"},
    )
    expire = IcebergExpireSnapshotsOperator(
        task_id="expire_snapshots",
        table="{{ params.table }}",
        older_than="{{ params.snapshot_max_age }}",
        retain_last="{{ params.retain_last }}",
        trigger_rule="none_failed",
    )
    orphans = IcebergRemoveOrphanFilesOperator(
        task_id="remove_orphan_files",
        table="{{ params.table }}",
        older_than="{{ params.orphan_min_age }}",
        list_only="{{ params.orphans_list_only }}",
    )

    branch = health_check()
    branch >> compact >> expire >> orphans
    branch >> expire


if __name__ == "__main__":
    run = dag.test()
    if run.state != "success":
        raise SystemExit(
            f"The table care DAG run ended {run.state} (its table, demo.orders, comes from make demo)."
        )
