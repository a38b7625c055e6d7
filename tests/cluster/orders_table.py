"""The orders table of ``tests/conftest.py``'s ``create_orders_table``, written by pyiceberg.

The cluster tests create their tables without a local SparkSession: pyiceberg writes the same rows
(through the same catalog the operators then use, S3 included), and Spark on the cluster changes them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

ORDERS_SCHEMA = Schema(
    NestedField(1, "order_id", LongType(), required=False),
    NestedField(2, "customer_id", LongType(), required=False),
    NestedField(3, "status", StringType(), required=False),
    NestedField(4, "amount", DoubleType(), required=False),
    NestedField(5, "comment", StringType(), required=False),
)
BY_STATUS = PartitionSpec(
    PartitionField(source_id=3, field_id=1000, transform=IdentityTransform(), name="status")
)


def orders(first: int, last: int) -> pa.Table:
    """Orders ``first..last``: customer ``id % 100``, status O/F/P by ``id % 3``, amount ``id * 1.5``."""
    ids = range(first, last + 1)
    return pa.table(
        {
            "order_id": pa.array(ids, pa.int64()),
            "customer_id": pa.array([i % 100 for i in ids], pa.int64()),
            "status": pa.array([("O", "F", "P")[i % 3] for i in ids], pa.string()),
            "amount": pa.array([i * 1.5 for i in ids], pa.float64()),
            "comment": pa.array([None if i % 10 == 0 else f"order {i}" for i in ids], pa.string()),
        }
    )


def create_orders_table(catalog: Catalog, name: str, rows: int = 3000, files_per_partition: int = 2) -> str:
    """A format v2 orders table partitioned by status, ``files_per_partition`` data files each."""
    catalog.create_namespace_if_not_exists(name.split(".", maxsplit=1)[0])
    table = catalog.create_table(
        name, schema=ORDERS_SCHEMA, partition_spec=BY_STATUS, properties={"format-version": "2"}
    )
    step = -(-rows // files_per_partition)
    for first in range(1, rows + 1, step):
        table.append(orders(first, min(first + step - 1, rows)))
    return name
