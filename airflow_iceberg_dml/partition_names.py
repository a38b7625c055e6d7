"""Partitions named as a person reads them: ``o_orderdate_month=1995-03``, not the stored 302.

Iceberg stores a transformed partition value as a number (years, months, days or hours since 1970, a
bucket); pyiceberg's :meth:`~pyiceberg.transforms.Transform.to_human_string` names it as Iceberg names
the partition's folder. The health report labels manifest entries with it; a dry run's ``impact``
labels the partitions Spark reported (its ``_partition`` column, one field per partition field of
any of the table's specs, by name).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from pyiceberg.table import Table
    from pyiceberg.transforms import Transform
    from pyiceberg.types import IcebergType


@dataclass(frozen=True)
class PartitionField:
    """A partition field and the type of its source column (None: the column is no longer in the table)."""

    name: str
    transform: Transform[Any, Any]
    source_type: IcebergType | None

    def human(self, value: Any) -> str:
        """``value`` as stored in a manifest, named as Iceberg names a partition's folder."""
        if self.source_type is not None:
            try:
                return self.transform.to_human_string(self.source_type, value)
            except Exception:  # noqa: BLE001 - a label is informative; the stored value still names it
                pass
        return str(value)


def _joined(named: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{name}={text}" for name, text in named) or "unpartitioned"


def partition_label(spec_id: int, fields: Sequence[PartitionField], values: Sequence[Any]) -> str:
    """``name=value, ...`` of a manifest entry's partition (``values`` in the order of its spec's
    ``fields``): ``o_orderdate_year=1992``, not the stored 22; ``spec N:`` first for a spec other than 0."""
    text = _joined((field.name, field.human(value)) for field, value in zip(fields, values, strict=False))
    return text if spec_id == 0 else f"spec {spec_id}: {text}"


def partition_fields(table: Table) -> dict[int, list[PartitionField]]:
    """The fields of each of ``table``'s partition specs, by spec id."""
    schemas = [table.schema(), *table.schemas().values()]  # the current one first

    def source_type(field_id: int) -> IcebergType | None:
        for schema in schemas:
            try:
                return schema.find_type(field_id)
            except ValueError:  # not in this schema (dropped, or added later)
                continue
        return None

    return {
        spec_id: [
            PartitionField(field.name, field.transform, source_type(field.source_id)) for field in spec.fields
        ]
        for spec_id, spec in table.specs().items()
    }


def spark_partition_namer(table: Table) -> Callable[[Mapping[str, Any]], str]:
    """A function that names a partition as Spark reports it (its ``_partition`` struct as JSON, field
    name to value) by ``name=value, ...``. Numbers are stored transform results and are named by the
    field's transform (the current spec's field of that name first), as is a boolean (``true``); text
    is kept as Spark gave it (a date, a decimal, a string). A field Spark lists with no value is
    ``null`` (also the value of a field that a file's own spec does not have)."""
    fields = partition_fields(table)
    by_name: dict[str, PartitionField] = {}
    for spec_id in [table.spec().spec_id, *fields]:
        for field in fields.get(spec_id, []):
            by_name.setdefault(field.name, field)

    def text(key: str, value: Any) -> str:
        field = by_name.get(key)
        if value is None:
            return "null"
        return str(value) if isinstance(value, str) or field is None else field.human(value)

    return lambda values: _joined((key, text(key, value)) for key, value in values.items())
