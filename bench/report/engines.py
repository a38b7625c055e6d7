"""The warm engine against spark-submit and pyiceberg: its blocks of docs/benchmarks.md."""

from __future__ import annotations

from typing import Any

from bench.common import (
    format_bytes,
    format_percent,
    format_ratio,
    format_seconds,
    markdown_table,
    ratio,
    ratio_table,
)
from bench.engine_tasks import Engine

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


def _backfill_text(backfill: dict[str, Any]) -> str:
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
    return (
        f"Backfill: {backfill['changes']} changes in sequence on `{backfill['table']}` (SF "
        f"{backfill['scale_factor']:g}; {backfill['predicates']}, one task each), each engine from the "
        "same base snapshot:\n\n"
        + markdown_table(
            ["engine", "total", "median per change", "first change", "changes per minute"], backfill_rows
        )
        + f"\n\n**{format_ratio(backfill['speedup'])} the changes per minute** over the warm engine."
    )


def _memory_text(engines: dict[str, Any]) -> str:
    server, backfill = engines["server"], engines["backfill"]
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
    return "The server's memory:\n\n" + markdown_table(
        ["when", "resident memory (RSS)", "live heap after a full GC"], memory_rows
    )


def engines_block(engines: dict[str, Any]) -> str:
    """The warm engine against spark-submit and pyiceberg: server start, changes, backfill, memory, goals."""
    server = engines["server"]
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
    backfill_text, memory = _backfill_text(engines["backfill"]), _memory_text(engines)
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
        f"- {backfill['changes']} small changes one after another (a task each): the warm engine makes "
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
