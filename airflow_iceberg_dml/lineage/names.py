"""How OpenLineage names an Iceberg table: its storage location, with the catalog's name as a symlink."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from airflow_iceberg_dml.sql import split_table_name

if TYPE_CHECKING:
    from airflow_iceberg_dml.catalog_config import CatalogConfig

#: Default ports OpenLineage writes into a database namespace.
_DEFAULT_PORTS = {"postgres": 5432}


# -- dataset names: pure ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableDatasetName:
    """How OpenLineage names one Iceberg table: its storage location, and the catalog's name for it."""

    namespace: str
    """Storage: ``file``, ``s3://<bucket>``, ``gs://<bucket>``, ``hdfs://<host>:<port>`` ..."""
    name: str
    """The table's location under that namespace (a path, or an object key)."""
    table_namespace: str
    """The catalog: its REST URI, or its database server (``postgres://host:5432``, ``sqlite://<file>``)."""
    table_name: str
    """The table in that catalog: ``namespace.table`` (REST), ``database.namespace.table`` (PostgreSQL)."""
    catalog_name: str
    catalog_type: str
    """``rest`` or ``jdbc`` (a SQL catalog, which Spark reaches through Iceberg's JDBC catalog)."""
    catalog_uri: str
    """The catalog URI, without credentials."""
    warehouse: str | None


def without_credentials(uri: str) -> str:
    """``uri`` without user, password, query or fragment (lineage must carry no secret)."""
    parts = urlsplit(uri)
    if not parts.netloc:  # sqlite:////path/catalog.db: keep the path exactly
        return uri.split("?", 1)[0].split("#", 1)[0]
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def storage_dataset_name(location: str) -> tuple[str, str]:
    """Namespace and name of a storage location, as OpenLineage names files (``file`` + absolute path;
    ``s3://bucket`` + key; ``scheme://authority`` + path otherwise)."""
    parts = urlsplit(location.rstrip("/"))
    scheme = parts.scheme.lower()
    if scheme in ("", "file"):
        return "file", parts.path or location
    if scheme in ("s3", "s3a", "s3n", "gs"):
        return f"{'gs' if scheme == 'gs' else 's3'}://{parts.netloc}", parts.path.lstrip("/")
    return f"{scheme}://{parts.netloc}", parts.path


def catalog_table_name(config: CatalogConfig, table: str) -> tuple[str, str]:
    """Namespace and name of ``table`` in its catalog: a REST catalog by its URI, a SQL catalog by its
    database (``postgres://host:port`` + ``database.namespace.table``; ``sqlite://<file>`` +
    ``namespace.table``), as OpenLineage's Spark integration names an Iceberg table's symlink."""
    qualified = ".".join(split_table_name(table))
    uri = config.properties["uri"]
    if config.catalog_type != "sql":
        return without_credentials(uri), qualified
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    backend = url.get_backend_name()
    if backend == "sqlite":
        return f"sqlite://{url.database or ''}", qualified
    scheme = "postgres" if backend == "postgresql" else backend
    port = url.port or _DEFAULT_PORTS.get(scheme)
    authority = f"{url.host or 'localhost'}{f':{port}' if port else ''}"
    name = f"{url.database}.{qualified}" if url.database else qualified
    return f"{scheme}://{authority}", name


def table_dataset_name(config: CatalogConfig, table: str, location: str) -> TableDatasetName:
    """The OpenLineage names of ``table`` (``namespace.table``) stored at ``location``."""
    namespace, name = storage_dataset_name(location)
    table_namespace, table_name = catalog_table_name(config, table)
    warehouse = config.properties.get("warehouse")
    return TableDatasetName(
        namespace=namespace,
        name=name,
        table_namespace=table_namespace,
        table_name=table_name,
        catalog_name=config.name,
        catalog_type="jdbc" if config.catalog_type == "sql" else config.catalog_type,
        catalog_uri=without_credentials(config.properties["uri"]),
        warehouse=without_credentials(warehouse) if warehouse and "://" in warehouse else warehouse,
    )
