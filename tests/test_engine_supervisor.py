"""The local engine under its supervisor: the server killed ten times at random points of random changes.

Each round runs a random DELETE or UPDATE through the Spark Connect hook (the path every task takes) and
SIGKILLs the server's JVM a random 0.1 to 3 s after the job's session opened: while it plans, writes or
commits, or after it ended (the server then dies between tasks); in one random round, as the session
opens, before the job's first statement. Every failed try says the engine was lost, where, and how to
check it, never with PySpark's NO_ACTIVE_SESSION (what its client raises after a restart). The task's
retry is played by submitting the same spec (same run key) until it succeeds, as Airflow's retries
would. The supervisor starts the server again each time. Every change is applied exactly once, the table
equals the changes applied in Python to the rows read before, every job after a restart found the new
server with nothing reset (one more kill between tasks: the next task succeeds on its first try), and
the server's own UI counts no session left open. The killed servers could not clean their temporary
files up: they were in the engine's folder, not the system's, and went before the next server started.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from airflow_iceberg_dml import engine
from airflow_iceberg_dml.engine_supervisor import (
    LOG_FILE,
    TMP_DIR,
    WARM_UP_FAILED,
    WARMED,
    read_server,
)
from airflow_iceberg_dml.exceptions import IcebergDmlError
from airflow_iceberg_dml.hooks.spark_connect import IcebergSparkConnectHook
from airflow_iceberg_dml.runtime import keep_jvm_tmp_in
from airflow_iceberg_dml.spec import DmlSpec, JobKind, Outcome, RunKey, SummaryKey
from tests.conftest import NAMESPACE, free_port

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

CONN_ID = "spark_connect_supervised"
KILLS = 10
ROWS = 60_000
RETRY_DEADLINE_S = 300


@pytest.fixture
def supervised(catalog_hook: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A supervised engine of this test's own (the session's shared one must not die)."""
    home = tmp_path / "engine"
    state = engine.start(
        home=home,
        port=free_port(),
        catalog=catalog_hook.catalog_config,
        conf={"spark.master": "local[2]", "spark.sql.shuffle.partitions": "4"},
        warm=False,
    )
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", f"{state.connection_uri}?unreachable_timeout=10")
    yield state, engine.engine_dir(home)
    engine.stop(home)
    assert not engine.is_alive(state.pid)
    left = [path.name for path in (engine.engine_dir(home) / TMP_DIR).iterdir() if path.is_file()]
    assert not left, f"a server that stopped left {left}"


def _table(catalog_hook: Any, name: str) -> pa.Table:
    ids = pa.array(range(1, ROWS + 1), pa.int64())
    rows = pa.table({"id": ids, "amount": pa.compute.multiply(pa.compute.cast(ids, pa.float64()), 0.5)})
    table = catalog_hook.catalog.create_table(
        name, schema=rows.schema, properties={"format-version": "2", "write.delete.mode": "merge-on-read",
                                              "write.update.mode": "merge-on-read"},
    )  # fmt: skip
    for part in range(4):
        table.append(rows.slice(part * ROWS // 4, ROWS // 4))
    return rows


def _change(number: int, chance: random.Random, name: str) -> tuple[DmlSpec, Any]:
    """A random change and what it does to a row dict (None: the row is deleted)."""
    key = RunKey("supervised", "change", f"round-{number}")
    common = {"catalog": "iceberg_default", "table": name, "run_key": key,
              "snapshot_properties": key.summary_properties(1)}  # fmt: skip
    modulus, remainder = chance.choice((7, 11, 13)), chance.randrange(7)
    if chance.random() < 0.5:
        spec = DmlSpec(kind=JobKind.DELETE, where=f"id % {modulus} = {remainder}", **common)
        return spec, lambda row: None if row["id"] % modulus == remainder else row
    step = chance.randrange(1, 5)
    spec = DmlSpec(
        kind=JobKind.UPDATE,
        where=f"id % {modulus} = {remainder}",
        assignments={"amount": f"amount + {step}"},
        **common,
    )
    return (
        spec,
        lambda row: {**row, "amount": row["amount"] + step} if row["id"] % modulus == remainder else row,
    )


def _says_the_engine_was_lost(error: IcebergDmlError, state: Any, where: str) -> None:
    """A failed try's message names the server and what to run, in the package's words."""
    message = str(error)
    assert f"{state.host}:{state.port}" in message, (where, message)
    assert "make engine-status" in message or "engine start" in message, (where, message)
    for unhelpful in ("NO_ACTIVE_SESSION", "RPC that terminated"):  # PySpark's, gRPC's repr
        assert unhelpful not in message + str(error.__cause__), (where, message, error.__cause__)


def _until_it_commits(
    spec: DmlSpec, catalog_hook: Any, on_started: Any, failures: list[str], where: str, state: Any
) -> Outcome:
    """Submit ``spec`` as a task and its retries would: again after every retryable failure."""
    deadline = time.monotonic() + RETRY_DEADLINE_S
    while True:
        try:
            record = IcebergSparkConnectHook(CONN_ID).submit(
                spec, catalog_hook.catalog_config, "sup", on_started
            )
            return record.outcome
        except IcebergDmlError as error:
            failures.append(f"{where}: {type(error).__name__}")
            _says_the_engine_was_lost(error, state, where)
            if not error.retryable:
                pytest.fail(f"{where}: not retryable: {error!r}")
            if time.monotonic() > deadline:
                pytest.fail(f"{where}: did not commit within {RETRY_DEADLINE_S} s: {failures}")
            time.sleep(1)
        on_started = None  # one kill per round; the retries run undisturbed


def _wait_for_restart(state: Any, folder: Path, restarts: int) -> None:
    deadline = time.monotonic() + RETRY_DEADLINE_S
    while True:
        server = read_server(folder)
        if server is not None and server.restarts == restarts and engine.listens(server.pid, state.port):
            return
        assert time.monotonic() < deadline, f"the supervisor did not restart the server ({server})"
        time.sleep(0.5)


def _warm_up_ended(state: Any, folder: Path) -> None:
    """The supervisor's warm-up of the server that serves now has ended (it runs beside the jobs)."""
    pid = engine.server_pid(state, folder)
    log = folder / LOG_FILE
    deadline = time.monotonic() + RETRY_DEADLINE_S
    while not any(f"{said} pid {pid}" in log.read_text() for said in (WARMED, WARM_UP_FAILED)):
        assert time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.5)


def _open_sessions(state: Any) -> list[str]:
    """The sessions the server's web UI lists as not closed, each with what it ran (to tell whose it is)."""
    import html
    import re
    import urllib.request

    base = f"http://{state.host}:{state.ui_port}/connect"
    with urllib.request.urlopen(f"{base}/?sessionstat.pageSize=1000", timeout=5) as page:
        text = page.read().decode("utf-8", "replace")
    rows = re.findall(r"session/\?id=([0-9a-f-]+).*?</td>\s*<td>([^<]*)</td>\s*<td>([^<]*)</td>", text, re.S)
    described = []
    for session_id, started, finished in rows:
        if finished.strip():
            continue
        with urllib.request.urlopen(f"{base}/session/?id={session_id}", timeout=5) as page:
            statements = re.sub(r"<[^>]+>|\s+", " ", html.unescape(page.read().decode("utf-8", "replace")))
        described.append(f"{session_id} started {started.strip()}: {statements[-1500:]}")
    return described


def _no_session_left(state: Any, folder: Path) -> None:
    """The server's own count of live sessions: every job's session was released (the warm-up's too)."""
    _warm_up_ended(state, folder)
    for _ in range(30):
        sessions = engine.live_sessions(state)
        if sessions is not None and sessions[0] == 0:
            break
        time.sleep(1)
    assert sessions == (0, 0), (sessions, _open_sessions(state), (folder / LOG_FILE).read_text()[-2000:])
    running, text = engine.describe(state, folder)
    assert running
    assert f"restarts: {KILLS + 1}" in text
    assert "live sessions 0" in text


def _kill_after(
    delay: float, state: Any, folder: Path, killed: list[int], killers: list[threading.Thread], _: Any
) -> None:
    """SIGKILL the server ``delay`` seconds from now (as ``on_started``); for 0, dead on return."""

    def kill() -> None:
        time.sleep(delay)
        pid = engine.server_pid(state, folder)
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    killers.append(threading.Thread(target=kill, daemon=True))
    killers[-1].start()
    if not delay:  # dead before the hook goes on
        killers[-1].join()
        deadline = time.monotonic() + 10
        while engine.is_alive(killed[-1]) and time.monotonic() < deadline:
            time.sleep(0.05)


@pytest.mark.slow
def test_ten_kills_at_random_points_every_change_applied_once(catalog_hook: Any, supervised: Any) -> None:
    state, folder = supervised
    seed = int(os.environ.get("SUPERVISOR_TEST_SEED", time.time_ns() % 100_000))
    chance = random.Random(seed)
    name = f"{NAMESPACE}.supervised_{seed}"
    rows = {row["id"]: row for row in _table(catalog_hook, name).to_pylist()}
    failures: list[str] = []
    killed: list[int] = []
    at_once = chance.randrange(1, KILLS + 1)  # the round whose server dies before the job's first statement

    for number in range(1, KILLS + 1):
        spec, apply = _change(number, chance, name)
        delay = 0.0 if number == at_once else chance.uniform(0.1, 3.0)

        killers: list[threading.Thread] = []
        kill_later = partial(_kill_after, delay, state, folder, killed, killers)
        where = f"seed {seed}, round {number}"
        outcome = _until_it_commits(spec, catalog_hook, kill_later, failures, where, state)
        # A change that matches nothing (an earlier round deleted its rows) commits nothing.
        matched = any(apply(row) != row for row in rows.values())
        expected = (Outcome.COMMITTED, Outcome.REPLAYED) if matched else (Outcome.NOOP,)
        assert outcome in expected, (seed, number, outcome)
        rows = {key: changed for key, row in rows.items() if (changed := apply(row)) is not None}
        for killer in killers:  # a job that ended before its kill: the server dies between tasks
            killer.join()
        _wait_for_restart(state, folder, number)

    # Every kill was followed by a restart, and the server that serves now was never reset by us.
    server = read_server(folder)
    assert server is not None
    assert len(set(killed)) == KILLS, (seed, killed)
    assert server.restarts == KILLS, (seed, failures)
    assert engine.is_alive(state.pid)

    # Killed between tasks: once it is back, the next task succeeds on its first try, with no action.
    os.kill(engine.server_pid(state, folder), signal.SIGKILL)
    _wait_for_restart(state, folder, KILLS + 1)
    spec, apply = _change(KILLS + 1, chance, name)
    matched = any(apply(row) != row for row in rows.values())
    record = IcebergSparkConnectHook(CONN_ID).submit(spec, catalog_hook.catalog_config, "sup")
    assert record.outcome is (Outcome.COMMITTED if matched else Outcome.NOOP)
    rows = {key: changed for key, row in rows.items() if (changed := apply(row)) is not None}

    table = catalog_hook.load_table(name)
    actual = {row["id"]: row for row in table.scan().to_arrow().to_pylist()}
    assert actual == rows, f"seed {seed}: {failures}"
    commits = Counter(
        summary.get(SummaryKey.RUN_ID)
        for snapshot in table.snapshots()
        if (summary := snapshot.summary.additional_properties if snapshot.summary else {}).get(
            SummaryKey.DAG_ID
        )
        == "supervised"
    )
    assert set(commits.values()) <= {1}, (seed, commits)
    _no_session_left(state, folder)
    # Each server extracts the SQLite driver's native library (1 MB) to its temporary folder; a killed
    # one leaves it there. Twelve servers ran, one is left: its own.
    libraries = sorted(path.name for path in (folder / TMP_DIR).glob("sqlite-*.so"))
    assert len(libraries) == 1, libraries
    print(f"seed {seed}; failed tries: {failures}")


def test_the_servers_temporary_folder_gives_way_to_the_users_own(tmp_path: Path) -> None:
    environment = {"SPARK_SUBMIT_OPTS": "-Xss4m"}
    keep_jvm_tmp_in(environment, tmp_path / "engine tmp")
    assert environment["SPARK_SUBMIT_OPTS"] == f'-Xss4m "-Djava.io.tmpdir={tmp_path}/engine tmp"'
    assert (tmp_path / "engine tmp").is_dir()
    own = {"SPARK_SUBMIT_OPTS": "-Djava.io.tmpdir=/scratch"}
    keep_jvm_tmp_in(own, tmp_path / "unused")
    assert own == {"SPARK_SUBMIT_OPTS": "-Djava.io.tmpdir=/scratch"}
    assert not (tmp_path / "unused").exists()
