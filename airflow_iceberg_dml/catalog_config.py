"""One catalog configuration, seen by pyiceberg and by Spark under the same name.

The input is what an Airflow ``iceberg`` connection holds (pyiceberg-style properties: ``type``,
``uri``, ``warehouse``, ``credential``, ``s3.*`` ...). The catalog is named by the extra
``catalog-name``, else after the connection id. The Spark side is derived through an
allow-list: only keys named here reach ``spark.sql.catalog.<name>.*``, so that an unrelated or
mistyped extra never lands in a Spark configuration. No Airflow import: tested as pure logic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from airflow_iceberg_dml.exceptions import CatalogConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from pyiceberg.catalog import Catalog

SPARK_CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"

#: Connection property -> Iceberg Java catalog property, for properties both sides share.
_SHARED_KEYS = {
    "warehouse": "warehouse",
    "io-impl": "io-impl",
    "s3.endpoint": "s3.endpoint",
    "s3.access-key-id": "s3.access-key-id",
    "s3.secret-access-key": "s3.secret-access-key",
    "s3.session-token": "s3.session-token",
    "s3.path-style-access": "s3.path-style-access",
    # pyiceberg says s3.region, Iceberg's Java clients say client.region.
    "s3.region": "client.region",
}
_REST_KEYS = {
    "uri": "uri",
    "credential": "credential",
    "token": "token",
    "prefix": "prefix",
    "scope": "scope",
    "oauth2-server-uri": "oauth2-server-uri",
}
_PREFIX_KEYS = ("header.",)
#: Keys that only pyiceberg reads; never forwarded to Spark, never reported as ignored.
_PYICEBERG_ONLY = {"type", "uri", "py-io-impl", "init_catalog_tables", "echo", "pool_pre_ping"}
#: A SQL catalog's table layout, in pyiceberg's words (``v0``/``v1``); Iceberg's JDBC catalog says
#: ``jdbc.schema-version`` (``V0``/``V1``). Both create their tables in the layout named; told ``v1``,
#: pyiceberg moves a ``v0`` catalog to ``v1``.
_SQL_SCHEMA_VERSION = "schema_version"
#: Connection extra naming the catalog on both sides; read here, never passed on as a property.
CATALOG_NAME_KEY = "catalog-name"


class CatalogType(StrEnum):
    """The catalog kinds that pyiceberg and Spark both open from one connection (its ``type``)."""

    SQL = "sql"
    """pyiceberg's SQL catalog (SQLite or PostgreSQL), which Spark opens as Iceberg's JDBC catalog."""
    REST = "rest"
    """An Iceberg REST catalog; the default when the connection names no type."""


SUPPORTED_TYPES = tuple(kind.value for kind in CatalogType)
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"


def embedded_properties(home: Path) -> dict[str, str]:
    """The embedded default: a SQLite SQL catalog and a local warehouse under ``home``, in the SQL
    catalogs' ``v1`` layout on both sides, whichever creates it first (Spark's own default is ``v0``,
    which pyiceberg warns about each time it opens the catalog)."""
    return {
        "type": "sql",
        "uri": f"sqlite:///{home / 'catalog.db'}",
        "warehouse": (home / "warehouse").as_uri(),
        _SQL_SCHEMA_VERSION: "v1",
    }


def spark_catalog_name(conn_id: str, catalog_name: str | None = None) -> str:
    """The catalog name both sides use: the connection's ``catalog-name`` extra, else its id.

    A SQL catalog keys its rows by this name: two connections see the same tables only under the
    same name, and the embedded catalog's tables are under ``iceberg_default``.
    """
    if catalog_name is not None:
        if not re.fullmatch(_IDENTIFIER, catalog_name):
            raise CatalogConfigError(
                f"Extra {CATALOG_NAME_KEY!r} of connection {conn_id!r} is {catalog_name!r}: it is the "
                "catalog name in Spark SQL and must be a plain identifier (letters, digits, underscores)."
            )
        return catalog_name
    if not re.fullmatch(_IDENTIFIER, conn_id):
        raise CatalogConfigError(
            f"Connection id {conn_id!r} is also the catalog name in Spark SQL and must be a plain "
            "identifier (letters, digits, underscores); or name the catalog with the connection's extra "
            f"{CATALOG_NAME_KEY!r}."
        )
    return conn_id


def _sqlalchemy_to_jdbc(uri: str) -> dict[str, str]:
    """Translate pyiceberg's SQLAlchemy URL into the JDBC catalog's ``uri``/``jdbc.*`` properties."""
    try:
        url = make_url(uri)
    except ArgumentError as error:
        raise CatalogConfigError(f"SQL catalog uri {uri!r} is not a SQLAlchemy URL: {error}") from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise CatalogConfigError("An in-memory SQLite catalog cannot be shared with Spark; use a file.")
        return {"uri": f"jdbc:sqlite:{url.database}"}
    if backend == "postgresql":
        host = url.host or "localhost"
        port = f":{url.port}" if url.port else ""
        properties = {"uri": f"jdbc:postgresql://{host}{port}/{url.database or ''}"}
        if url.username:
            properties["jdbc.user"] = url.username
        if url.password:
            properties["jdbc.password"] = str(url.password)
        return properties
    raise CatalogConfigError(
        f"SQL catalog backend {backend!r} is not supported for Spark; use sqlite or postgresql."
    )


@dataclass(frozen=True)
class CatalogConfig:
    """A catalog name and its pyiceberg properties, with the Spark properties derived from them."""

    name: str
    properties: Mapping[str, str]
    ignored_keys: tuple[str, ...] = field(default=())

    @classmethod
    def from_properties(cls, conn_id: str, properties: Mapping[str, object]) -> CatalogConfig:
        """The catalog of connection ``conn_id``, named by its ``catalog-name`` property, else ``conn_id``."""
        as_text = {key: str(value) for key, value in properties.items() if value is not None}
        name = spark_catalog_name(conn_id, as_text.pop(CATALOG_NAME_KEY, None))
        catalog_type = as_text.setdefault("type", CatalogType.REST.value)
        if catalog_type not in SUPPORTED_TYPES:
            raise CatalogConfigError(
                f"Catalog type {catalog_type!r} is not supported; "
                f"supported types: {', '.join(SUPPORTED_TYPES)}."
            )
        if "uri" not in as_text:
            raise CatalogConfigError(
                f"The {catalog_type} catalog {name!r} has no uri: set the connection's host (or extra 'uri')."
            )
        if catalog_type == CatalogType.REST and "credential" in as_text:
            # Both clients fall back to the catalog's own token endpoint with a deprecation warning
            # (a fallback Iceberg will remove): name it, unless the connection names another one.
            as_text.setdefault("oauth2-server-uri", f"{as_text['uri'].rstrip('/')}/v1/oauth/tokens")
        known = set(_SHARED_KEYS) | set(_REST_KEYS) | _PYICEBERG_ONLY | {_SQL_SCHEMA_VERSION}
        ignored = tuple(
            sorted(key for key in as_text if key not in known and not key.startswith(_PREFIX_KEYS))
        )
        return cls(name=name, properties=as_text, ignored_keys=ignored)

    @property
    def catalog_type(self) -> str:
        """The connection's catalog type, one of :class:`CatalogType`'s values."""
        return self.properties["type"]

    @property
    def uses_s3(self) -> bool:
        """True when the table files are on S3 (an S3 warehouse, or S3FileIO named)."""
        return self.properties.get("io-impl") == S3_FILE_IO or self.properties.get(
            "warehouse", ""
        ).startswith(("s3://", "s3a://"))

    def pyiceberg_properties(self) -> dict[str, str]:
        """Properties for ``pyiceberg.catalog.load_catalog(name, **properties)``."""
        return {key: value for key, value in self.properties.items() if key != "io-impl"}

    def pyiceberg_catalog(self) -> Catalog:
        """A new pyiceberg catalog client for this catalog."""
        from pyiceberg.catalog import load_catalog

        from airflow_iceberg_dml.variant_type import read_variant_columns

        read_variant_columns()
        return load_catalog(self.name, **self.pyiceberg_properties())

    def spark_properties(self) -> dict[str, str]:
        """``spark.sql.catalog.<name>.*`` for Iceberg's SparkCatalog, secrets included: keep off argv."""
        catalog: dict[str, str] = {}
        if self.catalog_type == CatalogType.SQL:
            catalog["type"] = "jdbc"
            catalog.update(_sqlalchemy_to_jdbc(self.properties["uri"]))
            if _SQL_SCHEMA_VERSION in self.properties:
                catalog["jdbc.schema-version"] = self.properties[_SQL_SCHEMA_VERSION].upper()
        else:
            catalog["type"] = CatalogType.REST.value
            catalog.update(
                {java: self.properties[key] for key, java in _REST_KEYS.items() if key in self.properties}
            )
        catalog.update(
            {java: self.properties[key] for key, java in _SHARED_KEYS.items() if key in self.properties}
        )
        catalog.update({key: value for key, value in self.properties.items() if key.startswith(_PREFIX_KEYS)})
        if self.uses_s3 and "io-impl" not in catalog:
            catalog["io-impl"] = S3_FILE_IO
        # A job plans the same table more than once (validation, then the change): cache manifests.
        catalog["io.manifest.cache-enabled"] = "true"
        prefix = f"spark.sql.catalog.{self.name}"
        return {prefix: SPARK_CATALOG_CLASS, **{f"{prefix}.{key}": value for key, value in catalog.items()}}
