"""Triggers: poll Iceberg catalogs asynchronously, for deferred sensors and asset watchers."""

from __future__ import annotations
