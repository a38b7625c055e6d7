"""OpenLineage objects (the provider installed): the table's datasets and the operator's lineage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.sql import delete_statement, table_identifier, update_statement

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airflow.providers.openlineage.extractors import OperatorLineage
    from pyiceberg.table import Table

    from airflow_iceberg_dml.lineage.names import TableDatasetName


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


@dataclass(frozen=True)
class DmlStatement:
    """What a DML task says it does, as written: no bound value, only parameter names. ``text`` is the
    statement's SQL when it is not a DELETE or UPDATE of ``where`` (a MERGE)."""

    kind: str
    table: str
    where: str
    assignments: Mapping[str, str]
    branch: str | None
    parameter_names: list[str]
    text: str | None = None


def dml_lineage(
    names: TableDatasetName, table: Table | None, result: Mapping[str, Any] | None, statement: DmlStatement
) -> OperatorLineage[Any, Any]:
    """A DML task's lineage: the table as input and output; with the result, the exact snapshots and
    what the commit did (``icebergDmlCommit``) and the Spark application (``externalQuery``)."""
    from airflow_iceberg_dml.lineage.facets import IcebergDmlCommitRunFacet, dml_commit_fields

    text = statement.text or dml_statement_text(
        names.catalog_name, statement.table, statement.where, statement.assignments, statement.branch
    )
    job_facets = {"sql": sql_job_facet(text)}
    if result is None:
        head = table.current_snapshot() if table is not None else None
        version = str(head.snapshot_id) if head is not None else None
        inputs, outputs = table_datasets(names, table, input_version=version, output_version=None)
        return operator_lineage(inputs, outputs, job_facets=job_facets)
    committed = not result["noop"]
    inputs, outputs = table_datasets(
        names,
        table,
        input_version=result["parent_snapshot_id"] if committed else result["snapshot_id"],
        output_version=result["snapshot_id"],
        output_facets=output_statistics(
            result["rows_inserted"], result["added_data_files"] + result["added_delete_files"]
        ),
        output=committed,
    )
    commit = IcebergDmlCommitRunFacet(
        **dml_commit_fields(
            result,
            kind=statement.kind,
            where=statement.where,
            assignments=dict(statement.assignments),
            parameter_names=statement.parameter_names,
        )
    )
    run_facets = {"icebergDmlCommit": commit, **spark_application_facet(result["spark_app_id"])}
    return operator_lineage(inputs, outputs, run_facets, job_facets)
