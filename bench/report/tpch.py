"""The TPC-H, overhead, runtime and driver memory blocks of docs/benchmarks.md."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.bench_tpch import Method
from bench.common import (
    REPO,
    format_bytes,
    format_percent,
    format_ratio,
    format_seconds,
    markdown_table,
    median,
    ratio,
    ratio_table,
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
        f"Each DELETE removes {each} of `lineitem` "
        "(a distinct `l_partkey` range, its rows spread over the partitions), "
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
