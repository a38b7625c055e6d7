"""One read of a snapshot's manifests per host (health_cache.py): real pyiceberg tables, real processes
started together, the files on disk read back."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from airflow_iceberg_dml.health import file_entries, table_health
from airflow_iceberg_dml.health_cache import FOLDER, MAX_AGE_S, shared_file_entries
from airflow_iceberg_dml.table_lock import LOCK_FOLDER_ENV

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.table import Table

    from airflow_iceberg_dml.health_cache import Entries


def _catalog(folder: Path) -> dict[str, str]:
    return {"uri": f"sqlite:///{folder}/catalog.db", "warehouse": (folder / "warehouse").as_uri()}


def _table(folder: Path, appends: int) -> Table:
    """A table partitioned by status, one manifest per append (three partitions each)."""
    catalog = SqlCatalog("health_cache", **_catalog(folder))
    catalog.create_namespace("n")
    schema = Schema(NestedField(1, "id", LongType(), False), NestedField(2, "status", StringType(), False))
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "status"))
    table = catalog.create_table("n.t", schema, partition_spec=spec)
    for number in range(appends):
        _append(table, number)
    return table


def _append(table: Table, number: int) -> None:
    ids = list(range(number * 30, number * 30 + 30))
    table.append(pa.table({"id": pa.array(ids, pa.int64()), "status": [("O", "F", "P")[i % 3] for i in ids]}))


@pytest.fixture
def locks(tmp_path: Path, monkeypatch: Any) -> Path:
    """This test's lock folder, as every task of a host shares one; the snapshots' files go in it."""
    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    return tmp_path / "locks" / FOLDER


class _Reads:
    """``file_entries``, counting its calls."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, table: Table) -> Entries:
        self.count += 1
        return file_entries(table)


def test_the_tasks_of_a_host_read_a_snapshots_manifests_once(tmp_path: Path) -> None:
    table = _table(tmp_path, appends=6)
    locks = tmp_path / "locks"
    go = tmp_path / "go"
    child = textwrap.dedent(
        """
        import json, os, sys, time
        from pathlib import Path
        from pyiceberg.catalog.sql import SqlCatalog
        from airflow_iceberg_dml.health import file_entries, table_health
        from airflow_iceberg_dml.health_cache import shared_file_entries

        table = SqlCatalog("health_cache", **json.loads(sys.argv[1])).load_table("n.t")
        reads = []
        def read(table):
            reads.append(time.monotonic())
            return file_entries(table)
        while not Path(sys.argv[2]).exists():  # the processes start their reads together
            time.sleep(0.005)
        entries, manifests = shared_file_entries(table, read)
        report = table_health(table)
        print(json.dumps({"reads": len(reads), "entries": len(entries), "manifests": manifests,
                          "small_data_files": report.small_data_files}))
        """
    )
    env = {**os.environ, LOCK_FOLDER_ENV: str(locks)}
    command = [sys.executable, "-c", child, json.dumps(_catalog(tmp_path)), str(go)]
    processes = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    time.sleep(1.0)
    go.touch()
    outputs = [process.communicate(timeout=300) for process in processes]
    assert all(process.returncode == 0 for process in processes), [err[-2000:] for _, err in outputs]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]

    entries, manifests = file_entries(table)
    assert sum(result["reads"] for result in results) == 1  # one process read the manifests
    found = {(result["entries"], result["manifests"], result["small_data_files"]) for result in results}
    assert found == {(len(entries), manifests, 18)}
    assert manifests == 6
    (written,) = (locks / FOLDER).glob("*.json")
    assert stat.S_IMODE(written.stat().st_mode) == 0o600  # partition values: its owner's only


def test_the_same_entries_come_back_a_new_snapshot_is_read_anew_and_old_files_go(
    tmp_path: Path, locks: Path
) -> None:
    table = _table(tmp_path, appends=3)
    reads = _Reads()

    first = shared_file_entries(table, reads)
    assert first == file_entries(table)
    assert shared_file_entries(table, reads) == first
    assert reads.count == 1
    (old,) = locks.glob("*.json")
    assert table_health(table).small_data_files == 9  # counted from the live files, not the summary
    stored = json.loads(old.read_text())
    old.write_text(json.dumps({**stored, "entries": stored["entries"][:1]}))
    assert table_health(table).small_data_files == 1  # the report reads the file, not the manifests

    aged = time.time() - MAX_AGE_S - 1
    os.utime(old, (aged, aged))
    _append(table, 3)
    table = table.refresh()
    second = shared_file_entries(table, reads)
    assert reads.count == 2
    assert second == file_entries(table)
    assert len(second[0]) == len(first[0]) + 3
    assert old not in set(locks.iterdir())  # written more than MAX_AGE_S ago: removed
    assert len(list(locks.glob("*.json"))) == 1


def test_a_file_that_cannot_be_read_back_is_replaced_by_a_read_of_the_manifests(
    tmp_path: Path, locks: Path
) -> None:
    table = _table(tmp_path, appends=2)
    reads = _Reads()
    shared_file_entries(table, reads)
    (written,) = locks.glob("*.json")
    written.write_text('{"manifests": 2, "entries": [{"kind": 7}]}')

    assert shared_file_entries(table, reads) == file_entries(table)
    assert reads.count == 2
    assert json.loads(written.read_text())["manifests"] == 2
    assert shared_file_entries(table, reads) == file_entries(table)
    assert reads.count == 2
