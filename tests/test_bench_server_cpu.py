"""The split of the warm engine's CPU by the JVM's threads (bench/cpu_use.py), which the grouped-job and
backfill benchmarks report."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.cpu_use import SERVER_PARTS, ThreadCpu, server_parts, thread_cpu_seconds


def test_a_thread_born_between_readings_counts_from_zero_and_one_gone_is_the_drivers() -> None:
    before = {1: ("tasks", 10.0), 2: ("jit", 5.0), 3: ("driver", 1.0), 4: ("tasks", 2.0)}
    # thread 4 (a task thread) is gone; thread 5 (a compiler) was born; thread 3 spent 0.5 s
    after = {1: ("tasks", 10.25), 2: ("jit", 5.5), 3: ("driver", 1.5), 5: ("jit", 0.5)}
    parts = server_parts(before, after, total=2.0)
    assert set(parts) == set(SERVER_PARTS)
    assert parts["tasks"] == pytest.approx(0.25)
    assert parts["jit"] == pytest.approx(1.0)
    assert parts["gc"] == 0.0
    assert parts["driver"] == pytest.approx(0.75)  # the rest of the total, whatever the gone threads spent
    assert sum(parts.values()) == pytest.approx(2.0)


def test_threads_of_a_live_process_are_read_by_name_and_time() -> None:
    spent, read = threading.Event(), threading.Event()

    def burn() -> None:
        # named as the JVM names its executor threads (Linux keeps 15 characters)
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text("Executor task launch worker")
        deadline = time.thread_time() + 0.3
        while time.thread_time() < deadline:
            pass
        spent.set()
        read.wait(30)  # alive until read

    before = thread_cpu_seconds(os.getpid())
    worker = threading.Thread(target=burn)
    worker.start()
    spent.wait(30)
    after = thread_cpu_seconds(os.getpid())
    read.set()
    worker.join()
    # other threads of this process (a SparkSession's, under a test worker) may be born meanwhile
    assert worker.native_id not in before
    kind, seconds = after[worker.native_id]
    assert kind == "tasks"
    assert seconds >= 0.2
    assert after[os.getpid()][0] == "driver"  # the main thread: none of the named kinds


#: A process that, once told to on its stdin, burns 0.3 s of CPU on a thread named as the JVM names a
#: compiler thread, says so when that thread has ended, and lives on until killed.
RETIRED_COMPILER = """
import sys, threading, time
def burn():
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
        comm.write("C2 CompilerThread3")
    deadline = time.thread_time() + 0.3
    while time.thread_time() < deadline:
        pass
sys.stdin.readline()
compiler = threading.Thread(target=burn)
compiler.start()
compiler.join()
print(compiler.native_id, flush=True)
time.sleep(60)
"""


def test_a_thread_that_ended_between_the_start_and_the_stop_keeps_what_it_spent() -> None:
    # The JVM retires compiler threads that have nothing to compile; what they spent is still the JIT's.
    process = subprocess.Popen(
        [sys.executable, "-c", RETIRED_COMPILER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        threads = ThreadCpu(process.pid, every_s=0.05)
        assert process.stdin
        assert process.stdout
        process.stdin.write("go\n")
        process.stdin.flush()
        compiler = int(process.stdout.readline())
        parts = threads.stop(total=10.0)
        assert compiler not in thread_cpu_seconds(process.pid)  # gone at the stop's own reading
    finally:
        process.kill()
        process.wait()
    assert parts["jit"] >= 0.2
    assert (parts["tasks"], parts["gc"]) == (0.0, 0.0)  # the process's other threads are the driver's
    assert parts["driver"] == pytest.approx(10.0 - parts["jit"])
