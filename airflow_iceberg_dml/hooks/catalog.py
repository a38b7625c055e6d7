"""The catalog hook: one Airflow ``iceberg`` connection, seen by pyiceberg and by Spark."""

from __future__ import annotations

import json
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from airflow.sdk.exceptions import AirflowNotFoundException
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, ValidationError
from pyiceberg.table.refs import SnapshotRefType

from airflow_iceberg_dml import runtime
from airflow_iceberg_dml.catalog_config import CatalogConfig, embedded_properties
from airflow_iceberg_dml.commits import CommitMarks, ours, walk_back
from airflow_iceberg_dml.compat import PYICEBERG
from airflow_iceberg_dml.exceptions import (
    BranchNotFoundError,
    CatalogConnectionNotFoundError,
    TableNotFoundError,
    UnsupportedTableError,
)
from airflow_iceberg_dml.result import summary_of
from airflow_iceberg_dml.sql import split_table_name
from airflow_iceberg_dml.variant_type import unknown_type

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from airflow_iceberg_dml.health import HealthReport, HealthThresholds, Retention
    from airflow_iceberg_dml.spec import RunKey


def _missing_connection_message(conn_id: str) -> str:
    extra = json.dumps({"type": "rest", "warehouse": "..."})
    connection = json.dumps({"conn_type": "iceberg", "host": "<catalog URI>", "extra": {"type": "rest"}})
    return (
        f"The Airflow connection {conn_id!r} does not exist; only {IcebergHook.default_conn_name!r} may be "
        "left undefined (it then means the embedded catalog). Fix catalog_conn_id, or create the connection "
        f"where the task and the triggerer run: airflow connections add {conn_id} --conn-type iceberg "
        f"--conn-host '<catalog URI>' --conn-extra '{extra}', "
        f"or AIRFLOW_CONN_{conn_id.upper()}='{connection}'."
    )


class IcebergCatalogHook(IcebergHook):
    """pyiceberg catalog and Spark catalog properties from one ``iceberg`` connection.

    The connection is the official ``iceberg`` type (apache-airflow-providers-apache-iceberg):
    host = catalog URI, login/password = REST client credential, extra = pyiceberg properties
    (``type``, ``warehouse``, ``io-impl``, ``s3.*`` ...). The catalog is named by the extra
    ``catalog-name``, else after the connection id, on both sides. When ``iceberg_default`` does not
    exist, the embedded default is used: a SQLite SQL catalog and a warehouse under
    ``$AIRFLOW_ICEBERG_DML_HOME``. Any other connection id must exist:
    :class:`~airflow_iceberg_dml.exceptions.CatalogConnectionNotFoundError` otherwise.

    :param iceberg_conn_id: The Iceberg connection id; also the catalog name unless its extra
        ``catalog-name`` names it.
    """

    hook_name = "Iceberg (row-level DML)"

    @cached_property
    def catalog_config(self) -> CatalogConfig:
        """The catalog this connection describes (the embedded one for a missing ``iceberg_default``)."""
        try:
            conn = self.get_connection(self.conn_id)
        except AirflowNotFoundException:
            if self.conn_id != self.default_conn_name:
                # A mistyped id must not silently become the embedded catalog.
                raise CatalogConnectionNotFoundError(_missing_connection_message(self.conn_id)) from None
            home = runtime.default_home()
            home.mkdir(parents=True, exist_ok=True)
            self.log.info("No connection %r: using the embedded catalog in %s", self.conn_id, home)
            return CatalogConfig.from_properties(self.conn_id, embedded_properties(home))
        properties: dict[str, Any] = dict(conn.extra_dejson or {})
        if conn.host:
            properties["uri"] = conn.host.rstrip("/")
        if properties.get("type", "rest") == "rest" and conn.login and conn.password:
            properties["credential"] = f"{conn.login}:{conn.password}"
        config = CatalogConfig.from_properties(self.conn_id, properties)
        if config.ignored_keys:
            self.log.warning(
                "Connection %r: extras not passed to Spark (not in the allow-list): %s",
                self.conn_id,
                ", ".join(config.ignored_keys),
            )
        return config

    @cached_property
    def catalog(self) -> Catalog:
        """The pyiceberg catalog, named as :attr:`catalog_config` says."""
        return self.catalog_config.pyiceberg_catalog()

    def spark_properties(self) -> dict[str, str]:
        """Spark configuration for this catalog (``spark.sql.catalog.<name>.*``)."""
        return self.catalog_config.spark_properties()

    def load_table(self, table_name: str) -> Table:
        """Load a table by ``namespace.table``, or raise :class:`TableNotFoundError`."""
        split_table_name(table_name)  # InvalidTableNameError
        try:
            return self.catalog.load_table(table_name)
        except (NoSuchTableError, NoSuchNamespaceError):
            raise TableNotFoundError(
                f"Table {table_name!r} does not exist in catalog {self.catalog_config.name!r}."
            ) from None
        except (ValidationError, ValueError) as error:  # metadata that pyiceberg cannot parse
            unknown = unknown_type(error)
            if unknown is None:
                raise
            raise UnsupportedTableError(
                f"Table {table_name!r} has a column of type {unknown!r}, which {PYICEBERG.describe()} cannot "
                "read, and the operators read a table's metadata with it (variant columns are read at the "
                "top level and in structs, not as a list's element or a map's key or value)."
            ) from None

    @staticmethod
    def head_snapshot(table: Table, branch: str | None = None, *, writing: bool = False) -> Snapshot | None:
        """The head snapshot of ``branch`` (``main`` when None), or raise :class:`BranchNotFoundError`:
        also for a tag when the caller is ``writing`` (a commit cannot move a tag)."""
        if branch is None:
            return table.current_snapshot()
        ref = table.metadata.refs.get(branch)
        if ref is None or (writing and ref.snapshot_ref_type == SnapshotRefType.TAG):
            kind = "is a tag, which no commit can move" if ref is not None else "does not exist"
            raise BranchNotFoundError(
                f"Branch {branch!r} {kind} on table {'.'.join(table.name())!r}; give a branch, or create it "
                f"first (ALTER TABLE ... CREATE BRANCH ...)."
            )
        return table.snapshot_by_name(branch)

    @staticmethod
    def ancestors(table: Table, snapshot: Snapshot | None, stop_at: int | None = None) -> Iterator[Snapshot]:
        """``snapshot`` and its ancestors, newest first, down to ``stop_at`` (excluded; the whole history
        when it is not an ancestor), or where history was expired.

        Each parent is found in an index of the metadata's snapshots, built once per walk: pyiceberg's
        ancestry helpers look each one up in the list (``snapshot_by_id``), so that a walk of the whole
        history (a run key that has not committed) cost quadratic time: 29.7 times this walk's at 5,000
        snapshots (bench/bench_history_lookup.py).
        """
        by_id = {each.snapshot_id: each for each in table.metadata.snapshots}

        def parent(child: Snapshot) -> Snapshot | None:
            return None if child.parent_snapshot_id is None else by_id.get(child.parent_snapshot_id)

        return walk_back(snapshot, parent, _snapshot_id, stop_at)

    def health(
        self,
        table: Table | str,
        thresholds: HealthThresholds | None = None,
        *,
        retention: Retention | None = None,
        read_manifests: bool = True,
    ) -> HealthReport:
        """The table's health from its metadata only (no data file is read): delete files and
        deleted-row ratio per partition, small files, manifests, snapshots, metadata.json size, and
        which maintenance procedures it needs. See :mod:`airflow_iceberg_dml.health`.

        :param table: A table loaded by this hook, or its ``namespace.table`` name.
        :param retention: Expiry settings for the expirable-snapshot count (default: the table's own).
        :param read_manifests: False reads only metadata.json (summary totals, no per-partition view).
        """
        from airflow_iceberg_dml.health import table_health

        loaded = self.load_table(table) if isinstance(table, str) else table
        return table_health(loaded, thresholds, retention=retention, read_manifests=read_manifests)

    def find_commits(
        self, table: Table, marks: CommitMarks, branch: str | None = None, stop_at: int | None = None
    ) -> list[Snapshot]:
        """Snapshots on the branch whose summary carries ``marks`` (:mod:`airflow_iceberg_dml.commits`),
        newest first.

        Walks back from the branch head and stops at ``stop_at`` (a snapshot id known to precede
        the run), so the cost is the number of newer snapshots, not the table's history.
        """
        head = self.head_snapshot(table, branch)
        if head is None:
            return []
        return ours(self.ancestors(table, head, stop_at), summary_of, marks)

    def find_run_commits(
        self, table: Table, run_key: RunKey, branch: str | None = None, stop_at: int | None = None
    ) -> list[Snapshot]:
        """Snapshots on the branch committed by ``run_key`` (any try), newest first (:meth:`find_commits`)."""
        return self.find_commits(table, CommitMarks(run_key=run_key), branch, stop_at)


def _snapshot_id(snapshot: Snapshot) -> int:
    return snapshot.snapshot_id
