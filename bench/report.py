"""Refreshes the generated parts of ``docs/benchmarks.md`` and its plots from the results files.

The page is written by hand; the tables and figures inside ``<!-- bench:<name> -->`` ...
``<!-- /bench:<name> -->`` markers are generated. Only those blocks are replaced, so the prose
and the sections other benchmarks add stay as they are. A block whose results are missing is
left unchanged.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from bench import plots
from bench.bench_engines import NAME as ENGINES
from bench.bench_engines import Engine
from bench.bench_erasure import NAME as ERASURE
from bench.bench_noop_check import NAME as NOOP_CHECK
from bench.bench_noop_check import Side
from bench.bench_tpch import Method, results_name
from bench.common import (
    REPO,
    format_bytes,
    format_percent,
    format_ratio,
    format_seconds,
    log,
    markdown_table,
    median,
    ratio,
    ratio_table,
    read_results,
    results_dir,
)

if TYPE_CHECKING:
    from collections.abc import Callable

DOCS = REPO / "docs" / "benchmarks.md"
IMAGES = REPO / "docs" / "img"
DELETE_PLOT = IMAGES / "bench_time_vs_selectivity.png"
READS_PLOT = IMAGES / "bench_reads_vs_deletes.png"
OURS = str(Method.OURS)
COPY_ON_WRITE = str(Method.SPARK_COW)
#: The smaller TPC-H scale factor set beside the default one (``python -m bench tpch --scale-factor
#: 0.1``, results in ``tpch_sf0_1.json``): how the ratios change with the size of the table.
SECONDARY_SCALE_FACTOR = 0.1


def replace_block(text: str, name: str, content: str) -> str:
    """``text`` with the generated block ``name`` replaced by ``content``."""
    pattern = re.compile(rf"(<!-- bench:{re.escape(name)} -->\n).*?(<!-- /bench:{re.escape(name)} -->)", re.S)
    if not pattern.search(text):
        raise LookupError(f"{DOCS.name} has no generated block {name!r} (<!-- bench:{name} --> markers)")
    return pattern.sub(lambda match: match.group(1) + content.strip() + "\n" + match.group(2), text)


def machine_block(results: dict[str, Any]) -> str:
    machine = results["machine"]
    items = [
        ["CPU", f"{machine['cpu_count']} x {machine['cpu_model']}"],
        ["memory", format_bytes(machine["memory_bytes"])],
        ["OS", machine["os"]],
        ["Python", machine["python"]],
        ["Java", machine["java"]],
        ["Spark (pyspark)", machine["spark"]],
        ["Iceberg (Spark runtime)", machine["iceberg"]],
        ["pyiceberg / pyarrow", f"{machine['pyiceberg']} / {machine['pyarrow']}"],
        ["Airflow", machine["airflow"]],
        ["airflow-iceberg-dml", machine["airflow_iceberg_dml"]],
        ["tpchgen-cli", machine["tpchgen_cli"]],
    ]
    return "\n".join(f"- {name}: {value}" for name, value in items) + f"\n\nResults of {results['created']}."


def runtime_block(runtimes: dict[str, Any]) -> str:
    rows = [
        [name, format_seconds(entry["seconds"]), entry["finished"]]
        for name, entry in sorted(runtimes.items())
    ]
    total = sum(entry["seconds"] for entry in runtimes.values())
    rows.append(["**all**", f"**{total / 60:.0f} min**", ""])
    return markdown_table(["benchmark", "wall time of its last full run", "finished (UTC)"], rows)


def overhead_block(overhead: dict[str, Any]) -> str:
    sides = overhead["sides"]
    names = list(sides)
    rows = [
        [label, *(format_seconds(sides[side]["phases"][key]["median"]) for side in names)]
        for key, label in overhead["phase_labels"].items()
    ]
    rows.append(
        ["**total**", *(f"**{format_seconds(sides[side]['total_seconds']['median'])}**" for side in names)]
    )
    runs = ", ".join(
        f"{side}: " + " / ".join(format_seconds(value) for value in sides[side]["total_seconds"]["runs"])
        for side in names
    )
    steps = ""
    if overhead["job_steps"]:
        labels = overhead["job_step_labels"]
        step_rows = [
            [label, format_seconds(overhead["job_steps"][key]["median"])]
            for key, label in labels.items()
            if key in overhead["job_steps"]
        ]
        steps = (
            "\n\nAbove the goal, so each step inside the job was timed too, in "
            f"{len(overhead['job_steps']['session']['runs'])} more spark-submit runs "
            "(`bench/job_phases.py`, the job with a timer around each step):\n\n"
            + markdown_table(["job step (median)", "seconds"], step_rows)
        )
    return (
        f"DELETE of {overhead['rows_deleted']:,} rows (`{overhead['where']}`) from `{overhead['table']}` "
        f"(TPC-H SF {overhead['scale_factor']:g}), merge-on-read; median of {overhead['runs']} runs each, "
        f"after {overhead['warm_up_runs']} warm-up run(s) each, interleaved.\n\n"
        + markdown_table(["phase (median of runs)", *names], rows)
        + f"\n\n**Operator overhead: {format_percent(overhead['overhead'])}** (goal: at most "
        f"{format_percent(overhead['goal'])}). Runs: {runs}." + steps
    )


def _table_by_method(cases: list[dict[str, Any]], value: Callable[[dict[str, Any]], str], header: str) -> str:
    methods = list(cases[0]["methods"])
    rows = [[case["case"], *(value(case["methods"][method]) for method in methods)] for case in cases]
    return markdown_table([header, *methods], rows)


def _written(trials: dict[str, Any]) -> str:
    return f"{trials['files_written']:.0f} files, {format_bytes(trials['bytes_written'])}"


def _reads_table(cases: list[dict[str, Any]], key: str) -> str:
    """Read times after each change, with ratios to the read after Spark's copy-on-write change."""
    medians = {case["case"]: {m: t[key]["median"] for m, t in case["methods"].items()} for case in cases}
    return ratio_table("change", medians, baseline=COPY_ON_WRITE)


def changes_block(cases: list[dict[str, Any]]) -> str:
    """Wall time with ratios to ours, what was written, and the reads afterwards."""
    times = {
        f"{case['case']} ({case['lineitem_rows']:,} rows)": {
            m: t["seconds"]["median"] for m, t in case["methods"].items()
        }
        for case in cases
    }
    return "\n\n".join(
        [
            "Wall time (median):\n\n" + ratio_table("change", times, baseline=OURS),
            "Written (from the snapshot summaries):\n\n" + _table_by_method(cases, _written, "change"),
            "Full scan afterwards (median), against the same read after the copy-on-write change:\n\n"
            + _reads_table(cases, "full_scan_seconds"),
            "TPC-H Q6 afterwards (median), against the same read after the copy-on-write change:\n\n"
            + _reads_table(cases, "selective_seconds"),
        ]
    )


def _trials(repeats: int) -> str:
    return "one trial" if repeats == 1 else f"the median of {repeats} trials"


def tpch_setup_block(tpch: dict[str, Any]) -> str:
    rows, files = tpch["rows"], tpch["data_files"]
    before = tpch["reads_against_deletes"]["points"][0]
    trials = _trials(tpch["repeats"])
    return (
        f"TPC-H scale factor {tpch['scale_factor']:g}: `lineitem` {rows['lineitem']:,} rows in "
        f"{files['lineitem']} data files (partitioned by ship month), `orders` {rows['orders']:,} rows in "
        f"{files['orders']} data files (by order month); format v2. Each figure is {trials} per way, "
        f"the ways interleaved (after one warm-up trial each); after each "
        f"trial's change each query runs once. Before any change (median of {tpch['read_runs']} runs): "
        f"full scan {format_seconds(before['full_scan_seconds'])}, Q6 "
        f"{format_seconds(before['selective_seconds'])}. This run took "
        f"{tpch['runtime_seconds'] / 60:.0f} min."
    )


def reads_block(tpch: dict[str, Any]) -> str:
    series = tpch["reads_against_deletes"]
    base = series["points"][0]

    def row(label: str, point: dict[str, Any]) -> list[str]:
        return [
            label,
            f"{point['delete_files']} / {point['data_files']}",
            f"{point['position_deletes']:,}",
            format_seconds(point["full_scan_seconds"]),
            format_ratio(ratio(point["full_scan_seconds"], base["full_scan_seconds"])),
            format_seconds(point["selective_seconds"]),
            format_ratio(ratio(point["selective_seconds"], base["selective_seconds"])),
        ]

    rows = [row(str(point["deletes"]), point) for point in series["points"]]
    rows += [row(f"compacted, {variant}", point) for variant, point in series["after_compaction"].items()]
    compactions = "; ".join(
        f"{variant}: `{', '.join(f'{k}={v}' for k, v in series['compaction_options'][variant].items())}`, "
        f"{format_seconds(point['compaction_seconds'])}"
        for variant, point in series["after_compaction"].items()
    )
    each = format_percent(series["delete_fraction_each"])
    delete_time = format_seconds(median(series["delete_seconds"]))
    return (
        f"Each DELETE removes {each} of `lineitem` (a distinct `l_partkey` range, rows in every partition), "
        f"through our job, merge-on-read; median DELETE time {delete_time}. "
        f"Then, each from the same pile of deletes, one `rewrite_data_files` ({compactions}).\n\n"
        + markdown_table(
            [
                "deletes",
                "delete files / data files",
                "deleted positions",
                "full scan",
                "vs none",
                "Q6",
                "vs none",
            ],
            rows,
        )
    )


def driver_memory_block(memory: dict[str, Any]) -> str:
    rows = [
        [
            f"{run['positions']:,}",
            f"{run['table_rows']:,}",
            str(run["delete_files"]),
            format_seconds(run["seconds"]),
            format_bytes(run["peak_rss_bytes"]),
            format_bytes(run["peak_jvm_rss_bytes"]),
        ]
        for run in memory["runs"]
    ]
    return f"`spark.driver.memory`: {memory['driver_memory']}.\n\n" + markdown_table(
        [
            "positions deleted",
            "table rows",
            "delete files",
            "wall time",
            "peak RSS, JVM + Python",
            "peak RSS, JVM",
        ],
        rows,
    )


def _ratios_to_ours(cases: list[dict[str, Any]]) -> str:
    """Per other method, the range of its median time over ours across ``cases``."""
    others = [method for method in cases[0]["methods"] if method != OURS]
    ranges = []
    for method in others:
        ratios = [
            ratio(case["methods"][method]["seconds"]["median"], case["methods"][OURS]["seconds"]["median"])
            for case in cases
        ]
        ranges.append(f"{method} {format_ratio(min(ratios))} to {format_ratio(max(ratios))}")
    return ", ".join(ranges)


def _tpch_lines(tpch: dict[str, Any], scope: str) -> list[str]:
    cases = [*tpch["delete"], tpch["rf2"]]
    labels = ", ".join(case["case"] for case in cases)
    return [
        f"- DELETE ({labels}), {scope}: {_ratios_to_ours(cases)} the time of ours (merge-on-read).",
        f"- UPDATE ({', '.join(case['case'] for case in tpch['update'])}), {scope}: "
        f"{_ratios_to_ours(tpch['update'])} the time of ours.",
    ]


def summary_block(
    overhead: dict[str, Any] | None,
    tpch: dict[str, Any] | None,
    secondary: dict[str, Any] | None,
    memory: dict[str, Any] | None,
    engines: dict[str, Any] | None = None,
) -> str:
    lines = []
    if overhead:
        lines.append(
            f"- Operator end to end against a bare spark-submit of the same DELETE: "
            f"**{format_percent(overhead['overhead'])}** overhead, medians of {overhead['runs']} runs each "
            f"(goal: at most {format_percent(overhead['goal'])})."
        )
    if tpch:
        lines += _tpch_lines(tpch, f"TPC-H SF {tpch['scale_factor']:g}, {_trials(tpch['repeats'])}")
    if secondary:
        lines += _tpch_lines(
            secondary, f"TPC-H SF {secondary['scale_factor']:g}, {_trials(secondary['repeats'])}"
        )
    if tpch:
        series = tpch["reads_against_deletes"]
        first, last = series["points"][0], series["points"][-1]
        none = first["full_scan_seconds"]
        piled_up = format_ratio(ratio(last["full_scan_seconds"], none))
        compacted = ", ".join(
            f"{format_ratio(ratio(point['full_scan_seconds'], none))} ({variant})"
            for variant, point in series["after_compaction"].items()
        )
        lines.append(
            f"- Full scan after {last['deletes']} merge-on-read deletes: {piled_up} the time with none; "
            f"after one compaction {compacted}."
        )
    if memory:
        largest = memory["runs"][-1]
        lines.append(
            f"- Driver peak RSS for a DELETE of {largest['positions']:,} positions: "
            f"{format_bytes(largest['peak_rss_bytes'])} (default `spark.driver.memory`)."
        )
    if engines:
        lines += engines_summary_lines(engines)
    erasure = read_results(ERASURE)
    if erasure:
        lines += erasure_summary_lines(erasure)
    for name, section in (
        ("sensor_poll", "Sensor poll cost"),
        ("compaction", "Compaction payoff"),
        (NOOP_CHECK, "No-match check"),
    ):
        found = read_results(name)
        where = f"`bench/results/{name}.json`"
        state = (
            f"results {where} of {found.get('created', 'unknown date')}" if found else f"{where} not present"
        )
        lines.append(f"- {section}: see [{section}](#{section.lower().replace(' ', '-')}) ({state}).")
    return "\n".join(lines)


def noop_check_block(noop: dict[str, Any]) -> str:
    """The existence check alone, and the DELETE job with and without it, per table."""
    tables = noop["tables"]

    def median_of(table: dict[str, Any], side: Side) -> str:
        return format_seconds(table["sides"][side]["median"])

    def label(table: dict[str, Any]) -> str:
        return f"`{table['table']}` ({table['rows']:,} rows, {table['data_files']} data files)"

    predicates = "; ".join(
        f"`{table['table']}`: no match `{table['no_match_where']}`, match `{table['match_where']}` "
        f"({table['rows_matched']} rows)"
        for table in tables
    )
    check = markdown_table(
        [
            "table",
            *(str(side) for side in (Side.CHECK_NO_MATCH, Side.CHECK_MATCH, Side.JOB_MATCH)),
            *(f"{side} / {Side.JOB_MATCH}" for side in (Side.CHECK_NO_MATCH, Side.CHECK_MATCH)),
        ],
        [
            [
                label(table),
                *(median_of(table, side) for side in (Side.CHECK_NO_MATCH, Side.CHECK_MATCH, Side.JOB_MATCH)),
                format_percent(table["ratios"]["check_no_match_over_job"]),
                format_percent(table["ratios"]["check_match_over_job"]),
            ]
            for table in tables
        ],
    )
    jobs = markdown_table(
        [
            "table",
            str(Side.JOB_MATCH),
            str(Side.JOB_MATCH_UNCHECKED),
            "with / without check",
            f"{Side.JOB_NO_MATCH} (commits nothing)",
            f"{Side.JOB_NO_MATCH_UNCHECKED} (commits an empty snapshot)",
            "with / without check",
        ],
        [
            [
                f"`{table['table']}`",
                median_of(table, Side.JOB_MATCH),
                median_of(table, Side.JOB_MATCH_UNCHECKED),
                format_ratio(table["ratios"]["job_over_job_without_check"]),
                median_of(table, Side.JOB_NO_MATCH),
                median_of(table, Side.JOB_NO_MATCH_UNCHECKED),
                format_ratio(table["ratios"]["job_no_match_over_without_check"]),
            ]
            for table in tables
        ],
    )
    return (
        f"TPC-H scale factor {noop['scale_factor']:g}, merge-on-read, every job from the tagged base "
        f"snapshot; median of {noop['runs']} runs of each side, interleaved, after "
        f"{noop['warm_up_runs']} warm-up run each. Predicates: {predicates}. This run took "
        f"{noop['runtime_seconds'] / 60:.0f} min.\n\n"
        f"The check alone, against the matching DELETE job:\n\n{check}\n\n"
        f"The DELETE job with the check and without it (as before the check):\n\n{jobs}"
    )


CONNECT = str(Engine.CONNECT)
SPARK_SUBMIT = str(Engine.SPARK_SUBMIT)
PYICEBERG = str(Engine.PYICEBERG)


def _change_label(change: dict[str, Any], selectivity: float) -> str:
    return (
        f"{change['kind']} {format_percent(selectivity)}, SF {change['scale_factor']:g} "
        f"({change['rows']:,} of {change['table_rows']:,} rows)"
    )


def _engine_phases(engines: dict[str, Any], scale_factor: float) -> str:
    """The phases of each engine and kind at one scale factor, medians; "-" where a phase does not apply."""
    changes = [change for change in engines["changes"] if change["scale_factor"] == scale_factor]
    columns = [(change, side) for side in engines["engines"] for change in changes]
    rows = [
        [
            label,
            *(
                format_seconds(change["sides"][side]["phases"][key]["median"])
                if key in change["sides"][side]["phases"]
                else "-"
                for change, side in columns
            ),
        ]
        for key, label in engines["phase_labels"].items()
    ]
    rows.append(
        [
            "**total**",
            *(
                f"**{format_seconds(change['sides'][side]['total_seconds']['median'])}**"
                for change, side in columns
            ),
        ]
    )
    return markdown_table(
        [f"phase (median), SF {scale_factor:g}", *(f"{side}, {change['kind']}" for change, side in columns)],
        rows,
    )


def engines_block(engines: dict[str, Any]) -> str:
    """The warm engine against spark-submit and pyiceberg: server start, changes, backfill, memory, goals."""
    server, backfill = engines["server"], engines["backfill"]
    selectivity = engines["selectivity"]
    scales = " and ".join(f"{scale:g}" for scale in engines["scale_factors"])
    plural = "s" if len(engines["scale_factors"]) > 1 else ""
    setup = (
        f"TPC-H `lineitem` at scale factor{plural} {scales}, every change as an Airflow task (`dag.test()`). "
        f"Medians of {engines['runs']} runs of each engine, interleaved with their order rotated, each "
        f"from the tagged base snapshot, after {engines['warm_up_runs']} warm-up round per scale factor. "
        f"This run took {engines['runtime_seconds'] / 60:.0f} min.\n\n"
        f"The server: cold start {format_seconds(server['cold_start_seconds'])} "
        f"({format_seconds(server['listening_seconds'])} until it listened, then "
        f"{format_seconds(server['warm_up_seconds'])} for its warm-up); its first task (the "
        f"backfill's first change) took {format_seconds(server['first_task_seconds'])}."
    )
    times = {
        _change_label(change, selectivity): {
            side: change["sides"][side]["total_seconds"]["median"] for side in engines["engines"]
        }
        for change in engines["changes"]
    }
    wall = "Wall time of the task (median):\n\n" + ratio_table("change", times, baseline=CONNECT)
    runs = "\n".join(
        f"- {_change_label(change, selectivity)}: "
        + "; ".join(
            f"{side} "
            + " / ".join(format_seconds(value) for value in change["sides"][side]["total_seconds"]["runs"])
            for side in engines["engines"]
        )
        for change in engines["changes"]
    )
    phases = "\n\n".join(_engine_phases(engines, scale) for scale in engines["scale_factors"])
    sides = backfill["sides"]
    backfill_rows = [
        [
            side,
            format_seconds(sides[side]["total_seconds"]),
            format_seconds(sides[side]["median_seconds"]),
            format_seconds(sides[side]["seconds"][0]),
            f"{sides[side]['changes_per_minute']:.1f}",
        ]
        for side in (CONNECT, SPARK_SUBMIT)
    ]
    backfill_text = (
        f"Backfill: {backfill['changes']} changes in sequence on `{backfill['table']}` (SF "
        f"{backfill['scale_factor']:g}; {backfill['predicates']}, one task each), each engine from the "
        "same base snapshot:\n\n"
        + markdown_table(
            ["engine", "total", "median per change", "first change", "changes per minute"], backfill_rows
        )
        + f"\n\n**{format_ratio(backfill['speedup'])} the changes per minute** over the warm engine."
    )
    tasks = (
        backfill["changes"]
        + sum(len(change["sides"][CONNECT]["total_seconds"]["runs"]) for change in engines["changes"])
        + engines["warm_up_runs"] * len(engines["scale_factors"])
    )
    memory_rows = [
        [
            f"{point} (all {tasks} tasks it ran)" if point == "at the end" else point,
            format_bytes(values["rss_bytes"]) if values["rss_bytes"] is not None else "-",
            format_bytes(values["live_heap_bytes"]) if values["live_heap_bytes"] is not None else "-",
        ]
        for point, values in server["memory"].items()
    ]
    memory = "The server's memory:\n\n" + markdown_table(
        ["when", "resident memory (RSS)", "live heap after a full GC"], memory_rows
    )
    goal_lines = "\n".join(
        f"- {'met' if goal['met'] else '**missed**'}: {goal['goal']}: "
        + (format_seconds(goal["value"]) if goal["unit"] == "seconds" else format_ratio(goal["value"]))
        for goal in engines["goals"]
    )
    return "\n\n".join(
        [
            setup,
            wall,
            "Runs:\n\n" + runs,
            "Where the time goes (medians; a run's phases add up to its total):\n\n" + phases,
            backfill_text,
            memory,
            "Goals (issue 12):\n\n" + goal_lines,
        ]
    )


def engines_summary_lines(engines: dict[str, Any]) -> list[str]:
    """The warm engine in the summary: its medians and ratios, the backfill, memory, the goals."""
    selectivity = engines["selectivity"]
    lines = []
    for scale in engines["scale_factors"]:
        parts = []
        for change in engines["changes"]:
            if change["scale_factor"] != scale:
                continue
            medians = {side: change["sides"][side]["total_seconds"]["median"] for side in engines["engines"]}
            parts.append(
                f"{change['kind']} {format_seconds(medians[CONNECT])} (spark-submit took "
                f"{format_ratio(ratio(medians[SPARK_SUBMIT], medians[CONNECT]))} as long, pyiceberg "
                f"{format_ratio(ratio(medians[PYICEBERG], medians[CONNECT]))})"
            )
        lines.append(
            f"- Warm engine (Spark Connect), a {format_percent(selectivity)} change of `lineitem` as a task, "
            f"TPC-H SF {scale:g}, medians of {engines['runs']}: " + "; ".join(parts) + "."
        )
    backfill, memory = engines["backfill"], engines["server"]["memory"]
    first, last = memory.get("after the first change"), memory.get(f"after {backfill['changes']} changes")
    rss = (
        f"; server RSS {format_bytes(first['rss_bytes'])} after the first change, "
        f"{format_bytes(last['rss_bytes'])} after the last"
        if first and last and first["rss_bytes"] and last["rss_bytes"]
        else ""
    )
    if first and last and first["live_heap_bytes"] and last["live_heap_bytes"]:
        rss += (
            f" (live heap after a full GC {format_bytes(first['live_heap_bytes'])}, then "
            f"{format_bytes(last['live_heap_bytes'])})"
        )
    lines.append(
        f"- Backfill of {backfill['changes']} small changes: the warm engine makes "
        f"**{format_ratio(backfill['speedup'])}** the changes per minute of spark-submit{rss}. Server cold "
        f"start {format_seconds(engines['server']['cold_start_seconds'])}, first task "
        f"{format_seconds(engines['server']['first_task_seconds'])}."
    )
    met = sum(goal["met"] for goal in engines["goals"])
    missed = [goal["goal"] for goal in engines["goals"] if not goal["met"]]
    lines.append(
        f"- Warm engine goals: {met} of {len(engines['goals'])} met"
        + (f"; missed: {'; '.join(missed)}" if missed else "")
        + " (see [Warm engine (Spark Connect)](#warm-engine-spark-connect))."
    )
    return lines


def _files(writes: dict[str, Any]) -> str:
    written = writes["data_files_written"] + writes["delete_files_written"]
    data, deletes = writes["data_files_written"], writes["delete_files_written"]
    return f"{written:,.0f} ({data:,.0f} data + {deletes:,.0f} delete)"


def erasure_block(erasure: dict[str, Any]) -> str:
    """Batched against naive erasure, the purge against a full compaction, the checks."""
    tables, batched, naive = erasure["tables"], erasure["batched"], erasure["naive"]
    compaction, purge, ratios = erasure["compaction"], erasure["purge"], erasure["ratios"]
    erased, sample_rows = erasure["erased_rows"], erasure["sample_rows"]
    extrapolated = naive["extrapolated"]
    scale = extrapolated["customers"] / naive["customers"]
    orders, lineitem = tables["orders"], tables["lineitem"]
    setup = (
        f"TPC-H scale factor {erasure['scale_factor']:g}: `orders` {orders['total-records']:,} rows "
        f"in {orders['total-data-files']} data files, `lineitem` "
        f"{lineitem['total-records']:,} rows in {lineitem['total-data-files']} data files "
        f"(copies, made in {format_seconds(erasure['copy_seconds'])}). {erasure['customers']:,} customers "
        f"who have orders, evenly spread over the key range: {erased['orders']:,} orders and "
        f"{erased['lineitem']:,} line items. The naive sample, the first {naive['customers']} of them: "
        f"{sample_rows['orders']:,} orders and {sample_rows['lineitem']:,} line items. The Connect server "
        f"started in {format_seconds(erasure['server']['cold_start_seconds'])} (not counted). One run of "
        f"each side; this run took {erasure['runtime_seconds'] / 60:.0f} min."
    )
    naive_tasks = naive["tasks"]
    erase_rows = [
        [
            "batched: one `IcebergEraseOperator` task",
            f"{batched['customers']:,}",
            "1",
            format_seconds(batched["seconds"]),
            format_seconds(batched["seconds"] / batched["customers"]),
            f"{batched['writes']['snapshots']}",
            _files(batched["writes"]),
        ],
        [
            "naive: one `IcebergDeleteOperator` task per customer and table, measured sample",
            f"{naive['customers']:,}",
            f"{naive_tasks:,}",
            format_seconds(naive["seconds"]),
            format_seconds(naive["per_customer_seconds"]),
            f"{naive['writes']['snapshots']:,}",
            _files(naive["writes"]),
        ],
        [
            f"naive, **extrapolated** to {extrapolated['customers']:,} customers (the sample x {scale:g})",
            f"{extrapolated['customers']:,}",
            f"{naive_tasks * scale:,.0f}",
            f"{extrapolated['seconds'] / 60:.0f} min",
            format_seconds(naive["per_customer_seconds"]),
            f"{extrapolated['commits']:,.0f}",
            f"{extrapolated['files_written']:,.0f}",
        ],
    ]
    erase_table = markdown_table(
        ["way", "customers", "tasks", "wall time", "per customer", "commits", "files written"], erase_rows
    )
    trend = naive["task_trend_seconds"]
    medians = naive["task_median_seconds"]
    naive_text = (
        "**Naive (extrapolated) / batched: "
        f"{format_ratio(ratios['naive_extrapolated_over_batched_seconds'])} the time, "
        f"{format_ratio(ratios['naive_extrapolated_over_batched_files'])} the files written.** The measured "
        f"sample alone took {format_ratio(ratios['naive_sample_over_batched_seconds'])} the time "
        f"of the batched erasure of all {batched['customers']:,}. Naive task medians: `lineitem` "
        f"{format_seconds(medians['lineitem'])}, `orders` {format_seconds(medians['orders'])}; median of the "
        f"first {trend['lineitem']['tasks_each']} tasks against the last {trend['lineitem']['tasks_each']}: "
        f"`lineitem` {format_seconds(trend['lineitem']['first'])} then "
        f"{format_seconds(trend['lineitem']['last'])}, `orders` {format_seconds(trend['orders']['first'])} "
        f"then {format_seconds(trend['orders']['last'])}."
    )

    def left(entry: dict[str, Any]) -> str:
        return f"{entry['after']['total-data-files']} data, {entry['after']['total-delete-files']} delete"

    purge_tables, compaction_tables = purge["tables"], compaction["tables"]
    maintenance_rows = [
        [
            'purge (`mode="purge"`)',
            format_seconds(purge["seconds"]),
            f"{purge['data_files_rewritten']}",
            " / ".join(
                f"{purge_tables[kind]['data_files_with_erased_rows']}" for kind in ("orders", "lineitem")
            ),
            "; ".join(f"`{kind}` {left(purge_tables[kind])}" for kind in ("orders", "lineitem")),
        ],
        [
            "full compaction (`force=True, rewrite_all=True`)",
            format_seconds(compaction["seconds"]),
            f"{compaction['data_files_rewritten']}",
            "-",
            "; ".join(f"`{kind}` {left(compaction_tables[kind])}" for kind in ("orders", "lineitem")),
        ],
    ]
    maintenance = markdown_table(
        [
            "from the table after the batched erasure",
            "wall time",
            "data files rewritten",
            "data files that held erased rows (orders / lineitem)",
            "live files afterwards",
        ],
        maintenance_rows,
    )
    steps = markdown_table(
        ["purge step", "seconds"],
        [[purge["step_labels"][key], format_seconds(value)] for key, value in purge["steps"].items()],
    )
    expiry = "; ".join(
        f"`{kind}`: {purge_tables[kind]['snapshots_expired']} snapshots expired, "
        f"{purge_tables[kind]['files_deleted_by_expiry']} files deleted by the expiry, verification read "
        f"{purge_tables[kind]['verification']['files_referenced']} referenced and "
        f"{purge_tables[kind]['verification']['files_on_storage']} stored files for "
        f"{purge_tables[kind]['verification']['keys_checked']:,} keys"
        for kind in ("orders", "lineitem")
    )
    checks = erasure["checks"]
    check_lines = "\n".join(
        [
            f"- after the batched erasure: {checks['batched']['orders_remaining']} orders and "
            f"{checks['batched']['lineitem_remaining']} line items of the {erasure['customers']:,} customers "
            f"live; {checks['batched']['orders_live']:,} and {checks['batched']['lineitem_live']:,} rows "
            "live (the base less exactly the erased rows); the report's `rows_deleted` equal to the rows "
            "counted before;",
            f"- after the naive sample: {checks['naive']['orders_remaining']} orders and "
            f"{checks['naive']['lineitem_remaining']} line items of its {naive['customers']} customers live; "
            f"{checks['naive']['orders_live']:,} and {checks['naive']['lineitem_live']:,} rows live;",
            f"- after the purge: status `{purge['status']}`, verification clean on both tables ({expiry}); "
            f"{checks['purge']['orders_raw_hits']} and {checks['purge']['lineitem_raw_hits']} rows with an "
            "erased key in any Parquet file under the tables' locations, read again by the benchmark without "
            f"delete files; {checks['purge']['orders_live']:,} and {checks['purge']['lineitem_live']:,} rows "
            "live (none lost).",
        ]
    )
    return "\n\n".join(
        [
            setup,
            "Erasing the customers from `orders` and `lineitem`:\n\n" + erase_table,
            naive_text,
            "Removing the erased rows from the data files:\n\n"
            + maintenance
            + f"\n\n**Purge / full compaction: {format_ratio(ratios['purge_over_compaction_seconds'])} the "
            "time.**",
            "Where the purge's time goes (from the job's own lines; the steps add up to its wall time):\n\n"
            + steps,
            "Checked in the run (not timed):\n\n" + check_lines,
        ]
    )


def erasure_summary_lines(erasure: dict[str, Any]) -> list[str]:
    batched, naive, ratios = erasure["batched"], erasure["naive"], erasure["ratios"]
    extrapolated = naive["extrapolated"]
    return [
        f"- Privacy erasure of {erasure['customers']:,} customers from TPC-H SF {erasure['scale_factor']:g} "
        f"`orders` and `lineitem`: batched {format_seconds(batched['seconds'])} and "
        f"{batched['files_written']:,} files; naive {format_seconds(naive['per_customer_seconds'])} per "
        f"customer (a sample of {naive['customers']}), extrapolated "
        f"{extrapolated['seconds'] / 60:.0f} min and {extrapolated['files_written']:,.0f} files "
        f"(**{format_ratio(ratios['naive_extrapolated_over_batched_seconds'])}** the time). Purge "
        f"{format_seconds(erasure['purge']['seconds'])} against a full compaction's "
        f"{format_seconds(erasure['compaction']['seconds'])} "
        f"({format_ratio(ratios['purge_over_compaction_seconds'])}), verification clean "
        "(see [Privacy erasure](#privacy-erasure))."
    ]


def secondary_scale_block(tpch: dict[str, Any]) -> str:
    """The whole TPC-H comparison at another scale factor, under ``####`` headings."""
    return "\n\n".join(
        [
            tpch_setup_block(tpch),
            "#### DELETE\n\n" + changes_block([*tpch["delete"], tpch["rf2"]]),
            "#### UPDATE\n\n" + changes_block(tpch["update"]),
            "#### Reads as merge-on-read deletes pile up\n\n" + reads_block(tpch),
        ]
    )


def update_docs() -> None:
    """Rewrite the generated blocks and the plots from the results of the last full runs."""
    overhead, tpch, memory = read_results("overhead"), read_results("tpch"), read_results("driver_memory")
    runtimes_path = results_dir(quick=False) / "runtimes.json"
    text = DOCS.read_text()
    secondary = read_results(results_name(SECONDARY_SCALE_FACTOR))
    engines = read_results(ENGINES)
    blocks: dict[str, str] = {"summary": summary_block(overhead, tpch, secondary, memory, engines)}
    newest = max((r for r in (overhead, tpch, memory) if r), key=lambda r: str(r["created"]), default=None)
    if newest:
        blocks["machine"] = machine_block(newest)
    if runtimes_path.is_file():
        blocks["runtime"] = runtime_block(json.loads(runtimes_path.read_text()))
    if overhead:
        blocks["overhead"] = overhead_block(overhead)
    if tpch:
        blocks["tpch-setup"] = tpch_setup_block(tpch)
        blocks["tpch-delete"] = changes_block([*tpch["delete"], tpch["rf2"]])
        blocks["tpch-update"] = changes_block(tpch["update"])
        blocks["tpch-reads"] = reads_block(tpch)
        IMAGES.mkdir(parents=True, exist_ok=True)
        plots.time_against_selectivity(tpch, DELETE_PLOT)
        plots.reads_against_deletes(tpch, READS_PLOT)
    if secondary:
        blocks["tpch-secondary"] = secondary_scale_block(secondary)
    if memory:
        blocks["driver-memory"] = driver_memory_block(memory)
    noop = read_results(NOOP_CHECK)
    if noop:
        blocks["noop-check"] = noop_check_block(noop)
    if engines:
        blocks["engines"] = engines_block(engines)
    erasure = read_results(ERASURE)
    if erasure:
        blocks["erasure"] = erasure_block(erasure)
    for name, content in blocks.items():
        text = replace_block(text, name, content)
    DOCS.write_text(text)
    log(f"updated {DOCS.relative_to(REPO)} ({', '.join(blocks)}) and the plots in {IMAGES.relative_to(REPO)}")
