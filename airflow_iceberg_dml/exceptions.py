"""Errors raised by airflow-iceberg-dml, one class per condition a user can act on.

This module has no Airflow import: the Spark job raises the same classes, and reports them by
name so that the Airflow side raises the same class again (see :func:`error_from_record`).
"""

from __future__ import annotations


class IcebergDmlError(Exception):
    """Root of every error this package raises."""

    #: False when retrying the task cannot help (bad input): the operator then fails without retry.
    retryable = False


class TableNotFoundError(IcebergDmlError):
    """The table does not exist in the catalog."""


class BranchNotFoundError(IcebergDmlError):
    """The branch named by ``branch`` does not exist on the table."""


class InvalidPredicateError(IcebergDmlError):
    """The ``where`` predicate is missing, malformed, or not a boolean expression."""


class UnknownColumnError(IcebergDmlError):
    """A column named in ``where`` or ``set`` is not in the table's schema."""


class InvalidExpressionError(IcebergDmlError):
    """A ``set`` expression is malformed or cannot be assigned to its column."""


class WriteModeConflictError(IcebergDmlError):
    """The table is configured for a different row-level write mode than the one requested."""


class SnapshotMismatchError(IcebergDmlError):
    """The table moved on from the snapshot the change was planned against (``expected_snapshot_id``)."""


class GuardExceededError(IcebergDmlError):
    """The change would touch more rows than ``max_rows_affected`` / ``max_fraction_affected`` allow."""


class AuditFailedError(IcebergDmlError):
    """A write-audit-publish audit did not pass; the change was not published."""


class ConcurrentCommitError(IcebergDmlError):
    """Another writer committed in a way this change cannot be reconciled with; retrying re-plans it."""

    retryable = True


class CatalogConfigError(IcebergDmlError):
    """The catalog connection cannot be turned into a catalog configuration."""


class JarResolutionError(IcebergDmlError):
    """The Iceberg runtime jars could not be found or fetched."""


class SparkJobError(IcebergDmlError):
    """The Spark application failed for a reason the job did not classify."""

    retryable = True


class CommitNotFoundError(IcebergDmlError):
    """The job reported success but its commit cannot be found in the table history."""

    retryable = True


class InvalidSnapshotFilterError(IcebergDmlError, ValueError):
    """A snapshot sensor or trigger condition is malformed (wrong type, unknown operation, bad count)."""


class SnapshotNotFoundError(IcebergDmlError):
    """The snapshot named by ``newer_than_snapshot_id`` is not in the table (wrong id, or expired)."""


class CatalogUnavailableError(IcebergDmlError):
    """The catalog could not be reached (connection refused, timeout, server error); polling goes on."""

    retryable = True


class InvalidMaintenanceOptionError(IcebergDmlError, ValueError):
    """A maintenance option, sort order or argument is unknown or has an invalid value."""


class UnsafeRetentionError(IcebergDmlError, ValueError):
    """``older_than`` is more recent than the safety floor of snapshot expiry or orphan removal."""


_BY_NAME: dict[str, type[IcebergDmlError]] = {
    cls.__name__: cls
    for cls in (
        TableNotFoundError,
        BranchNotFoundError,
        InvalidPredicateError,
        UnknownColumnError,
        InvalidExpressionError,
        WriteModeConflictError,
        SnapshotMismatchError,
        GuardExceededError,
        AuditFailedError,
        ConcurrentCommitError,
        CatalogConfigError,
        JarResolutionError,
        SparkJobError,
        CommitNotFoundError,
        InvalidSnapshotFilterError,
        SnapshotNotFoundError,
        CatalogUnavailableError,
        InvalidMaintenanceOptionError,
        UnsafeRetentionError,
    )
}


def error_from_record(error_type: str, message: str) -> IcebergDmlError:
    """Rebuild the error a Spark job reported by class name (unknown names become SparkJobError)."""
    return _BY_NAME.get(error_type, SparkJobError)(message)
