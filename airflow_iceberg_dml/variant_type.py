"""Tables with a ``variant`` column (Iceberg format v3), whose schema pyiceberg 0.12 cannot read.

The operators read a table's metadata with pyiceberg (schema, snapshots, refs, properties, manifests),
never its rows; Spark reads and writes the rows. pyiceberg 0.12 has no variant type, and refuses the
whole table ("Unsupported field type: 'variant'") although nothing here reads a variant value. So
:func:`read_variant_columns` teaches it the type's name, as a primitive type of its own, where it
parses the type of a column or of a struct's field.

It patches ``IcebergType.handle_primitive_type``, the classmethod through which pyiceberg parses the
type name of a field (``NestedField``): one public name, replaced once per process, that still parses
every other type as before. It does not reach the element of a list or the key or value of a map
(``list<variant>``), which pyiceberg parses through a validator built with its classes: such a table
fails with :class:`~airflow_iceberg_dml.exceptions.UnsupportedTableError`, as does any type a
pyiceberg release does not know. A pyiceberg that has a variant type of its own is left alone.
"""

from __future__ import annotations

import re
from typing import Any, Literal

_patched = False
#: How pydantic's error names a type that pyiceberg does not know.
_UNKNOWN_TYPE = re.compile(r"(?:Unsupported field type|Type not recognized): '?([^'\s\]]+)")


def read_variant_columns() -> None:
    """Let pyiceberg read a schema with variant columns (once per process; a no-op when it can)."""
    global _patched
    from pyiceberg import types

    if _patched or hasattr(types, "VariantType"):
        return
    from pydantic import Field

    class VariantType(types.PrimitiveType):
        """Iceberg's ``variant`` (format v3): semi-structured values, read by Spark only."""

        root: Literal["variant"] = Field(default="variant")

        def minimum_format_version(self) -> Literal[3]:
            return 3

    parse: Any = types.IcebergType.handle_primitive_type  # the bound classmethod

    def handle_primitive_type(cls: type, value: Any, handler: Any) -> Any:
        return VariantType() if value == "variant" else parse(value, handler)

    types.IcebergType.handle_primitive_type = classmethod(handle_primitive_type)  # type: ignore[assignment,method-assign]
    _patched = True


def unknown_type(error: Exception) -> str | None:
    """The type name a pyiceberg parse error says it does not know, or None for another error."""
    found = _UNKNOWN_TYPE.search(str(error))
    return found.group(1) if found else None
