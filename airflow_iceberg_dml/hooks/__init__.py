"""Hooks: the catalog (pyiceberg) and spark-submit, the two things this package talks to."""

from __future__ import annotations
