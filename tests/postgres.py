"""A PostgreSQL server of the test's own on loopback (Debian's ``postgresql`` package's binaries)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator


def _postgres_bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))), None)
    if not found:
        pytest.fail(f"PostgreSQL server binaries ({name}) not found: install Debian's 'postgresql' package.")
    return str(found)


@contextmanager
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server on 127.0.0.1, run as the 'postgres' user when the tests run as root; yields
    the SQLAlchemy URI of its ``postgres`` database (user ``iceberg``)."""
    folder = Path(tempfile.mkdtemp(prefix="iceberg-dml-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
        # The server's user must pass through the session's private temp folders (search, not list).
        for parent in folder.parents:
            if parent.stat().st_uid == 0 and not parent.stat().st_mode & 0o001:
                parent.chmod(parent.stat().st_mode | 0o011)
    (folder / "pw").write_text("iceberg-pw\n")
    if as_user:
        shutil.chown(folder / "pw", "postgres")
    data, port = folder / "data", free_port()
    subprocess.run(
        [*as_user, _postgres_bin("initdb"), "-D", str(data), "-U", "iceberg", "--pwfile", str(folder / "pw"),
         "--auth=scram-sha-256"],
        check=True, capture_output=True,
    )  # fmt: skip
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections=200"
    subprocess.run(
        [*as_user, _postgres_bin("pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w",
         "start"],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield f"postgresql+psycopg2://iceberg:iceberg-pw@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, _postgres_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], check=False
        )
        shutil.rmtree(folder, ignore_errors=True)
