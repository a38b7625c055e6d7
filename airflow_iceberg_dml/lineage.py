"""OpenLineage: which task changed which Iceberg table, what the commit did, and the Spark run under it.

The operators implement the OpenLineage provider's conventions (``get_openlineage_facets_on_start``,
``get_openlineage_facets_on_complete``) through :class:`IcebergLineageMixin`; the provider calls them
when it is installed and enabled. Everything else in this module is what they need:

- the table's dataset, named as OpenLineage's Spark integration names an Iceberg table, so that our
  events and a Spark listener's events meet on one dataset: the namespace and name of the table's
  storage location (``file`` + path, ``s3://bucket`` + key ...), with the catalog's own name as a
  ``TABLE`` symlink (REST: the catalog URI and ``namespace.table``; SQL/JDBC: the database server and
  ``database.namespace.table``, or the SQLite file) and a ``catalog`` facet;
- facets from the result: OpenLineage's own classes where they have a field (schema, version = the
  snapshot id as text, output statistics, storage, SQL text, external query = the Spark application),
  and two custom run facets for the rest (``icebergDmlCommit``, ``icebergMaintenance``), whose JSON
  schema ships in this package (``openlineage_facets.json``);
- :func:`spark_lineage_properties`: the ``spark.openlineage.*`` properties that nest the Spark
  application under its Airflow task, the way the Spark provider's ``SparkSubmitOperator`` does.

The OpenLineage provider is optional: without it this module imports, the pure functions work,
:func:`spark_lineage_properties` returns ``{}``, and the provider never calls the operator methods.
Bound parameter values never appear in what is emitted (they can be personal data): the predicate and
expressions are sent as written, with their ``:name`` markers, and only the parameters' names.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from airflow_iceberg_dml import __version__
from airflow_iceberg_dml.sql import delete_statement, split_table_name, table_identifier, update_statement

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context
    from pyiceberg.table import Table

    from airflow_iceberg_dml.catalog_config import CatalogConfig

log = logging.getLogger(__name__)

try:  # the OpenLineage provider brings the client; both are optional
    import attr
    from openlineage.client.generated.base import RunFacet

    HAVE_OPENLINEAGE_CLIENT = True
except ImportError:
    HAVE_OPENLINEAGE_CLIENT = False

#: Where the custom facets' JSON schema is published: the file shipped in this package, at this version.
FACET_SCHEMA_URL = (
    "https://github.com/airflow-iceberg-dml/airflow-iceberg-dml/blob/"
    f"v{__version__}/airflow_iceberg_dml/openlineage_facets.json"
)
#: Default ports OpenLineage writes into a database namespace.
_DEFAULT_PORTS = {"postgres": 5432}
#: Health report fields carried by the lineage facets (the full report is in the task's XCom).
_HEALTH_FIELDS = {
    "snapshot_id": "snapshotId",
    "healthy": "healthy",
    "needs": "needs",
    "data_files": "dataFiles",
    "delete_files": "deleteFiles",
    "records": "records",
    "position_deletes": "positionDeletes",
    "deleted_ratio": "deletedRatio",
    "delete_files_per_data_file": "deleteFilesPerDataFile",
    "data_files_with_deletes": "dataFilesWithDeletes",
    "small_data_files": "smallDataFiles",
    "partitions_needing_compaction": "partitionsNeedingCompaction",
    "snapshot_count": "snapshotCount",
}


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


# -- facet contents: pure ---------------------------------------------------------------------------------


def health_facet_fields(health: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The headline numbers of a health report (``HealthReport.to_dict()``), camelCase."""
    if health is None:
        return None
    return {camel: health.get(key) for key, camel in _HEALTH_FIELDS.items()}


def dml_commit_fields(
    result: Mapping[str, Any],
    *,
    kind: str,
    where: str,
    assignments: Mapping[str, str],
    parameter_names: list[str],
) -> dict[str, Any]:
    """The ``icebergDmlCommit`` run facet's fields from a DML result: no parameter value, only names."""
    return {
        "statement": kind,
        "table": result["table"],
        "branch": result["branch"],
        "operation": result["operation"],
        "snapshotId": result["snapshot_id"],
        "parentSnapshotId": result["parent_snapshot_id"],
        "sequenceNumber": result["sequence_number"],
        "committedAt": result["committed_at"],
        "plan": result["plan"],
        "writeMode": result["write_mode"],
        "noop": result["noop"],
        "dryRun": result["dry_run"],
        "replayed": result["replayed"],
        "rowsDeleted": result["rows_deleted"],
        "rowsInserted": result["rows_inserted"],
        "addedDeleteFiles": result["added_delete_files"],
        "addedDataFiles": result["added_data_files"],
        "removedDataFiles": result["removed_data_files"],
        "predicate": where,
        "assignments": dict(assignments),
        "parameterNames": sorted(parameter_names),
        "sparkAppId": result["spark_app_id"],
        "healthAfter": health_facet_fields(result.get("health")),
    }


def maintenance_fields(result: Mapping[str, Any]) -> dict[str, Any]:
    """The ``icebergMaintenance`` run facet's fields from a maintenance result."""
    return {
        "table": result["table"],
        "procedures": list(result["procedures"]),
        "noop": result["noop"],
        "forced": result["forced"],
        "reason": result["reason"],
        "snapshotId": result["snapshot_id"],
        "committedSnapshotIds": list(result["committed_snapshot_ids"]),
        "conflictRetries": result["conflict_retries"],
        "sparkAppId": result["spark_app_id"],
        "healthBefore": health_facet_fields(result["health_before"]),
        "healthAfter": health_facet_fields(result["health_after"]),
    }


# -- the custom facets ------------------------------------------------------------------------------------

if HAVE_OPENLINEAGE_CLIENT:

    @attr.define
    class IcebergDmlCommitRunFacet(RunFacet):
        """What a DELETE or UPDATE task committed (fields: see ``dml_commit_fields``)."""

        statement: str
        table: str
        branch: str
        operation: str | None
        snapshotId: str | None  # noqa: N815 - OpenLineage facets are camelCase
        parentSnapshotId: str | None  # noqa: N815
        sequenceNumber: int | None  # noqa: N815
        committedAt: str | None  # noqa: N815
        plan: str
        writeMode: str | None  # noqa: N815
        noop: bool
        dryRun: bool  # noqa: N815
        replayed: bool
        rowsDeleted: int  # noqa: N815
        rowsInserted: int  # noqa: N815
        addedDeleteFiles: int  # noqa: N815
        addedDataFiles: int  # noqa: N815
        removedDataFiles: int  # noqa: N815
        predicate: str
        assignments: dict[str, str]
        parameterNames: list[str]  # noqa: N815
        sparkAppId: str | None  # noqa: N815
        healthAfter: dict[str, Any] | None  # noqa: N815

        @staticmethod
        def _get_schema() -> str:
            return f"{FACET_SCHEMA_URL}#/$defs/IcebergDmlCommitRunFacet"

    @attr.define
    class IcebergMaintenanceRunFacet(RunFacet):
        """What a maintenance task ran, and the table's health before and after."""

        table: str
        procedures: list[str]
        noop: bool
        forced: bool
        reason: str
        snapshotId: str | None  # noqa: N815
        committedSnapshotIds: list[str]  # noqa: N815
        conflictRetries: int  # noqa: N815
        sparkAppId: str | None  # noqa: N815
        healthBefore: dict[str, Any] | None  # noqa: N815
        healthAfter: dict[str, Any] | None  # noqa: N815

        @staticmethod
        def _get_schema() -> str:
            return f"{FACET_SCHEMA_URL}#/$defs/IcebergMaintenanceRunFacet"


# -- OpenLineage objects (the provider installed) ----------------------------------------------------------


def table_dataset_facets(names: TableDatasetName, table: Table | None, version: str | None) -> dict[str, Any]:
    """The facets that describe the table itself: schema, symlink, catalog, storage, version."""
    from openlineage.client.generated.catalog_dataset import CatalogDatasetFacet
    from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacet, SchemaDatasetFacetFields
    from openlineage.client.generated.storage_dataset import StorageDatasetFacet
    from openlineage.client.generated.symlinks_dataset import Identifier, SymlinksDatasetFacet

    facets: dict[str, Any] = {
        "symlinks": SymlinksDatasetFacet(
            identifiers=[Identifier(namespace=names.table_namespace, name=names.table_name, type="TABLE")]
        ),
        "catalog": CatalogDatasetFacet(
            framework="iceberg",
            type=names.catalog_type,
            name=names.catalog_name,
            metadataUri=names.catalog_uri,
            warehouseUri=names.warehouse,
            source="airflow",
        ),
    }
    if table is not None:
        facets["schema"] = SchemaDatasetFacet(
            fields=[
                SchemaDatasetFacetFields(name=field.name, type=str(field.field_type), description=field.doc)
                for field in table.schema().fields
            ]
        )
        facets["storage"] = StorageDatasetFacet(
            storageLayer="iceberg", fileFormat=table.properties.get("write.format.default", "parquet")
        )
    if version is not None:
        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=version)
    return facets


def table_datasets(
    names: TableDatasetName,
    table: Table | None,
    *,
    input_version: str | None,
    output_version: str | None,
    output_facets: Mapping[str, Any] | None = None,
    output: bool = True,
) -> tuple[list[Any], list[Any]]:
    """The table as input (at ``input_version``) and, when ``output``, as output (at ``output_version``)."""
    from openlineage.client.event_v2 import InputDataset, OutputDataset

    inputs = [
        InputDataset(
            namespace=names.namespace,
            name=names.name,
            facets=table_dataset_facets(names, table, input_version),
        )
    ]
    outputs = []
    if output:
        outputs.append(
            OutputDataset(
                namespace=names.namespace,
                name=names.name,
                facets=table_dataset_facets(names, table, output_version),
                outputFacets=dict(output_facets or {}),
            )
        )
    return inputs, outputs


def operator_lineage(
    inputs: list[Any],
    outputs: list[Any],
    run_facets: Mapping[str, Any] | None = None,
    job_facets: Mapping[str, Any] | None = None,
) -> OperatorLineage[Any, Any]:
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(
        inputs=inputs, outputs=outputs, run_facets=dict(run_facets or {}), job_facets=dict(job_facets or {})
    )


def sql_job_facet(query: str) -> Any:
    from openlineage.client.generated.sql_job import SQLJobFacet

    return SQLJobFacet(query=query, dialect="spark")


def spark_application_facet(application_id: str | None) -> dict[str, Any]:
    """``externalQuery``: the Spark application that made the change, when known."""
    if not application_id:
        return {}
    from openlineage.client.generated.external_query_run import ExternalQueryRunFacet

    return {"externalQuery": ExternalQueryRunFacet(externalQueryId=application_id, source="spark")}


def output_statistics(rows: int, files: int) -> dict[str, Any]:
    from openlineage.client.generated.output_statistics_output_dataset import (
        OutputStatisticsOutputDatasetFacet,
    )

    return {"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=rows, fileCount=files)}


def dml_statement_text(
    catalog: str, table: str, where: str, assignments: Mapping[str, str], branch: str | None = None
) -> str:
    """The statement as written: ``where`` and ``set`` with their ``:name`` markers, never the values."""
    target = table_identifier(catalog, table, branch)
    if assignments:
        return update_statement(target, assignments, where)
    return delete_statement(target, where)


# -- the operators' side -----------------------------------------------------------------------------------


class IcebergLineageMixin:
    """``get_openlineage_facets_on_start/complete/failure`` for the operators of this package.

    The operator supplies ``table``, ``catalog_conn_id``, :meth:`lineage_facets` (what its result
    says), and keeps ``_lineage_table`` (the table it loaded) and ``_lineage_result`` (its result).
    """

    table: str
    catalog_conn_id: str
    _lineage_table: Table | None = None
    _lineage_result: Mapping[str, Any] | None = None
    #: False for an operator that only reads the table (the sensor).
    lineage_writes: bool = True
    openlineage_inject_parent_job_info: bool = False
    openlineage_inject_transport_info: bool = False

    _lineage_dataset_name: TableDatasetName | None = None

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        """Render, then, when OpenLineage is on, read the table's names here, in the task's process.

        The OpenLineage provider calls the ``get_openlineage_facets_*`` methods in a forked child
        process, where reaching Airflow's connections through the task supervisor is not safe.
        """
        super().render_template_fields(context, jinja_env)  # type: ignore[misc]
        if openlineage_enabled():
            self._lineage_names()

    def _lineage_names(self) -> tuple[TableDatasetName, Table | None] | None:
        from airflow_iceberg_dml.exceptions import IcebergDmlError
        from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

        if self._lineage_dataset_name is not None:
            return self._lineage_dataset_name, self._lineage_table
        hook = IcebergCatalogHook(self.catalog_conn_id)
        try:
            table = self._lineage_table or hook.load_table(self.table)
            self._lineage_dataset_name = table_dataset_name(hook.catalog_config, self.table, table.location())
        except IcebergDmlError as error:
            log.info("No lineage for %s: %s", self.table, error)
            return None
        self._lineage_table = table
        return self._lineage_dataset_name, table

    def lineage_facets(
        self, names: TableDatasetName, table: Table | None, result: Mapping[str, Any] | None
    ) -> OperatorLineage[Any, Any]:
        """The task's lineage; ``result`` is None before the task ran (start) or when it failed."""
        head = table.current_snapshot() if table is not None else None
        version = str(head.snapshot_id) if head is not None else None
        inputs, outputs = table_datasets(
            names, table, input_version=version, output_version=version, output=self.lineage_writes
        )
        return operator_lineage(inputs, outputs)

    def inject_openlineage(self, parent_job_info: bool | None, transport_info: bool | None) -> None:
        """What the Spark job gets; None follows ``[openlineage] spark_inject_*`` (as the Spark provider)."""
        self.openlineage_inject_parent_job_info = (
            openlineage_config_default("spark_inject_parent_job_info")
            if parent_job_info is None
            else parent_job_info
        )
        self.openlineage_inject_transport_info = (
            openlineage_config_default("spark_inject_transport_info")
            if transport_info is None
            else transport_info
        )

    def job_spark_conf(self, context: Context) -> dict[str, str]:
        """What a spark-submit job of this task gets: its ``spark.openlineage.*`` properties."""
        return self.openlineage_spark_properties(context)

    def openlineage_spark_properties(self, context: Context) -> dict[str, str]:
        """This task's ``spark.openlineage.*`` properties (:func:`spark_lineage_properties`)."""
        return spark_lineage_properties(
            context,
            inject_parent_job=self.openlineage_inject_parent_job_info,
            inject_transport=self.openlineage_inject_transport_info,
            existing=getattr(self, "spark_conf", None),
        )

    def get_openlineage_facets_on_start(self) -> OperatorLineage[Any, Any] | None:
        found = self._lineage_names()
        return None if found is None else self.lineage_facets(*found, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage[Any, Any] | None:
        found = self._lineage_names()
        return None if found is None else self.lineage_facets(*found, self._lineage_result)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage[Any, Any] | None:
        found = self._lineage_names()
        return None if found is None else self.lineage_facets(*found, None)


# -- the Spark application, nested under its Airflow task -------------------------------------------------

#: Transport settings that may carry a credential: never passed to Spark.
_SECRET_TRANSPORT_KEYS = (".auth.", ".headers.")


def openlineage_enabled() -> bool:
    """Whether the OpenLineage provider is installed and enabled (``[openlineage]`` has a transport)."""
    try:
        from airflow.providers.openlineage import conf as openlineage_conf
    except ImportError:
        return False
    return not openlineage_conf.is_disabled()


def openlineage_config_default(option: str) -> bool:
    """``[openlineage] <option>`` (``spark_inject_parent_job_info`` ...), False when unset."""
    from airflow.sdk import conf

    return conf.getboolean("openlineage", option, fallback=False)


def spark_lineage_properties(
    context: Context,
    *,
    inject_parent_job: bool,
    inject_transport: bool,
    existing: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """``spark.openlineage.*`` properties that nest a Spark application under the task in ``context``.

    The parent job (namespace, job name and run id of this task and of its DAG run) when
    ``inject_parent_job``; the HTTP transport (URL, endpoint, timeout, compression) when
    ``inject_transport``. Empty when the OpenLineage provider is not installed or is disabled. A group
    already present in ``existing`` (the user's ``spark_conf``) is left to the user, as the Spark
    provider does. Credentials of the transport (API key, headers) are never included: give them to
    the Spark listener in ``spark_conf`` yourself, where they stay off the command line.
    """
    if not (inject_parent_job or inject_transport):
        return {}
    if not openlineage_enabled():
        return {}
    from airflow.providers.openlineage.utils.spark import (
        inject_parent_job_information_into_spark_properties,
        inject_transport_information_into_spark_properties,
    )

    given = dict(existing or {})
    found: dict[str, Any] = {}
    if inject_parent_job:
        found.update(inject_parent_job_information_into_spark_properties(dict(given), context))
    if inject_transport:
        found.update(inject_transport_information_into_spark_properties(dict(given), context))
    properties = {str(key): str(value) for key, value in found.items() if key not in given}
    secret = sorted(key for key in properties if any(part in key for part in _SECRET_TRANSPORT_KEYS))
    if secret:
        log.warning(
            "Not passing the OpenLineage transport's %s to Spark (credentials); set them in spark_conf "
            "if the Spark listener needs them.",
            ", ".join(secret),
        )
    return {key: value for key, value in properties.items() if key not in secret}
