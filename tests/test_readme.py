"""The README's first example runs as written: "A DAG in ten lines", a real daily run over the session's
Spark Connect server, the table read back with pyiceberg and checked against pyarrow's own answer."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from tests.conftest import task_states, xcom_result

REPO = Path(__file__).resolve().parents[1]

DAY = dt.date(1995, 3, 1)
SCHEMA = pa.schema(
    [
        pa.field("o_orderkey", pa.int64(), nullable=False),
        pa.field("o_orderstatus", pa.string()),
        pa.field("o_orderdate", pa.date32()),
        pa.field("o_comment", pa.string()),
    ]
)


def _readme_block() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## A DAG in ten lines") :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


def _orders(first_key: int) -> pa.Table:
    """Three days of orders; test orders ('TEST ...') and lower-case statuses on each day."""
    rows = [
        (
            first_key + i,
            ["O", "F", "p", "O"][i % 4],
            DAY + dt.timedelta(days=i % 3 - 1),
            "TEST order, remove" if i % 5 == 0 else f"order {i}",
        )
        for i in range(60)
    ]
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, row, strict=True)) for row in rows], schema=SCHEMA)


def test_the_readme_dag_in_ten_lines_runs_as_written(catalog_hook, airflow_db, spark_default_over_connect):
    from tests.dags import readme_dag

    assert _readme_block() in (REPO / "tests" / "dags" / "readme_dag.py").read_text()

    catalog = catalog_hook.catalog
    catalog.create_namespace_if_not_exists("sales")
    table = catalog.create_table("sales.orders", schema=SCHEMA)
    for first_key in (1, 1001):  # two data files, each mixing the three days
        table.append(_orders(first_key))
    before = table.scan().to_arrow()

    dag_run = readme_dag.dag.test(logical_date=dt.datetime(DAY.year, DAY.month, DAY.day, tzinfo=dt.UTC))

    assert task_states(dag_run) == {"drop_test_orders": "success", "fix_status": "success"}
    dropped = pc.and_(pc.equal(before["o_orderdate"], DAY), pc.starts_with(before["o_comment"], "TEST"))
    expected = before.filter(pc.invert(dropped))
    status = expected["o_orderstatus"]
    expected = expected.set_column(1, "o_orderstatus", pc.if_else(pc.equal(status, "p"), "P", status))
    after = catalog.load_table("sales.orders").scan().to_arrow()
    assert after.sort_by("o_orderkey").to_pylist() == expected.sort_by("o_orderkey").to_pylist()
    assert pc.sum(dropped).as_py() == 8  # that day's test orders, in both files; not the other days'

    deleted = xcom_result(dag_run, "drop_test_orders")
    fixed = xcom_result(dag_run, "fix_status")
    assert deleted["rows_deleted"] == 8
    assert fixed["rows_inserted"] == pc.sum(pc.equal(expected["o_orderstatus"], "P")).as_py() == 28
    assert fixed["parent_snapshot_id"] == deleted["snapshot_id"]  # pinned to the delete's snapshot
