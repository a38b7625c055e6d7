"""The summary block of docs/benchmarks.md: one line per goal, from every benchmark's results."""

from __future__ import annotations

from typing import Any

from bench.bench_erasure import NAME as ERASURE
from bench.bench_noop_check import NAME as NOOP_CHECK
from bench.common import (
    format_bytes,
    format_percent,
    format_ratio,
    ratio,
    read_results,
)
from bench.report.engines import engines_summary_lines
from bench.report.erasure import erasure_summary_lines
from bench.report.many_changes import many_changes_summary_lines
from bench.report.tpch import OURS, _trials


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
    lines += many_changes_summary_lines()
    erasure = read_results(ERASURE)
    if erasure:
        lines += erasure_summary_lines(erasure)
    for name, section in (
        ("sensor_poll", "Sensor poll cost"),
        ("history_lookup", "Run key lookup"),
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
