"""The backfill benchmark's split of the machine's CPU by the deployment's processes (bench/cpu_use.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from bench.cpu_use import ROLES, CpuUse, per_change

# A scheduler that, once told, starts a worker that runs a task burning CPU, waits for it, and stays.
TASK = "import time\ndeadline = time.process_time() + 0.4\nwhile time.process_time() < deadline: pass\n"
WORKER = textwrap.dedent(f"""
    import subprocess, sys, time
    subprocess.run([sys.executable, "-c", {TASK!r}], check=True)
    print("task ended", flush=True)
    time.sleep(60)
""")
SCHEDULER = textwrap.dedent(f"""
    import subprocess, sys
    sys.stdin.readline()
    worker = subprocess.Popen([sys.executable, "-c", {WORKER!r}], stdout=sys.stdout)
    worker.wait()
""")


def test_an_ended_task_counts_for_the_tasks_not_its_worker_or_the_scheduler() -> None:
    scheduler = subprocess.Popen(
        [sys.executable, "-c", SCHEDULER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert scheduler.stdin is not None
        assert scheduler.stdout is not None
        cpu = CpuUse({"scheduler": scheduler.pid, "api_server": None})
        scheduler.stdin.write("go\n")
        scheduler.stdin.flush()
        assert scheduler.stdout.readline().strip() == "task ended"
        used = cpu.stop()
    finally:
        scheduler.kill()
        scheduler.wait()
    seconds = used["cpu_seconds"]
    assert seconds["tasks"] >= 0.35  # the task's burn, read from its worker's ended children
    assert seconds["supervisors"] < seconds["tasks"]
    assert seconds["scheduler"] < 0.2
    assert seconds["api_server"] == 0.0
    assert seconds["machine"] >= seconds["tasks"] + seconds["supervisors"] + seconds["scheduler"] - 0.05
    assert set(per_change(seconds, 2)) == set(ROLES)
    assert per_change(seconds, 2)["tasks"] == seconds["tasks"] / 2
