"""Airflow operators for row-level changes on Iceberg tables."""

from __future__ import annotations
