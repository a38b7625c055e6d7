"""Storage I/O of an erasure, through the catalog's own FileIO: its report files, and files to delete.

The erase operator never touches storage itself: a report is written here (a local path or any URI the
catalog's storage can write), and the files the purge's verification found unreferenced are deleted here.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_iceberg_dml.erasure_report import RemainingFile
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

#: Characters a report's file name keeps; anything else becomes ``_``.
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._=-]+")
#: Beside the first table, outside its data: ``<table location>.erasure-reports``.
DEFAULT_REPORT_SUFFIX = ".erasure-reports"


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
        """``location``, or the default one beside :attr:`table`."""
        if location:
            return str(location).rstrip("/")
        return str(self._table().location()).rstrip("/") + DEFAULT_REPORT_SUFFIX

    def write_report(self, location: str | None, report: dict[str, Any]) -> str:
        """Write ``report`` as ``<request_id>.<mode>.json`` in the report folder; its path."""
        name = _UNSAFE_NAME.sub("_", f"{report['request_id']}.{report['mode']}") + ".json"
        path = f"{self.report_folder(location)}/{name}"
        payload = json.dumps({**report, "report_path": path}, indent=2, sort_keys=True).encode()
        with self._table().io.new_output(path).create(overwrite=True) as stream:
            stream.write(payload)
        return path

    def delete_unreferenced(
        self, table: str, remaining: list[RemainingFile], grace_ms: int, now_ms: int
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
                "%s: deleted %s (no snapshot referenced it; it held erased keys)", table, item["file"]
            )
            deleted.append(item["file"])
        return deleted, kept
