"""An Airflow deployment of one's own, as production runs it: PostgreSQL as the metadata database
(started on loopback), an API server, a scheduler, a DAG processor and LocalExecutor, each its own
process. Used by ``tests/test_backfill.py`` and ``bench/bench_backfill.py``.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

#: How each line of an Airflow log begins (a traceback's lines do not).
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")


class DeploymentError(RuntimeError):
    """An Airflow command failed, a process exited, or a wait timed out (the logs are named)."""


def free_port() -> int:
    """A TCP port nothing listens on, on loopback."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _postgres_bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))), None)
    if not found:
        raise DeploymentError(
            f"PostgreSQL server binaries ({name}) not found: install Debian's 'postgresql' package."
        )
    return str(found)


def libpq_dsn(uri: str) -> str:
    """A SQLAlchemy ``postgresql+psycopg2://`` URI as psycopg2 takes it."""
    return uri.replace("postgresql+psycopg2://", "postgresql://")


@contextmanager
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server on 127.0.0.1, run as the 'postgres' user when run as root; yields the
    SQLAlchemy URI of its ``postgres`` database (user ``iceberg``)."""
    folder = Path(tempfile.mkdtemp(prefix="iceberg-dml-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
        # The server's user must pass through the private temp folders (search, not list).
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


def create_database(server_uri: str, name: str) -> str:
    """Create database ``name`` on the server of ``server_uri``; its URI."""
    import psycopg2

    with closing(psycopg2.connect(libpq_dsn(server_uri))) as db:
        db.autocommit = True
        db.cursor().execute(f'CREATE DATABASE "{name}"')
    return server_uri.rsplit("/", 1)[0] + f"/{name}"


class AirflowDeployment:
    """Its own home, metadata database and processes; ``dag_files`` alone in its DAGs folder.

    :param parallelism: Airflow's ``[core] parallelism`` (task slots of the LocalExecutor).
    :param env: More environment for every Airflow process (connections, for example).
    """

    def __init__(
        self,
        home: Path,
        database_uri: str,
        dag_files: list[Path],
        *,
        parallelism: int = 8,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.home = home
        self.database_uri = database_uri
        self.processes: list[subprocess.Popen[bytes]] = []
        api_port = free_port()
        dags = home / "dags"
        dags.mkdir(parents=True)
        for dag_file in dag_files:
            shutil.copy(dag_file, dags)  # as written
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_uri,
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(parallelism),
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(2 * parallelism),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(32).hex(),  # 64 bytes: what SHA-512 signing asks for
            **(env or {}),
        }
        self.env.pop("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", None)  # the default: the dags folder

    def run(self, *args: str) -> str:
        """``airflow <args>``; its output, or DeploymentError with it."""
        done = subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise DeploymentError(f"airflow {' '.join(args)}:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def start(self) -> None:
        """Migrate the database, then start the API server, the scheduler and the DAG processor."""
        self.run("db", "migrate")
        for command in ("api-server", "scheduler", "dag-processor"):
            log = (self.home / f"{command}.log").open("wb")
            self.processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "airflow", command],
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def pids(self) -> list[int]:
        """The process ids of the API server, the scheduler and the DAG processor (:meth:`start`)."""
        return [process.pid for process in self.processes]

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` on the metadata database."""
        import psycopg2

        with closing(psycopg2.connect(libpq_dsn(self.database_uri))) as db, db.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def failures(self, dag_id: str) -> str:
        """Why runs of ``dag_id`` did not succeed: each unsuccessful task try's last warnings and errors
        (its own log) and the scheduler's lines naming its run; empty if every run succeeded."""
        from bench.task_phases import failure_lines

        instances = self.query(
            "SELECT run_id, task_id, try_number, start_date, end_date, state FROM task_instance"
            " WHERE dag_id = %s",
            dag_id,
        )
        failed = [i for i in instances if i[5] != "success"]
        if not failed:
            return ""
        said = failure_lines(self.home / "logs", dag_id, failed)
        scheduler = (self.home / "scheduler.log").read_text(errors="replace").splitlines()
        for run_id in sorted({run_id for run_id, *_ in failed}):
            said += [line[:400] for line in scheduler if run_id in line][-8:]
        # The API server fails a task whose state update raised (its traceback's last lines).
        api = (self.home / "api-server.log").read_text(errors="replace").splitlines()
        for at, line in enumerate(api):
            if "Error updating Task Instance state" in line:
                traceback = list(itertools.takewhile(lambda text: not LOG_LINE.match(text), api[at + 1 :]))
                said += [line[:400], *(text[:400] for text in traceback[-6:])]
        return "\n".join(said)

    def wait_for(self, what: str, ready: Callable[[], object], timeout: float) -> None:
        """Until ``ready()`` is true; DeploymentError if a process exits or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while not ready():
            for process in self.processes:
                if process.poll() is not None:
                    raise DeploymentError(f"an Airflow process exited ({process.args!r}): see {self.home}")
            if time.monotonic() > deadline:
                raise DeploymentError(f"Timed out waiting for {what}; logs in {self.home}")
            time.sleep(2)

    def wait_for_dag(self, dag_id: str, timeout: float = 300) -> None:
        self.wait_for(
            f"the DAG processor to serialize {dag_id}",
            lambda: self.query("SELECT 1 FROM serialized_dag WHERE dag_id = %s", dag_id),
            timeout,
        )

    def wait_for_runs(self, dag_id: str, count: int, timeout: float) -> None:
        def finished() -> bool:
            states = self.query("SELECT state FROM dag_run WHERE dag_id = %s", dag_id)
            return len(states) == count and all(state in ("success", "failed") for (state,) in states)

        self.wait_for(f"{count} runs of {dag_id} to finish", finished, timeout)


def peak_overlap(intervals: list[tuple[Any, Any]]) -> int:
    """The most intervals (start, end) open at one moment."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    open_now = peak = 0
    for _, step in edges:
        open_now += step
        peak = max(peak, open_now)
    return peak
