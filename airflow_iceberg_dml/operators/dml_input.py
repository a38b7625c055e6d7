"""The DML operators' input, checked without Spark: ``where``, ``set``, and the grouped parameters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_iceberg_dml.exceptions import InvalidExpressionError, InvalidPredicateError, UnknownColumnError
from airflow_iceberg_dml.spec import Audits, CommitPolicy, Guards
from airflow_iceberg_dml.sql import expression_problem, unknown_column_problem

if TYPE_CHECKING:
    from pyiceberg.table import Table

Config = TypeVar("Config", Guards, CommitPolicy)


def given_once(group: str, given: object, **separate: object) -> None:
    """Refuse a group of parameters given both as its config object and one by one."""
    twice = [name for name, value in separate.items() if value is not None]
    if given is not None and twice:
        raise TypeError(f"{', '.join(twice)} given both on its own and in {group}: give each once.")


def grouped(config: type[Config], given: Config | Mapping[str, Any] | None, **separate: Any) -> Config:
    """The config object given, or one made of the parameters given one by one (checked here)."""
    if given is None:
        return config(**{name: value for name, value in separate.items() if value is not None})
    return config(**given) if isinstance(given, Mapping) else given


def checked_assignments(
    table_name: str, where: object, assignments: dict[str, str], table: Table
) -> dict[str, str]:
    """``assignments``, once ``where`` and the ``set`` expressions are checked as text and against the
    columns of ``table``: bad input raises the package's non-retryable errors."""
    if not isinstance(where, str) or not where.strip():
        raise InvalidPredicateError(
            "where is required and must be a non-empty Spark SQL predicate; "
            'to change every row on purpose, pass where="TRUE".'
        )
    problem = expression_problem(where)
    if problem:
        raise InvalidPredicateError(f"where={where!r}: {problem}")
    for column, expression in assignments.items():
        problem = expression_problem(expression)
        if problem:
            raise InvalidExpressionError(f"set[{column!r}]={expression!r}: {problem}")
    columns = [field.name for field in table.schema().fields]
    for column in assignments:
        if problem := unknown_column_problem(column, table_name, columns):
            raise UnknownColumnError(f"set: {problem}.")
    return assignments


def audit_queries(
    audits: Mapping[str, str] | Audits | None, keep_failed_branch: bool | None
) -> tuple[Mapping[str, str] | None, bool]:
    """(the audit queries as a plain mapping, so that Airflow renders them in either form; whether to
    keep a failed audit's branch), from ``audits`` given either way."""
    if isinstance(audits, Audits):
        given_once("audits", audits, keep_failed_branch=keep_failed_branch)
        return dict(audits.queries), audits.keep_failed_branch
    return audits, bool(keep_failed_branch)
