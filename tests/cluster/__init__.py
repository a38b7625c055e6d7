"""Tests against real servers on loopback: Spark standalone, Iceberg REST catalog, S3."""

from __future__ import annotations
