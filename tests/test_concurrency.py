"""DELETE, UPDATE and compaction committing concurrently on one table, on a catalog that takes
concurrent commits (PostgreSQL, started here on loopback): nothing lost, nothing applied twice."""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from airflow_iceberg_dml.exceptions import ConcurrentCommitError
from airflow_iceberg_dml.hooks.spark_submit import IcebergSparkSubmitHook
from airflow_iceberg_dml.spec import DmlSpec, JobKind, Outcome, RunKey
from bench.deployment import postgres_server

if TYPE_CHECKING:
    from collections.abc import Iterator

ROUNDS = 3
ROWS = 2000
CONN_ID = "iceberg_pg"


@pytest.fixture(scope="module")
def postgres_uri() -> Iterator[str]:
    with postgres_server() as uri:
        yield uri


@pytest.fixture(scope="module")
def pg_catalog(postgres_uri, spark, monkeypatch_module) -> Iterator[object]:
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    warehouse = Path(tempfile.mkdtemp(prefix="iceberg-dml-pg-warehouse-"))
    connection = {
        "conn_type": "iceberg",
        "host": postgres_uri,
        "extra": {"type": "sql", "warehouse": warehouse.as_uri()},
    }
    monkeypatch_module.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(connection))
    hook = IcebergCatalogHook(CONN_ID)
    # The shared test session gets this catalog too: it is the third, concurrent writer (compaction).
    for key, value in hook.spark_properties().items():
        spark.conf.set(key, value)
    yield hook
    shutil.rmtree(warehouse, ignore_errors=True)


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _expected(rounds: int) -> dict[int, float]:
    """The table after ``rounds`` rounds applied one after another (the order does not matter)."""
    return {
        order_id: order_id * 1.5 + sum(1 for r in range(1, rounds + 1) if order_id % 5 == r)
        for order_id in range(1, ROWS + 1)
        if all(order_id % 7 != r for r in range(1, rounds + 1))
    }


def _submit_until_done(hook_catalog, spec: DmlSpec, outcomes: list[str]) -> None:
    """Submit like an Airflow task with retries: same run key, until it commits or replays."""
    for try_number in range(1, 6):
        tried = DmlSpec(
            **{**spec.__dict__, "snapshot_properties": spec.run_key.summary_properties(try_number)}
        )
        try:
            record = IcebergSparkSubmitHook().submit(tried, hook_catalog.catalog_config, name="concurrency")
        except ConcurrentCommitError:
            outcomes.append(f"{spec.kind.value}: conflict on try {try_number}")
            continue
        assert record is not None
        outcomes.append(f"{spec.kind.value}: {record.outcome.value} on try {try_number}")
        assert record.outcome in (Outcome.COMMITTED, Outcome.REPLAYED)
        return
    pytest.fail(f"{spec.kind.value} did not commit in 5 tries: {outcomes}")


@pytest.mark.spark_submit
@pytest.mark.slow
def test_concurrent_delete_update_and_compaction_equal_the_sequential_result(spark, pg_catalog):
    catalog = pg_catalog.catalog
    catalog.create_namespace_if_not_exists("tests")
    name = "tests.concurrent"
    ids = pa.array(range(1, ROWS + 1), pa.int64())
    rows = pa.table({"order_id": ids, "bucket": pa.compute.cast(pa.compute.bit_wise_and(ids, 3), pa.int64()),
                     "amount": pa.compute.multiply(pa.compute.cast(ids, pa.float64()), 1.5)})  # fmt: skip
    table = catalog.create_table(name, schema=rows.schema, properties={"format-version": "2"})
    for part in range(4):  # several data files, so that compaction has work to do
        table.append(rows.slice(part * ROWS // 4, ROWS // 4))

    outcomes: list[str] = []
    for round_number in range(1, ROUNDS + 1):
        run_id = f"round-{round_number}"
        delete = DmlSpec(
            kind=JobKind.DELETE,
            catalog=CONN_ID,
            table=name,
            where=f"order_id % 7 = {round_number}",
            run_key=RunKey("concurrency", "delete", run_id),
        )
        update = DmlSpec(
            kind=JobKind.UPDATE,
            catalog=CONN_ID,
            table=name,
            where=f"order_id % 5 = {round_number}",
            assignments={"amount": "amount + 1"},
            run_key=RunKey("concurrency", "update", run_id),
        )
        writers = [
            threading.Thread(target=_submit_until_done, args=(pg_catalog, spec, outcomes))
            for spec in (delete, update)
        ]
        for writer in writers:
            writer.start()
        try:  # the third writer: compaction from another Spark application, at the same time
            options = "map('rewrite-all', 'true')"
            spark.sql(
                f"CALL {CONN_ID}.system.rewrite_data_files(table => '{name}', options => {options})"
            ).collect()
            outcomes.append("compaction: committed")
        except Exception as error:  # noqa: BLE001 - a compaction that loses a conflict changes nothing
            outcomes.append(f"compaction: {type(error).__name__}")
        for writer in writers:
            writer.join(timeout=600)

        arrow = catalog.load_table(name).scan().to_arrow()
        actual = dict(zip(arrow["order_id"].to_pylist(), arrow["amount"].to_pylist(), strict=True))
        assert actual == _expected(round_number), f"round {round_number}: {outcomes}"
        spark.sql(f"REFRESH TABLE {CONN_ID}.{name}")  # the session caches tables it has loaded
        spark_rows = spark.sql(f"SELECT count(*), sum(amount) FROM {CONN_ID}.{name}").collect()[0]
        assert spark_rows[0] == len(actual)
        assert spark_rows[1] == pytest.approx(sum(actual.values()))
    print("outcomes:", outcomes)
