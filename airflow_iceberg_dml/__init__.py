"""Row-level DELETE, UPDATE and maintenance of Apache Iceberg tables from Airflow, run on Spark.

Importing this package imports no Airflow and no Spark: the Spark job imports it too.
"""

from __future__ import annotations

__version__ = "0.1.0"
