"""A MERGE's refusals in the user's terms: Spark's analysis and cardinality failures as the package's
non-retryable errors, each naming what to change."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.exceptions import (
    DuplicateSourceRowsError,
    IcebergDmlError,
    InvalidExpressionError,
    TableNotFoundError,
    UnknownColumnError,
)
from airflow_iceberg_dml.jobs.runner import java_causes
from airflow_iceberg_dml.metadata_columns import metadata_hint

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.specs.merge import MergeClause

#: Spark's plan text for a statement its analyser refused (``EXPLAIN`` reports instead of raising).
PLANNING_ERROR = "Error occurred during query planning"


def planning_error(plan: str) -> str | None:
    """The analyser's message in an ``EXPLAIN`` output, or None when the statement was planned."""
    if plan.lstrip().startswith(PLANNING_ERROR):
        return plan.split(":", 1)[1].strip()
    return None


def analysis_error(table: str, message: str, hint: str = "", kind: str = "MERGE") -> IcebergDmlError:
    """Spark's analysis error (``[CONDITION] text``) on a ``kind`` (a MERGE, a slice overwrite) into
    ``table``, ``hint`` after it."""
    condition = message[1 : message.find("]")] if message.startswith("[") else ""
    first = message.splitlines()[0].replace("table ``", f"table {table}")
    change = f"{kind} into {table!r}"
    if condition.startswith("UNRESOLVED_COLUMN"):
        return UnknownColumnError(f"{change}: a column is not in the target or the source: {first}")
    if condition.startswith(("TABLE_OR_VIEW_NOT_FOUND", "REQUIRES_SINGLE_PART_NAMESPACE")):
        return TableNotFoundError(f"{change}: {first}")
    if condition.startswith("INCOMPATIBLE_DATA_FOR_TABLE"):
        return InvalidExpressionError(
            f"{change}: a source column or value cannot be written to its target column: {first}"
        )
    return InvalidExpressionError(f"{change}: {first}{hint}")


def metadata_column_hint(
    error: BaseException | str, texts: Iterable[tuple[str, str, str]], target_alias: str
) -> str:
    """What to write instead when a MERGE failed (``error``, or the analyser's message) on a condition on
    the target's metadata column (:mod:`airflow_iceberg_dml.metadata_columns`), or ``""``; ``texts`` as
    :meth:`MergeJob._texts`."""
    causes = [error] if isinstance(error, str) else [message for _, message in java_causes(error)]
    return metadata_hint(causes, [given for _, given, _ in texts], target_alias)


def check_assigned_columns(table: str, clauses: Iterable[MergeClause], columns: Sequence[str]) -> None:
    """Refuse a clause whose assignments name a column the target ``table`` does not have (a name in
    backquotes or a struct's field said so), before Spark plans the MERGE."""
    for clause in clauses:
        for column in clause.assignments:
            if problem := sql.unknown_column_problem(column, table, columns):
                raise UnknownColumnError(f"MERGE into {table!r}: {clause.describe()}: {problem}.")


def is_parse_error(error: Exception) -> bool:
    from pyspark.errors import ParseException

    return isinstance(error, ParseException)


def unparsable(spark: SparkSession, texts: Iterable[tuple[str, str, str]]) -> InvalidExpressionError | None:
    """The first of ``texts`` (what it is, as given, as bound) that Spark's parser does not read as one
    expression, named; None when each one does (what failed to parse is elsewhere: the source query).

    Asked only once a statement has failed to parse, to say which of the user's texts is at fault
    rather than a line of the statement the job built: one request per text on Spark Connect.
    """
    from pyspark.errors import AnalysisException, ParseException

    from airflow_iceberg_dml.jobs.runner import error_summary, functions

    expr = functions(spark).expr
    for what, shown, bound in texts:
        # Alone first, so that Spark's position is in the user's text; then in parentheses, as the
        # statement has it, where a name after the expression (an alias alone) does not parse.
        for text, after in [(bound, ""), (f"(\n{bound}\n)", " (text follows the expression)")]:
            try:
                spark.range(0).select(expr(text)).schema  # noqa: B018 - parsed (and analysed), never run
            except ParseException as error:
                problem = error_summary(error)
                return InvalidExpressionError(
                    f"{what}={shown!r} is not one Spark SQL expression{after}: {problem}"
                )
            except AnalysisException:
                continue  # it parsed: its columns are the MERGE's, not this probe's
    return None


def one_sided_on_error(on: str, side: str, target_alias: str, source_alias: str) -> InvalidExpressionError:
    """``on`` resolves on ``side`` (``target`` or ``source``) alone."""
    other = "source" if side == "target" else "target"
    return InvalidExpressionError(
        f"on={on!r} names no column of the {other} (it resolves on the {side} alone): "
        f"a MERGE pairs target and source rows; say how, e.g. '{target_alias}.id = {source_alias}.id'."
    )


def duplicate_error(table: str, on: str, target_rows: int, source_rows: int) -> DuplicateSourceRowsError:
    """Target rows that ``on`` pairs with several source rows (Spark's ``MERGE_CARDINALITY_VIOLATION``)."""
    return DuplicateSourceRowsError(
        f"on={on!r} pairs {target_rows} target row(s) of {table!r} with more than one source row each "
        f"({source_rows} source rows in all): a MERGE changes a target row once. Make the source unique "
        "on the key of the on condition. Nothing was committed."
    )
