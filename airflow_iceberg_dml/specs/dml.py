"""The spec of a DELETE or UPDATE, with its guards, commit policy and audits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from airflow_iceberg_dml.exceptions import InvalidExpressionError
from airflow_iceberg_dml.specs.common import (
    SPEC_VERSION,
    TABLE_PLACEHOLDER,
    IsolationLevel,
    JobKind,
    JsonSpec,
    RunKey,
    WriteMode,
    reads_table,
)
from airflow_iceberg_dml.specs.parameters import Parameter, given_parameters, parameter_problem


@dataclass(frozen=True)
class Guards:
    """Limits on how much a DELETE or UPDATE may change. The job counts the rows the change would
    touch at the head snapshot, before writing; above either limit it fails, committing nothing.

    :param max_rows_affected: Fail when the change would touch more rows than this.
    :param max_fraction_affected: Fail when a larger fraction (0..1) of the live rows would change,
        e.g. ``0.01`` for 1%.
    """

    max_rows_affected: int | None = None
    max_fraction_affected: float | None = None

    def __post_init__(self) -> None:
        fraction = self.max_fraction_affected
        if fraction is not None and not 0 <= fraction <= 1:
            raise ValueError(f"max_fraction_affected={fraction} must be between 0 and 1.")
        if self.max_rows_affected is not None and self.max_rows_affected < 0:
            raise ValueError(f"max_rows_affected={self.max_rows_affected} must not be negative.")

    @property
    def active(self) -> bool:
        """Whether any limit is set (the job then counts the rows before writing)."""
        return self.max_rows_affected is not None or self.max_fraction_affected is not None


@dataclass(frozen=True)
class CommitPolicy:
    """How a DELETE or UPDATE commits.

    :param exactly_once: When True (default), a change whose run key (dag, task, run, map index)
        already committed on the branch returns that commit and commits nothing, so that a retried
        non-idempotent UPDATE is applied once. False re-applies on purpose.
    :param conflict_retries: How many times the job re-plans the change on the new head after a
        commit conflict with a concurrent writer (Iceberg itself retries plain commit races), before
        failing with ``ConcurrentCommitError`` (retryable). Default 2.
    :param isolation_level: ``serializable`` or ``snapshot``: Iceberg's conflict check at commit,
        set on the table (``write.<operation>.isolation-level``); None keeps the table's setting.
    """

    exactly_once: bool = True
    conflict_retries: int = 2
    isolation_level: IsolationLevel | None = None

    def __post_init__(self) -> None:
        if isinstance(self.conflict_retries, bool) or not isinstance(self.conflict_retries, int):
            raise ValueError(f"conflict_retries={self.conflict_retries!r} is not an integer.")
        if self.conflict_retries < 0:
            raise ValueError(f"conflict_retries={self.conflict_retries} must be >= 0.")
        if self.isolation_level is not None:
            object.__setattr__(self, "isolation_level", IsolationLevel(self.isolation_level))


@dataclass(frozen=True)
class Audits:
    """Write-audit-publish: the change is written to a branch made from the head, the queries run on
    it, and the branch is fast-forwarded into the changed ref only when every query returns true.

    :param queries: Name to SQL query returning one boolean, with ``{table}`` standing for the audit
        branch, e.g. ``{"no_negative": "SELECT count(*) = 0 FROM {table} WHERE amount < 0"}``.
        Empty: no audit, the change is written to the ref directly.
    :param keep_failed_branch: Keep the audit branch when an audit fails, to inspect it (dropped
        by default).
    """

    queries: Mapping[str, str] = field(default_factory=dict)
    keep_failed_branch: bool = False

    def __post_init__(self) -> None:
        for name, query in self.queries.items():
            if not isinstance(name, str) or not isinstance(query, str) or not query.strip():
                raise ValueError(
                    f"audits[{name!r}] must be a SQL query (text) returning one boolean, not {query!r}."
                )
            if not reads_table(query):
                raise ValueError(
                    f"audits[{name!r}] must read the table as {TABLE_PLACEHOLDER} (outside quotes), so "
                    f"that it audits the branch the change was written to, not main: {query!r}."
                )


@dataclass(frozen=True)
class GroupMember:
    """Another task's change that this job applies in its own commit (a group commit).

    The member waited for its turn on the same table with a change that differs from this job's in
    its rows only (same kind, table, branch, ``set`` expressions and commit settings), or, on a table
    whose MERGE is merge-on-read, in its kind too: DELETEs and UPDATEs of one ``set`` mixed in one
    MERGE (``group_commit`` on the operators).

    :param run_key: The member's run key; the group commit carries it, so that the member (and any
        later try of it) finds the commit as its own.
    :param where: The member's predicate, its parameters already bound.
    :param kind: The member's kind; None: the job's own.
    :param assignments: An UPDATE member's ``set``, its parameters already bound.
    :param change: The digest of the member's change (:mod:`airflow_iceberg_dml.change_digest`), for
        its entry in the commit's summary; None: not known.
    """

    run_key: RunKey
    where: str
    kind: JobKind | None = None
    assignments: Mapping[str, str] = field(default_factory=dict)
    change: str | None = None


@dataclass(frozen=True)
class DmlSpec(JsonSpec):
    """One DELETE or UPDATE, as the Spark job receives it.

    :param kind: DELETE or UPDATE.
    :param catalog: Catalog name, the same in Spark and pyiceberg.
    :param table: ``namespace.table`` inside the catalog.
    :param where: Spark SQL boolean expression selecting the rows.
    :param assignments: UPDATE only: column name to Spark SQL expression.
    :param parameters: Values bound to named parameter markers (``:name``) in ``where``/``assignments``.
    :param write_mode: Row-level write mode requested.
    :param branch: Branch to change instead of ``main``.
    :param snapshot_properties: Entries added to the summary of the commit (run key included).
    :param result_path: Where the job writes its :class:`JobRecord`; None when the driver is remote.
    :param expected_snapshot_id: The head snapshot the change was planned against (for example
        the one a check looked at). When the branch head is another snapshot, the job fails
        before writing (:class:`~airflow_iceberg_dml.exceptions.SnapshotMismatchError`).
    :param run_key: The Airflow identity of the change; with ``commit_policy.exactly_once``, a commit
        of the same run key already in the branch history is returned instead of committing again.
    :param dry_run: Count what would change (rows and data files per partition); commit nothing.
    :param guards: :class:`Guards`: limits on the rows the change may touch.
    :param commit_policy: :class:`CommitPolicy`: exactly once, conflict retries, isolation level.
    :param audits: :class:`Audits`: write-audit-publish queries.
    :param group: Waiting tasks' changes to apply in this job's commit, when their rows and this
        change's rows do not overlap (:class:`GroupMember`; see ``group_commit`` on the operators).
    """

    application: ClassVar[str] = "dml.py"

    kind: JobKind
    catalog: str
    table: str
    where: str
    assignments: Mapping[str, str] = field(default_factory=dict)
    parameters: Mapping[str, Parameter] = field(default_factory=dict)
    write_mode: WriteMode = WriteMode.MERGE_ON_READ
    branch: str | None = None
    snapshot_properties: Mapping[str, str] = field(default_factory=dict)
    result_path: str | None = None
    expected_snapshot_id: int | None = None
    run_key: RunKey | None = None
    dry_run: bool = False
    guards: Guards = field(default_factory=Guards)
    commit_policy: CommitPolicy = field(default_factory=CommitPolicy)
    audits: Audits = field(default_factory=Audits)
    group: tuple[GroupMember, ...] = ()
    version: int = SPEC_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", given_parameters(self.parameters))
        problem = parameter_problem(self.parameters)
        if problem:
            raise InvalidExpressionError(problem)
