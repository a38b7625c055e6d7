"""MERGE INTO: the operator against a hand-written spark-submit, merge-on-read against copy-on-write,
and the warm engine against spark-submit.

The target is a copy of TPC-H ``lineitem`` (scale factor 0.1 by default: 600,572 rows in 84
monthly partitions), made for this benchmark and tagged at its base snapshot; every run starts from
that snapshot (rolled back to it, ``write.merge.mode`` set). A source table per share ``X`` of the
target updates ``X`` of its rows (``l_partkey <= k``: spread over every data file; new quantity
and comment) and inserts ``X / 10`` new rows (copies of other rows under new order keys, so in
every partition too). The MERGE pairs rows on ``lineitem``'s key and has two clauses: matched ->
update quantity and comment, not matched -> insert.

1. **Operator overhead** (``X`` = 1%): the MERGE operator as a one-task DAG
   (``bench/dags/bench_merge_dag.py``) run with ``dag.test()``, its job through spark-submit,
   against ``spark-submit bench/bare_spark_merge.py``: the same MERGE written by hand, with the same
   jars and properties file (catalog included) as the job (as ``bench_overhead`` does for DELETE).
   The job also counts, before writing, the rows each clause will change (one join of target and
   source): that count, the validation (an ``EXPLAIN`` of the MERGE) and the operator's own work
   are what the operator adds. Where the time goes is measured from outside (call times and the
   arrival of the job's own log lines) and, inside the job, by timing its steps in one warm session
   (part 2).
2. **Warm engine**: the same task with its Spark connection a ``spark_connect`` one to a Connect
   server this benchmark starts (``airflow_iceberg_dml.engine``, as ``bench_engines`` does). Parts 1
   and 2 are one loop of three sides, interleaved with their order rotated, medians of ``--runs``
   after one warm-up round.
3. **Merge-on-read against copy-on-write** (``X`` = 0.1%, 1%, 10%): the package's MERGE job
   (:func:`airflow_iceberg_dml.jobs.merge.run_spec`, the code spark-submit runs) on one shared local
   SparkSession, the two modes interleaved, ``--repeats`` trials each: the job's time and its steps
   (pin the source, validate, count per clause, MERGE and commit), the files and bytes written (from
   the snapshot summaries), and then a full scan of the target (merge-on-read pays at read time).

Every run is checked: one commit, the live rows and the summary's MERGE counters as expected.

``python -m bench merge [--quick] [--scale-factor 0.1] [--runs 5] [--repeats 3]``; after a full run
it rewrites its own blocks of docs/benchmarks.md and ``docs/img/bench_merge.png`` (not with
``--no-docs``); ``python -m bench.bench_merge --docs-only`` redraws them from the last results.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.spec import Outcome, SummaryKey
from bench.common import (
    Samples,
    configure_environment,
    format_bytes,
    format_percent,
    format_ratio,
    format_seconds,
    interleaved,
    log,
    median,
    ratio,
    timed,
    write_results,
)
from bench.merge_end_to_end import PHASES, Side, end_to_end
from bench.merge_tables import Case, Mode, check, make_source, make_target, reset
from bench.probes import record_calls
from bench.report.merge import NAME, update_docs
from bench.tables import CATALOG, catalog_hook, local_session
from bench.tpch import QUICK_SCALE_FACTOR, full_scan_query, load

if TYPE_CHECKING:
    from airflow_iceberg_dml.spec import MergeSpec
    from bench.engine_server import Server
    from bench.tables import BenchTable

DEFAULT_SCALE_FACTOR = 0.1
DEFAULT_RUNS = 5
DEFAULT_REPEATS = 3
#: The goal of the MERGE issue: the operator adds at most 10% to a bare spark-submit of the same MERGE.
GOAL = 0.10
#: Shares of the target's rows the MERGE updates (part 3).
FRACTIONS = (0.001, 0.01, 0.1)
#: The share of parts 1 and 2.
OVERHEAD_FRACTION = 0.01

#: The steps of the job timed in the shared session (part 3), in the order they run.
JOB_STEPS = {
    "_pin_source": "pin the source snapshot",
    "_check_on_names_both_sides": "check that the on condition names both sides (analysis only)",
    "_change_is_certain": "is a change certain? (read one source row)",
    "_validate": "EXPLAIN the MERGE (skipped when a change is certain)",
    "_count": "count the rows per clause (one join; skipped when a change is certain)",
    "_commit": "MERGE statement and commit",
}


# -- part 3: merge-on-read against copy-on-write, in one session ---------------------------------------------


@dataclass
class Trials:
    """One mode on one case: a value per trial."""

    seconds: Samples = field(default_factory=Samples)
    steps: dict[str, Samples] = field(
        default_factory=lambda: {key: Samples() for key in [*JOB_STEPS, "other"]}
    )
    full_scan: Samples = field(default_factory=Samples)
    writes: list[dict[str, int]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds.as_json(),
            "steps": {key: samples.as_json() for key, samples in self.steps.items()},
            "full_scan_seconds": self.full_scan.as_json(),
            **{key: median([w[key] for w in self.writes]) for key in self.writes[0]},
        }


def merge_spec(target: BenchTable, case: Case, mode: Mode) -> MergeSpec:
    """The spec the operator builds for this MERGE, less what only a task has (run key, summary entries)."""
    from airflow_iceberg_dml.operators.merge import merge_clause
    from airflow_iceberg_dml.spec import MergeSource, MergeSpec
    from bench.bare_spark_merge import ON
    from bench.dags.bench_merge_dag import CLAUSES

    return MergeSpec(
        catalog=CATALOG,
        table=target.name,
        source=MergeSource(table=case.source.name),
        on=ON,
        clauses=tuple(merge_clause(clause) for clause in CLAUSES),
        write_mode=mode.write_mode,
    )


def full_scan(target: BenchTable, runs: int) -> tuple[float, int]:
    """The median time of ``runs`` full scans of the target, and the rows read."""
    samples, rows = Samples(), 0
    for _ in range(runs):
        seconds, (row,) = timed(lambda: target.spark.sql(full_scan_query(target.identifier)).collect())
        samples.add(seconds)
        rows = int(row.n)
    return samples.median, rows


def trial(target: BenchTable, case: Case, mode: Mode, trials: Trials, read_runs: int) -> None:
    """Reset, run the job (timed, its steps too), check, record the writes, then read the table."""
    from airflow_iceberg_dml.jobs.merge import MergeJob, run_spec

    reset(target, mode)
    spec = merge_spec(target, case, mode)
    with ExitStack() as stack:
        calls = {step: stack.enter_context(record_calls(MergeJob, step)) for step in JOB_STEPS}
        seconds, record = timed(partial(run_spec, target.spark, spec))
    if record.outcome is not Outcome.COMMITTED:
        raise RuntimeError(
            f"MERGE job ({mode}, {case.label}): {record.outcome}: {record.error_type}: {record.error_message}"
        )
    check(target, case, f"job {mode}")
    steps = {step: sum(call.ended - call.started for call in found) for step, found in calls.items()}
    writes = target.writes_since_base()
    scan, rows = full_scan(target, read_runs)
    if rows != case.target_rows + case.inserted:
        raise AssertionError(
            f"{mode}: full scan read {rows:,} rows, expected {case.target_rows + case.inserted:,}"
        )
    trials.seconds.add(seconds)
    for step, value in steps.items():
        trials.steps[step].add(value)
    trials.steps["other"].add(seconds - sum(steps.values()))
    trials.full_scan.add(scan)
    trials.writes.append(
        {
            "data_files_written": writes.data_files_written,
            "delete_files_written": writes.delete_files_written,
            "bytes_written": writes.bytes_written,
            "data_files_removed": writes.data_files_removed,
        }
    )
    log(
        f"{case.label:>5} {mode:<14} {format_seconds(seconds):>8} (count {format_seconds(steps['_count'])}, "
        f"MERGE {format_seconds(steps['_commit'])}); {writes.data_files_written} data + "
        f"{writes.delete_files_written} delete file(s), {format_bytes(writes.bytes_written)}; "
        f"full scan after {format_seconds(scan)}"
    )


def modes_compared(
    target: BenchTable, cases: list[Case], repeats: int, read_runs: int
) -> list[dict[str, Any]]:
    """Every case in both modes, ``repeats`` trials interleaved; a warm-up trial of each mode first."""
    for mode in Mode:
        trial(target, cases[0], mode, Trials(), read_runs)
    results = []
    for case in cases:
        reset(target, Mode.MERGE_ON_READ)
        base_scan, _ = full_scan(target, max(3, read_runs))
        by_mode = {mode: Trials() for mode in Mode}
        for _, mode in interleaved(repeats, list(Mode)):
            trial(target, case, mode, by_mode[mode], read_runs)
        target.clean()
        results.append(
            {
                **case.as_json(),
                "base_full_scan_seconds": base_scan,
                "modes": {str(mode): trials.as_json() for mode, trials in by_mode.items()},
            }
        )
    return results


# -- the run -------------------------------------------------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench merge", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="scale factor 0.01, one run and one trial each")
    parser.add_argument(
        "--scale-factor", type=float, help=f"TPC-H scale factor (default {DEFAULT_SCALE_FACTOR:g})"
    )
    parser.add_argument("--runs", type=int, help=f"end-to-end runs per side (default {DEFAULT_RUNS})")
    parser.add_argument("--repeats", type=int, help=f"trials per mode and share (default {DEFAULT_REPEATS})")
    parser.add_argument(
        "--docs-only", action="store_true", help="redraw the docs blocks from the last results"
    )
    args, _ = parser.parse_known_args(argv)
    args.scale_factor = args.scale_factor or (QUICK_SCALE_FACTOR if args.quick else DEFAULT_SCALE_FACTOR)
    args.runs = args.runs or (1 if args.quick else DEFAULT_RUNS)
    args.repeats = args.repeats or (1 if args.quick else DEFAULT_REPEATS)
    args.warm_up = 0 if args.quick else 1
    args.read_runs = 1 if args.quick else 3
    return args


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Parts 3, then 1 and 2, on tables made for the run and dropped after it; what they measured."""
    from bench.engine_server import start_server, stop_server

    hook = catalog_hook()
    spark = local_session(hook, "bench-merge")
    server: Server | None = None
    failed = True
    try:
        tpch = load(spark, hook, args.scale_factor)
        target = make_target(tpch)
        cases = [make_source(tpch, target, fraction) for fraction in FRACTIONS]
        data_files = int(target.summary().get(SummaryKey.TOTAL_DATA_FILES, 0))
        modes = modes_compared(target, cases, args.repeats, args.read_runs)
        server = start_server(hook)
        overhead_case = next(case for case in cases if case.fraction == OVERHEAD_FRACTION)
        cold_start = server.listening_seconds + server.warm_up_seconds
        sides = end_to_end(target, overhead_case, hook, server, runs=args.runs, warm_up=args.warm_up)
        for table in [target, *(case.source for case in cases)]:
            spark.sql(f"DROP TABLE IF EXISTS {table.identifier} PURGE")
        failed = False
    finally:
        if server is not None:
            stop_server(server, keep_log=failed)
        spark.stop()
    medians = sides.medians()
    overhead = ratio(medians[Side.OPERATOR], medians[Side.BARE]) - 1
    speedup = ratio(medians[Side.OPERATOR], medians[Side.CONNECT])
    log(f"operator overhead: {format_percent(overhead)} (goal: at most {format_percent(GOAL)})")
    log(f"spark-submit / warm engine: {format_ratio(speedup)}")
    return {
        "target": {"table": target.name, "rows": overhead_case.target_rows, "data_files": data_files},
        "end_to_end": {
            "case": overhead_case.as_json(),
            "phase_labels": PHASES,
            "sides": sides.as_json(),
            "overhead": overhead,
            "goal_met": overhead <= GOAL,
            "spark_submit_over_connect": speedup,
            "server_cold_start_seconds": cold_start,
        },
        "modes": modes,
    }


def main(argv: list[str] | None = None) -> None:
    configure_environment()
    args = _arguments(argv)
    if args.docs_only:
        update_docs()
        return
    from bench.bench_overhead import use_bench_dag_bundle

    use_bench_dag_bundle()
    started = time.monotonic()
    measured = measure(args)
    payload: dict[str, Any] = {
        "scale_factor": args.scale_factor,
        "target": measured["target"],
        "on": _on(),
        "clauses": _clauses(),
        "runs": args.runs,
        "warm_up_runs": args.warm_up,
        "repeats": args.repeats,
        "read_runs": args.read_runs,
        "goal": GOAL,
        "end_to_end": measured["end_to_end"],
        "job_step_labels": {**JOB_STEPS, "other": "other: load the target, find the commit, record"},
        "modes": measured["modes"],
        "runtime_seconds": time.monotonic() - started,
    }
    write_results(NAME, payload, quick=args.quick)
    if not args.quick and "--no-docs" not in sys.argv[1:]:
        update_docs()


def _on() -> str:
    from bench.bare_spark_merge import ON

    return ON


def _clauses() -> list[dict[str, Any]]:
    from bench.dags.bench_merge_dag import CLAUSES

    return [dict(clause) for clause in CLAUSES]


if __name__ == "__main__":
    main()
