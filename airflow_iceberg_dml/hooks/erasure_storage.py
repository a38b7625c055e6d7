"""Storage I/O of an erasure, through the catalog's own FileIO: its report files, and files to delete.

The erase operator never touches storage itself: a report is written here (a local path or any URI the
catalog's storage can write), and the files the purge's verification found unreferenced are deleted here.

Reports are an audit trail: every run writes a new file (never over another one), whole or not at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from airflow.sdk import BaseHook, conf

from airflow_iceberg_dml.erasure_keys import KeyDigests, KeyMatcher, key_names, redacted
from airflow_iceberg_dml.erasure_layers import LayerScan
from airflow_iceberg_dml.exceptions import InvalidSubjectsError

if TYPE_CHECKING:
    from collections.abc import Set

    from pyiceberg.table import Table

    from airflow_iceberg_dml.erasure_report import RemainingFile, TableReport
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_dml.specs.erasure import ErasureSpec

#: A killed writer's temporary file older than this is removed by the next write in its folder.
STALE_TEMPORARY_S = 3600
#: A line of a subjects file that is an integer key.
_INTEGER = re.compile(r"[+-]?[0-9]+")
#: Characters a report's file name keeps; anything else becomes ``_``.
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._=-]+")
#: The Airflow setting (``[iceberg_dml] erasure_report_location``, or the environment variable
#: ``AIRFLOW__ICEBERG_DML__ERASURE_REPORT_LOCATION``) that sets a deployment's report folder.
REPORT_LOCATION_OPTION = ("iceberg_dml", "erasure_report_location")
#: The default report folder's name, at the root of the catalog's warehouse, outside every table.
DEFAULT_REPORT_FOLDER = "_erasure_reports"


def _local_path(location: str) -> Path | None:
    """The local path of ``location`` (a path or a ``file:`` URI), or None for another storage."""
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return Path(parsed.path)
    return Path(location) if not parsed.scheme or len(parsed.scheme) == 1 else None


class ErasureStorageHook(BaseHook):
    """Writes erasure reports and deletes leftover files with the FileIO of a table of the catalog.

    :param catalog_hook: The catalog the erased tables are in.
    :param table: A table of that catalog whose FileIO (and location) is used.
    """

    def __init__(self, catalog_hook: IcebergCatalogHook, table: str) -> None:
        super().__init__()
        self.catalog_hook = catalog_hook
        self.table = table

    def _table(self) -> Table:
        return self.catalog_hook.load_table(self.table)

    def report_folder(self, location: str | None) -> str:
        """Where reports go: ``location``; else the deployment's setting (:data:`REPORT_LOCATION_OPTION`);
        else ``_erasure_reports`` at the root of the catalog's warehouse (a path or URI), or, for a
        catalog whose warehouse is a name (a REST catalog), two levels above :attr:`table`'s location
        (its namespace's parent). Never inside a table's folder, so orphan removal never reaches it."""
        if location:
            return str(location).rstrip("/")
        configured = conf.get(*REPORT_LOCATION_OPTION, fallback=None)
        if configured:
            return str(configured).rstrip("/")
        warehouse = str(self.catalog_hook.catalog_config.properties.get("warehouse") or "")
        if "://" in warehouse or warehouse.startswith("/"):
            return f"{warehouse.rstrip('/')}/{DEFAULT_REPORT_FOLDER}"
        namespace_parent = str(self._table().location()).rstrip("/").rsplit("/", 2)[0]
        return f"{namespace_parent}/{DEFAULT_REPORT_FOLDER}"

    def write_report(self, location: str | None, report: dict[str, Any]) -> str:
        """Write ``report`` to a file of its own in the report folder; its path.

        The name is ``<request_id>.<mode>.<UTC time>-<random>.json``: a second run of the same request
        writes a second file. Nothing is overwritten: the file is created exclusively. A local file is
        written under a temporary name and renamed, so a killed writer leaves no partial report; on an
        object store (S3, GCS, ADLS) an object appears only once it is whole.
        """
        stamp = f"{datetime.now(tz=UTC):%Y%m%dT%H%M%S%fZ}-{uuid.uuid4().hex[:8]}"
        name = _UNSAFE_NAME.sub("_", f"{report['request_id']}.{report['mode']}.{stamp}")
        path = f"{self.report_folder(location)}/{name}.json"
        payload = json.dumps({**report, "report_path": path}, indent=2, sort_keys=True).encode()
        local = _local_path(path)
        if local is not None:
            _write_local_once(local, payload)
        else:
            with self._table().io.new_output(path).create(overwrite=False) as stream:
                stream.write(payload)
        return path

    def read_subjects(self, location: str) -> list[Any]:
        """The keys in the file at ``location`` (a local path or a URI this storage reads): a JSON list,
        or one key per line, integers when every line is one. The keys are never logged."""
        local = _local_path(location)
        try:
            if local is not None:
                text = local.read_text(encoding="utf-8")
            else:
                with self._table().io.new_input(location).open() as stream:
                    text = stream.read().decode("utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidSubjectsError(
                f"subjects_file {location!r} cannot be read ({type(error).__name__})."
            ) from None
        if text.lstrip().startswith("["):
            try:
                keys = json.loads(text)
            except ValueError:
                keys = None
            if not isinstance(keys, list):
                raise InvalidSubjectsError(f"subjects_file {location!r} is not a JSON list of keys.")
            return keys
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if all(_INTEGER.fullmatch(line) for line in lines):
            return [int(line) for line in lines]
        return lines

    def finish_purge(self, tables: dict[str, TableReport], spec: ErasureSpec) -> list[str]:
        """The worker's part of a purge, after the Spark job: delete what the job found unreferenced,
        then check every metadata layer and every name under each table (deleting what is unreferenced
        and holds erased keys, and empty folders). The paths deleted."""
        digests = {
            name: KeyDigests.from_json(entry.pop("key_digests", None)) for name, entry in tables.items()
        }
        names = {
            name: key_names(self.catalog_hook.load_table(name), entry["column"])
            for name, entry in tables.items()
            if "verification" in entry
        }
        deleted = self.delete_leftovers(tables, spec.orphan_grace_ms, names)
        for name, entry in tables.items():
            check = entry.get("verification")
            if check is not None:
                for item in check.get("remaining", []):
                    item["file"] = redacted(item["file"], names[name])
                deleted += self.check_layers(name, entry, digests[name], spec)
        return deleted

    def check_layers(
        self, name: str, entry: TableReport, digests: KeyDigests | None, spec: ErasureSpec
    ) -> list[str]:
        """Read every layer of ``name`` for the erased keys (:mod:`~airflow_iceberg_dml.erasure_layers`):
        files no snapshot references that hold one (older than the orphan grace) are deleted, then empty
        folders; a second pass is the verdict, in ``entry``'s verification. The paths deleted."""
        check = entry["verification"]
        try:
            if digests is None or spec.digest_salt is None:
                raise ValueError("the job handed over no key digests")
            scan = LayerScan(
                self.catalog_hook.load_table(name), entry["column"], KeyMatcher(digests, spec.digest_salt)
            )
        except (ValueError, TypeError) as error:
            check["layers"] = {"not_checked": str(error)}
            check["clean"] = False
            return []
        found = scan.check()
        now_ms = int(time.time() * 1000)
        deleted: list[str] = []
        old_unreferenced = {
            residue.file: residue.layer
            for residue in found.residues
            if not residue.referenced
            and residue.modified_ms
            and now_ms - residue.modified_ms >= spec.orphan_grace_ms
        }
        for path, layer in sorted(old_unreferenced.items()):
            scan.fs.delete_file(path)
            self.log.info(
                "%s: deleted %s (no snapshot referenced it; its %s held an erased key)",
                name,
                scan.display(path),
                layer,
            )
            deleted.append(scan.display(path))
        deleted += clean_empty_folders(scan)
        final = scan.check()
        check["layers"] = final.to_json(scan.key_names)
        check["clean"] = bool(check.get("clean")) and not final.residues and not final.unreadable
        self.log.info(
            "%s: the metadata layers and names were read (%s): %s",
            name,
            ", ".join(f"{layer} {count}" for layer, count in sorted(final.files.items())),
            "no erased key"
            if not final.residues and not final.unreadable
            else f"{len(final.residues)} residue(s), {len(final.unreadable)} unreadable file(s)",
        )
        return deleted

    def delete_leftovers(
        self, tables: dict[str, TableReport], grace_ms: int, names: dict[str, set[str]] | None = None
    ) -> list[str]:
        """Delete the files that hold erased keys and that no snapshot references (older than
        ``grace_ms``), per table of a purge's report; what is deleted and gone leaves the verification's
        ``remaining``. The paths deleted."""
        now_ms = int(time.time() * 1000)
        deleted: list[str] = []
        for name, entry in tables.items():
            check = entry.get("verification")
            if not check:
                continue
            # Files no snapshot references, older than the grace, that the job did not read (one may be
            # half-written): deleted by path; one whose delete fails stays, as not verified.
            unread: list[RemainingFile] = [
                {
                    "file": item["file"],
                    "referenced": False,
                    "modified_ms": item["modified_ms"],
                    "unread": True,
                }
                for item in check.pop("unreferenced", [])
            ]
            gone, kept = self.delete_unreferenced(
                name, [*check.get("remaining", []), *unread], grace_ms, now_ms, (names or {}).get(name, set())
            )
            deleted += gone
            check["remaining"] = kept
            check["clean"] = not kept
        return deleted

    def delete_unreferenced(
        self,
        table: str,
        remaining: list[RemainingFile],
        grace_ms: int,
        now_ms: int,
        names: Set[str] = frozenset(),
    ) -> tuple[list[str], list[RemainingFile]]:
        """Delete the files no snapshot references that are older than ``grace_ms``: (deleted, kept).

        A file a snapshot references, a younger one (a write may be in progress) and one that is still
        there after the delete are kept, the last marked ``delete_failed``.
        """
        io = self.catalog_hook.load_table(table).io
        deleted: list[str] = []
        kept: list[RemainingFile] = []
        for item in remaining:
            modified = item.get("modified_ms") or now_ms
            if item.get("referenced") or now_ms - modified < grace_ms:
                kept.append(item)
                continue
            io.delete(item["file"])
            if io.new_input(item["file"]).exists():
                kept.append({**item, "delete_failed": True})
                continue
            self.log.info(
                "%s: deleted %s (no snapshot referenced it; %s)",
                table,
                redacted(item["file"], names),
                "not read" if item.get("unread") else "it held erased keys",
            )
            deleted.append(redacted(item["file"], names))
        return deleted, kept


def _write_local_once(path: Path, payload: bytes) -> None:
    """Write ``path`` whole or not at all, never over an existing file: a hidden temporary file in the
    same folder, flushed to disk, then linked to its name (which fails if the name is taken). A writer
    killed midway leaves only its temporary file, which a later write removes once it is an hour old."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stale_before = time.time() - STALE_TEMPORARY_S
    for stale in path.parent.glob(".*.tmp"):  # a killed writer's: never a report's name
        with contextlib.suppress(OSError):
            if stale.stat().st_mtime < stale_before:
                stale.unlink()
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(payload)
            stream.flush()
            os.fsync(stream.fileno())
        os.link(temporary, path)
    finally:
        os.unlink(temporary)


def clean_empty_folders(scan: LayerScan) -> list[str]:
    """Remove the folders under the table's location and write paths that hold no file any more (a
    purged partition's), and Hadoop's checksum files whose file is gone; local storage only (object
    stores have no folders). The folders removed."""
    from pyarrow.fs import LocalFileSystem

    if not isinstance(scan.fs, LocalFileSystem):
        return []
    listing = scan.listing()
    files = {info.path for info in listing if info.is_file}
    for path in sorted(files):
        folder, _, name = path.rpartition("/")
        if name.startswith(".") and name.endswith(".crc") and f"{folder}/{name[1:-4]}" not in files:
            scan.fs.delete_file(path)
            files.discard(path)
    removed = []
    folders = sorted((info.path for info in listing if not info.is_file), key=len, reverse=True)
    kept = {scan.root.rstrip("/") + "/data", *scan.metadata_roots, *scan.roots}
    for folder in folders:
        if folder.rstrip("/") in kept:
            continue
        if not any(path.startswith(folder.rstrip("/") + "/") for path in files):
            scan.fs.delete_dir(folder)
            removed.append(scan.display(folder))
    return removed
