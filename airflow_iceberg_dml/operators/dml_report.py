"""What a DELETE or UPDATE task says in its log once it ended: the commit, then the table's health."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_iceberg_dml.spec import MaintenanceProcedure

if TYPE_CHECKING:
    from airflow.sdk.types import Logger

    from airflow_iceberg_dml.result import DmlResult


def log_dml_result(log: Logger, table: str, result: DmlResult) -> None:
    if result["noop"]:
        log.info("No-op: nothing matched; %s stays on snapshot %s.", table, result["snapshot_id"])
        return
    log.info(
        "Committed snapshot %s (%s, plan %s, write mode %s): %d row(s) deleted, %d inserted, "
        "%d delete file(s) and %d data file(s) added, %d data file(s) removed, in %.1fs.",
        result["snapshot_id"],
        result["operation"],
        result["plan"],
        result["write_mode"],
        result["rows_deleted"],
        result["rows_inserted"],
        result["added_delete_files"],
        result["added_data_files"],
        result["removed_data_files"],
        result["duration_s"],
    )


def log_dml_health(log: Logger, table: str, result: DmlResult) -> None:
    """A warning when the change made compaction due, else one line of the table's health."""
    health = result["health"]
    if health is None:
        return
    compaction = MaintenanceProcedure.REWRITE_DATA_FILES.value
    if compaction in health["needs"]:
        log.warning(
            "%s now needs compaction (run IcebergCompactionOperator): %s. Health checked in %.3fs.",
            table,
            "; ".join(health["reasons"].get(compaction, [])),
            health["check_duration_s"],
        )
        return
    log.info(
        "Health of %s after the change (checked in %.3fs): %d data files, %d delete files, %.1f%% of "
        "rows deleted; no compaction needed.",
        table,
        health["check_duration_s"],
        health["data_files"],
        health["delete_files"],
        100 * health["deleted_ratio"],
    )
