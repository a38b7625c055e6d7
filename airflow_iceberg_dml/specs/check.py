"""The spec of a data-quality check job: named checks, counted against one snapshot of a table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import ClassVar

from airflow_iceberg_dml.exceptions import InvalidCheckError
from airflow_iceberg_dml.specs.common import (
    SPEC_VERSION,
    TABLE_PLACEHOLDER,
    JsonSpec,
    reads_table,
)
from airflow_iceberg_dml.specs.parameters import Parameter, given_parameters, parameter_problem
from airflow_iceberg_dml.sql import expression_problem


class CheckKind(StrEnum):
    """What a check counts. Each check's failing count is 0 when it passes."""

    ROW_CONDITION = "row_condition"
    """Rows for which ``condition`` is not true (false or NULL)."""
    UNIQUE = "unique"
    """Rows whose key (``columns``, none of them NULL) appears more than once."""
    NOT_NULL = "not_null"
    """Rows where any of ``columns`` is NULL."""
    ROW_COUNT = "row_count"
    """How far the number of rows is outside ``min_rows`` .. ``max_rows`` (0 inside)."""
    SQL = "sql"
    """The number ``query`` returns (one row, one column, a whole number >= 0)."""


#: The fields each kind needs (beyond ``name`` and ``kind``); every other field must stay unset.
_NEEDS: dict[CheckKind, tuple[str, ...]] = {
    CheckKind.ROW_CONDITION: ("condition",),
    CheckKind.UNIQUE: ("columns",),
    CheckKind.NOT_NULL: ("columns",),
    CheckKind.ROW_COUNT: (),
    CheckKind.SQL: ("query",),
}
_OPTIONAL: dict[CheckKind, tuple[str, ...]] = {CheckKind.ROW_COUNT: ("min_rows", "max_rows")}


@dataclass(frozen=True)
class Check:
    """One named data-quality check. What it counts as failing depends on its kind:

    * ``row_condition``: the rows for which ``condition`` (a Spark SQL boolean expression over the
      row) is not true; a NULL result counts as failing. ``condition="amount >= 0"`` fails a row
      with a negative amount and a row with no amount.
    * ``unique``: the rows whose key, the values of ``columns`` together, appears on more than one
      row: a key on three rows counts 3. Rows with a NULL in any key column are not counted (SQL's
      UNIQUE; check them with ``not_null``). ``duplicate_keys`` says how many distinct keys repeat.
    * ``not_null``: the rows where at least one of ``columns`` is NULL.
    * ``row_count``: how far the number of rows is outside the range: ``min_rows - rows`` below it,
      ``rows - max_rows`` above it, 0 inside. ``rows`` reports the count itself. With neither
      bound it only reports the count.
    * ``sql``: the number ``query`` returns, a SELECT with ``{table}`` standing for the table pinned
      at the checked snapshot, returning one row with one whole number >= 0, e.g. ``SELECT count(*)
      FROM {table} o LEFT ANTI JOIN db.customers c ON o.customer_id = c.id``.

    Malformed checks raise :class:`~airflow_iceberg_dml.exceptions.InvalidCheckError` naming the check.
    """

    name: str
    kind: CheckKind
    condition: str | None = None
    columns: tuple[str, ...] = ()
    min_rows: int | None = None
    max_rows: int | None = None
    query: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidCheckError(f"A check's name must be a non-empty string, not {self.name!r}.")
        try:
            object.__setattr__(self, "kind", CheckKind(self.kind))
        except ValueError:
            kinds = ", ".join(kind.value for kind in CheckKind)
            raise InvalidCheckError(f"{self.label}: kind must be one of {kinds}.") from None
        if isinstance(self.columns, list | tuple):
            object.__setattr__(self, "columns", tuple(self.columns))
        self._check_fields()
        self._check_values()

    @property
    def label(self) -> str:
        """How messages and log lines name the check: ``check 'name' (kind)``."""
        kind = self.kind.value if isinstance(self.kind, CheckKind) else self.kind
        return f"check {self.name!r} ({kind})"

    def _check_fields(self) -> None:
        allowed = {"name", "kind", *_NEEDS[self.kind], *_OPTIONAL.get(self.kind, ())}
        given = {item.name for item in fields(self) if getattr(self, item.name) not in (None, ())}
        extra = sorted(given - allowed)
        if extra:
            raise InvalidCheckError(f"{self.label}: {', '.join(extra)} does not apply to this kind.")
        missing = [name for name in _NEEDS[self.kind] if name not in given]
        if missing:
            raise InvalidCheckError(f"{self.label}: {', '.join(missing)} is required.")

    def _check_values(self) -> None:
        if self.kind in (CheckKind.UNIQUE, CheckKind.NOT_NULL):
            names = self.columns
            if not isinstance(names, tuple) or any(not isinstance(c, str) or not c.strip() for c in names):
                raise InvalidCheckError(f"{self.label}: columns must be a list of names, not {names!r}.")
        for bound in ("min_rows", "max_rows"):
            value = getattr(self, bound)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidCheckError(f"{self.label}: {bound}={value!r} must be a whole number >= 0.")
        if self.min_rows is not None and self.max_rows is not None and self.min_rows > self.max_rows:
            raise InvalidCheckError(f"{self.label}: min_rows={self.min_rows} > max_rows={self.max_rows}.")
        self._check_texts()

    def _check_texts(self) -> None:
        for name in ("condition", "query"):
            text = getattr(self, name)
            if text is None:
                continue
            if not isinstance(text, str) or not text.strip():
                raise InvalidCheckError(f"{self.label}: {name} must be non-empty Spark SQL text.")
            problem = expression_problem(text)
            if problem:
                raise InvalidCheckError(f"{self.label}: {name}={text!r}: {problem}.")
        if self.query is not None and not reads_table(self.query):
            raise InvalidCheckError(
                f"{self.label}: the query must read the table as {TABLE_PLACEHOLDER}, so that it counts "
                "the checked snapshot."
            )

    @classmethod
    def from_definition(cls, name: str, definition: Check | Mapping[str, object]) -> Check:
        """The check named ``name`` from a mapping of its fields (``{"kind": "not_null", "columns":
        ["id"]}``), or a :class:`Check` given as it is (its own name must be ``name``)."""
        if isinstance(definition, Check):
            if definition.name != name:
                raise InvalidCheckError(f"check {name!r} is given a Check named {definition.name!r}.")
            return definition
        if not isinstance(definition, Mapping):
            raise InvalidCheckError(f"check {name!r}: expected a mapping of its fields, not {definition!r}.")
        known = {item.name for item in fields(cls)} - {"name"}
        unknown = sorted(str(key) for key in definition if key not in known)
        if unknown:
            raise InvalidCheckError(f"check {name!r}: unknown field(s) {unknown} (fields: {sorted(known)}).")
        if "kind" not in definition:
            raise InvalidCheckError(f"check {name!r}: kind is required.")
        return cls(name=name, **definition)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CheckSpec(JsonSpec):
    """Data-quality checks of one table at one snapshot, as the Spark job receives them.

    :param catalog: Catalog name, the same in Spark and pyiceberg.
    :param table: ``namespace.table`` inside the catalog.
    :param checks: The checks, their names unique.
    :param branch: Check the head of this branch instead of ``main``'s.
    :param snapshot_id: Check this snapshot (any one still in the table's metadata) instead of the head.
    :param parameters: Values bound to named parameter markers (``:name``) in conditions and queries.
    :param result_path: Where the job writes its :class:`JobRecord`; None when the driver is remote.
    """

    application: ClassVar[str] = "check.py"

    catalog: str
    table: str
    checks: tuple[Check, ...]
    branch: str | None = None
    snapshot_id: int | None = None
    parameters: Mapping[str, Parameter] = field(default_factory=dict)
    result_path: str | None = None
    version: int = SPEC_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "checks", tuple(self.checks))
        if not self.checks:
            raise InvalidCheckError("No checks to run: give at least one.")
        names = [check.name for check in self.checks]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise InvalidCheckError(f"Check names must be unique: {repeated} given more than once.")
        object.__setattr__(self, "parameters", given_parameters(self.parameters))
        problem = parameter_problem(self.parameters)
        if problem:
            raise InvalidCheckError(problem)
