"""Write-audit-publish of a change (DELETE, UPDATE, MERGE): write to a branch, audit it, fast-forward the
ref to it."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.exceptions import AuditFailedError, ConcurrentCommitError, InvalidExpressionError
from airflow_iceberg_dml.jobs.row_level import find_own_commit
from airflow_iceberg_dml.jobs.runner import error_summary, log
from airflow_iceberg_dml.specs.common import with_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.jobs.table_state import TableState
    from airflow_iceberg_dml.spec import Audits, RunKey


class AuditedSpec(Protocol):
    """What write-audit-publish reads of a job's spec (a DELETE/UPDATE's or a MERGE's)."""

    @property
    def catalog(self) -> str: ...
    @property
    def table(self) -> str: ...
    @property
    def run_key(self) -> RunKey | None: ...
    @property
    def audits(self) -> Audits: ...


SpecT = TypeVar("SpecT", bound=AuditedSpec)


class WriteAuditPublish(Generic[SpecT]):
    """Part of :class:`~airflow_iceberg_dml.jobs.dml.DmlJob` and
    :class:`~airflow_iceberg_dml.jobs.merge.MergeJob`: the audit branch and its publication."""

    spark: SparkSession
    spec: SpecT
    state: TableState
    ref: str
    app_id: str
    job_id: str
    table_name: str

    def _target(self, ref: str) -> str:
        raise NotImplementedError  # the job's

    def _audit_branch_name(self) -> str:
        identity = repr(self.spec.run_key) if self.spec.run_key else self.app_id
        return "audit_" + hashlib.sha1(identity.encode()).hexdigest()[:16]

    def _create_audit_branch(self, head: int) -> str:
        """A fresh branch at the head snapshot, named after the run key (a retry reuses the name)."""
        branch = self._audit_branch_name()
        base = sql.table_identifier(self.spec.catalog, self.spec.table)
        self.spark.sql(sql.drop_branch(base, branch))
        self.spark.sql(sql.create_branch(base, branch, head))
        log(f"Write-audit-publish: writing to branch {branch} made from snapshot {head}")
        return branch

    def _drop_branch(self, branch: str) -> None:
        self.spark.sql(sql.drop_branch(sql.table_identifier(self.spec.catalog, self.spec.table), branch))

    def _audit_and_publish(self, branch: str, head: int) -> None:
        """Run every audit on ``branch``; fast-forward the ref to it only when all pass."""
        failures = []
        for name, query in self.spec.audits.queries.items():
            try:
                rows = self.spark.sql(with_table(query, self._target(branch))).collect()
            except Exception as error:  # noqa: BLE001 - a broken audit is a failed audit, reported as such
                failures.append(f"{name!r} could not run: {error_summary(error)}")
                continue
            values = [list(row) for row in rows]
            if values != [[True]]:
                failures.append(f"{name!r} returned {values[:3]} (one row with true expected): {query}")
            else:
                log(f"Audit {name!r} passed")
        if failures:
            if not self.spec.audits.keep_failed_branch:
                self._drop_branch(branch)
            where_now = "kept for inspection" if self.spec.audits.keep_failed_branch else "dropped"
            raise AuditFailedError(
                f"Audit failed: {'; '.join(failures)}. {self.ref} is unchanged at snapshot {head}; "
                f"branch {branch} {where_now}."
            )
        try:
            self.spark.sql(sql.fast_forward_call(self.spec.catalog, self.spec.table, self.ref, branch))
        except Exception as error:  # noqa: BLE001 - reported with the reason, the branch left to inspect
            raise ConcurrentCommitError(
                f"All audits passed but {self.ref} could not be fast-forwarded to {branch}: "
                f"{error_summary(error)}. Another commit landed on {self.ref}; the task "
                "can be retried."
            ) from None
        self._drop_branch(branch)
        log(f"All audits passed: {self.ref} fast-forwarded to branch {branch}")

    # -- for a job that writes through these two (a MERGE; a DELETE or UPDATE does it its own way) ------

    def _write_ref(self, head: int | None) -> str:
        """Where the change is written: with audits, a branch made from ``head``; else the ref."""
        if not self.spec.audits.queries:
            return self.ref
        if head is None:
            raise InvalidExpressionError(
                f"audits: {self.table_name} has no snapshot to branch from; write it once without audits."
            )
        return self._create_audit_branch(head)

    def _published(self, head: int | None, write_ref: str) -> int | None:
        """The snapshot the change committed on ``write_ref``; an audit branch is audited, then the ref
        fast-forwarded to it (or the task fails, the ref unchanged)."""
        snapshot_id = find_own_commit(self.state, write_ref, head, self.job_id, self.app_id)
        if write_ref != self.ref:
            assert head is not None  # an audit branch is made from a snapshot (_write_ref)
            if snapshot_id is None:
                self._drop_branch(write_ref)
            else:
                self._audit_and_publish(write_ref, head)
        log(f"Committed snapshot {snapshot_id} on {self.table_name} (ref {self.ref})")
        return snapshot_id
