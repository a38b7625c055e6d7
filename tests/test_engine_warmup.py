"""The engine's warm-up: its rounds commit on a scratch table of its own, which it drops with its files,
and the users' catalog is left as it was."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from airflow_iceberg_dml import engine
from airflow_iceberg_dml.engine_warmup import WARM_ROUNDS, warm_up
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


def test_the_engine_warms_up_with_8_rounds_unless_told(capsys: pytest.CaptureFixture[str]) -> None:
    """``engine start --warm-rounds N``: the default is 8, for ``start`` called from Python too."""
    assert WARM_ROUNDS == 8
    assert inspect.signature(engine.start).parameters["warm_rounds"].default == WARM_ROUNDS
    with pytest.raises(SystemExit):
        engine.main(["start", "--help"])
    assert re.search(r"--warm-rounds N\s+rounds of .* \(default\s+8;", capsys.readouterr().out, re.DOTALL)
