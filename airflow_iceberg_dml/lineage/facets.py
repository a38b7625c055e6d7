"""What the lineage events say: facets built from a task's result (pure), and the two custom facets.

The custom run facets (``icebergDmlCommit``, ``icebergMaintenance``) have their JSON schema in this
package (``openlineage_facets.json``). Bound parameter values are never in them: only their names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from airflow_iceberg_dml import __version__

if TYPE_CHECKING:
    from collections.abc import Mapping

try:  # the OpenLineage provider brings the client; both are optional
    import attr
    from openlineage.client.generated.base import RunFacet

    HAVE_OPENLINEAGE_CLIENT = True
except ImportError:
    HAVE_OPENLINEAGE_CLIENT = False

#: Where the custom facets' JSON schema is published: the file shipped in this package, at this version.

FACET_SCHEMA_URL = (
    "https://github.com/airflow-iceberg-dml/airflow-iceberg-dml/blob/"
    f"v{__version__}/airflow_iceberg_dml/openlineage_facets.json"
)
#: Health report fields carried by the lineage facets (the full report is in the task's XCom).
_HEALTH_FIELDS = {
    "snapshot_id": "snapshotId",
    "healthy": "healthy",
    "needs": "needs",
    "data_files": "dataFiles",
    "delete_files": "deleteFiles",
    "records": "records",
    "position_deletes": "positionDeletes",
    "deleted_ratio": "deletedRatio",
    "delete_files_per_data_file": "deleteFilesPerDataFile",
    "data_files_with_deletes": "dataFilesWithDeletes",
    "small_data_files": "smallDataFiles",
    "partitions_needing_compaction": "partitionsNeedingCompaction",
    "snapshot_count": "snapshotCount",
}


# -- facet contents: pure ---------------------------------------------------------------------------------


def health_facet_fields(health: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The headline numbers of a health report (``HealthReport.to_dict()``), camelCase."""
    if health is None:
        return None
    return {camel: health.get(key) for key, camel in _HEALTH_FIELDS.items()}


def dml_commit_fields(
    result: Mapping[str, Any],
    *,
    kind: str,
    where: str,
    assignments: Mapping[str, str],
    parameter_names: list[str],
) -> dict[str, Any]:
    """The ``icebergDmlCommit`` run facet's fields from a DML result: no parameter value, only names."""
    return {
        "statement": kind,
        "table": result["table"],
        "branch": result["branch"],
        "operation": result["operation"],
        "snapshotId": result["snapshot_id"],
        "parentSnapshotId": result["parent_snapshot_id"],
        "sequenceNumber": result["sequence_number"],
        "committedAt": result["committed_at"],
        "plan": result["plan"],
        "writeMode": result["write_mode"],
        "noop": result["noop"],
        "dryRun": result["dry_run"],
        "replayed": result["replayed"],
        "rowsDeleted": result["rows_deleted"],
        "rowsInserted": result["rows_inserted"],
        "addedDeleteFiles": result["added_delete_files"],
        "addedDataFiles": result["added_data_files"],
        "removedDataFiles": result["removed_data_files"],
        "predicate": where,
        "assignments": dict(assignments),
        "parameterNames": sorted(parameter_names),
        "sparkAppId": result["spark_app_id"],
        "healthAfter": health_facet_fields(result.get("health")),
    }


def maintenance_fields(result: Mapping[str, Any]) -> dict[str, Any]:
    """The ``icebergMaintenance`` run facet's fields from a maintenance result."""
    return {
        "table": result["table"],
        "procedures": list(result["procedures"]),
        "noop": result["noop"],
        "forced": result["forced"],
        "reason": result["reason"],
        "snapshotId": result["snapshot_id"],
        "committedSnapshotIds": list(result["committed_snapshot_ids"]),
        "conflictRetries": result["conflict_retries"],
        "sparkAppId": result["spark_app_id"],
        "healthBefore": health_facet_fields(result["health_before"]),
        "healthAfter": health_facet_fields(result["health_after"]),
    }


# -- the custom facets ------------------------------------------------------------------------------------

if HAVE_OPENLINEAGE_CLIENT:

    @attr.define
    class IcebergDmlCommitRunFacet(RunFacet):
        """What a DELETE or UPDATE task committed (fields: see ``dml_commit_fields``)."""

        statement: str
        table: str
        branch: str
        operation: str | None
        snapshotId: str | None  # noqa: N815 - OpenLineage facets are camelCase
        parentSnapshotId: str | None  # noqa: N815
        sequenceNumber: int | None  # noqa: N815
        committedAt: str | None  # noqa: N815
        plan: str
        writeMode: str | None  # noqa: N815
        noop: bool
        dryRun: bool  # noqa: N815
        replayed: bool
        rowsDeleted: int  # noqa: N815
        rowsInserted: int  # noqa: N815
        addedDeleteFiles: int  # noqa: N815
        addedDataFiles: int  # noqa: N815
        removedDataFiles: int  # noqa: N815
        predicate: str
        assignments: dict[str, str]
        parameterNames: list[str]  # noqa: N815
        sparkAppId: str | None  # noqa: N815
        healthAfter: dict[str, Any] | None  # noqa: N815

        @staticmethod
        def _get_schema() -> str:
            return f"{FACET_SCHEMA_URL}#/$defs/IcebergDmlCommitRunFacet"

    @attr.define
    class IcebergMaintenanceRunFacet(RunFacet):
        """What a maintenance task ran, and the table's health before and after."""

        #: Airflow's secrets masker hides the value of any key that holds a sensitive word, "dsn" among
        #: them: "committeDSNapshotIds" would reach every event as "***" (the OpenLineage provider's
        #: redactor skips the fields a facet lists here).
        _additional_skip_redact: ClassVar[list[str]] = ["committedSnapshotIds"]

        table: str
        procedures: list[str]
        noop: bool
        forced: bool
        reason: str
        snapshotId: str | None  # noqa: N815
        committedSnapshotIds: list[str]  # noqa: N815
        conflictRetries: int  # noqa: N815
        sparkAppId: str | None  # noqa: N815
        healthBefore: dict[str, Any] | None  # noqa: N815
        healthAfter: dict[str, Any] | None  # noqa: N815

        @staticmethod
        def _get_schema() -> str:
            return f"{FACET_SCHEMA_URL}#/$defs/IcebergMaintenanceRunFacet"
