"""What a DELETE or UPDATE would touch (rows, data files, per partition), and the guards on it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.exceptions import GuardExceededError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from types import ModuleType

    from pyspark.sql import DataFrame, SparkSession

    from airflow_iceberg_dml.jobs.table_state import TableState
    from airflow_iceberg_dml.spec import DmlSpec, Guards


def rows_at(spark: SparkSession, identifier: str, version: int | str) -> DataFrame:
    """The rows of table ``identifier`` at a snapshot (``TableState.version``), for a query that the
    client builds: over Spark Connect it reaches the server in one request, where ``spark.sql`` of its
    text takes two."""
    return spark.read.option("versionAsOf", str(version)).table(identifier)


def any_match(rows: DataFrame, functions: ModuleType, where: str) -> DataFrame:
    """One row when any of ``rows`` matches ``where``, none otherwise: reading stops at the first match
    (``sql.exists_query`` as a query of the client's)."""
    return rows.where(functions.expr(where)).select(functions.lit(1).alias("matched")).limit(1)


def counts_by_change(
    rows: DataFrame, functions: ModuleType, wheres: Sequence[str], kinds: Sequence[str] | None = None
) -> DataFrame:
    """The rows of ``rows`` each of ``wheres`` matches, and the overlap, in one pass over what pruning by
    any of them keeps (``sql.group_count_query`` as a query of the client's)."""
    return rows.where(functions.expr(sql.any_of(wheres))).selectExpr(*sql.group_count_columns(wheres, kinds))


def impact_by_partition(rows: DataFrame, functions: ModuleType, where: str) -> DataFrame:
    """The rows of ``rows`` that ``where`` matches and the data files that hold them, per partition
    (Iceberg's ``_partition`` and ``_file`` metadata columns), as a query of the client's."""
    return (
        rows.where(functions.expr(where))
        .groupBy(functions.col("_partition").alias("partition"))
        .agg(functions.count(functions.lit(1)).alias("rows"), functions.countDistinct("_file").alias("files"))
    )


def _json_value(value: Any) -> Any:
    """A partition value as JSON: dates and decimals as text, the rest as is."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


class DmlImpact:
    """Part of :class:`~airflow_iceberg_dml.jobs.dml.DmlJob`: the change's impact, for dry runs and guards."""

    spark: SparkSession
    spec: DmlSpec
    state: TableState
    functions: ModuleType
    ref: str
    app_id: str
    where: str
    _where_evaluated: bool

    def _naming_input_errors(self) -> Any:
        raise NotImplementedError  # DmlValidation's

    def _snapshot_rows(self, head: int) -> DataFrame:
        """The table's rows at snapshot ``head`` (:func:`rows_at`)."""
        return rows_at(self.spark, self.state.identifier, self.state.version(head, self.ref))

    def _impact(self, head: int) -> dict[str, Any]:
        """Rows and data files the change would touch, per partition, at the head snapshot."""
        with self._naming_input_errors():
            rows = impact_by_partition(self._snapshot_rows(head), self.functions, self.where).collect()
        self._where_evaluated = True
        partitions = [
            {
                "partition": {
                    k: _json_value(v) for k, v in (row.partition.asDict() if row.partition else {}).items()
                },
                "rows": int(row.rows),
                "data_files": int(row.files),
            }
            for row in rows
        ]
        total = self.state.live_rows(head, self.ref)
        matched = sum(int(row.rows) for row in rows)
        return {
            "rows_matched": matched,
            "rows_total": total,
            "fraction": round(matched / total, 6) if total else 0.0,
            "data_files_touched": sum(int(row.files) for row in rows),
            "partitions": sorted(partitions, key=lambda p: str(p["partition"])),
        }

    def _check_guards(self, impact: Mapping[str, Any]) -> None:
        check_guards(self.spec.guards, impact["rows_matched"], impact["rows_total"])


def check_guards(guards: Guards, matched: int, total: int) -> None:
    """Fail, committing nothing, when ``matched`` rows of ``total`` exceed a guard (the share compared
    unrounded, so exactly the allowed share passes)."""
    if guards.max_rows_affected is not None and matched > guards.max_rows_affected:
        raise GuardExceededError(
            f"The change would touch {matched} of {total} rows, more than "
            f"max_rows_affected={guards.max_rows_affected}. Nothing was committed."
        )
    fraction = matched / total if total else 0.0
    if guards.max_fraction_affected is not None and fraction > guards.max_fraction_affected:
        raise GuardExceededError(
            f"The change would touch {matched} of {total} rows ({fraction:.2%}), more than "
            f"max_fraction_affected={guards.max_fraction_affected:.2%}. Nothing was committed."
        )
