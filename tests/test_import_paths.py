"""Modules split by concern still offer every public name at the path users and jobs import it from."""

from __future__ import annotations

import importlib

import pytest

#: The public names of each module before it was split (and what was added since).
PUBLIC_NAMES = {
    "airflow_iceberg_dml.spec": (
        "PACKAGE_VERSION SPEC_VERSION LOG_PREFIX JobKind WriteMode IsolationLevel Plan SummaryKey "
        "snapshot_id_text parse_snapshot_id RunKey ScalarParameter Parameter JobSpec JsonSpec Guards "
        "CommitPolicy Audits DmlSpec Outcome JobRecord MAINTENANCE_PROCEDURE_KEY MaintenanceProcedure "
        "CompactionStrategy RewriteDataFilesCall RewritePositionDeleteFilesCall RewriteManifestsCall "
        "ExpireSnapshotsCall RemoveOrphanFilesCall ProcedureCall MaintenanceSpec ErasureMode ErasureTarget "
        "ErasureSpec Check CheckKind CheckSpec MergeAction MergeClause MergeSource MergeSpec MergeWhen "
        "GroupMember ParameterValue SqlType TypedValue"
    ),
    "airflow_iceberg_dml.health": (
        "MIB DEFAULT_MAX_SNAPSHOT_AGE_MS DEFAULT_MIN_SNAPSHOTS_TO_KEEP MAX_SNAPSHOT_AGE_PROPERTY "
        "MIN_SNAPSHOTS_TO_KEEP_PROPERTY FileKind FileEntry HealthThresholds Retention SnapshotInfo "
        "PartitionHealth HealthReport expirable_snapshots assess file_entries metadata_json_size "
        "default_retention table_health"
    ),
    "airflow_iceberg_dml.snapshot_filter": (
        "MAIN_BRANCH SnapshotOperation SnapshotInfo SnapshotMatch snapshot_match parse_timestamp "
        "SnapshotFilter WatchState WalkResult walk baseline"
    ),
}


@pytest.mark.parametrize("module_name", sorted(PUBLIC_NAMES))
def test_every_public_name_is_importable_from_its_old_module(module_name):
    module = importlib.import_module(module_name)
    names = PUBLIC_NAMES[module_name].split()
    assert [name for name in names if not hasattr(module, name)] == []
    assert sorted(module.__all__) == sorted(names)
    assert [name for name in module.__all__ if not hasattr(module, name)] == []
