"""The typed job specs and records, by job kind; :mod:`airflow_iceberg_dml.spec` re-exports them all."""
