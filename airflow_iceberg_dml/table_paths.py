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
    from collections.abc import Mapping, Sequence

    from pyiceberg.table import Table

#: Table properties that put data files outside the table's location, and the one for metadata files.
DATA_WRITE_PATHS = ("write.data.path", "write.object-storage.path", "write.folder-storage.path")
WRITE_PATHS = (*DATA_WRITE_PATHS, "write.metadata.path")


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


def within_table(location: str, table: Table) -> bool:
    """Whether ``location`` is the table's location or a folder in it, or in a path the table writes
    to (:data:`WRITE_PATHS`): compared as file systems (scheme, bucket) and paths, ``..`` resolved."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    def parsed(uri: str) -> tuple[str, str, str]:
        scheme, netloc, path = PyArrowFileIO.parse_location(uri)
        return _SAME_SCHEME.get(scheme, scheme), netloc, posixpath.normpath(path)

    scheme, netloc, path = parsed(location)
    for root in (table.location(), *write_paths(table.properties)):
        root_scheme, root_netloc, root_path = parsed(root)
        if (root_scheme, root_netloc) == (scheme, netloc) and is_under(path, root_path):
            return True
    return False
