"""Validation of a DELETE or UPDATE before it writes: Spark's own parser and analyser, exactly as the
change will run; failures on the user's text or data named as the package's non-retryable errors."""

from __future__ import annotations

from contextlib import contextmanager
from functools import reduce
from typing import TYPE_CHECKING

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.exceptions import (
    IcebergDmlError,
    InvalidExpressionError,
    InvalidPredicateError,
    TableNotFoundError,
    UnknownColumnError,
    UnsupportedTableError,
)
from airflow_iceberg_dml.jobs.runner import (
    error_condition,
    error_message,
    error_parameters,
    error_summary,
    is_input_error,
    java_causes,
    probe_row,
)
from airflow_iceberg_dml.metadata_columns import metadata_hint, reserved_name_refusal, unbound_metadata_column

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from types import ModuleType

    from pyspark.sql import DataFrame, SparkSession

    from airflow_iceberg_dml.jobs.table_state import TableState
    from airflow_iceberg_dml.spec import DmlSpec


class DmlValidation:
    """Part of :class:`~airflow_iceberg_dml.jobs.dml.DmlJob`: the checks of ``where`` and ``set``."""

    spark: SparkSession
    spec: DmlSpec
    state: TableState
    ref: str
    app_id: str
    functions: ModuleType
    target: str
    where: str
    assignments: dict[str, str]
    _where_evaluated: bool

    def _columns(self) -> list[str]:
        raise NotImplementedError  # DmlJob's

    def _validate(self) -> None:
        """Parse and analyse the predicate and expressions exactly as the change will, writing nothing."""
        spec = self.spec
        for text, error, what in [
            (spec.where, InvalidPredicateError, f"where={spec.where!r}"),
            *[(e, InvalidExpressionError, f"set[{c!r}]={e!r}") for c, e in spec.assignments.items()],
        ]:
            problem = sql.expression_problem(text)
            if problem:
                raise error(f"{what}: {problem}")
        self._parse(self.where, InvalidPredicateError, f"where={spec.where!r}")
        columns = self._columns()
        for column, expression in self.assignments.items():
            if problem := sql.unknown_column_problem(column, spec.table, columns):
                raise UnknownColumnError(f"set: {problem}.")
            self._parse(expression, InvalidExpressionError, f"set[{column!r}]={spec.assignments[column]!r}")
        self._analyse_at_once()

    def _analyse_at_once(self) -> None:
        """Every check of :meth:`_analyse`, for ``where`` and ``set``, in one plan that Spark resolves in
        one request (the job runs while the table's turn is held: each request to the server counts).
        When Spark refuses it, the checks one at a time name the expression and the problem."""
        from pyspark.errors import AnalysisException

        expressions = [self.where, *self.assignments.values()]
        try:
            frame = self._deterministic_only(expressions).where(self.functions.expr(self.where))
            if self.assignments:
                frame = frame.select(
                    *[self.functions.expr(text).alias(column) for column, text in self.assignments.items()]
                )
            frame.schema  # noqa: B018 - Spark Connect analyses a plan only when asked for its schema
        except AnalysisException as error:
            self._analyse()
            if self.assignments:
                self._analyse(self.assignments)
            # Refused together, accepted apart: said as Spark says it.
            raise InvalidPredicateError(f"where={self.spec.where!r}: {error_message(error)}") from None

    def _parse(self, text: str, error: type[IcebergDmlError], what: str) -> None:
        """Spark's own expression parser: exactly one expression, nothing after it (no second statement)."""
        from pyspark.errors import ParseException

        try:
            self.functions.expr(text)  # classic Spark parses here; Spark Connect when _analyse resolves it
        except ParseException as parse_error:
            raise error(f"{what} is not a valid Spark SQL expression: {error_message(parse_error)}") from None

    def _analyse(self, assignments: Mapping[str, str] | None = None) -> DataFrame:
        """The rows the change selects (and, for ``set``, what it writes), resolved by Spark's analyser
        against the table exactly as the change will be; each text parsed as one expression."""
        from pyspark.errors import AnalysisException

        in_set = bool(assignments)
        where = "set expressions" if in_set else f"where={self.spec.where!r}"
        error_class = InvalidExpressionError if in_set else InvalidPredicateError
        expressions = [self.where, *(assignments or {}).values()]
        try:
            frame = self.spark.table(self.target).where(self.functions.expr(self.where))
            if assignments:
                frame = frame.select(
                    *[self.functions.expr(text).alias(column) for column, text in assignments.items()]
                )
            frame.schema  # noqa: B018 - Spark Connect analyses a plan only when asked for its schema
            self._deterministic_only(expressions).schema  # noqa: B018 - analysed, never run
        except AnalysisException as error:
            condition = error_condition(error)
            if condition.startswith("UNRESOLVED_COLUMN"):
                raise UnknownColumnError(f"{where}: unknown column. {error_message(error)}") from None
            if condition.startswith(("TABLE_OR_VIEW_NOT_FOUND", "REQUIRES_SINGLE_PART_NAMESPACE")):
                # The table to change was found before this: the missing one is one the text reads.
                raise TableNotFoundError(
                    f"{where}: a table it reads does not exist: {error_message(error)}"
                ) from None
            if condition.startswith("INVALID_NON_DETERMINISTIC_EXPRESSIONS"):
                # A retried or re-planned change must select and produce the same rows every time.
                raise error_class(
                    f"{where}: non-deterministic functions (rand(), uuid(), ...) are not allowed."
                ) from None
            raise error_class(f"{where}: {error_message(error)}") from None
        return frame

    def _deterministic_only(self, expressions: list[str]) -> DataFrame:
        """A plan that Spark's analyser refuses when one of ``expressions`` is not deterministic.

        PySpark has no public way to ask whether an expression is deterministic; a join condition is
        where the analyser insists on it (``INVALID_NON_DETERMINISTIC_EXPRESSIONS``), on either engine.
        """
        probe = probe_row(self.spark)
        condition = reduce(lambda a, b: a & b, [self.functions.expr(text).isNull() for text in expressions])
        return self.spark.table(self.target).join(probe, condition)

    @contextmanager
    def _naming_input_errors(self) -> Iterator[None]:
        """Turn Spark's failure on the user's ``where``/``set`` (or the data they meet) into the
        package's non-retryable error naming the column and the problem; anything else passes."""
        try:
            yield
        except IcebergDmlError:
            raise
        except Exception as error:
            if not is_input_error(error):
                raise
            raise self._input_error(error) from None

    def _input_error(self, error: BaseException) -> IcebergDmlError:
        spec = self.spec
        # Spark leaves the table name empty in some messages ("the table ``"): name it here.
        problem = error_summary(error).replace("table ``", f"table {spec.table}").strip()
        causes = [message for _, message in java_causes(error)]
        if reserved_name_refusal(causes):
            return UnsupportedTableError(f"{spec.table!r}: {problem} Rename the column first (ALTER TABLE).")
        if unbound_metadata_column(causes):
            hint = metadata_hint(causes, [spec.where, *spec.assignments.values()])
            return InvalidPredicateError(f"where={spec.where!r} on {spec.table!r}: {problem}.{hint}")
        if error_condition(error).startswith("UNRESOLVED_COLUMN"):
            return UnknownColumnError(f"A column is not in table {spec.table!r}: {problem}")
        parameters = error_parameters(error)
        named = (parameters.get("colName") or parameters.get("columnName") or "").strip("`").lower()
        columns = [column for column in spec.assignments if column.lower() == named]
        if not columns and self._where_evaluated:
            # The predicate ran over the rows before the write did: the failure is in ``set``.
            columns = list(spec.assignments)
        if not columns:
            return InvalidPredicateError(f"where={spec.where!r} on {spec.table!r}: {problem}")
        shown = ", ".join(f"set[{column!r}]={spec.assignments[column]!r}" for column in columns)
        targets = ", ".join(map(repr, columns))
        return InvalidExpressionError(f"{shown}: cannot be written to {targets} of {spec.table!r}: {problem}")
