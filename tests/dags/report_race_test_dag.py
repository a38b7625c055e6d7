"""Tasks that emit an event for one table at the same moment, through the operators' own lifecycle.

Each task is an operator of the package's base class whose change needs no job: it loads the table,
meets the other tasks at a barrier (a folder, a run's conf, where each task leaves a file and waits
until ``parties`` files are there), and reports an event for the table through its asset alias, as a
DML task does once its commit landed. Four tasks per run, two runs at once: eight success reports of
one asset Airflow has never seen, at one moment, each pair of tasks sharing an alias.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pendulum
from airflow.sdk import DAG, Asset, Param

from airflow_iceberg_dml.operators.base import BaseIcebergSparkJobOperator, table_asset_uri

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pydantic import JsonValue

DAG_ID = "iceberg_report_race"
TASKS = 4
#: How long a task waits at the barrier for the others before it fails.
BARRIER_TIMEOUT_S = 300


class ReportTogether(BaseIcebergSparkJobOperator[None, dict[str, str]]):
    """The table's event once ``parties`` tasks have reached the ``barrier`` folder, with no job."""

    template_fields: Sequence[str] = ("table", "barrier", "parties")
    asset_alias_prefix: ClassVar[str | None] = "iceberg-dml"

    def __init__(self, *, barrier: str, parties: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.barrier = barrier
        self.parties = parties

    def plan(self, run: Any, table: Any) -> dict[str, str]:
        folder = Path(self.barrier)
        ti = run.context["ti"]
        (folder / f"{ti.run_id}.{self.task_id}").touch()
        deadline = time.monotonic() + BARRIER_TIMEOUT_S
        while len(list(folder.iterdir())) < int(self.parties):
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {self.parties} tasks reached {folder}")
            time.sleep(0.02)
        return {"table": self.table}

    def asset_events(self, run: Any, result: dict[str, str]) -> list[tuple[Asset, dict[str, JsonValue]]]:
        return [(Asset(uri=table_asset_uri(self.catalog_conn_id, self.table)), {"task": self.task_id})]


with DAG(
    DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    max_active_runs=2,
    params={
        "table": Param("demo.orders", type="string"),
        "barrier": Param(type="string", description="the barrier's folder, this test's own"),
        "parties": Param(str(TASKS), type="string"),
    },
):
    for n in range(TASKS):
        ReportTogether(
            task_id=f"report_{n}",
            table="{{ params.table }}",
            barrier="{{ params.barrier }}",
            parties="{{ params.parties }}",
        )
