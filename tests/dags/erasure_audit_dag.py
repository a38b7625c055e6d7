"""DAGs run by tests/test_erasure_audit.py and tests/test_erasure.py: a purge with nothing due (decided
without Spark), an erase then purge whose subjects come from a file, and an erase whose subjects come
from a query (no key stored by Airflow in either)."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.erase import IcebergEraseOperator
from tests.dags.erasure_test_dag import tables_of

#: The table of the not-due purge (created by the test with pyiceberg).
NOT_DUE_TABLE = "tests.erasure_audit_not_due"

with DAG(
    "erasure_purge_not_due",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"subjects_file": "", "report_location": ""},
) as dag_purge_not_due:
    IcebergEraseOperator(
        task_id="purge",
        mode="purge",
        tables={NOT_DUE_TABLE: "customer_id"},
        subjects_file="{{ params.subjects_file }}",
        purge_ahead=timedelta(days=7),
        report_location="{{ params.report_location }}",
    )

with DAG(
    "erasure_from_file",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"subjects_file": "", "report_location": ""},
) as dag_from_file:
    erase = IcebergEraseOperator(
        task_id="erase",
        tables=tables_of("v2_unpartitioned"),
        subjects_file="{{ params.subjects_file }}",
        request_id="request-{{ run_id }}",
        report_location="{{ params.report_location }}",
    )
    purge = IcebergEraseOperator(
        task_id="purge",
        mode="purge",
        tables=tables_of("v2_unpartitioned"),
        subjects_file="{{ params.subjects_file }}",
        request_id="request-{{ run_id }}",
        purge_ahead=timedelta(days=365),
        min_retention=timedelta(0),
        orphan_grace=timedelta(0),
        report_location="{{ params.report_location }}",
    )
    erase >> purge

with DAG(
    "erasure_from_query",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"subjects_query": "", "report_location": ""},
) as dag_from_query:
    IcebergEraseOperator(
        task_id="erase",
        tables=tables_of("v2_unpartitioned"),
        subjects_query="{{ params.subjects_query }}",
        request_id="request-{{ run_id }}",
        report_location="{{ params.report_location }}",
    )

#: The table of the layers test: orders partitioned by the erased key (created by the test).
LAYERS_TABLE = "tests.erasure_layers_orders"

with DAG(
    "erasure_layers_purge",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"subjects_file": "", "report_location": ""},
) as dag_layers_purge:
    IcebergEraseOperator(
        task_id="purge",
        mode="purge",
        tables={LAYERS_TABLE: "customer_id"},
        subjects_file="{{ params.subjects_file }}",
        purge_ahead=timedelta(days=365),
        min_retention=timedelta(0),
        report_location="{{ params.report_location }}",
    )  # orphan_grace: the default hour

#: The table of the string-key test: format v3 (deletion vectors), bucketed by the e-mail it erases.
EMAILS_TABLE = "tests.erasure_emails"

with DAG(
    "erasure_emails",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"subjects_file": ""},
) as dag_emails:
    erase = IcebergEraseOperator(
        task_id="erase", tables={EMAILS_TABLE: "email"}, subjects_file="{{ params.subjects_file }}"
    )
    purge = IcebergEraseOperator(
        task_id="purge",
        mode="purge",
        tables={EMAILS_TABLE: "email"},
        subjects_file="{{ params.subjects_file }}",
        purge_ahead=timedelta(days=365),
        min_retention=timedelta(0),
    )
    erase >> purge
