"""What a job reads of its table: refs, snapshots, properties, columns.

Through Spark SQL: Iceberg's metadata tables (``<table>.refs``, ``<table>.snapshots``) and ``SHOW
TBLPROPERTIES`` are public SQL, the same calls in a classic Spark driver and over Spark Connect. Each
costs the engine a Spark job. The DML, MERGE and check jobs read the table's metadata (one
:class:`MetadataView` per refresh) instead, wherever they can:

- in the Airflow worker, as every job over Spark Connect runs, from the table's metadata file through
  the connection's pyiceberg catalog (one read in the worker, no work for the engine;
  ``bench/bench_group_job.py``): the Connect hook offers that catalog for the job's duration
  (:func:`metadata_through`), and a job takes it with :func:`worker_catalog`. That view is read when
  the job refreshes, before Spark refreshes its own, so that Spark knows every snapshot it names;
- in a classic driver (spark-submit), from the table Spark itself loaded, after Spark refreshed it
  (``in_driver``; :func:`~airflow_iceberg_dml.jobs.spark_internals.table_metadata_json`).

A property set through Spark is seen after the next refresh (the jobs set one, then read no property
before they refresh).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.commits import SnapshotHistory, SnapshotRow
from airflow_iceberg_dml.exceptions import BranchNotFoundError, IcebergDmlError, TableNotFoundError
from airflow_iceberg_dml.jobs import spark_internals
from airflow_iceberg_dml.jobs.runner import error_condition, error_message, is_connect, log
from airflow_iceberg_dml.spec import SummaryKey

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from pyiceberg.catalog import Catalog
    from pyiceberg.table.metadata import TableMetadata
    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.catalog_config import CatalogConfig

MAIN = "main"

#: The catalog of the Airflow worker a job runs in, offered by :func:`metadata_through`.
_offered: ContextVar[CatalogConfig | None] = ContextVar("iceberg_dml_worker_catalog", default=None)
#: pyiceberg's catalogs, one per configuration, kept for the worker process's life.
_clients: dict[str, Catalog] = {}


@contextmanager
def metadata_through(config: CatalogConfig) -> Iterator[None]:
    """Offer the jobs run in this context the catalog of ``config`` (pyiceberg, in this process) to
    read their table's metadata with (:func:`worker_catalog`)."""
    token = _offered.set(config)
    try:
        yield
    finally:
        _offered.reset(token)


def worker_catalog(name: str) -> Catalog | None:
    """The pyiceberg catalog named ``name`` that :func:`metadata_through` offers; None outside it, for
    another catalog, or when the catalog cannot be opened here (the job then reads through Spark)."""
    config = _offered.get()
    if config is None or config.name != name:
        return None
    key = json.dumps([config.name, dict(config.properties)], sort_keys=True)
    if key not in _clients:
        try:
            _clients[key] = config.pyiceberg_catalog()
        except Exception as error:  # noqa: BLE001 - Spark SQL reads the same metadata, only slower
            log(f"Reading the table's metadata through Spark: catalog {name!r} ({error_message(error)}).")
            return None
    return _clients[key]


@dataclass(frozen=True)
class MetadataView:
    """One version of a table's metadata, as the jobs read it: refs, snapshots, properties, columns."""

    refs: dict[str, int]
    snapshots: tuple[SnapshotRow, ...]
    #: The table's properties, and its ``format-version``.
    properties: dict[str, str]
    #: The current schema's column names, in order.
    columns: list[str]
    #: The current schema's id, and each snapshot's (None where the metadata does not say).
    schema_id: int | None = None
    snapshot_schemas: Mapping[int, int | None] = field(default_factory=dict)
    #: The current schema's top-level columns' field ids, by name.
    field_ids: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of_pyiceberg(cls, metadata: TableMetadata) -> MetadataView:
        return cls(
            refs={name: ref.snapshot_id for name, ref in metadata.refs.items()},
            snapshots=tuple(
                SnapshotRow(
                    snapshot_id=snapshot.snapshot_id,
                    parent_id=snapshot.parent_snapshot_id,
                    summary=dict(snapshot.summary.additional_properties) if snapshot.summary else {},
                    operation=snapshot.summary.operation.value if snapshot.summary else None,
                )
                for snapshot in metadata.snapshots
            ),
            properties={"format-version": str(metadata.format_version), **metadata.properties},
            columns=[column.name for column in metadata.schema().fields],
            schema_id=metadata.current_schema_id,
            snapshot_schemas={snapshot.snapshot_id: snapshot.schema_id for snapshot in metadata.snapshots},
            field_ids={column.name: column.field_id for column in metadata.schema().fields},
        )

    @classmethod
    def of_json(cls, text: str) -> MetadataView:
        """From the metadata file's JSON, by the field names of Iceberg's table spec (``refs`` and
        ``current-schema-id`` may be absent from a format version 1 file)."""
        metadata = json.loads(text)
        refs = {name: int(ref["snapshot-id"]) for name, ref in metadata.get("refs", {}).items()}
        current = metadata.get("current-snapshot-id")
        if "refs" not in metadata and current not in (None, -1):
            refs = {MAIN: int(current)}
        return cls(
            refs=refs,
            snapshots=tuple(_snapshot_row(snapshot) for snapshot in metadata.get("snapshots", [])),
            properties={"format-version": str(metadata["format-version"]), **metadata.get("properties", {})},
            columns=[str(column["name"]) for column in _current_schema(metadata)["fields"]],
            field_ids={
                str(column["name"]): int(column["id"]) for column in _current_schema(metadata)["fields"]
            },
            schema_id=_current_schema(metadata).get("schema-id", 0),
            snapshot_schemas={
                int(snapshot["snapshot-id"]): snapshot.get("schema-id")
                for snapshot in metadata.get("snapshots", [])
            },
        )


def _snapshot_row(snapshot: dict[str, Any]) -> SnapshotRow:
    summary = {str(key): str(value) for key, value in snapshot.get("summary", {}).items()}
    parent = snapshot.get("parent-snapshot-id")
    return SnapshotRow(
        snapshot_id=int(snapshot["snapshot-id"]),
        parent_id=int(parent) if parent is not None else None,
        operation=summary.pop("operation", None),
        summary=summary,
    )


def _current_schema(metadata: dict[str, Any]) -> dict[str, Any]:
    if "current-schema-id" not in metadata:
        return dict(metadata["schema"])
    current = metadata["current-schema-id"]
    return next(schema for schema in metadata["schemas"] if schema["schema-id"] == current)


class TableState:
    """One Iceberg table as a job sees it: through Spark SQL, or its metadata (``client``, ``in_driver``).
    Call :meth:`refresh` to see others' commits."""

    def __init__(
        self,
        spark: SparkSession,
        catalog: str,
        table: str,
        client: Catalog | None = None,
        *,
        in_driver: bool = False,
    ) -> None:
        """``client``: the pyiceberg catalog (named ``catalog``) to read refs, snapshots, properties and
        columns through, from the metadata file (:func:`worker_catalog`). ``in_driver``, without a
        client: read them in the Spark driver when ``spark`` is a classic session. Else through Spark SQL.
        """
        self.spark = spark
        self.catalog = catalog
        self.table = table
        self.identifier = sql.table_identifier(catalog, table)
        self._client = client
        self._in_driver = client is None and in_driver and not is_connect(spark)
        self._history: SnapshotHistory | None = None
        self._metadata: MetadataView | None = None

    def refresh(self, *, after_own_commit: bool = False) -> None:
        """Drop Spark's cached copy of the table, so that the next read sees the latest commit.

        ``after_own_commit``: the job's Spark session has just committed, so its copy of the table has
        that commit; when the metadata is read from its file or in the driver, only that is read again
        (one request fewer to the server). Raises :class:`TableNotFoundError` naming the table and
        catalog when it does not exist.
        """
        self._history = None
        self._metadata = None
        if self._client is not None:  # first: Spark's table, refreshed next, is then at least as new
            self._metadata = self._load()
        if not (after_own_commit and (self._client is not None or self._in_driver)):
            self._refresh_spark()
        if self._in_driver:  # the table Spark has just refreshed (or committed to)
            self._metadata = self._load_in_driver()

    def _refresh_spark(self) -> None:
        from pyspark.errors import AnalysisException

        try:
            self.spark.sql(sql.refresh_table(self.identifier))
        except AnalysisException as error:
            condition = error_condition(error)
            if condition.startswith(("TABLE_OR_VIEW_NOT_FOUND", "REQUIRES_SINGLE_PART_NAMESPACE")):
                raise self._not_found() from None
            raise

    def refs(self) -> dict[str, int]:
        """Branch and tag names to their head snapshot ids."""
        if (metadata := self._view()) is not None:
            return dict(metadata.refs)
        rows = self.spark.sql(sql.metadata_query(self.identifier, "refs", "name, snapshot_id")).collect()
        return {str(row.name): int(row.snapshot_id) for row in rows}

    def head(self, ref: str = MAIN) -> int | None:
        """The head snapshot of ``ref``; None for ``main`` of a table with no snapshot.

        Raises :class:`BranchNotFoundError` for any other ref that does not exist.
        """
        refs = self.refs()
        if ref != MAIN and ref not in refs:
            raise BranchNotFoundError(
                f"Branch {ref!r} does not exist on {self.table!r}; create it first "
                f"(ALTER TABLE ... CREATE BRANCH {ref})."
            )
        return refs.get(ref)

    def history(self) -> SnapshotHistory:
        """Every snapshot still in the metadata, with its parent and summary: read once between two
        :meth:`refresh` calls (a job plans on the history it read, and refreshes to see a newer one)."""
        if self._history is None:
            self._history = self._read_history()
        return self._history

    def _read_history(self) -> SnapshotHistory:
        if (metadata := self._view()) is not None:
            return SnapshotHistory(metadata.snapshots)
        rows = self.spark.sql(
            sql.metadata_query(self.identifier, "snapshots", "snapshot_id, parent_id, summary, operation")
        ).collect()
        return SnapshotHistory(
            SnapshotRow(
                snapshot_id=int(row.snapshot_id),
                parent_id=int(row.parent_id) if row.parent_id is not None else None,
                summary=dict(row.summary or {}),
                operation=row.operation,
            )
            for row in rows
        )

    def summary(self, snapshot_id: int | None) -> Mapping[str, str]:
        """One snapshot's summary; empty for None or a snapshot no longer in the metadata."""
        row = self.history().get(snapshot_id)
        return row.summary if row is not None else {}

    def live_rows(self, snapshot_id: int | None, ref: str = MAIN) -> int:
        """The rows ``snapshot_id`` (of ``ref``) holds: its summary's records less its position deletes;
        counted by Spark where the summary cannot say, when the snapshot has equality deletes (a CDC
        writer's: each may delete any number of rows, or none) or no record count. The count reads the
        snapshot's files, with their deletes."""
        summary = self.summary(snapshot_id)
        records = summary.get(SummaryKey.TOTAL_RECORDS)
        equality_deletes = int(summary.get(SummaryKey.TOTAL_EQUALITY_DELETES) or 0)
        if snapshot_id is None or (records is not None and equality_deletes == 0):
            return int(records or 0) - int(summary.get(SummaryKey.TOTAL_POSITION_DELETES) or 0)
        version = str(self.version(snapshot_id, ref))
        return int(self.spark.read.option("versionAsOf", version).table(self.identifier).count())

    def properties(self) -> dict[str, str]:
        """The table's properties (Iceberg adds ``format-version``; Spark SQL ``sort-order`` and others)."""
        if (metadata := self._view()) is not None:
            return dict(metadata.properties)
        rows = self.spark.sql(sql.show_properties(self.identifier)).collect()
        return {str(row.key): str(row.value) for row in rows}

    def columns(self, ref: str = MAIN) -> list[str]:
        """The column names, in the table's order: the current schema's, which a branch reads and every
        write uses (from the metadata file when there is one, else a request to Spark's analyser)."""
        if (metadata := self._view()) is not None:
            return list(metadata.columns)
        return list(self.spark.table(sql.table_identifier(self.catalog, self.table, _branch(ref))).columns)

    def field_id(self, column: str) -> int | None:
        """The Iceberg field id of top-level ``column``; None when only Spark SQL is read (it has none)."""
        metadata = self._view()
        return None if metadata is None else metadata.field_ids.get(column)

    @overload
    def version(self, snapshot_id: int, ref: str = MAIN) -> int | str: ...
    @overload
    def version(self, snapshot_id: None, ref: str = MAIN) -> None: ...
    def version(self, snapshot_id: int | None, ref: str = MAIN) -> int | str | None:
        """How a query reads ``snapshot_id`` (``sql.as_of``): by its id, or by ``ref`` when it is the head
        of ``ref`` and the table's schema changed since (a column added, renamed, widened). Iceberg reads a
        snapshot id with the columns it was written with (and 1.11 binds a filter on a renamed column to
        the new name, apache/iceberg#16510), a branch with the table's: the columns a write has."""
        metadata = self._view()
        if snapshot_id is None or metadata is None or metadata.schema_id is None:
            return snapshot_id
        if self.refs().get(ref) != snapshot_id:
            return snapshot_id
        written_with = metadata.snapshot_schemas.get(snapshot_id)
        return snapshot_id if written_with in (None, metadata.schema_id) else ref

    def _view(self) -> MetadataView | None:
        """The metadata as :meth:`refresh` left it (read now if not yet); None: ask Spark SQL."""
        if self._metadata is None and self._in_driver:
            self._metadata = self._load_in_driver()
        elif self._metadata is None and self._client is not None:
            self._metadata = self._load()
        return self._metadata

    def _load(self) -> MetadataView:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        assert self._client is not None
        try:
            return MetadataView.of_pyiceberg(self._client.load_table(self.table).metadata)
        except (NoSuchTableError, NoSuchNamespaceError):
            raise self._not_found() from None

    def _load_in_driver(self) -> MetadataView | None:
        """From the table the driver's Spark loaded; None (and Spark SQL from then on) when it cannot."""
        try:
            text = spark_internals.table_metadata_json(self.spark, self.identifier, self.table, self.catalog)
        except IcebergDmlError:
            raise
        except Exception as error:  # noqa: BLE001 - Spark SQL reads the same metadata, only slower
            log(f"Reading the table's metadata through Spark SQL: {self.table!r} ({error_message(error)}).")
            self._in_driver = False
            return None
        return MetadataView.of_json(text)

    def _not_found(self) -> TableNotFoundError:
        return TableNotFoundError(f"Table {self.table!r} does not exist in catalog {self.catalog!r}.")


def _branch(ref: str) -> str | None:
    return None if ref == MAIN else ref
