"""The purge's check of every layer of a table, read by the worker from storage itself.

The Spark job reads the data files (every row, no delete file applied). This module reads everything
else under the table's location and its write paths (:mod:`~airflow_iceberg_dml.table_paths`), each
file by its own format and never through Spark's view:

- manifests (Avro, every entry: ADDED, EXISTING and DELETED): the key column's lower and upper bounds,
  partition values derived from the key, and the file paths they name;
- manifest lists (Avro): each manifest's partition summary (bounds) and path;
- table metadata (``*.metadata.json``, every version kept): every string, snapshot summaries included;
- Puffin files (deletion vectors, statistics): the footer's blob properties;
- delete files (Parquet): the paths position deletes name, the key column of equality deletes (by
  its field id: a file written before a rename has the old name);
- partition statistics (Parquet): the partition values;
- names: every folder and file name under the location, and the catalog entry's metadata location.

A value is compared with the erased keys through :class:`~airflow_iceberg_dml.erasure_keys.KeyMatcher`
(salted digests): this module never sees a key, and a residue names its file and layer, never a key.
"""

from __future__ import annotations

import json
import struct
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from airflow_iceberg_dml.erasure_findings import LayerCheck, Residue, unique
from airflow_iceberg_dml.erasure_keys import keeps_value, key_names, redacted
from airflow_iceberg_dml.table_paths import is_under, storage_roots

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyarrow.fs import FileInfo, FileSystem
    from pyiceberg.table import Table

    from airflow_iceberg_dml.erasure_keys import KeyMatcher

#: The layers, as the report names them.
NAMES = "names"
MANIFESTS = "manifests"
MANIFEST_LISTS = "manifest lists"
TABLE_METADATA = "table metadata"
PUFFIN = "puffin files"
DELETE_FILES = "delete files"
PARTITION_STATISTICS = "partition statistics"
CATALOG = "catalog entry"
#: The field id of ``file_path`` in position delete files (the Iceberg spec's reserved id).
_DELETE_FILE_PATH_ID = 2147483546
_PUFFIN_MAGIC = b"PFA1"
_BOUND_FORMATS = {"int": "<i", "long": "<q", "date": "<i"}


class LayerScan:
    """One table's storage, read for the erased keys of ``column``.

    :param table: The table (pyiceberg), for its location, FileIO, schema and metadata.
    :param column: The erased key's column.
    :param matcher: Whether a text is a form of an erased key.
    """

    def __init__(self, table: Table, column: str, matcher: KeyMatcher) -> None:
        from pyiceberg.io.pyarrow import PyArrowFileIO

        if not isinstance(table.io, PyArrowFileIO):
            raise TypeError(f"the layer check lists storage through pyarrow, not {type(table.io).__name__}")
        self.table = table
        self.column = column
        self.matches = matcher
        scheme, netloc, self.root = PyArrowFileIO.parse_location(table.location())
        self.scheme = scheme
        self.fs: FileSystem = table.io.fs_by_scheme(scheme, netloc)
        #: Where the table's files are (its location, and its write paths outside it), and its metadata.
        self.roots, self.metadata_roots = storage_roots(table)
        schema = table.schema()
        key_field = schema.find_field(column, case_sensitive=False)
        self.key_id, self.key_type = key_field.field_id, str(key_field.field_type)
        self.key_is_text = self.key_type == "string"
        self.key_names = key_names(table, column)

    # -- the pass --------------------------------------------------------------------------------------

    def check(self) -> LayerCheck:
        """Read every layer: the files read per layer, the residues (each marked referenced or not, with
        its file's modification time) and the files that could not be read."""
        found = LayerCheck()
        listing = self.listing()
        files = {info.path: int(info.mtime_ns // 1_000_000) for info in listing if info.is_file}
        found.files[NAMES] = len(listing)
        for info in listing:
            self._name(found, info.path)
        lists: dict[str, list[str]] = {}
        live: dict[str, list[tuple[str, int]]] = {}
        for path in sorted(p for p in files if p.endswith(".avro")):
            self._avro(found, path, lists, live)
        referenced = self._referenced(lists, live)
        deletes = {p: content for entries in live.values() for p, content in entries if content in (1, 2)}
        for path in sorted(files):
            if path.endswith(".metadata.json"):
                self._read(found, path, TABLE_METADATA, self._metadata_json)
            elif path.endswith((".puffin", ".stats")):
                self._read(found, path, PUFFIN, self._puffin)
            elif path in deletes:
                self._read(found, path, DELETE_FILES, partial(self._delete_file, content=deletes[path]))
            elif path.endswith(".parquet") and self._in_metadata(path):
                self._read(found, path, PARTITION_STATISTICS, self._partition_statistics)
        self._catalog_entry(found)
        for residue in found.residues:
            residue.referenced = residue.file in referenced or residue.layer == CATALOG
            residue.modified_ms = files.get(residue.file, 0)
        found.residues = unique(found.residues)
        return found

    def display(self, path: str) -> str:
        """A path as reports and logs show it: a URI, its key-valued folder names redacted."""
        return redacted(path if self.scheme == "file" else f"{self.scheme}://{path}", self.key_names)

    def listing(self) -> list[FileInfo]:
        from pyarrow.fs import FileSelector

        return [
            info
            for root in self.roots
            for info in self.fs.get_file_info(FileSelector(root, recursive=True, allow_not_found=True))
        ]

    def _in_metadata(self, path: str) -> bool:
        return any(is_under(path, root) for root in self.metadata_roots)

    def _read(self, found: LayerCheck, path: str, layer: str, reader: Any) -> None:
        found.files[layer] += 1
        try:
            reader(found, path)
        except Exception as error:  # noqa: BLE001 - an unreadable file is not a verified one
            found.unreadable.append(f"{self.display(path)} ({layer}: {type(error).__name__})")

    # -- values ------------------------------------------------------------------------------------------

    def _text(self, found: LayerCheck, path: str, layer: str, where: str, text: str) -> None:
        """A string found in a file: a path (each segment, ``name=value`` parts), or a value."""
        if self._text_holds_key(text):
            found.residues.append(Residue(path, layer, where))

    def _text_holds_key(self, text: str) -> bool:
        """A string key anywhere; a key as the value of a ``name=value`` path segment (or summary entry)
        whose name is the key column or a partition field of it; a string key as a whole segment."""
        if self.key_is_text and self.matches(text):
            return True
        return any(self._segment_holds_key(segment) for segment in text.split("/"))

    def _segment_holds_key(self, segment: str) -> bool:
        name, equals, value = segment.partition("=")
        if equals:
            return name.rsplit(".", 1)[-1].lower() in self.key_names and self.matches(unquote(value))
        return self.key_is_text and self.matches(unquote(segment))

    def _strings(self, found: LayerCheck, path: str, layer: str, value: Any, where: str) -> None:
        for text in _all_strings(value):
            self._text(found, path, layer, where, text)

    def _name(self, found: LayerCheck, path: str) -> None:
        root = max((root for root in self.roots if is_under(path, root)), key=len, default=self.root)
        relative = path[len(root) :].lstrip("/")
        if any(self._segment_holds_key(segment) for segment in relative.split("/")):
            found.residues.append(Residue(path, NAMES, "a folder or file name"))

    def _bound(self, raw: bytes, type_name: str) -> str | None:
        if type_name == "string":
            return raw.decode("utf-8", "replace")
        form = _BOUND_FORMATS.get(type_name)
        if form is None or len(raw) != struct.calcsize(form):
            return None
        return str(struct.unpack(form, raw)[0])

    # -- Avro: manifests and manifest lists --------------------------------------------------------------

    def _avro(self, found: LayerCheck, path: str, lists: dict[str, list[str]], live: dict[str, Any]) -> None:
        import fastavro

        try:
            with self.fs.open_input_file(path) as stream:
                reader = fastavro.reader(stream)
                names = {item["name"] for item in reader.writer_schema.get("fields", [])}  # type: ignore[union-attr]
                if "manifest_path" in names:
                    found.files[MANIFEST_LISTS] += 1
                    lists[path] = [self._manifest_list_entry(found, path, dict(entry)) for entry in reader]  # type: ignore[arg-type]
                elif "data_file" in names:
                    found.files[MANIFESTS] += 1
                    live[path] = self._manifest(found, path, reader)
                else:
                    found.files[TABLE_METADATA] += 1
                    for record in reader:
                        self._strings(found, path, TABLE_METADATA, record, "an Avro record")
        except Exception as error:  # noqa: BLE001 - an unreadable file is not a verified one
            found.unreadable.append(f"{self.display(path)} (Avro: {type(error).__name__})")

    def _manifest(self, found: LayerCheck, path: str, reader: Any) -> list[tuple[str, int]]:
        """Check every entry of a manifest; the (path, content) of its live entries."""
        header = reader.metadata
        key_partitions = {
            str(item["name"])
            for item in json.loads(header.get("partition-spec", "[]"))
            if item.get("source-id") == self.key_id and keeps_value(str(item.get("transform")))
        }
        key_type = self._type_in(json.loads(header["schema"])) if "schema" in header else self.key_type
        live = []
        for entry in reader:
            status = {0: "EXISTING", 1: "ADDED", 2: "DELETED"}.get(entry.get("status"), "an")
            data_file = entry["data_file"]
            self._entry(
                found, path, f"a {status} entry", data_file, key_partitions=key_partitions, key_type=key_type
            )
            if entry.get("status") != 2:
                live.append((_fs_path(str(data_file["file_path"])), int(data_file.get("content") or 0)))
        return live

    def _entry(
        self,
        found: LayerCheck,
        path: str,
        where: str,
        data_file: dict[str, Any],
        *,
        key_partitions: set[str],
        key_type: str | None,
    ) -> None:
        """One manifest entry: the paths it names, its partition values and bounds of the key column."""
        self._text(found, path, MANIFESTS, f"{where}'s file path", str(data_file["file_path"]))
        if data_file.get("referenced_data_file"):
            referenced = str(data_file["referenced_data_file"])
            self._text(found, path, MANIFESTS, f"{where}'s referenced data file", referenced)
        for name, value in (data_file.get("partition") or {}).items():
            if name in key_partitions and value is not None and self.matches(str(value)):
                found.residues.append(Residue(path, MANIFESTS, f"{where}'s partition value {name}"))
        for side in ("lower_bounds", "upper_bounds"):
            for bound in data_file.get(side) or []:
                if bound["key"] == _DELETE_FILE_PATH_ID:
                    text = bound["value"].decode("utf-8", "replace")
                    self._text(found, path, MANIFESTS, f"{where}'s {side[:-1]} of file_path", text)
                elif bound["key"] == self.key_id and key_type is not None:
                    value = self._bound(bound["value"], key_type)
                    if value is not None and self.matches(value):
                        found.residues.append(
                            Residue(path, MANIFESTS, f"{where}'s {side[:-1]} of {self.column}")
                        )

    def _type_in(self, schema: dict[str, Any]) -> str | None:
        for item in schema.get("fields", []):
            if item.get("id") == self.key_id and isinstance(item.get("type"), str):
                return str(item["type"])
        return None

    def _manifest_list_entry(self, found: LayerCheck, path: str, entry: dict[str, Any]) -> str:
        manifest = str(entry["manifest_path"])
        self._text(found, path, MANIFEST_LISTS, "a manifest's path", manifest)
        spec = self.table.metadata.specs().get(int(entry.get("partition_spec_id") or 0))
        for position, summary in enumerate(entry.get("partitions") or []):
            if spec is None or position >= len(spec.fields):
                continue
            if spec.fields[position].source_id != self.key_id or not keeps_value(
                str(spec.fields[position].transform)
            ):
                continue
            for side in ("lower_bound", "upper_bound"):
                raw = summary.get(side)
                text = self._bound(raw, self.key_type) if raw is not None else None
                if text is not None and self.matches(text):
                    where = f"a manifest's partition summary ({side} of {spec.fields[position].name})"
                    found.residues.append(Residue(path, MANIFEST_LISTS, where))
        return _fs_path(manifest)

    # -- JSON, Puffin and Parquet ------------------------------------------------------------------------

    def _metadata_json(self, found: LayerCheck, path: str) -> None:
        with self.fs.open_input_file(path) as stream:
            document = json.loads(stream.read())
        self._strings(found, path, TABLE_METADATA, document, "a value or name in the table metadata")

    def _puffin(self, found: LayerCheck, path: str) -> None:
        with self.fs.open_input_file(path) as stream:
            size = stream.size()
            stream.seek(size - 12)
            tail = stream.read(12)
            if tail[8:] != _PUFFIN_MAGIC:
                raise ValueError("not a Puffin file")
            length, flags = struct.unpack("<ii", tail[:8])
            if flags & 1:
                raise ValueError("a compressed Puffin footer")
            stream.seek(size - 12 - length)
            footer = json.loads(stream.read(length))
        self._strings(found, path, PUFFIN, footer, "a blob's properties in the footer")

    def _delete_file(self, found: LayerCheck, path: str, content: int) -> None:
        import pyarrow.parquet as pq

        with self.fs.open_input_file(path) as stream:
            parquet = pq.ParquetFile(stream)
            names = parquet.schema_arrow.names
            if content == 1 and "file_path" in names:
                for text in set(parquet.read(columns=["file_path"]).column(0).to_pylist()):
                    self._text(found, path, DELETE_FILES, "a position delete's data file path", str(text))
            key = _column_of(parquet.schema_arrow, self.key_id) or next(
                (name for name in names if name.lower() == self.column.lower()), None
            )
            if content == 2 and key is not None:
                values = parquet.read(columns=[key]).column(0).to_pylist()
                if any(value is not None and self.matches(str(value)) for value in set(values)):
                    found.residues.append(Residue(path, DELETE_FILES, f"an equality delete's {key}"))

    def _partition_statistics(self, found: LayerCheck, path: str) -> None:
        import pyarrow.parquet as pq

        with self.fs.open_input_file(path) as stream:
            rows = pq.read_table(stream).to_pylist()
        for row in rows:
            partition = row.get("partition") or {}
            if any(value is not None and self.matches(str(value)) for value in partition.values()):
                found.residues.append(Residue(path, PARTITION_STATISTICS, "a partition value"))
                return

    def _catalog_entry(self, found: LayerCheck) -> None:
        found.files[CATALOG] += 1
        where = str(self.table.metadata_location)
        self._text(found, where, CATALOG, "the metadata location the catalog points to", where)
        self._strings(found, where, CATALOG, dict(self.table.properties), "a table property")

    # -- what the table references ----------------------------------------------------------------------

    def _referenced(self, lists: dict[str, list[str]], live: dict[str, list[tuple[str, int]]]) -> set[str]:
        """Every file the table's metadata references: metadata versions, manifest lists, manifests,
        statistics files and the live data and delete files of every snapshot."""
        metadata = self.table.metadata
        paths = {self.table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
        paths.update(str(item.statistics_path) for item in metadata.statistics)
        paths.update(str(item.statistics_path) for item in metadata.partition_statistics)
        manifest_lists = {str(snapshot.manifest_list) for snapshot in metadata.snapshots}
        paths.update(manifest_lists)
        referenced = {_fs_path(path) for path in paths}
        for manifest_list in (_fs_path(path) for path in manifest_lists):
            for manifest in lists.get(manifest_list, []):
                referenced.add(manifest)
                referenced.update(path for path, _ in live.get(manifest, []))
        return referenced


def _column_of(schema: Any, field_id: int) -> str | None:
    """The column of a Parquet file (its Arrow schema) that holds Iceberg field ``field_id``: renamed
    since the file was written, it has its old name there."""
    wanted = str(field_id).encode()
    return next(
        (item.name for item in schema if (item.metadata or {}).get(b"PARQUET:field_id") == wanted), None
    )


def _fs_path(location: str) -> str:
    from pyiceberg.io.pyarrow import PyArrowFileIO

    return PyArrowFileIO.parse_location(location)[2]


def _all_strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _all_strings(key)
            yield from _all_strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _all_strings(item)
