"""What every benchmark shares: timing, statistics, tables, results files, machine and versions.

Absolute times are this machine's; what a benchmark reports as its finding is a ratio of two
medians measured side by side in the same run, with the two sides interleaved so that both see
the same machine load.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

T = TypeVar("T")
K = TypeVar("K")

REPO = Path(__file__).resolve().parents[1]
#: Results of full runs, one JSON file per benchmark (git-ignored).
RESULTS_DIR = REPO / "bench" / "results"
#: Results of ``--quick`` smoke runs, kept apart so that they never stand in for full runs.
QUICK_RESULTS_DIR = RESULTS_DIR / "quick"


def configure_environment() -> None:
    """Default the state folders to the ones ``make bench`` exports, so ``python -m bench`` matches it.

    Call before Airflow is imported. Values already in the environment win.
    """
    defaults = {
        "AIRFLOW_HOME": REPO / ".airflow",
        "AIRFLOW_ICEBERG_DML_HOME": REPO / ".iceberg",
        "AIRFLOW_ICEBERG_DML_JAR_CACHE": REPO / ".jars",
        "AIRFLOW__CORE__DAGS_FOLDER": REPO / "dags",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, str(value))


# -- timing ----------------------------------------------------------------------------------------


def timed(action: Callable[[], T]) -> tuple[float, T]:
    """Run ``action`` once; return its wall time in seconds and its result."""
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def median(values: Sequence[float]) -> float:
    """The median; a benchmark's figure is the median of its runs, never a single run."""
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


def ratio(value: float, baseline: float) -> float:
    """``value / baseline``: above 1 when ``value`` is slower (or bigger) than the baseline."""
    return value / baseline if baseline else float("inf")


@dataclass
class Samples:
    """Repeated measurements of one quantity, with their median."""

    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(value)

    @property
    def median(self) -> float:
        return median(self.values)

    def as_json(self) -> dict[str, Any]:
        return {"median": self.median, "runs": self.values}


def interleaved(runs: int, sides: Sequence[T]) -> Iterator[tuple[int, T]]:
    """``(run, side)`` pairs, the order of the sides rotated each run so that none always goes first."""
    for run in range(runs):
        shift = run % len(sides)
        for side in [*sides[shift:], *sides[:shift]]:
            yield run, side


def timed_interleaved(actions: Mapping[K, Callable[[], object]], runs: int) -> dict[K, Samples]:
    """Each action timed ``runs`` times, all interleaved so that each sees the same machine load; the
    garbage of the previous call collected first, so that a cheap call does not pay for an expensive one's."""
    samples = {key: Samples() for key in actions}
    for _, key in interleaved(runs, list(actions)):
        gc.collect()
        samples[key].add(timed(actions[key])[0])
    return samples


# -- formatting --------------------------------------------------------------------------------------


def process_tree_cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of process ``pid`` and its live descendants (a supervised engine's
    server, and the JVM under it); a process gone meanwhile counts nothing."""
    import psutil

    total = 0.0
    with suppress(psutil.Error):
        root = psutil.Process(pid)
        for process in [root, *root.children(recursive=True)]:
            with suppress(psutil.Error):
                times = process.cpu_times()
                total += times.user + times.system
    return total


def format_seconds(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def format_ratio(value: float) -> str:
    return f"{value:.2f}x"


def format_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def format_percent(fraction: float) -> str:
    return f"{fraction * 100:.2g}%" if fraction < 0.01 else f"{fraction * 100:.0f}%"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub Markdown table; the first column is left-aligned, the others right-aligned."""
    align = [":--", *["--:"] * (len(headers) - 1)]
    lines = [headers, align, *rows]
    return "\n".join("| " + " | ".join(str(cell) for cell in line) + " |" for line in lines)


def ratio_table(
    title: str,
    medians: Mapping[str, Mapping[str, float]],
    baseline: str,
    unit: Callable[[float], str] = format_seconds,
) -> str:
    """Rows of medians side by side, then each column's ratio to the ``baseline`` column.

    :param title: Header of the first column (what a row is).
    :param medians: Row label -> column label -> median. Every row has the same columns.
    :param baseline: The column the ratios divide by (the ratios say how much slower the others are).
    """
    columns = list(next(iter(medians.values())))
    others = [column for column in columns if column != baseline]
    headers = [title, *columns, *(f"{other} / {baseline}" for other in others)]
    rows = [
        [
            label,
            *(unit(values[column]) for column in columns),
            *(format_ratio(ratio(values[other], values[baseline])) for other in others),
        ]
        for label, values in medians.items()
    ]
    return markdown_table(headers, rows)


def log(message: str) -> None:
    """A progress line of the benchmark itself (Spark and Airflow print their own)."""
    print(f"bench | {message}", flush=True)


# -- results -------------------------------------------------------------------------------------------


def results_dir(quick: bool) -> Path:
    return QUICK_RESULTS_DIR if quick else RESULTS_DIR


def write_results(name: str, payload: Mapping[str, Any], *, quick: bool) -> Path:
    """Write ``bench/results[/quick]/<name>.json`` with the machine and versions it was measured on."""
    folder = results_dir(quick)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    document = {
        "benchmark": name,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "machine": machine_info(),
        **payload,
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    log(f"results: {path.relative_to(REPO)}")
    return path


def read_results(name: str, *, quick: bool = False) -> dict[str, Any] | None:
    """The results a benchmark wrote last, or None when it has not run."""
    path = results_dir(quick) / f"{name}.json"
    if not path.is_file():
        return None
    document: dict[str, Any] = json.loads(path.read_text())
    return document


# -- machine and versions --------------------------------------------------------------------------------


def _command_output(command: list[str]) -> str:
    if shutil.which(command[0]) is None:
        return ""
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    return (completed.stdout + completed.stderr).strip()


def java_version() -> str:
    """The Java that spark-submit runs (``$JAVA_HOME/bin/java``, else ``java`` on the PATH)."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else "java"
    match = re.search(r'version "([^"]+)"', _command_output([java, "-version"]))
    return match.group(1) if match else "unknown"


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _distribution_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_info() -> dict[str, Any]:
    """CPU, memory and the versions of everything on the measured path."""
    import psutil

    from airflow_iceberg_dml import runtime

    tpchgen = _command_output(["tpchgen-cli", "--version"]) or _command_output(
        [str(Path(sys.executable).parent / "tpchgen-cli"), "--version"]
    )
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_bytes": psutil.virtual_memory().total,
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": java_version(),
        "spark": _distribution_version("pyspark"),
        "iceberg": runtime.ICEBERG_VERSION,
        "pyiceberg": _distribution_version("pyiceberg"),
        "pyarrow": _distribution_version("pyarrow"),
        "airflow": _distribution_version("apache-airflow"),
        "airflow_iceberg_dml": _distribution_version("airflow-iceberg-dml"),
        "tpchgen_cli": tpchgen.split()[-1] if tpchgen else "not installed",
    }


def commit_sizes(table: Any, dag_id: str) -> list[int]:
    """How many changes each commit of ``dag_id``'s tasks on ``table`` applied (more than one: a group
    commit; not the claiming change when it matched no row), oldest first."""
    from airflow_iceberg_dml.spec import SummaryKey
    from airflow_iceberg_dml.specs.common import applied_changes

    summaries = [s.summary.additional_properties for s in table.metadata.snapshots if s.summary]
    return [max(applied_changes(s), 1) for s in summaries if s.get(SummaryKey.DAG_ID) == dag_id]
