"""What a DML task's look for its own earlier commit costs, by the length of the table's history.

Before it plans, every DELETE, UPDATE or MERGE task asks the table whether its run key has committed
already (exactly once): ``IcebergCatalogHook.find_run_commits``, a walk back from the head. A run key
that has not committed (every first try) is looked for through the whole history. The tables are the
sensor benchmark's (:func:`bench.bench_sensor_poll.ensure_table`: real Iceberg appends, reused by later
runs), with 10 and 5,000 snapshots (``--snapshots``; building a longer one takes a while: 5,000
took about four minutes, once).

On each table, loaded once, interleaved (``--runs`` each, after one warm-up each), the median wall
time of:

- ``lookup``: the package's look for a run key the table does not hold;
- ``pyiceberg walk``: the same look over pyiceberg's ancestry helper (``ancestors_between_ids``), as
  the package made it before: each parent is found by a scan of the snapshot list;
- ``load``: ``load_table``, reading and parsing metadata.json, which every task does anyway.

The goal: at every history length, the lookup costs at most half the table's load, which the task pays
anyway: it does not decide how long a task takes to plan, however long the history.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from bench.common import (
    Samples,
    configure_environment,
    format_bytes,
    format_ratio,
    log,
    markdown_table,
    ratio,
    timed_interleaved,
    write_results,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

NAME = "history_lookup"
#: The lookup may cost at most this fraction of the table's load.
GOAL_FRACTION = 0.5
LOOKUP, PYICEBERG, LOAD = "lookup", "pyiceberg walk", "load"
SIDES = (LOOKUP, PYICEBERG, LOAD)


def milliseconds(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def actions(hook: IcebergCatalogHook, name: str) -> dict[str, Callable[[], object]]:
    """The three ways to spend time on ``name``; each checked to find nothing (the run key is absent)."""
    from pyiceberg.table.snapshots import ancestors_between_ids

    from airflow_iceberg_dml.commits import CommitMarks, ours
    from airflow_iceberg_dml.result import summary_of
    from airflow_iceberg_dml.spec import RunKey

    table = hook.load_table(name)
    head = table.current_snapshot()
    if head is None:
        raise RuntimeError(f"{name} has no snapshot.")
    absent = RunKey("bench", "history_lookup", "never_committed", -1)
    marks = CommitMarks(run_key=absent)

    def lookup() -> object:
        return hook.find_run_commits(table, absent)

    def pyiceberg_walk() -> object:
        return ours(ancestors_between_ids(None, head.snapshot_id, table.metadata), summary_of, marks)

    def load() -> object:
        return hook.load_table(name)

    for action in (lookup, pyiceberg_walk):
        if action():
            raise RuntimeError(f"{name} holds a commit of {absent}.")
    return {LOOKUP: lookup, PYICEBERG: pyiceberg_walk, LOAD: load}


def measure(hook: IcebergCatalogHook, tables: dict[int, str], runs: int) -> dict[tuple[int, str], Samples]:
    """Every (table, side) pair ``runs`` times, interleaved, so that each sees the same machine load."""
    pairs = {
        (count, side): action
        for count, name in tables.items()
        for side, action in actions(hook, name).items()
    }
    log(f"{runs} timings per table and side, interleaved")
    return timed_interleaved(pairs, runs)


def _table(medians: dict[int, dict[str, float]], sizes: dict[int, int]) -> str:
    rows = [
        [
            f"{count:,} snapshots",
            format_bytes(sizes[count]),
            *(milliseconds(medians[count][side]) for side in SIDES),
            format_ratio(ratio(medians[count][LOOKUP], medians[count][LOAD])),
            format_ratio(ratio(medians[count][PYICEBERG], medians[count][LOOKUP])),
        ]
        for count in medians
    ]
    headers = ["table", "metadata.json", *SIDES, f"{LOOKUP} / {LOAD}", f"{PYICEBERG} / {LOOKUP}"]
    return markdown_table(headers, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_history_lookup", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a small smoke run (10 and 500 snapshots)")
    parser.add_argument("--snapshots", help="history lengths, comma-separated (default 10,5000)")
    parser.add_argument("--runs", type=int, help="timings per table and side (default 10)")
    args, _ = parser.parse_known_args(argv)
    default = "10,500" if args.quick else "10,5000"
    counts = sorted({int(text) for text in (args.snapshots or default).split(",")})
    runs = args.runs or (3 if args.quick else 10)

    configure_environment()
    from bench.bench_sensor_poll import ensure_table, metadata_size
    from bench.tables import catalog_hook, local_session

    hook = catalog_hook()
    spark = local_session(hook, "bench-history-lookup")
    try:
        tables = {count: ensure_table(spark, hook, count) for count in counts}
    finally:
        spark.stop()
    samples = measure(hook, tables, runs)
    medians = {count: {side: samples[count, side].median for side in SIDES} for count in tables}
    sizes = {count: metadata_size(hook, name) for count, name in tables.items()}

    fractions = {count: ratio(medians[count][LOOKUP], medians[count][LOAD]) for count in tables}
    goal_met = all(fraction <= GOAL_FRACTION for fraction in fractions.values())
    table = _table(medians, sizes)
    print()
    print(table)
    print()
    print(
        f"Goal: the lookup at most {GOAL_FRACTION:.2f}x the table's load at every history length: "
        f"{', '.join(format_ratio(fraction) for fraction in fractions.values())} -> "
        f"{'met' if goal_met else 'NOT met'}."
    )
    write_results(
        NAME,
        {
            "snapshots": counts,
            "runs": runs,
            "metadata_bytes": {str(count): size for count, size in sizes.items()},
            "medians_s": {str(count): values for count, values in medians.items()},
            "samples": {
                str(count): {side: samples[count, side].as_json() for side in SIDES} for count in tables
            },
            "lookup_over_load": {str(count): value for count, value in fractions.items()},
            "goal_fraction": GOAL_FRACTION,
            "goal_met": goal_met,
            "markdown": table,
        },
        quick=args.quick,
    )


if __name__ == "__main__":
    main()
