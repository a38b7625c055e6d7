"""Sensors: wait for Iceberg commits."""

from __future__ import annotations
