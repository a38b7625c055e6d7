"""What a job reports back about its run: its outcome, and what failed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.specs.common import JsonSpec, Plan

if TYPE_CHECKING:
    from airflow_iceberg_dml.exceptions import IcebergDmlError


class Outcome(StrEnum):
    """How a job ended."""

    COMMITTED = "committed"
    """The change was committed as one new snapshot."""
    NOOP = "noop"
    """Nothing matched; nothing was committed."""
    DRY_RUN = "dry-run"
    """A dry run: what would change is in ``details``; nothing was committed."""
    REPLAYED = "replayed"
    """An earlier try of the same run key had committed: its snapshot is returned, nothing new."""
    CHECKED = "checked"
    """Read-only data-quality checks ran; their counts are in ``details``; nothing was committed."""
    FAILED = "failed"
    """The job stopped before committing; ``error_type`` and ``error_message`` say why."""


@dataclass(frozen=True)
class JobRecord(JsonSpec):
    """What the Spark job reports back about its run (the numbers come from the snapshot itself)."""

    outcome: Outcome
    spark_app_id: str | None = None
    snapshot_id: int | None = None
    write_mode: str | None = None
    plan: Plan | None = None
    statement: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    #: Whether retrying can help, as the job's error class says; sent with the class name so that the
    #: Airflow side never has to guess it for a class it does not know.
    retryable: bool | None = None
    #: Job-specific output, e.g. a procedure's result columns under their own names.
    details: Mapping[str, Any] = field(default_factory=dict)

    def error(self) -> IcebergDmlError:
        """The error a FAILED job reported, as its own class (see
        :func:`~airflow_iceberg_dml.exceptions.error_from_record`)."""
        from airflow_iceberg_dml.exceptions import error_from_record

        return error_from_record(self.error_type or "", self.error_message or "", self.retryable)
