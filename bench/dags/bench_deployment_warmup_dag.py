"""The backfill benchmark's deployment warm-up: a backfill of this DAG runs in each fresh deployment
before the measured one, so that the measured backfill meets an Airflow that has run tasks before, as a
production deployment's has.

A fresh API server answers its first request to each route of the execution API slowly (its first task's
``run`` took 3.0 s, its first ``validate-inlets-and-outlets`` 0.6 s, while the tasks behind them waited).
The tasks here make the requests a DML task makes: they start, look a connection up, have an outlet (an
asset alias) with an event on it, push an XCom and end.
"""

from __future__ import annotations

from contextlib import suppress

import pendulum
from airflow.sdk import DAG, Asset, AssetAlias, BaseHook, task
from airflow.sdk.exceptions import AirflowNotFoundException

ALIAS = AssetAlias("bench_deployment_warmup")


@task(outlets=[ALIAS])
def warm(day: str, **context: object) -> str:
    with suppress(AirflowNotFoundException):  # none is defined: the lookup is the point
        BaseHook.get_connection("bench_deployment_warmup")
    task_id = context["ti"].task_id  # type: ignore[attr-defined]
    context["outlet_events"][ALIAS].add(Asset(f"bench://deployment-warmup/{day}/{task_id}"))  # type: ignore[index]
    return day


with DAG(
    "bench_deployment_warmup",
    schedule="@daily",
    start_date=pendulum.datetime(1992, 1, 1, tz="UTC"),
    end_date=pendulum.datetime(1998, 8, 2, tz="UTC"),  # no scheduled run: only the backfill's
    catchup=False,
):
    warm.override(task_id="first")("{{ ds }}")
    warm.override(task_id="second")("{{ ds }}")
