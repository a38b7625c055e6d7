"""Watching a spark-submit from outside: when each output line arrives, and the peak memory.

:func:`trace_hook_submits` observes the spark-submit runs that
:class:`~airflow_iceberg_dml.hooks.spark_submit.IcebergSparkSubmitHook` makes (the operators'
path), without changing what they do; :func:`run_traced` runs any other command the same way.
The job's own progress lines (``iceberg-dml | ...``) then say how long each phase took.
"""

from __future__ import annotations

import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator


class MemoryPoller(threading.Thread):
    """Samples the resident memory of a process and its descendants until stopped; keeps the peaks.

    :param pid: The root process (spark-submit execs the driver JVM, which starts the Python driver).
    :param interval_s: Time between samples.
    """

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        super().__init__(name=f"rss-{pid}", daemon=True)
        self.pid = pid
        self.interval_s = interval_s
        #: Peak of the summed RSS of the whole process tree, in bytes.
        self.peak_tree_rss = 0
        #: Peak RSS of the root process alone (the driver JVM), in bytes.
        self.peak_root_rss = 0
        self._stopped = threading.Event()

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._stopped.is_set():
            try:
                root_rss = root.memory_info().rss
                tree_rss = root_rss
                for child in root.children(recursive=True):
                    try:
                        tree_rss += child.memory_info().rss
                    except psutil.NoSuchProcess:
                        continue
            except psutil.NoSuchProcess:
                return
            self.peak_root_rss = max(self.peak_root_rss, root_rss)
            self.peak_tree_rss = max(self.peak_tree_rss, tree_rss)
            self._stopped.wait(self.interval_s)

    def stop(self) -> None:
        self._stopped.set()
        self.join()


@dataclass
class ProcessTrace:
    """One spark-submit process: when it started, when each output line arrived, when output ended."""

    started: float
    lines: list[tuple[float, str]] = field(default_factory=list)
    ended: float = 0.0
    peak_tree_rss: int = 0
    peak_root_rss: int = 0

    def line_time(self, prefix: str) -> float:
        """When the first line starting with ``prefix`` arrived (``time.perf_counter`` clock)."""
        for stamp, line in self.lines:
            if line.startswith(prefix):
                return stamp
        raise LookupError(f"no output line starts with {prefix!r}; the job's log lines have changed")


def follow(pid: int, lines: Iterable[Any], trace: ProcessTrace, poll_memory: bool) -> Iterator[Any]:
    """Pass ``lines`` through, stamping each in ``trace``; sample memory meanwhile if asked."""
    poller = MemoryPoller(pid) if poll_memory else None
    if poller:
        poller.start()
    try:
        for line in lines:
            trace.lines.append((time.perf_counter(), str(line).rstrip()))
            yield line
    finally:
        trace.ended = time.perf_counter()
        if poller:
            poller.stop()
            trace.peak_tree_rss, trace.peak_root_rss = poller.peak_tree_rss, poller.peak_root_rss


@dataclass
class SubmitTrace:
    """One ``IcebergSparkSubmitHook.submit`` call and the spark-submit process it ran."""

    call: Call
    process: ProcessTrace


@contextmanager
def trace_hook_submits(poll_memory: bool = False) -> Iterator[list[SubmitTrace]]:
    """Record every spark-submit the package's hook makes inside the block, in order.

    Wraps ``IcebergSparkSubmitHook.submit`` (start and end) and the line reader of the provider's
    ``SparkSubmitHook`` that it drives (process start, output lines, memory); behaviour is unchanged.
    """
    from airflow_iceberg_dml.hooks import spark_submit

    processes: list[ProcessTrace] = []
    routed_hook = spark_submit._RoutedSparkSubmitHook
    read_log = routed_hook._process_spark_submit_log

    def traced_read_log(self: Any, itr: Iterator[Any]) -> None:
        processes.append(ProcessTrace(started=time.perf_counter()))
        read_log(self, follow(self._submit_sp.pid, itr, processes[-1], poll_memory))

    traces: list[SubmitTrace] = []
    routed_hook._process_spark_submit_log = traced_read_log  # type: ignore[method-assign]
    try:
        with record_calls(spark_submit.IcebergSparkSubmitHook, "submit") as calls:
            yield traces
            traces.extend(SubmitTrace(call, process) for call, process in zip(calls, processes, strict=True))
    finally:
        routed_hook._process_spark_submit_log = read_log  # type: ignore[method-assign]


def run_traced(command: list[str], poll_memory: bool = False) -> ProcessTrace:
    """Run ``command`` (stdout and stderr merged) to the end; raise if it fails."""
    trace = ProcessTrace(started=time.perf_counter())
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as process:
        assert process.stdout is not None
        output = list(follow(process.pid, process.stdout, trace, poll_memory))
        returncode = process.wait()
    trace.ended = time.perf_counter()
    if returncode != 0:
        raise subprocess.CalledProcessError(returncode, command, "".join(output[-40:]))
    return trace


@dataclass
class Call:
    """When one call started and ended (``time.perf_counter`` clock)."""

    started: float
    ended: float = 0.0


@contextmanager
def record_calls(owner: object, attribute: str) -> Iterator[list[Call]]:
    """Record when each call of ``owner.attribute`` (a method, or a module's function) starts and ends
    inside the block."""
    original: Callable[..., Any] = getattr(owner, attribute)
    calls: list[Call] = []

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(Call(started=time.perf_counter()))
        try:
            return original(*args, **kwargs)
        finally:
            calls[-1].ended = time.perf_counter()

    inherited = attribute not in vars(owner)
    setattr(owner, attribute, recorded)
    try:
        yield calls
    finally:
        if inherited:
            # Back to inheriting it: set on the subclass, a later patch of the base class (another
            # benchmark of the same run) would no longer reach the subclass's calls.
            delattr(owner, attribute)
        else:
            setattr(owner, attribute, original)


@contextmanager
def stamp_job_lines() -> Iterator[list[tuple[float, str]]]:
    """When each of a job's own lines is logged inside the block (the Connect hook hands them to the
    task log through ``jobs.runner.log_to``; the wrapper stamps each on its way, behaviour unchanged)."""
    from airflow_iceberg_dml.jobs import runner

    original = runner.log_to
    lines: list[tuple[float, str]] = []

    @contextmanager
    def stamped_log_to(sink: Callable[[str], None]) -> Iterator[None]:
        def stamped(line: str) -> None:
            lines.append((time.perf_counter(), line))
            sink(line)

        with original(stamped):
            yield

    runner.log_to = stamped_log_to
    try:
        yield lines
    finally:
        runner.log_to = original
