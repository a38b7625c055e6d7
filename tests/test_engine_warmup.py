"""The engine's warm-up: its rounds commit on a scratch table of its own, which it drops with its files,
and the users' catalog is left as it was."""

from __future__ import annotations

from typing import Any

from airflow_iceberg_dml import engine
from airflow_iceberg_dml.engine_warmup import warm_up
from tests.conftest import SESSION_TMP


def _listing(catalog_hook: Any) -> set[tuple[str, ...]]:
    """Every namespace and every table of the users' catalog."""
    catalog = catalog_hook.catalog
    namespaces = catalog.list_namespaces()
    tables = {tuple(table) for namespace in namespaces for table in catalog.list_tables(namespace)}
    return tables | {tuple(namespace) for namespace in namespaces}


def test_warm_up_rounds_commit_on_a_scratch_table_that_is_dropped_with_its_files(
    connect_server: Any, catalog_hook: Any
) -> None:
    folder = engine.engine_dir(SESSION_TMP / "connect-engine")  # the session server's, as conftest starts it
    before = _listing(catalog_hook)

    done = warm_up(connect_server, folder, rounds=3)

    # Its first write, the DELETE and the UPDATE, then each round's MERGE and DELETE: the head's ancestry,
    # read from Iceberg's refs and snapshots tables before the drop.
    assert (done.rounds, done.commits) == (3, 3 + 2 * 3)
    # Each round runs the package's own jobs, as tasks run them: the grouped MERGE and the DELETE commit,
    # the DELETE that matches nothing commits nothing.
    assert done.outcomes == {"committed": 2 * 3, "noop": 3}
    assert [path for path in (folder / "warmup").rglob("*") if path.is_file()] == []
    assert _listing(catalog_hook) == before
