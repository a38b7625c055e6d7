"""Errors raised by airflow-iceberg-dml, one class per condition a user can act on.

This module has no Airflow import: the Spark job raises the same classes and reports each by name,
with its ``retryable`` flag, so that the Airflow side raises the same class again (see
:func:`error_from_record`). Every subclass is known by name as soon as it is defined: there is no
list to keep.
"""

from __future__ import annotations

#: Every error class of this package by name, filled in as each class is defined.
_BY_NAME: dict[str, type[IcebergDmlError]] = {}


class IcebergDmlError(Exception):
    """Root of every error this package raises."""

    #: False when retrying the task cannot help (bad input): the operator then fails without retry.
    retryable = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        _BY_NAME[cls.__name__] = cls


class TableNotFoundError(IcebergDmlError):
    """The table does not exist in the catalog."""


class InvalidTableNameError(IcebergDmlError, ValueError):
    """``table`` is not ``namespace.table`` (after templates are rendered)."""


class BranchNotFoundError(IcebergDmlError):
    """The branch named by ``branch`` does not exist on the table."""


class InvalidPredicateError(IcebergDmlError):
    """The ``where`` predicate is missing, malformed, or not a boolean expression."""


class UnknownColumnError(IcebergDmlError):
    """A column named in ``where``, ``set`` or a data-quality check is not in the table's schema."""


class InvalidExpressionError(IcebergDmlError):
    """A ``set`` expression is malformed or cannot be assigned to its column."""


class WriteModeConflictError(IcebergDmlError):
    """The table is configured for a different row-level write mode than the one requested."""


class SnapshotMismatchError(IcebergDmlError):
    """The table moved on from the snapshot the change was planned against (``expected_snapshot_id``)."""


class ChangedRunError(IcebergDmlError):
    """An earlier try of this run key committed another change than this try's (its predicate, ``set``,
    merge or parameter values changed since): neither is applied on top of the other unasked."""


class GuardExceededError(IcebergDmlError):
    """The change would touch more rows than ``max_rows_affected`` / ``max_fraction_affected`` allow."""


class DuplicateSourceRowsError(IcebergDmlError):
    """A MERGE's ``on`` pairs one target row with more than one source row."""


class SliceViolationError(IcebergDmlError):
    """A slice overwrite's new rows fall outside the slice they replace."""


class AuditFailedError(IcebergDmlError):
    """A write-audit-publish audit did not pass; the change was not published."""


class ConcurrentCommitError(IcebergDmlError):
    """Another writer committed in a way this change cannot be reconciled with; retrying re-plans it."""

    retryable = True


class CatalogConfigError(IcebergDmlError):
    """The catalog connection cannot be turned into a catalog configuration."""


class CatalogConnectionNotFoundError(CatalogConfigError):
    """The ``iceberg`` connection named by ``catalog_conn_id`` does not exist (only the default may)."""


class JarResolutionError(IcebergDmlError):
    """The Iceberg runtime jars could not be found or fetched."""


class SparkJobError(IcebergDmlError):
    """The Spark application failed for a reason the job did not classify."""

    retryable = True


class SparkConnectUnavailableError(IcebergDmlError):
    """The Spark Connect server could not be reached (down, restarting, wrong host or port)."""

    retryable = True


class SparkConnectServerError(IcebergDmlError):
    """The Spark Connect server cannot run the job as configured: no Iceberg runtime, a Spark version
    the client does not match, or a setting a session may not change."""


class CommitNotFoundError(IcebergDmlError):
    """The job reported success but its commit cannot be found in the table history."""

    retryable = True


class InvalidSnapshotFilterError(IcebergDmlError, ValueError):
    """A snapshot sensor or trigger condition is malformed (wrong type, unknown operation, bad count)."""


class SnapshotNotFoundError(IcebergDmlError):
    """The snapshot named by ``newer_than_snapshot_id`` (or a check's ``snapshot_id``, or a MERGE's
    ``source_snapshot_id``) is not in the table (wrong id, or expired), or a check found no snapshot at
    all to check (a table never written)."""


class UnsupportedTableError(IcebergDmlError):
    """The table is of a kind the task cannot handle: its metadata holds a type that pyiceberg, which the
    operators read metadata with, does not know (a ``list<variant>`` column, or a type newer than the
    installed pyiceberg), or an erasure's table has files in a format its proof does not read (ORC, Avro)."""


class CatalogUnavailableError(IcebergDmlError):
    """The catalog could not be reached (connection refused, timeout, server error); polling goes on."""

    retryable = True


class InvalidMaintenanceOptionError(IcebergDmlError, ValueError):
    """A maintenance option, sort order or argument is unknown or has an invalid value."""


class UnsafeRetentionError(IcebergDmlError, ValueError):
    """``older_than`` is more recent than the safety floor of snapshot expiry or orphan removal."""


class InvalidSubjectsError(IcebergDmlError, ValueError):
    """An erasure's subjects are malformed: a key of the wrong type for its column, a requests query
    that is not one SELECT returning one column, or both ``subjects`` and ``subjects_query``."""


class ErasureIncompleteError(IcebergDmlError):
    """After a purge, an erased key is still in a file of the table (a protected tag or branch, a
    snapshot younger than the minimum retention, a file that could not be deleted)."""


class InvalidCheckError(IcebergDmlError, ValueError):
    """A data-quality check is malformed: an unknown kind, a field missing or of another kind, a condition
    that is not one deterministic boolean expression, or a query that does not return one whole number."""


class DataQualityCheckFailedError(IcebergDmlError):
    """A data-quality check counted failing rows (``fail_on_failure=True``); the message names each."""


class CheckResultUnavailableError(IcebergDmlError):
    """A check's counts did not come back to Airflow: its driver ran remotely (cluster deploy mode)."""


class ErasureReportUnavailableError(IcebergDmlError):
    """An erasure's report (what it erased, its verification) did not come back to Airflow: its driver
    ran remotely (cluster deploy mode), and an erasure the task cannot prove is not reported done."""


def error_from_record(error_type: str, message: str, retryable: bool | None = None) -> IcebergDmlError:
    """Rebuild the error a Spark job reported: its class by name, else one with the reported flag.

    A name this side does not know (a job of another package version) never becomes retryable on
    its own: it is :class:`SparkJobError` only when the job said retrying can help, and a plain
    :class:`IcebergDmlError` otherwise, or when the job did not say.
    """
    known = _BY_NAME.get(error_type)
    if known is not None:
        return known(message)
    unknown: type[IcebergDmlError] = SparkJobError if retryable else IcebergDmlError
    return unknown(f"{error_type}: {message}" if error_type else message)
