"""Tables with ``variant`` columns (format v3), at the top level and in a struct: the operators change
them, as real tasks over Spark Connect, although pyiceberg 0.12 has no variant type
(``airflow_iceberg_dml/variant_type.py``).

The rows are checked against a model kept here in Python, read back by Iceberg's reader in Spark
(pyiceberg cannot decode a variant), the variant values through ``to_json``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from airflow_iceberg_dml.exceptions import UnsupportedTableError
from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.merge import IcebergMergeOperator
from airflow_iceberg_dml.operators.overwrite import IcebergOverwriteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from tests.conftest import CATALOG, new_table_name


class _Events(dict):
    """``outlet_events``: an accessor for whatever outlet a task emits through."""

    def __missing__(self, key: Any) -> Any:
        return SimpleNamespace(add=lambda *_, **__: None)


def _execute(operator: Any) -> Any:
    ti = SimpleNamespace(dag_id="variant", task_id=operator.task_id, run_id="r1", map_index=-1, try_number=1)
    return operator.execute({"ti": ti, "outlet_events": _Events()})


def _rows(spark: Any, name: str) -> dict[int, tuple[str, float, str, str]]:
    """``k: (ds, v, payload as JSON, the struct's variant as JSON)``, as Iceberg's reader in Spark gives
    them (pyiceberg cannot decode a variant)."""
    spark.sql(f"REFRESH TABLE {CATALOG}.{name}")
    query = f"SELECT k, ds, v, to_json(payload), to_json(info.extra) FROM {CATALOG}.{name}"
    return {row[0]: (row[1], row[2], row[3], row[4]) for row in spark.sql(query).collect()}


def test_every_change_works_on_a_table_with_variant_columns(
    spark, catalog_hook, spark_default_over_connect
) -> None:
    name = new_table_name("variant")
    spark.sql(
        f"CREATE TABLE {CATALOG}.{name} (payload VARIANT, ds STRING, k BIGINT, v DOUBLE, "
        "info STRUCT<tag: STRING, extra: VARIANT>) USING iceberg "
        "TBLPROPERTIES ('format-version' = '3')"
    )
    # Two days mixed in every data file: the slice overwrite below is a row-level MERGE.
    spark.sql(
        f"INSERT INTO {CATALOG}.{name} SELECT parse_json(concat('{{\"n\":', id, '}}')), "
        "element_at(array('2026-01-01', '2026-01-02'), CAST(id % 2 AS INT) + 1), id, id * 1.0, "
        "named_struct('tag', 'x', 'extra', parse_json(concat('[', id, ']'))) FROM range(20)"
    )
    days = {k: "2026-01-01" if k % 2 == 0 else "2026-01-02" for k in range(20)}
    model = {k: (days[k], k * 1.0, f'{{"n":{k}}}', f"[{k}]") for k in range(20)}

    deleted = _execute(IcebergDeleteOperator(task_id="delete", table=name, where="k IN (1, 2)"))
    for k in (1, 2):
        del model[k]
    updated = _execute(
        IcebergUpdateOperator(task_id="update", table=name, where="k = 3", set={"v": "v + 100"})
    )
    model[3] = (model[3][0], 103.0, *model[3][2:])
    merged = _execute(
        IcebergMergeOperator(
            task_id="merge",
            table=name,
            source_query="SELECT 4 AS k",
            on="t.k = s.k",
            clauses=[{"when": "matched", "then": "update", "set": {"v": "0.0"}}],
        )
    )
    model[4] = (model[4][0], 0.0, *model[4][2:])
    overwritten = _execute(
        IcebergOverwriteOperator(
            task_id="overwrite",
            table=name,
            where="ds = '2026-01-01'",
            source_query=(
                "SELECT parse_json('{\"new\":true}') AS payload, '2026-01-01' AS ds, 100L AS k, 1.0D AS v, "
                "named_struct('tag', 'y', 'extra', parse_json('[]')) AS info"
            ),
        )
    )
    model = {k: row for k, row in model.items() if row[0] != "2026-01-01"} | {
        100: ("2026-01-01", 1.0, '{"new":true}', "[]")
    }
    compacted = _execute(IcebergCompactionOperator(task_id="compact", table=name))

    assert (deleted["rows_deleted"], updated["rows_inserted"], merged["merge"]["updated"]) == (2, 1, 1)
    assert overwritten["plan"] == "row-level"
    assert overwritten["rows_inserted"] == 1
    assert compacted["noop"] is False
    assert _rows(spark, name) == model


@pytest.mark.parametrize("nested", ["ARRAY<VARIANT>", "MAP<STRING, VARIANT>"])
def test_a_list_or_map_of_variants_fails_before_spark_naming_the_type(
    spark, catalog_hook, spark_default_over_connect, monkeypatch, nested
) -> None:
    from airflow.exceptions import AirflowFailException

    from airflow_iceberg_dml.operators import base

    name = new_table_name("variant_nested")
    spark.sql(
        f"CREATE TABLE {CATALOG}.{name} (k BIGINT, events {nested}) USING iceberg "
        "TBLPROPERTIES ('format-version' = '3')"
    )
    with pytest.raises(UnsupportedTableError, match=rf"Table '{name}' has a column of type 'variant'"):
        catalog_hook.load_table(name)
    monkeypatch.setattr(base, "engine_for", lambda *_, **__: pytest.fail("an engine was asked for a job"))
    with pytest.raises(AirflowFailException, match=f"Table '{name}' has a column of type 'variant'"):
        _execute(IcebergDeleteOperator(task_id="delete", table=name, where="k = 1"))


def test_pyiceberg_still_parses_every_other_type_and_names_the_ones_it_does_not_know() -> None:
    from pyiceberg.types import DecimalType, LongType, NestedField

    from airflow_iceberg_dml.variant_type import read_variant_columns, unknown_type

    read_variant_columns()
    read_variant_columns()  # once per process: a second call changes nothing

    def field(type_name: str) -> NestedField:
        return NestedField(field_id=1, name="c", field_type=type_name, required=False)

    assert field("long").field_type == LongType()
    assert field("decimal(9, 2)").field_type == DecimalType(9, 2)
    assert str(field("variant").field_type) == "variant"
    with pytest.raises(ValueError, match="Unsupported field type: 'shape'") as raised:
        field("shape")
    assert unknown_type(raised.value) == "shape"
    assert unknown_type(ValueError("Type not recognized: variant [type=value_error]")) == "variant"
    assert unknown_type(ValueError("another problem")) is None
