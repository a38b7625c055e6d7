"""Real servers for the cluster tests: jars from Maven, processes on loopback, and what /proc shows.

Every server listens on 127.0.0.1 only, runs in its own process group (so that stopping it also
stops what it started, such as a worker's executors), and dies with the test session: each one is
started with a parent-death signal, so a killed pytest does not leave servers behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

LOOPBACK = "127.0.0.1"
REPO = Path(__file__).resolve().parents[2]
#: Server jars, fetched once by Maven and kept across runs (``.jars/`` is ignored by git).
SERVER_JARS = REPO / ".jars" / "servers"

_PR_SET_PDEATHSIG = 1


def require_tool(name: str, debian_package: str, purpose: str) -> str:
    """The path of a command the cluster tests need, or a failure that names what to install."""
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(
            f"The cluster tests need '{name}' ({purpose}), which is not on the PATH. "
            f"Install the Debian package {debian_package} (apt-get install {debian_package})."
        )
    return path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def http_status(url: str, timeout_s: float = 2.0) -> int | None:
    """The HTTP status of a GET, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (urllib.error.URLError, OSError):
        return None


# -- jars -------------------------------------------------------------------------------------------


def _maven(arguments: Sequence[str], what: str) -> None:
    mvn = require_tool("mvn", "maven", "it fetches the server jars")
    completed = subprocess.run(
        [mvn, "--batch-mode", "--quiet", *arguments], capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        output = (completed.stdout + completed.stderr).strip()[-3000:]
        raise RuntimeError(f"Maven could not fetch {what} (exit {completed.returncode}):\n{output}")


def fetch_jar(coordinates: str, file_name: str) -> Path:
    """One jar by coordinates (``group:artifact:version[:jar:classifier]``), cached under .jars/servers."""
    target = SERVER_JARS / file_name
    if not target.is_file():
        SERVER_JARS.mkdir(parents=True, exist_ok=True)
        _maven(
            ["dependency:copy", f"-Dartifact={coordinates}", f"-DoutputDirectory={SERVER_JARS}"], coordinates
        )
    if not target.is_file():
        raise RuntimeError(f"Maven reported success but {target} is missing.")
    return target


def fetch_classpath(name: str, dependencies: Sequence[str]) -> Path:
    """A folder holding ``dependencies`` and everything they need at run time, cached by content.

    Each dependency is ``group:artifact:version`` or ``group:artifact:version:classifier``.
    """
    lines = []
    for coordinates in dependencies:
        group, artifact, version, *classifier = coordinates.split(":")
        extra = f"<classifier>{classifier[0]}</classifier>" if classifier else ""
        lines.append(
            f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version>{extra}</dependency>"
        )
    pom = (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        f"  <groupId>airflow-iceberg-dml.tests</groupId><artifactId>{name}</artifactId><version>0</version>\n"
        "  <dependencies>\n" + "\n".join(lines) + "\n  </dependencies>\n</project>\n"
    )
    folder = SERVER_JARS / f"{name}-{hashlib.sha256(pom.encode()).hexdigest()[:12]}"
    complete = folder / ".complete"
    if not complete.is_file():
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "lib").mkdir(parents=True)
        (folder / "pom.xml").write_text(pom)
        _maven(
            [
                "--file",
                str(folder / "pom.xml"),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={folder / 'lib'}",
            ],
            f"the {name} classpath",
        )
        complete.touch()
    return folder / "lib"


# -- processes --------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM it when the test process goes away."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class ServerProcess:
    """One server started by the tests, with its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(
        cls,
        name: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        log_dir: Path,
        cwd: Path | None = None,
    ) -> ServerProcess:
        log_path = log_dir / f"{name}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                list(command),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 (no threads to deadlock before exec)
            )
        return cls(name, process, log_path)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.is_file() else ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_until(self, ready: Callable[[], bool], *, timeout_s: float, what: str) -> None:
        """Poll ``ready`` until true; fail with the server's log when it exits or time runs out."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.process.returncode} before {what}:\n{self.log_tail()}"
                )
            if ready():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no {what} after {timeout_s:.0f}s:\n{self.log_tail()}")
            time.sleep(0.25)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM the server's process group, then SIGKILL what is left of it."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                return
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=timeout_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


# -- /proc ------------------------------------------------------------------------------------------


def process_ids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def read_proc(pid: int, name: str) -> bytes:
    """``/proc/<pid>/<name>`` (cmdline, environ ...), or b"" once the process is gone."""
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""


def command_line(pid: int) -> str:
    return read_proc(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace").strip()


def parent_id(pid: int) -> int | None:
    stat = read_proc(pid, "stat").decode(errors="replace")
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 else None


def children_by_parent() -> dict[int, list[int]]:
    """Every live process, by parent."""
    children: dict[int, list[int]] = {}
    for pid in process_ids():
        parent = parent_id(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    return children


def descendants(roots: Iterable[int], children: Mapping[int, list[int]] | None = None) -> set[int]:
    """Every live process below ``roots`` (the roots excluded)."""
    if children is None:
        children = children_by_parent()
    found: set[int] = set()
    pending = list(roots)
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    except OSError:
        pass
    return inodes


def _decode_address(hex_address: str) -> str:
    """``/proc/net/tcp{,6}`` local address (little-endian words) to text."""
    packed = bytes.fromhex(hex_address)
    words = b"".join(packed[i : i + 4][::-1] for i in range(0, len(packed), 4))
    if len(words) == 4:
        return socket.inet_ntop(socket.AF_INET, words)
    text = socket.inet_ntop(socket.AF_INET6, words)
    return text.removeprefix("::ffff:")


def listening_addresses(pids: Iterable[int]) -> dict[int, set[str]]:
    """The addresses each process listens on (TCP, IPv4 and IPv6), by pid; ``::ffff:`` stripped."""
    inodes = {pid: _socket_inodes(pid) for pid in pids}
    if not any(inodes.values()):
        return {}
    listening: dict[str, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A":  # LISTEN
                listening[fields[9]] = _decode_address(fields[1].split(":")[0])
    result = {}
    for pid, sockets in inodes.items():
        addresses = {listening[inode] for inode in sockets if inode in listening}
        if addresses:
            result[pid] = addresses
    return result
