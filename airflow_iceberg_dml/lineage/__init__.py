"""OpenLineage: which task changed which Iceberg table, what the commit did, and the Spark run under it.

The operators implement the OpenLineage provider's conventions (``get_openlineage_facets_on_start``,
``get_openlineage_facets_on_complete``) through :class:`IcebergLineageMixin` (``mixin``), built from the
table the task loaded and its result; the provider calls them when it is installed and enabled. The
rest of this package is what they need:

- ``names``: the table's dataset, named as OpenLineage's Spark integration names an Iceberg table, so that our
  events and a Spark listener's events meet on one dataset: the namespace and name of the table's
  storage location (``file`` + path, ``s3://bucket`` + key ...), with the catalog's own name as a
  ``TABLE`` symlink (REST: the catalog URI and ``namespace.table``; SQL/JDBC: the database server and
  ``database.namespace.table``, or the SQLite file) and a ``catalog`` facet;
- ``facets`` and ``events``: facets from the result: OpenLineage's own classes where they have a
  field (schema, version = the snapshot id as text, output statistics, storage, SQL text, external
  query = the Spark application),
  and two custom run facets for the rest (``icebergDmlCommit``, ``icebergMaintenance``), whose JSON
  schema ships in this package (``openlineage_facets.json``);
- ``spark``: :func:`spark_lineage_properties`, the ``spark.openlineage.*`` properties that nest the Spark
  application under its Airflow task, the way the Spark provider's ``SparkSubmitOperator`` does.

The OpenLineage provider is optional: without it this module imports, the pure functions work,
:func:`spark_lineage_properties` returns ``{}``, and the provider never calls the operator methods.
Bound parameter values never appear in what is emitted (they can be personal data): the predicate and
expressions are sent as written, with their ``:name`` markers, and only the parameters' names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.lineage.events import (
    DmlStatement,
    dml_lineage,
    dml_statement_text,
    operator_lineage,
    output_statistics,
    spark_application_facet,
    sql_job_facet,
    table_dataset_facets,
    table_datasets,
)
from airflow_iceberg_dml.lineage.mixin import IcebergLineageMixin
from airflow_iceberg_dml.lineage.names import (
    TableDatasetName,
    catalog_table_name,
    storage_dataset_name,
    table_dataset_name,
    without_credentials,
)
from airflow_iceberg_dml.lineage.spark import (
    openlineage_config_default,
    openlineage_enabled,
    spark_lineage_properties,
)

if TYPE_CHECKING:
    from airflow_iceberg_dml.lineage.facets import (
        FACET_SCHEMA_URL,
        HAVE_OPENLINEAGE_CLIENT,
        IcebergDmlCommitRunFacet,
        IcebergMaintenanceRunFacet,
        dml_commit_fields,
        health_facet_fields,
        maintenance_fields,
    )


def __getattr__(name: str) -> Any:
    """The facets module's names, imported on first use: it imports the OpenLineage client (a third
    of a second), which a task process parsing a DAG file does not need unless the OpenLineage
    provider asks for lineage. Every other name of ``__all__`` is imported above."""
    if name in __all__:
        from airflow_iceberg_dml.lineage import facets

        return getattr(facets, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FACET_SCHEMA_URL",
    "HAVE_OPENLINEAGE_CLIENT",
    "DmlStatement",
    "IcebergDmlCommitRunFacet",
    "IcebergLineageMixin",
    "IcebergMaintenanceRunFacet",
    "TableDatasetName",
    "catalog_table_name",
    "dml_commit_fields",
    "dml_lineage",
    "dml_statement_text",
    "health_facet_fields",
    "maintenance_fields",
    "openlineage_config_default",
    "openlineage_enabled",
    "operator_lineage",
    "output_statistics",
    "spark_application_facet",
    "spark_lineage_properties",
    "sql_job_facet",
    "storage_dataset_name",
    "table_dataset_facets",
    "table_dataset_name",
    "table_datasets",
    "without_credentials",
]
