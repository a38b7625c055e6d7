"""What a DELETE or UPDATE task says in its log once it ended: the commit (or what a dry run would
change), then the table's health."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_iceberg_dml.spec import MaintenanceProcedure

if TYPE_CHECKING:
    from airflow.sdk.types import Logger

    from airflow_iceberg_dml.result import DmlResult


#: Partitions a dry run lists one per line in the task log; the result (XCom) has them all.
DRY_RUN_PARTITIONS_LOGGED = 20
#: How the log line of a task whose change matched no row starts (the backfill benchmark counts them).
NOOP_SAID = "No-op: nothing matched"


def log_dml_result(log: Logger, table: str, result: DmlResult) -> None:
    if result["dry_run"]:
        _log_dry_run(log, table, result)
        return
    if result["noop"]:
        log.info(NOOP_SAID + " in %s at snapshot %s; nothing committed for it.", table, result["snapshot_id"])
        return
    snapshot, others = result["snapshot_id"], result["group_size"] - 1
    if result["replayed"]:
        committed = f"Snapshot {snapshot}, committed by an earlier try of this run"
    elif others:
        committed = f"Snapshot {snapshot} applied this change with {others} other(s) in one commit"
    else:
        committed = f"Committed snapshot {snapshot}"
    log.info(
        "%s (%s, plan %s, write mode %s): %s%d row(s) deleted, %d inserted; %d delete file(s) and %d data "
        "file(s) added, %d data file(s) removed, in %.1fs.",
        committed,
        result["operation"],
        result["plan"],
        result["write_mode"],
        "this change's " if others else "",
        result["rows_deleted"],
        result["rows_inserted"],
        result["added_delete_files"],
        result["added_data_files"],
        result["removed_data_files"],
        result["duration_s"],
    )


def _log_dry_run(log: Logger, table: str, result: DmlResult) -> None:
    """What a dry run would change, per partition; DELETE and UPDATE only (a MERGE lists its clauses)."""
    log.info("Dry run: nothing committed; %s stays on snapshot %s.", table, result["snapshot_id"])
    impact = result["impact"] or {}
    if "rows_matched" not in impact:
        return
    partitions = impact["partitions"]
    log.info(
        "The change would touch %d of %d row(s) (%.3g%%) in %d data file(s), in %d partition(s)%s",
        impact["rows_matched"],
        impact["rows_total"],
        100 * impact["fraction"],
        impact["data_files_touched"],
        len(partitions),
        ":" if partitions else ".",
    )
    for partition in partitions[:DRY_RUN_PARTITIONS_LOGGED]:
        log.info(
            "  %s: %d row(s) in %d data file(s)",
            partition.get("label", partition["partition"]),
            partition["rows"],
            partition["data_files"],
        )
    more = len(partitions) - DRY_RUN_PARTITIONS_LOGGED
    if more > 0:
        log.info("  ... and %d more (all in the result's impact)", more)


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
        "Health of %s%s (checked in %.3fs): %d data files, %d delete files, %.1f%% of "
        "rows deleted; no compaction needed.",
        table,
        "" if result["noop"] else " after the change",
        health["check_duration_s"],
        health["data_files"],
        health["delete_files"],
        100 * health["deleted_ratio"],
    )
