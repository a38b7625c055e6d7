"""The spec of a MERGE INTO, and of a slice overwrite: a target, a source, ordered clauses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

from airflow_iceberg_dml.exceptions import InvalidExpressionError
from airflow_iceberg_dml.specs.common import (
    SPEC_VERSION,
    JsonSpec,
    RunKey,
    WriteMode,
)
from airflow_iceberg_dml.specs.dml import Audits, CommitPolicy, Guards
from airflow_iceberg_dml.specs.parameters import Parameter, given_parameters, parameter_problem


class MergeWhen(StrEnum):
    """Which rows of the source-target join a clause applies to."""

    MATCHED = "matched"
    """A target row the ``on`` condition pairs with a source row."""
    NOT_MATCHED = "not matched"
    """A source row no target row pairs with."""
    NOT_MATCHED_BY_SOURCE = "not matched by source"
    """A target row no source row pairs with."""


class MergeAction(StrEnum):
    """What a clause does to the rows it applies to."""

    UPDATE = "update"
    """Assign ``set`` expressions (matched, not matched by source)."""
    UPDATE_ALL = "update *"
    """Take every column from the source row of the same name (matched)."""
    DELETE = "delete"
    """Remove the target row (matched, not matched by source)."""
    INSERT = "insert"
    """Insert a row of ``values`` (not matched)."""
    INSERT_ALL = "insert *"
    """Insert the source row, column by column of the same name (not matched)."""


#: The actions each kind of clause may take, as Spark SQL allows them.
ALLOWED_ACTIONS: dict[MergeWhen, tuple[MergeAction, ...]] = {
    MergeWhen.MATCHED: (MergeAction.UPDATE, MergeAction.UPDATE_ALL, MergeAction.DELETE),
    MergeWhen.NOT_MATCHED: (MergeAction.INSERT, MergeAction.INSERT_ALL),
    MergeWhen.NOT_MATCHED_BY_SOURCE: (MergeAction.UPDATE, MergeAction.DELETE),
}


@dataclass(frozen=True)
class MergeClause:
    """One ``WHEN ... [AND condition] THEN ...`` clause. Clauses of a kind are tried in order: a row
    takes the first whose condition holds (a NULL condition does not hold), or none.

    :param when: Which rows: ``matched``, ``not matched`` or ``not matched by source``.
    :param then: ``update``, ``update *``, ``delete``, ``insert`` or ``insert *``.
    :param condition: Spark SQL boolean over the target and source aliases; None: every such row.
    :param assignments: ``update``: target column to expression; ``insert``: target column to value.
    """

    when: MergeWhen
    then: MergeAction
    condition: str | None = None
    assignments: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "when", MergeWhen(self.when))
        object.__setattr__(self, "then", MergeAction(self.then))
        if self.then not in ALLOWED_ACTIONS[self.when]:
            allowed = ", ".join(repr(action.value) for action in ALLOWED_ACTIONS[self.when])
            raise ValueError(f"when {self.when.value!r} takes then = {allowed}, not {self.then.value!r}.")
        needs_assignments = self.then in (MergeAction.UPDATE, MergeAction.INSERT)
        if needs_assignments and not self.assignments:
            raise ValueError(f"then {self.then.value!r} needs its column -> expression assignments.")
        if not needs_assignments and self.assignments:
            raise ValueError(f"then {self.then.value!r} takes no assignments.")

    def describe(self) -> str:
        """The clause as SQL keywords, for logs and results: ``when matched and <cond> then delete``."""
        condition = f" and {self.condition}" if self.condition else ""
        return f"when {self.when.value}{condition} then {self.then.value}"


@dataclass(frozen=True)
class MergeSource:
    """Where the rows come from: a table of the catalog (optionally at a snapshot), or a query.

    :param table: ``namespace.table`` in the target's catalog. The job reads one snapshot of it: the
        given ``snapshot_id``, else its head when the job starts, for the counts and the write alike.
    :param snapshot_id: With ``table``: read this snapshot.
    :param query: A Spark SQL SELECT instead of a table.
    :param alias: The name the ``on`` condition and the clauses give the source.
    """

    table: str | None = None
    snapshot_id: int | None = None
    query: str | None = None
    alias: str = "s"

    def __post_init__(self) -> None:
        if (self.table is None) == (self.query is None):
            raise ValueError("The source is a table or a query: give exactly one of the two.")
        if self.snapshot_id is not None and self.table is None:
            raise ValueError("A source snapshot_id needs a source table.")
        if not self.alias.isidentifier():
            raise ValueError(f"Source alias {self.alias!r} is not an identifier.")


@dataclass(frozen=True)
class MergeSpec(JsonSpec):
    """One MERGE INTO (or slice overwrite, planned as one), as the Spark job receives it.

    :param catalog: Catalog name, the same in Spark and pyiceberg.
    :param table: The target, ``namespace.table`` inside the catalog.
    :param source: :class:`MergeSource`.
    :param on: Spark SQL boolean pairing target and source rows; it must name both.
    :param clauses: :class:`MergeClause` in order.
    :param target_alias: The name the ``on`` condition and the clauses give the target.
    :param overwrite: A slice overwrite: the predicate selecting the target rows the source
        replaces (``on`` is then ``FALSE`` and ``clauses`` are derived); every source row must
        satisfy it.
    :param parameters: Values bound to ``:name`` markers in every text of the spec.
    :param write_mode: Row-level write mode requested (``write.merge.mode``).
    :param branch: Branch to change instead of ``main``.
    :param snapshot_properties: Entries added to the summary of the commit (run key included).
    :param result_path: Where the job writes its record; None when the driver is remote.
    :param expected_snapshot_id: The head snapshot the change was planned against.
    :param run_key: The Airflow identity of the change (exactly once).
    :param dry_run: Count per clause what would change; commit nothing.
    :param guards: Limits on the rows the merge may change (inserted, updated and deleted).
    :param commit_policy: Exactly once, conflict retries, isolation level.
    :param audits: :class:`Audits`: write-audit-publish queries.
    """

    application: ClassVar[str] = "merge.py"

    catalog: str
    table: str
    source: MergeSource
    on: str
    clauses: tuple[MergeClause, ...] = ()
    target_alias: str = "t"
    overwrite: str | None = None
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
    version: int = SPEC_VERSION

    def __post_init__(self) -> None:
        if not self.clauses:
            raise ValueError("A merge needs at least one clause.")
        object.__setattr__(self, "parameters", given_parameters(self.parameters))
        problem = parameter_problem(self.parameters)
        if problem:
            raise InvalidExpressionError(problem)
        if not self.target_alias.isidentifier() or self.target_alias == self.source.alias:
            raise ValueError(
                f"Target alias {self.target_alias!r} must be an identifier other than the source's."
            )
