"""Maintenance refusals in the user's terms: what Iceberg or Spark refused of the input, as the package's
non-retryable errors (anything else stays a retryable ``SparkJobError``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_iceberg_dml.exceptions import (
    IcebergDmlError,
    InvalidMaintenanceOptionError,
    InvalidPredicateError,
    UnsupportedTableError,
)
from airflow_iceberg_dml.jobs.runner import error_message, java_causes
from airflow_iceberg_dml.table_paths import gc_disabled_problem

if TYPE_CHECKING:
    from airflow_iceberg_dml.spec import MaintenanceSpec


#: Iceberg's refusals of a rewrite's sort order: a column of no primitive type, or z-order columns that are
#: all identity partition columns (the operator refuses both before Spark; the table may change since).
_REFUSED_ORDERS = ("Cannot sort by", "in ZOrdering, the type is unsupported", "Cannot ZOrder")


def bad_input(spec: MaintenanceSpec, error: Exception) -> IcebergDmlError | None:
    """Iceberg refused the options, or Spark could not make an Iceberg filter of a ``where`` (its
    analysis lets a function of a column through; the conversion, in the job or in the ``CALL``
    over Spark Connect, fails): the input is bad, not the run. None for anything else."""
    causes = java_causes(error)
    if causes and "Cannot use options" in causes[-1][1]:
        return InvalidMaintenanceOptionError(causes[-1][1])
    if "GC is disabled" in error_message(error):  # gc.enabled set false since the operator checked
        deleting = " and ".join(call.procedure.value for call in spec.calls)
        return UnsupportedTableError(gc_disabled_problem(spec.table, {"gc.enabled": "false"}, deleting) or "")
    if causes and any(refusal in causes[-1][1] for refusal in _REFUSED_ORDERS):
        return InvalidMaintenanceOptionError(f"the rewrite's sort order cannot be used: {causes[-1][1]}")
    wheres = list(dict.fromkeys(where for call in spec.calls if (where := getattr(call, "where", None))))
    if wheres and "Cannot convert Spark filter" in error_message(error):
        return unusable_where(" / ".join(wheres), error_message(error))
    return None


def unusable_where(where: str, problem: str) -> InvalidPredicateError:
    """``where`` cannot select files, for Spark's reason ``problem``."""
    reason = problem.splitlines()[0] if problem else "no reason given"
    return InvalidPredicateError(
        f"where={where!r} cannot be used to select files: {reason} "
        "(use comparisons, IN, IS NULL, AND/OR/NOT on columns, ideally partition columns)."
    )
