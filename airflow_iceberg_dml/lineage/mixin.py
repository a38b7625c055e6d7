"""The operators' side: ``get_openlineage_facets_on_start/complete/failure``, from what the task read."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.lineage.events import operator_lineage, table_datasets
from airflow_iceberg_dml.lineage.names import TableDatasetName, table_dataset_name
from airflow_iceberg_dml.lineage.spark import openlineage_config_default, spark_lineage_properties

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context
    from pyiceberg.table import Table

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

log = logging.getLogger(__name__)


class IcebergLineageMixin:
    """Lineage for the operators of this package, built from the table the task loaded and its result.

    The operator calls :meth:`remember_lineage_table` once it has loaded the table (in ``plan``) and
    keeps its result in ``_lineage_result``; it supplies :meth:`lineage_facets`. Nothing is read here:
    the OpenLineage provider calls these methods in a forked child process, where reaching Airflow's
    connections or the catalog is not safe. So the START event, sent before the task runs, names no
    dataset; COMPLETE and FAILURE name the table with the snapshots the task read and wrote.
    """

    table: str
    _lineage_table: Table | None = None
    _lineage_dataset_name: TableDatasetName | None = None
    _lineage_result: Any = None
    #: False for an operator that only reads the table (the sensor).
    lineage_writes: bool = True
    openlineage_inject_parent_job_info: bool = False
    openlineage_inject_transport_info: bool = False

    def remember_lineage_table(self, catalog_hook: IcebergCatalogHook, table: Table) -> None:
        """Keep the table as the task loaded it, and its dataset name (from the catalog's configuration)."""
        self._lineage_table = table
        try:
            location = table.location()
            self._lineage_dataset_name = table_dataset_name(catalog_hook.catalog_config, self.table, location)
        except Exception as error:  # noqa: BLE001 - lineage is informative: it never fails the task
            log.info("No lineage for %s: %s", self.table, error)

    def lineage_facets(
        self, names: TableDatasetName, table: Table | None, result: Mapping[str, Any] | None
    ) -> OperatorLineage[Any, Any]:
        """The task's lineage; ``result`` is None when the task failed."""
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

    def _lineage(self, result: Mapping[str, Any] | None) -> OperatorLineage[Any, Any] | None:
        names = self._lineage_dataset_name
        return None if names is None else self.lineage_facets(names, self._lineage_table, result)

    def get_openlineage_facets_on_start(self) -> OperatorLineage[Any, Any] | None:
        return self._lineage(None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage[Any, Any] | None:
        return self._lineage(self._lineage_result)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage[Any, Any] | None:
        return self._lineage(None)
