"""Watch one ref of one table for new commits, reading as little as the catalog allows.

A poll first asks the catalog where the table's metadata is now (the *pointer*). When it has not moved,
the poll ends there: no metadata file is read. When it has, the table metadata is loaded once and only
the snapshots newer than the last head seen are walked (:func:`airflow_iceberg_dml.snapshot_walk.walk`).

How the pointer is read depends on the catalog:

- SQL catalog (pyiceberg ``SqlCatalog``, Iceberg's JDBC catalog): one ``SELECT metadata_location`` on the
  catalog's ``iceberg_tables`` row, through the catalog's own SQLAlchemy engine.
- REST catalog: ``GET .../tables/{table}`` (loadTable) with ``If-None-Match`` set to the ETag of the last
  response. A server that implements the spec's ETag support answers ``304 Not Modified`` with no body;
  a server that does not answers 200 with the metadata, and the poll compares ``metadata-location`` and
  skips the walk. The REST protocol has no cheaper request that says whether a table changed.
- Any other pyiceberg catalog: ``load_table`` on each poll, comparing ``metadata_location``.

This module uses pyiceberg only; the sensor (sync) and the trigger (in a thread) share it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    NoSuchNamespaceError,
    NoSuchTableError,
    ServerError,
    ServiceUnavailableError,
    TooManyRequestsError,
)

from airflow_iceberg_dml.compat import rest_load_table
from airflow_iceberg_dml.exceptions import (
    BranchNotFoundError,
    CatalogUnavailableError,
    IcebergDmlError,
    SnapshotNotFoundError,
    TableNotFoundError,
)
from airflow_iceberg_dml.snapshot_filter import MAIN_BRANCH, SnapshotFilter, SnapshotInfo
from airflow_iceberg_dml.snapshot_walk import WatchState, baseline, walk
from airflow_iceberg_dml.sql import split_table_name

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from airflow_iceberg_dml.compat import RestLoadTable

#: Seconds to connect / to read a REST response before the poll counts as "catalog unavailable".
REST_TIMEOUT = (10.0, 60.0)


class PointerStatus(StrEnum):
    """What a pointer read found."""

    UNCHANGED = "unchanged"
    """The table's metadata location is the one already seen: nothing was loaded."""
    CHANGED = "changed"
    """The table moved (or is seen for the first time): its metadata was loaded."""
    MISSING = "missing"
    """The catalog has no such table (or no such namespace)."""


@dataclass(frozen=True)
class PointerRead:
    status: PointerStatus
    metadata_location: str | None = None
    #: The loaded table, for CHANGED only.
    table: Table | None = None


class TablePointerReader(ABC):
    """Tells whether a table's metadata moved since a known location, loading it only when it did."""

    #: Short name of the strategy, for logs and benchmarks.
    strategy: ClassVar[str]

    def __init__(self, catalog: Catalog, table_name: str) -> None:
        self.catalog = catalog
        self.table_name = table_name

    @abstractmethod
    def read(self, known_location: str | None) -> PointerRead:
        """Compare the catalog's pointer with ``known_location`` (None: nothing seen yet)."""

    def _load(self) -> PointerRead:
        try:
            table = self.catalog.load_table(self.table_name)
        except (NoSuchTableError, NoSuchNamespaceError):
            return PointerRead(PointerStatus.MISSING)
        return PointerRead(PointerStatus.CHANGED, table.metadata_location, table)


class LoadTablePointerReader(TablePointerReader):
    """Any catalog: load the table on every poll and compare its metadata location."""

    strategy = "load-table"

    def read(self, known_location: str | None) -> PointerRead:
        loaded = self._load()
        if loaded.status is PointerStatus.CHANGED and loaded.metadata_location == known_location:
            return PointerRead(PointerStatus.UNCHANGED, known_location)
        return loaded


class SqlPointerReader(TablePointerReader):
    """SQL catalog: one indexed ``SELECT metadata_location`` through the catalog's SQLAlchemy engine."""

    strategy = "sql-pointer"

    def __init__(self, catalog: Catalog, table_name: str) -> None:
        from pyiceberg.catalog.sql import IcebergTables
        from sqlalchemy import select

        super().__init__(catalog, table_name)
        namespace = Catalog.namespace_to_string(Catalog.namespace_from(table_name))
        self._statement = select(IcebergTables.metadata_location).where(
            IcebergTables.catalog_name == catalog.name,
            IcebergTables.table_namespace == namespace,
            IcebergTables.table_name == Catalog.table_name_from(table_name),
        )

    def read(self, known_location: str | None) -> PointerRead:
        engine = self.catalog.engine  # type: ignore[attr-defined]
        with engine.connect() as connection:
            location = connection.execute(self._statement).scalar_one_or_none()
        if location is None:
            return PointerRead(PointerStatus.MISSING)
        if location == known_location:
            return PointerRead(PointerStatus.UNCHANGED, location)
        return self._load()


class RestPointerReader(TablePointerReader):
    """REST catalog: a conditional loadTable (``If-None-Match``); ``304`` means unchanged, with no body.

    Uses the pyiceberg REST catalog's own HTTP session (so its authentication and headers apply) and its
    response parsing, through :func:`airflow_iceberg_dml.compat.rest_load_table`.
    """

    strategy = "rest-etag"

    def __init__(self, catalog: Catalog, table_name: str, rest: RestLoadTable) -> None:
        super().__init__(catalog, table_name)
        self._rest = rest
        self._etag: str | None = None
        self._etag_location: str | None = None
        #: Whether the last 200 response carried an ETag (False: the server ignores conditional requests).
        self.server_sends_etag: bool | None = None

    def read(self, known_location: str | None) -> PointerRead:
        from pyiceberg.catalog.rest import TableResponse
        from requests import HTTPError

        headers = {}
        if self._etag is not None and known_location is not None and self._etag_location == known_location:
            headers["If-None-Match"] = self._etag
        response = self._rest.session.get(self._rest.url, headers=headers, timeout=REST_TIMEOUT)
        if response.status_code == 304:
            return PointerRead(PointerStatus.UNCHANGED, known_location)
        if response.status_code == 404:
            return PointerRead(PointerStatus.MISSING)
        try:
            response.raise_for_status()
        except HTTPError as error:
            self._rest.raise_error(error)
        loaded = TableResponse.model_validate_json(response.text)
        self._etag = response.headers.get("ETag")
        self._etag_location = loaded.metadata_location
        self.server_sends_etag = self._etag is not None
        if loaded.metadata_location is not None and loaded.metadata_location == known_location:
            return PointerRead(PointerStatus.UNCHANGED, known_location)
        return PointerRead(PointerStatus.CHANGED, loaded.metadata_location, self._rest.to_table(loaded))


def pointer_reader(catalog: Catalog, table_name: str) -> TablePointerReader:
    """The cheapest pointer reader for this catalog."""
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.catalog.sql import SqlCatalog

    if isinstance(catalog, SqlCatalog):
        return SqlPointerReader(catalog, table_name)
    if isinstance(catalog, RestCatalog):
        rest = rest_load_table(catalog, table_name)
        if rest is not None:
            return RestPointerReader(catalog, table_name, rest)
    return LoadTablePointerReader(catalog, table_name)


def is_catalog_unavailable(error: BaseException) -> bool:
    """True for errors that say the catalog could not be reached now, not that the request is wrong."""
    import requests
    import sqlalchemy.exc

    if isinstance(error, ServiceUnavailableError | ServerError | TooManyRequestsError):
        return True
    if isinstance(error, requests.ConnectionError | requests.Timeout):
        return True
    if isinstance(error, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError):
        return True
    if isinstance(error, sqlalchemy.exc.DBAPIError) and error.connection_invalidated:
        return True
    return isinstance(error, ConnectionError | TimeoutError)


@dataclass(frozen=True)
class PollResult:
    """What one poll saw."""

    #: The pointer moved and the metadata was read (False: one cheap pointer read, nothing else).
    changed: bool
    #: The head of the ref after the poll (None while the ref has no commit).
    head_snapshot_id: int | None
    #: Snapshots looked at (0 when unchanged).
    walked: int
    #: Matches found by this poll, oldest first.
    new_matches: tuple[SnapshotInfo, ...]
    #: All matches not reported yet, oldest first.
    pending: tuple[SnapshotInfo, ...]


class SnapshotWatcher:
    """Polls one ref of one table and keeps, between polls, what it has already seen.

    Not thread-safe; one per sensor or trigger. Each :meth:`poll` raises
    :class:`~airflow_iceberg_dml.exceptions.InvalidTableNameError` (no namespace),
    :class:`~airflow_iceberg_dml.exceptions.TableNotFoundError`,
    :class:`~airflow_iceberg_dml.exceptions.BranchNotFoundError` (ref missing),
    :class:`~airflow_iceberg_dml.exceptions.SnapshotNotFoundError` (``newer_than_snapshot_id`` unknown),
    :class:`~airflow_iceberg_dml.exceptions.CatalogUnavailableError`, or the error of a catalog that
    cannot be built (:class:`~airflow_iceberg_dml.exceptions.CatalogConfigError`, such as a missing
    connection); the caller decides whether to wait.

    :param catalog: The pyiceberg catalog, or a function returning it (called on each poll until it
        succeeds, so that a catalog that cannot be reached yet counts as unavailable, not as a crash;
        a configuration error, such as a missing connection, is raised at once).
    :param table_name: ``namespace.table``.
    :param snapshot_filter: What to look for.
    :param state: Where a previous watch stopped (an asset watcher's stored position).
    :param from_head: Count only commits after the first poll, unless the filter has its own lower bound.
    """

    def __init__(
        self,
        catalog: Catalog | Callable[[], Catalog],
        table_name: str,
        snapshot_filter: SnapshotFilter,
        *,
        state: WatchState | None = None,
        from_head: bool = False,
    ) -> None:
        self._catalog_source = catalog
        self._reader: TablePointerReader | None = None
        self.table_name = table_name
        self.snapshot_filter = snapshot_filter
        self.state = state or WatchState()
        self._from_head = from_head and not snapshot_filter.has_lower_bound
        self._location: str | None = None
        #: The error of the last metadata read, raised again while the pointer does not move.
        self._sticky_error: IcebergDmlError | None = None

    @property
    def reader(self) -> TablePointerReader | None:
        return self._reader

    def _read_pointer(self) -> PointerRead:
        try:
            if self._reader is None:
                split_table_name(self.table_name)  # InvalidTableNameError, not pyiceberg's empty namespace
                source = self._catalog_source
                catalog = source if isinstance(source, Catalog) else source()
                self._reader = pointer_reader(catalog, self.table_name)
            return self._reader.read(self._location)
        except Exception as error:
            if is_catalog_unavailable(error):
                raise CatalogUnavailableError(
                    f"Catalog unavailable while reading {self.table_name!r}: {type(error).__name__}: {error}"
                ) from error
            raise

    def poll(self) -> PollResult:
        """Read the pointer; when it moved, walk the new commits of the ref and record the matches."""
        pointer = self._read_pointer()
        if pointer.status is PointerStatus.MISSING:
            self._location = None
            self._sticky_error = None
            raise TableNotFoundError(f"Table {self.table_name!r} does not exist (yet) in the catalog.")
        if pointer.status is PointerStatus.UNCHANGED:
            if self._sticky_error is not None:
                raise type(self._sticky_error)(str(self._sticky_error))
            return PollResult(False, self.state.head_snapshot_id, 0, (), self.state.pending)
        table = pointer.table
        assert table is not None  # CHANGED always carries the table
        self._location = pointer.metadata_location
        self._sticky_error = None
        try:
            return self._walk(table)
        except IcebergDmlError as error:
            self._sticky_error = error
            raise

    def _walk(self, table: Table) -> PollResult:
        flt = self.snapshot_filter
        by_id = {snapshot.snapshot_id: snapshot for snapshot in table.metadata.snapshots}
        ref = table.metadata.refs.get(flt.ref)
        if ref is None and flt.ref != MAIN_BRANCH:
            raise BranchNotFoundError(
                f"Ref {flt.ref!r} (branch or tag) does not exist on table {self.table_name!r} "
                f"(refs: {sorted(table.metadata.refs)})."
            )
        # A table with no commit on main yet has no "main" ref: that is waiting, not an error.
        head_id = ref.snapshot_id if ref is not None else None
        boundary = flt.newer_than_snapshot_id
        if boundary is not None and boundary not in by_id and not self.state.head_after_boundary:
            raise SnapshotNotFoundError(
                f"newer_than_snapshot_id={boundary} is not a snapshot of {self.table_name!r}: a wrong id, "
                "or it was expired. No commit can be found to be newer than it."
            )
        if self._from_head and not self.state.started:
            self.state = baseline(head_id)
            return PollResult(True, head_id, 0, (), ())

        def lineage(start: int | None) -> Iterator[Snapshot]:
            seen = 0
            snapshot = by_id.get(start) if start is not None else None
            while snapshot is not None and seen <= len(by_id):
                yield snapshot
                seen += 1
                parent = snapshot.parent_snapshot_id
                snapshot = by_id.get(parent) if parent is not None else None

        def infos() -> Iterator[SnapshotInfo]:
            for snapshot in lineage(head_id):
                parent_id = snapshot.parent_snapshot_id
                yield SnapshotInfo.from_snapshot(snapshot, by_id.get(parent_id) if parent_id else None)

        result = walk(
            infos(),
            head_id,
            self.state,
            flt,
            previous_lineage=lambda previous: {snapshot.snapshot_id for snapshot in lineage(previous)},
        )
        self.state = result.state
        return PollResult(True, head_id, result.walked, result.new_matches, self.state.pending)

    def take(self, count: int) -> tuple[SnapshotInfo, ...]:
        """Remove and return the oldest ``count`` pending matches."""
        taken, self.state = self.state.take(count)
        return taken
