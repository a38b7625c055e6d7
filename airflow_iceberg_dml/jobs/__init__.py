"""Code that runs inside the Spark driver. Nothing here imports Airflow."""

from __future__ import annotations
