"""Tasks that emit an event for one table at the same moment, through the operators' own lifecycle.

Each task is an operator of the package's base class whose change needs no job: it loads the table,
waits for the wall-clock second ``at`` (a run's conf), and reports an event for the table through its
asset alias, as a DML task does once its commit landed. Four tasks per run, two runs at once: eight
success reports of one asset Airflow has never seen, each pair of tasks sharing an alias.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

import pendulum
from airflow.sdk import DAG, Asset, Param

from airflow_iceberg_dml.operators.base import BaseIcebergSparkJobOperator, table_asset_uri

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pydantic import JsonValue

DAG_ID = "iceberg_report_race"
TASKS = 4


class ReportAt(BaseIcebergSparkJobOperator[None, dict[str, str]]):
    """The table's event at the wall-clock second ``at``, with no job."""

    template_fields: Sequence[str] = ("table", "at")
    asset_alias_prefix: ClassVar[str | None] = "iceberg-dml"

    def __init__(self, *, at: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.at = at

    def plan(self, run: Any, table: Any) -> dict[str, str]:
        time.sleep(max(0.0, float(self.at) - time.time()))
        return {"table": self.table}

    def asset_events(self, run: Any, result: dict[str, str]) -> list[tuple[Asset, dict[str, JsonValue]]]:
        return [(Asset(uri=table_asset_uri(self.catalog_conn_id, self.table)), {"task": self.task_id})]


with DAG(
    DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    max_active_runs=2,
    params={"table": Param("demo.orders", type="string"), "at": Param("0", type="string")},
):
    for n in range(TASKS):
        ReportAt(task_id=f"report_{n}", table="{{ params.table }}", at="{{ params.at }}")
