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
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.spec import LOG_PREFIX, Outcome, SummaryKey, WriteMode
from bench.common import (
    REPO,
    Samples,
    configure_environment,
    format_bytes,
    format_percent,
    format_ratio,
    format_seconds,
    interleaved,
    log,
    markdown_table,
    median,
    ratio,
    read_results,
    timed,
    write_results,
)
from bench.probes import record_calls, run_traced, trace_hook_submits
from bench.tables import (
    BASE_TAG,
    CATALOG,
    NAMESPACE,
    TABLE_PROPERTIES,
    BenchTable,
    catalog_hook,
    local_session,
    properties_clause,
)
from bench.tpch import QUICK_SCALE_FACTOR, TpchTables, full_scan_query, load

if TYPE_CHECKING:
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_dml.spec import MergeSpec
    from bench.bench_engines import Server

NAME = "merge"
DEFAULT_SCALE_FACTOR = 0.1
DEFAULT_RUNS = 5
DEFAULT_REPEATS = 3
#: The goal of the MERGE issue: the operator adds at most 10% to a bare spark-submit of the same MERGE.
GOAL = 0.10
#: Shares of the target's rows the MERGE updates (part 3).
FRACTIONS = (0.001, 0.01, 0.1)
#: The share of parts 1 and 2.
OVERHEAD_FRACTION = 0.01
#: New rows the source inserts, per row it updates.
INSERTS_PER_UPDATE = 0.1
#: Added to ``l_orderkey`` of the inserted rows: no target row has such a key.
KEY_OFFSET = 1_000_000_000
UPDATED_COMMENT = "merged"
BARE_SCRIPT = Path(__file__).resolve().parent / "bare_spark_merge.py"
PLOT = REPO / "docs" / "img" / "bench_merge.png"
#: Generated blocks of docs/benchmarks.md this benchmark writes itself.
BLOCK, SUMMARY_BLOCK = "merge", "merge-summary"


class Side(StrEnum):
    """One way to run the MERGE end to end (parts 1 and 2)."""

    OPERATOR = "operator, spark-submit"
    BARE = "bare spark-submit"
    CONNECT = "operator, warm engine"


#: Where the time of an end-to-end run goes, in order; a run's phases add up to its total. The bare
#: side has only ``session``, ``merge`` and ``end``.
PHASES = {
    "airflow": "Airflow: DAG run, task start and finish (dag.test)",
    "operator": "operator: pyiceberg checks before, result and asset event after",
    "prepare": "hook: spark-submit: jars, package zip, properties file; Connect: server reachable?",
    "session": "spark-submit: JVM and SparkSession start; Connect: new session and its checks",
    "load": "job: load the target, pin the source snapshot",
    "count": "job: check on; read one source row (a change is certain: no EXPLAIN, no count)",
    "merge": "MERGE and commit",
    "end": "spark-submit: Spark stop, JVM exit; Connect: release the session",
}
_BARE_PHASES = ("session", "merge", "end")

#: The steps of the job timed in the shared session (part 3), in the order they run.
JOB_STEPS = {
    "_pin_source": "pin the source snapshot",
    "_check_on_names_both_sides": "check that the on condition names both sides (analysis only)",
    "_change_is_certain": "is a change certain? (read one source row)",
    "_validate": "EXPLAIN the MERGE (skipped when a change is certain)",
    "_count": "count the rows per clause (one join; skipped when a change is certain)",
    "_commit": "MERGE statement and commit",
}


class Mode(StrEnum):
    MERGE_ON_READ = WriteMode.MERGE_ON_READ.value
    COPY_ON_WRITE = WriteMode.COPY_ON_WRITE.value

    @property
    def write_mode(self) -> WriteMode:
        return WriteMode(self.value)


# -- the tables ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One source: the share of the target it updates, its rows, what the MERGE must do."""

    fraction: float
    source: BenchTable
    updated: int
    inserted: int
    target_rows: int

    @property
    def label(self) -> str:
        return format_percent(self.fraction)

    def as_json(self) -> dict[str, Any]:
        return {
            "fraction": self.fraction,
            "source": self.source.name,
            "updated": self.updated,
            "inserted": self.inserted,
            "target_rows": self.target_rows,
        }


def _name(scale_factor: float, suffix: str) -> str:
    return f"{NAMESPACE}.merge_sf{f'{scale_factor:g}'.replace('.', '_')}_{suffix}"


def make_target(tpch: TpchTables) -> BenchTable:
    """A copy of ``lineitem`` at its base snapshot, partitioned alike (by ship month), tagged."""
    spark, source = tpch.lineitem.spark, tpch.lineitem
    target = BenchTable(spark, source.hook, _name(tpch.scale_factor, "lineitem"))
    spark.sql(f"DROP TABLE IF EXISTS {target.identifier} PURGE")
    seconds, _ = timed(
        lambda: spark.sql(
            f"CREATE TABLE {target.identifier} USING iceberg PARTITIONED BY (months(l_shipdate)) "
            f"{properties_clause(TABLE_PROPERTIES)} AS "
            f"SELECT * FROM {source.identifier} VERSION AS OF '{BASE_TAG}'"
        )
    )
    target.tag_base()
    log(f"copied {source.name} to {target.name} in {format_seconds(seconds)}")
    return target


def make_source(tpch: TpchTables, target: BenchTable, fraction: float) -> Case:
    """The source of one share: ``fraction`` of the target's rows changed, ``fraction / 10`` new ones."""
    spark = target.spark
    fields = spark.table(target.identifier).schema.fields

    def select(changes: dict[str, str], where: str) -> str:
        columns = ", ".join(
            f"CAST({changes[f.name]} AS {f.dataType.simpleString()}) AS {f.name}"
            if f.name in changes
            else f.name
            for f in fields
        )
        return f"SELECT {columns} FROM {target.identifier} VERSION AS OF '{BASE_TAG}' WHERE {where}"

    updates = select(
        {"l_quantity": "l_quantity + 1", "l_comment": f"'{UPDATED_COMMENT}'"},
        tpch.partkey_predicate(fraction),
    )
    inserts = select(
        {"l_orderkey": f"l_orderkey + {KEY_OFFSET}", "l_comment": "'inserted'"},
        tpch.partkey_predicate(fraction * INSERTS_PER_UPDATE),
    )
    source = BenchTable(
        spark, target.hook, _name(tpch.scale_factor, f"source_{fraction:g}".replace(".", "_"))
    )
    spark.sql(f"DROP TABLE IF EXISTS {source.identifier} PURGE")
    spark.sql(
        f"CREATE TABLE {source.identifier} USING iceberg {properties_clause(TABLE_PROPERTIES)} AS "
        f"{updates} UNION ALL {inserts}"
    )
    (row,) = spark.sql(
        f"SELECT count_if(l_orderkey < {KEY_OFFSET}) AS updated, "
        f"count_if(l_orderkey >= {KEY_OFFSET}) AS inserted FROM {source.identifier}"
    ).collect()
    case = Case(fraction, source, int(row.updated), int(row.inserted), live_rows(target))
    log(f"source {source.name}: {case.updated:,} rows to update, {case.inserted:,} to insert")
    return case


def live_rows(table: BenchTable) -> int:
    """Rows of the head snapshot, position deletes applied, from its summary."""
    summary = table.summary()
    return int(summary.get(SummaryKey.TOTAL_RECORDS, 0)) - int(
        summary.get(SummaryKey.TOTAL_POSITION_DELETES, 0)
    )


def reset(target: BenchTable, mode: Mode) -> None:
    """Back to the base snapshot, with ``write.merge.mode`` = ``mode``."""
    table = target.load()
    current = table.current_snapshot()
    if current is None or current.snapshot_id != target.base_snapshot_id:
        target.spark.sql(
            f"CALL {CATALOG}.system.rollback_to_snapshot("
            f"table => '{target.name}', snapshot_id => {target.base_snapshot_id})"
        )
    if table.properties.get("write.merge.mode") != mode.value:
        target.spark.sql(
            f"ALTER TABLE {target.identifier} SET {properties_clause({'write.merge.mode': mode.value})}"
        )


_MERGE_COUNTER = "spark.merge-into.num-target-rows-"


def check(target: BenchTable, case: Case, who: str) -> None:
    """The head is one commit on the base snapshot that updated and inserted exactly the case's rows."""
    commits = target.writes_since_base().snapshots
    found = live_rows(target)
    expected = case.target_rows + case.inserted
    summary = target.summary()
    counters = {
        key: int(summary[_MERGE_COUNTER + key])
        for key in ("matched-updated", "inserted")
        if _MERGE_COUNTER + key in summary
    }
    if (
        commits != 1
        or found != expected
        or counters not in ({}, {"matched-updated": case.updated, "inserted": case.inserted})
    ):
        raise AssertionError(
            f"{who}, {case.label}: {commits} commit(s), {found:,} live rows, counters {counters}; expected 1 "
            f"commit, {expected:,} rows, {case.updated:,} updated and {case.inserted:,} inserted"
        )


# -- parts 1 and 2: end to end ---------------------------------------------------------------------------


def run_operator(side: Side, target: BenchTable, case: Case) -> dict[str, float]:
    """One ``dag.test()`` of the MERGE DAG on the engine of ``side``; its phases (seconds)."""
    from airflow_iceberg_dml.operators.dml import BaseIcebergDmlOperator
    from bench.bench_engines import trace_connect_jobs
    from bench.dags.bench_merge_dag import dag

    with ExitStack() as stack:
        executes = stack.enter_context(record_calls(BaseIcebergDmlOperator, "execute"))
        submits = stack.enter_context(trace_hook_submits())
        connect = stack.enter_context(trace_connect_jobs())
        started = time.perf_counter()
        dag_run = dag.test(run_conf={"table": target.name, "source": case.source.name})
        ended = time.perf_counter()
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    if states != {"merge": "success"}:
        raise RuntimeError(f"The benchmark DAG run failed ({side}): {states}")
    ran = (len(submits), len(connect.submits))
    if ran != ((1, 0) if side is Side.OPERATOR else (0, 1)):
        raise RuntimeError(f"{side}: expected one job on its engine, ran {ran} (spark-submit, Connect)")
    (execute,) = executes
    if side is Side.OPERATOR:
        (traced,) = submits
        job, call = traced.process, traced.call
        first, pinned, plan, committed = (
            job.line_time(LOG_PREFIX + "MERGE into"),
            job.line_time(LOG_PREFIX + "Source "),
            job.line_time(LOG_PREFIX + "Plan:"),
            job.line_time(LOG_PREFIX + "Committed snapshot"),
        )
        prepare, session = job.started - call.started, first - job.started
    else:
        (call,), (opened,) = connect.submits, connect.opens
        first, pinned, plan, committed = (
            connect.line_time("MERGE into"),
            connect.line_time("Source "),
            connect.line_time("Plan:"),
            connect.line_time("Committed snapshot"),
        )
        prepare, session = opened.started - call.started, first - opened.started
    return {
        "airflow": (execute.started - started) + (ended - execute.ended),
        "operator": (call.started - execute.started) + (execute.ended - call.ended),
        "prepare": prepare,
        "session": session,
        "load": pinned - first,
        "count": plan - pinned,
        "merge": committed - plan,
        "end": call.ended - committed,
    }


def run_bare(command: list[str]) -> dict[str, float]:
    """One bare spark-submit of the hand-written MERGE; its phases (seconds)."""
    from bench.bare_spark_merge import LOG_PREFIX as BARE_PREFIX

    trace = run_traced(command)
    session, merged = trace.line_time(f"{BARE_PREFIX}session ready"), trace.line_time(f"{BARE_PREFIX}merged")
    return {"session": session - trace.started, "merge": merged - session, "end": trace.ended - merged}


@dataclass
class EndToEnd:
    """The runs of every side (parts 1 and 2)."""

    totals: dict[Side, Samples] = field(default_factory=lambda: {side: Samples() for side in Side})
    phases: dict[Side, dict[str, Samples]] = field(
        default_factory=lambda: {
            side: {key: Samples() for key in (_BARE_PHASES if side is Side.BARE else PHASES)} for side in Side
        }
    )

    def medians(self) -> dict[Side, float]:
        return {side: samples.median for side, samples in self.totals.items()}

    def as_json(self) -> dict[str, Any]:
        return {
            str(side): {
                "total_seconds": self.totals[side].as_json(),
                "phases": {key: samples.as_json() for key, samples in self.phases[side].items()},
            }
            for side in Side
        }


def end_to_end(
    target: BenchTable, case: Case, hook: IcebergCatalogHook, server: Server, *, runs: int, warm_up: int
) -> EndToEnd:
    """The three sides interleaved, their order rotated, each run from the base snapshot (merge-on-read)."""
    from bench.bench_engines import engine_connection
    from bench.bench_overhead import submit_command

    found = EndToEnd()
    with tempfile.TemporaryDirectory(prefix="bench-merge-") as folder:
        bare = submit_command(hook, Path(folder), BARE_SCRIPT, target.identifier, case.source.identifier)
        for run, side in interleaved(warm_up + runs, list(Side)):
            reset(target, Mode.MERGE_ON_READ)
            with engine_connection(server.state.connection_uri if side is Side.CONNECT else None):
                measured = run_bare(bare) if side is Side.BARE else run_operator(side, target, case)
            check(target, case, str(side))
            total = sum(measured.values())
            counted = run >= warm_up
            log(f"{side}: {format_seconds(total)}{'' if counted else ' (warm-up, not counted)'}")
            if counted:
                found.totals[side].add(total)
                for key, seconds in measured.items():
                    found.phases[side][key].add(seconds)
    target.clean()
    return found


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


def main(argv: list[str] | None = None) -> None:
    configure_environment()
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
    if args.docs_only:
        update_docs()
        return
    from bench.bench_engines import start_server, stop_server
    from bench.bench_overhead import use_bench_dag_bundle

    scale_factor = args.scale_factor or (QUICK_SCALE_FACTOR if args.quick else DEFAULT_SCALE_FACTOR)
    runs = args.runs or (1 if args.quick else DEFAULT_RUNS)
    repeats = args.repeats or (1 if args.quick else DEFAULT_REPEATS)
    warm_up = 0 if args.quick else 1
    read_runs = 1 if args.quick else 3
    use_bench_dag_bundle()

    started = time.monotonic()
    hook = catalog_hook()
    spark = local_session(hook, "bench-merge")
    server: Server | None = None
    failed = True
    try:
        tpch = load(spark, hook, scale_factor)
        target = make_target(tpch)
        cases = [make_source(tpch, target, fraction) for fraction in FRACTIONS]
        data_files = int(target.summary().get(SummaryKey.TOTAL_DATA_FILES, 0))
        modes = modes_compared(target, cases, repeats, read_runs)
        server = start_server(hook)
        overhead_case = next(case for case in cases if case.fraction == OVERHEAD_FRACTION)
        cold_start = server.listening_seconds + server.warm_up_seconds
        sides = end_to_end(target, overhead_case, hook, server, runs=runs, warm_up=warm_up)
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
    payload: dict[str, Any] = {
        "scale_factor": scale_factor,
        "target": {"table": target.name, "rows": overhead_case.target_rows, "data_files": data_files},
        "on": _on(),
        "clauses": _clauses(),
        "runs": runs,
        "warm_up_runs": warm_up,
        "repeats": repeats,
        "read_runs": read_runs,
        "goal": GOAL,
        "end_to_end": {
            "case": overhead_case.as_json(),
            "phase_labels": PHASES,
            "sides": sides.as_json(),
            "overhead": overhead,
            "goal_met": overhead <= GOAL,
            "spark_submit_over_connect": speedup,
            "server_cold_start_seconds": cold_start,
        },
        "job_step_labels": {**JOB_STEPS, "other": "other: load the target, find the commit, record"},
        "modes": modes,
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


# -- docs/benchmarks.md ------------------------------------------------------------------------------------


def _files(values: dict[str, Any]) -> str:
    data, deletes = values["data_files_written"], values["delete_files_written"]
    return f"{data:g} + {deletes:g}"


def end_to_end_block(results: dict[str, Any]) -> str:
    e2e = results["end_to_end"]
    case, sides = e2e["case"], e2e["sides"]
    names = list(sides)
    rows = [
        [
            label,
            *(
                format_seconds(sides[side]["phases"][key]["median"]) if key in sides[side]["phases"] else "-"
                for side in names
            ),
        ]
        for key, label in e2e["phase_labels"].items()
    ]
    rows.append(
        ["**total**", *(f"**{format_seconds(sides[side]['total_seconds']['median'])}**" for side in names)]
    )
    runs = "; ".join(
        f"{side} " + " / ".join(format_seconds(value) for value in sides[side]["total_seconds"]["runs"])
        for side in names
    )
    points = (e2e["overhead"] - results["goal"]) * 100
    verdict = "met" if e2e["goal_met"] else f"**missed** by {points:.0f} percentage points"
    target = results["target"]
    return (
        f"End to end, a MERGE that updates {case['updated']:,} rows ({format_percent(case['fraction'])}) "
        f"and inserts {case['inserted']:,} into `{target['table']}` ({target['rows']:,} rows, TPC-H SF "
        f"{results['scale_factor']:g} `lineitem`), merge-on-read: medians of {results['runs']} runs of each "
        f"side, interleaved, after {results['warm_up_runs']} warm-up round(s). The Connect server's cold "
        f"start ({format_seconds(e2e['server_cold_start_seconds'])}) is not counted.\n\n"
        + markdown_table(["phase (median of runs)", *names], rows)
        + f"\n\n**Operator overhead against the bare spark-submit: {format_percent(e2e['overhead'])}** "
        f"(goal: at most {format_percent(results['goal'])}: {verdict}). **spark-submit / warm engine: "
        f"{format_ratio(e2e['spark_submit_over_connect'])}.** Runs: {runs}."
    )


def modes_block(results: dict[str, Any]) -> str:
    cases = results["modes"]
    mor, cow = str(Mode.MERGE_ON_READ), str(Mode.COPY_ON_WRITE)

    def label(case: dict[str, Any]) -> str:
        return (
            f"{format_percent(case['fraction'])} ({case['updated']:,} updated, {case['inserted']:,} inserted)"
        )

    def seconds(case: dict[str, Any], mode: str, key: str = "seconds", *, steps: bool = False) -> float:
        values = case["modes"][mode]["steps"] if steps else case["modes"][mode]
        value: float = values[key]["median"] if key in values else 0.0  # a step older results lack
        return value

    time_rows = [
        [
            label(case),
            format_seconds(seconds(case, mor)),
            format_seconds(seconds(case, cow)),
            format_ratio(ratio(seconds(case, cow), seconds(case, mor))),
            _files(case["modes"][mor]),
            _files(case["modes"][cow]),
            f"{case['modes'][cow]['data_files_removed']:g}",
            format_bytes(case["modes"][mor]["bytes_written"]),
            format_bytes(case["modes"][cow]["bytes_written"]),
        ]
        for case in cases
    ]
    times = markdown_table(
        [
            "share of the target updated",
            "MERGE, MoR",
            "MERGE, CoW",
            "CoW / MoR",
            "files written, MoR (data + delete)",
            "files written, CoW (data + delete)",
            "data files replaced, CoW",
            "bytes written, MoR",
            "bytes written, CoW",
        ],
        time_rows,
    )
    read_rows = [
        [
            label(case),
            format_seconds(case["base_full_scan_seconds"]),
            format_seconds(seconds(case, mor, "full_scan_seconds")),
            format_seconds(seconds(case, cow, "full_scan_seconds")),
            format_ratio(ratio(seconds(case, mor, "full_scan_seconds"), case["base_full_scan_seconds"])),
            format_ratio(
                ratio(seconds(case, mor, "full_scan_seconds"), seconds(case, cow, "full_scan_seconds"))
            ),
        ]
        for case in cases
    ]
    reads = markdown_table(
        [
            "share updated",
            "full scan before",
            "after MoR",
            "after CoW",
            "after MoR / before",
            "after MoR / after CoW",
        ],
        read_rows,
    )
    labels = results["job_step_labels"]
    columns = [(case, mode) for case in cases for mode in (mor, cow)]
    step_rows = [
        [label_text, *(format_seconds(seconds(case, mode, key, steps=True)) for case, mode in columns)]
        for key, label_text in labels.items()
    ]

    def before_merge(case: dict[str, Any], mode: str) -> str:
        spent = sum(
            seconds(case, mode, key, steps=True)
            for key in ("_check_on_names_both_sides", "_change_is_certain", "_validate", "_count")
        )
        return f"**{format_percent(spent / seconds(case, mode))}**"

    step_rows.append(
        [
            "**before the MERGE (validate, certain?, count) / job**",
            *(before_merge(case, mode) for case, mode in columns),
        ]
    )
    short = {mor: "MoR", cow: "CoW"}
    steps = markdown_table(
        [
            "job step (median)",
            *(f"{format_percent(case['fraction'])} {short[mode]}" for case, mode in columns),
        ],
        step_rows,
    )
    return (
        f"The MERGE job in one local SparkSession, {results['repeats']} trial(s) of each mode per share, "
        f"interleaved, after a warm-up trial of each; the full scan (`count(*)`, `sum(l_quantity)`) is the "
        f"median of {results['read_runs']} after each trial. The target: "
        f"{results['target']['rows']:,} rows in {results['target']['data_files']} data files.\n\n"
        "Time of the job and what it wrote (medians):\n\n"
        + times
        + "\n\nA full scan of the target before and after the MERGE (medians):\n\n"
        + reads
        + "\n\nWhere the job's time goes (medians; the steps add up to the job's time):\n\n"
        + steps
        + f"\n\n![MERGE time, bytes written and full scan after, merge-on-read against copy-on-write]"
        f"(img/{PLOT.name})"
    )


def merge_block(results: dict[str, Any]) -> str:
    return (
        end_to_end_block(results)
        + "\n\n"
        + modes_block(results)
        + f"\n\nThis run took {results['runtime_seconds'] / 60:.0f} min (results "
        f"`bench/results/{NAME}.json` of {results['created']})."
    )


def summary_line(results: dict[str, Any]) -> str:
    e2e = results["end_to_end"]
    mor, cow = str(Mode.MERGE_ON_READ), str(Mode.COPY_ON_WRITE)
    ratios = [
        ratio(case["modes"][cow]["seconds"]["median"], case["modes"][mor]["seconds"]["median"])
        for case in results["modes"]
    ]
    shares = ", ".join(format_percent(case["fraction"]) for case in results["modes"])
    anchor = "#merge-the-operator-merge-on-read-against-copy-on-write-warm-engine"
    return (
        f"- MERGE operator against a bare spark-submit of the same MERGE (TPC-H SF "
        f"{results['scale_factor']:g} `lineitem`, {format_percent(e2e['case']['fraction'])} updated): "
        f"**{format_percent(e2e['overhead'])}** overhead, medians of {results['runs']} (goal: at most "
        f"{format_percent(results['goal'])}, {'met' if e2e['goal_met'] else 'missed'}); spark-submit took "
        f"{format_ratio(e2e['spark_submit_over_connect'])} the time of the warm engine; copy-on-write "
        f"MERGE {format_ratio(min(ratios))} to {format_ratio(max(ratios))} the time of merge-on-read "
        f"({shares} updated) (see [MERGE]({anchor}))."
    )


def plot(results: dict[str, Any], target: Path) -> None:
    """MERGE time, bytes written and the full scan after, against the share updated, for both modes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = results["modes"]
    percents = [case["fraction"] * 100 for case in cases]
    figure, panels = plt.subplots(1, 3, figsize=(10.0, 3.2), dpi=80)
    for axes, key, title, scale in (
        (panels[0], "seconds", "MERGE job, s", 1.0),
        (panels[1], "bytes_written", "bytes written, MiB", 1 / 2**20),
        (panels[2], "full_scan_seconds", "full scan after, s", 1.0),
    ):
        for mode in (str(Mode.MERGE_ON_READ), str(Mode.COPY_ON_WRITE)):
            values = [
                (
                    case["modes"][mode][key]["median"]
                    if isinstance(case["modes"][mode][key], dict)
                    else case["modes"][mode][key]
                )
                * scale
                for case in cases
            ]
            axes.plot(percents, values, marker="o", label=mode)
        if key == "full_scan_seconds":
            axes.plot(
                percents,
                [case["base_full_scan_seconds"] for case in cases],
                linestyle="--",
                color="grey",
                label="before",
            )
        axes.set_xscale("log")
        axes.set_xticks(percents, [f"{p:g}%" for p in percents])
        axes.minorticks_off()
        axes.set_xlabel("target rows updated")
        axes.set_title(f"{title} (SF {results['scale_factor']:g})", fontsize="medium")
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(target)
    plt.close(figure)


def update_docs() -> None:
    """Rewrite this benchmark's blocks of docs/benchmarks.md and its plot from the last full results."""
    from bench.report import replace_block
    from bench.report.tpch import DOCS

    results = read_results(NAME)
    if results is None:
        log(f"no full results of {NAME}: docs left as they are")
        return
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    plot(results, PLOT)
    text = DOCS.read_text()
    text = replace_block(text, BLOCK, merge_block(results))
    text = replace_block(text, SUMMARY_BLOCK, summary_line(results))
    DOCS.write_text(text)
    log(f"updated {DOCS.relative_to(REPO)} ({BLOCK}, {SUMMARY_BLOCK}) and {PLOT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
