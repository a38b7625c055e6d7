"""The typed job spec that crosses from Airflow to Spark, and the record the job sends back.

The operator builds a spec, the hook writes it to a JSON file, the PySpark job in
``airflow_iceberg_dml.jobs`` reads it back. One mechanism writes and reads every spec and the record
(:mod:`airflow_iceberg_dml.wire`); the classes live in :mod:`airflow_iceberg_dml.specs` by job kind
and are all importable from here. Standard library only: this runs inside the Spark driver too.
"""

from __future__ import annotations

from airflow_iceberg_dml.specs.check import Check, CheckKind, CheckSpec
from airflow_iceberg_dml.specs.common import (
    LOG_PREFIX,
    PACKAGE_VERSION,
    SPEC_VERSION,
    IsolationLevel,
    JobKind,
    JobSpec,
    JsonSpec,
    Plan,
    RunKey,
    SummaryKey,
    WriteMode,
    parse_snapshot_id,
    snapshot_id_text,
)
from airflow_iceberg_dml.specs.dml import Audits, CommitPolicy, DmlSpec, GroupMember, Guards
from airflow_iceberg_dml.specs.erasure import ErasureMode, ErasureSpec, ErasureTarget
from airflow_iceberg_dml.specs.maintenance import (
    MAINTENANCE_PROCEDURE_KEY,
    CompactionStrategy,
    ExpireSnapshotsCall,
    MaintenanceProcedure,
    MaintenanceSpec,
    ProcedureCall,
    RemoveOrphanFilesCall,
    RewriteDataFilesCall,
    RewriteManifestsCall,
    RewritePositionDeleteFilesCall,
)
from airflow_iceberg_dml.specs.merge import MergeAction, MergeClause, MergeSource, MergeSpec, MergeWhen
from airflow_iceberg_dml.specs.parameters import (
    Parameter,
    ParameterValue,
    ScalarParameter,
    SqlType,
    TypedValue,
)
from airflow_iceberg_dml.specs.record import JobRecord, Outcome

__all__ = [
    "LOG_PREFIX",
    "MAINTENANCE_PROCEDURE_KEY",
    "PACKAGE_VERSION",
    "SPEC_VERSION",
    "Audits",
    "Check",
    "CheckKind",
    "CheckSpec",
    "CommitPolicy",
    "CompactionStrategy",
    "DmlSpec",
    "ErasureMode",
    "ErasureSpec",
    "ErasureTarget",
    "ExpireSnapshotsCall",
    "GroupMember",
    "Guards",
    "IsolationLevel",
    "JobKind",
    "JobRecord",
    "JobSpec",
    "JsonSpec",
    "MaintenanceProcedure",
    "MaintenanceSpec",
    "MergeAction",
    "MergeClause",
    "MergeSource",
    "MergeSpec",
    "MergeWhen",
    "Outcome",
    "Parameter",
    "ParameterValue",
    "Plan",
    "ProcedureCall",
    "RemoveOrphanFilesCall",
    "RewriteDataFilesCall",
    "RewriteManifestsCall",
    "RewritePositionDeleteFilesCall",
    "RunKey",
    "ScalarParameter",
    "SqlType",
    "SummaryKey",
    "TypedValue",
    "WriteMode",
    "parse_snapshot_id",
    "snapshot_id_text",
]
