"""Where a table's files are: its location, and the write paths its properties set outside it.

Iceberg's location providers write data files under ``write.data.path`` (or the object storage and
folder storage paths) and metadata files under ``write.metadata.path`` when the table sets them, which
may be anywhere, not under the table's location. An erasure's proof reads every file and every name
where the table writes, so it lists all of them.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

#: Table properties that put data files outside the table's location, and the one for metadata files.
DATA_WRITE_PATHS = ("write.data.path", "write.object-storage.path", "write.folder-storage.path")
WRITE_PATHS = (*DATA_WRITE_PATHS, "write.metadata.path")


def gc_disabled_problem(name: str, properties: Mapping[str, str], what: str) -> str | None:
    """Why ``what`` (a purge, snapshot expiry, orphan removal) cannot delete files of table ``name``, or
    None: with ``gc.enabled`` false, Iceberg deletes none of them (they may belong to another table too,
    as the files of a table the ``snapshot`` procedure made do), and refuses the procedures that would."""
    if properties.get("gc.enabled", "true").strip().lower() != "false":
        return None
    return (
        f"Table {name!r} has gc.enabled = false: Iceberg deletes none of its files, which may be another "
        f"table's too (a table the snapshot procedure made shares its source's), so {what} cannot run on "
        "it. Set gc.enabled = true only when no other table references its files."
    )


def write_paths(properties: Mapping[str, str], keys: Sequence[str] = WRITE_PATHS) -> list[str]:
    """The write paths the table's properties set, of ``keys``, in that order."""
    return [properties[key] for key in keys if properties.get(key)]


def is_under(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or in it."""
    return path.rstrip("/") == root.rstrip("/") or path.startswith(root.rstrip("/") + "/")


def storage_roots(table: Table) -> tuple[list[str], list[str]]:
    """``(roots, metadata roots)`` as pyarrow file system paths: the table's location and each write path
    not inside another root; its metadata folder and ``write.metadata.path``. A write path on another
    file system than the location (scheme, bucket) is a ``TypeError``: the check reads one."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    scheme, netloc, location = PyArrowFileIO.parse_location(table.location())
    roots = [location.rstrip("/")]
    for path in write_paths(table.properties):
        other_scheme, other_netloc, root = PyArrowFileIO.parse_location(path)
        if (other_scheme, other_netloc) != (scheme, netloc):
            raise TypeError(f"the table writes files to {path}, on another file system than its location")
        if not any(is_under(root, known) for known in roots):
            roots.append(root.rstrip("/"))
    metadata = [roots[0] + "/metadata"]
    if table.properties.get("write.metadata.path"):
        metadata.append(PyArrowFileIO.parse_location(table.properties["write.metadata.path"])[2].rstrip("/"))
    return roots, metadata


#: Schemes that name one file system (Hadoop's S3 connectors and Iceberg's own).
_SAME_SCHEME = {"s3a": "s3", "s3n": "s3"}


def _parsed(uri: str) -> tuple[str, str, str]:
    """(file system, bucket, path) of ``uri``, ``..`` resolved."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    scheme, netloc, path = PyArrowFileIO.parse_location(uri)
    return _SAME_SCHEME.get(scheme, scheme), netloc, posixpath.normpath(path)


def is_inside(uri: str, root: str) -> bool:
    """Whether ``uri`` is ``root`` or in it, as file systems (scheme, bucket) and paths."""
    (scheme, netloc, path), (root_scheme, root_netloc, root_path) = _parsed(uri), _parsed(root)
    return (scheme, netloc) == (root_scheme, root_netloc) and is_under(path, root_path)


def within_table(location: str, table: Table) -> bool:
    """Whether ``location`` is the table's location or a folder in it, or in a path the table writes
    to (:data:`WRITE_PATHS`): compared as file systems (scheme, bucket) and paths, ``..`` resolved."""
    return any(is_inside(location, root) for root in (table.location(), *write_paths(table.properties)))


def data_paths_shared(name: str, table: Table, catalog: Catalog) -> list[tuple[str, str]]:
    """(data write path, other table) for each data write path of ``table`` outside its location that
    another table of ``catalog`` also writes under (Iceberg lets tables share an object storage path),
    or holds. Empty without such a path, without reading the catalog."""
    outside = [
        path
        for path in write_paths(table.properties, DATA_WRITE_PATHS)
        if not is_inside(path, table.location())
    ]
    if not outside:
        return []
    shared: list[tuple[str, str]] = []
    for other_name, other in _tables(catalog):
        if other_name == name:
            continue
        roots = [other.location(), *write_paths(other.properties, DATA_WRITE_PATHS)]
        shared += [
            (path, other_name)
            for path in outside
            if any(is_inside(path, r) or is_inside(r, path) for r in roots)
        ]
    return shared


def _tables(catalog: Catalog, namespace: tuple[str, ...] = ()) -> Iterator[tuple[str, Table]]:
    """Every table of ``catalog``, nested namespaces included: (``namespace.table``, the table)."""
    for child in catalog.list_namespaces(namespace):
        if tuple(child) == namespace:  # a catalog that lists the namespace itself among its children
            continue
        for identifier in catalog.list_tables(child):
            yield ".".join(identifier), catalog.load_table(identifier)
        yield from _tables(catalog, tuple(child))
