"""``python -m bench [name ...] [--quick] [--no-docs] [options]``: run the benchmarks, refresh the docs.

Every ``bench/bench_<name>.py`` that has ``main(argv)`` is a benchmark. With no names, all of
them run in name order; otherwise the ones named (``overhead``, ``tpch`` ...). Every option is
passed on to every benchmark, which ignores the ones it does not know. After a full run (not
``--quick``), the generated parts of ``docs/benchmarks.md`` and its plots are refreshed from the
results files.
"""

from __future__ import annotations

import importlib
import json
import signal
import sys
import time
import traceback
from datetime import UTC, datetime

from bench.common import REPO, configure_environment, log, results_dir

_PREFIX = "bench_"


def available() -> list[str]:
    """Names of the benchmark modules in ``bench/`` that have a ``main``."""
    names = []
    for path in sorted((REPO / "bench").glob(f"{_PREFIX}*.py")):
        name = path.stem.removeprefix(_PREFIX)
        if callable(getattr(importlib.import_module(f"bench.{path.stem}"), "main", None)):
            names.append(name)
    return names


def _record_runtime(name: str, seconds: float, quick: bool) -> None:
    """Merge a benchmark's wall time into ``runtimes.json`` (documented with the results)."""
    path = results_dir(quick) / "runtimes.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    known = json.loads(path.read_text()) if path.is_file() else {}
    known[name] = {"seconds": seconds, "finished": datetime.now(UTC).isoformat(timespec="seconds")}
    path.write_text(json.dumps(known, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    configure_environment()
    # Stopped with SIGTERM (kill, a CI timeout), a benchmark still runs its cleanup: the servers and
    # Airflow deployments it started stop with it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    arguments = list(sys.argv[1:] if argv is None else argv)
    names_known = available()
    chosen = [a.removeprefix(_PREFIX) for a in arguments if a.removeprefix(_PREFIX) in names_known]
    options = [a for a in arguments if a.removeprefix(_PREFIX) not in names_known and a != "--no-docs"]
    quick = "--quick" in options
    failed = []
    for name in chosen or names_known:
        log(f"=== {name} {' '.join(options)}")
        started = time.monotonic()
        try:
            importlib.import_module(f"bench.{_PREFIX}{name}").main(options)
        except Exception:  # noqa: BLE001 - one failing benchmark must not hide the others' results
            traceback.print_exc()
            failed.append(name)
            continue
        seconds = time.monotonic() - started
        if all(option == "--quick" for option in options):
            # Only runs with the default settings document how long `make bench` takes.
            _record_runtime(name, seconds, quick)
        log(f"=== {name} finished in {seconds:.0f}s")
    if not quick and "--no-docs" not in arguments:
        from bench.report import update_docs

        update_docs()
    if failed:
        log(f"FAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
