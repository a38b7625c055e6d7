"""The summary's lines for many changes at once: a backfill under Airflow's scheduler, many writers on one
table, and an engine over hundreds of changes (`bench backfill`, `bench writers`, `bench engine_hours`)."""

from __future__ import annotations

from typing import Any

from bench.common import format_bytes, format_ratio, median, read_results

#: Issue 22's goals for a backfill on the warm engine: its changes per minute against spark-submit's and
#: against the no-op task's (Airflow's floor), with no task retried and none failed.
SUBMIT_GOAL, FLOOR_GOAL = 10.0, 0.5


def _joined(values: list[str]) -> str:
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]


def _ratios(rows: list[dict[str, Any]], key: str) -> str:
    """Each backfill's ratio, and their median when there are several (what the README's table gives)."""
    each = _joined([format_ratio(row[key]) for row in rows])
    return each if len(rows) == 1 else f"{each} (median {format_ratio(median([row[key] for row in rows]))})"


def _level_line(rows: list[dict[str, Any]], level: int) -> str | None:
    """One ``max_active_runs`` of a backfill run: the warm engine's backfills against the baselines."""
    ours = [row for row in rows if (row["engine"], row["max_active_runs"]) == ("connect", level)]
    if not ours or any("vs_submit" not in row or "vs_noop" not in row for row in ours):
        return None
    missed = [
        goal
        for goal, met in (
            (f"{SUBMIT_GOAL:g}x spark-submit", all(row["vs_submit"] >= SUBMIT_GOAL for row in ours)),
            ("half the floor", all(row["vs_noop"] >= FLOOR_GOAL for row in ours)),
            ("no retry or failure", all(row["task_retries"] == row["task_failures"] == 0 for row in ours)),
        )
        if not met
    ]
    rates = _joined([f"{row['changes_per_minute']:.1f}" for row in ours])
    return (
        f"at {level} max active runs, {rates} changes per minute, "
        f"{_ratios(ours, 'vs_submit')} spark-submit's and {_ratios(ours, 'vs_noop')} the no-op floor's, "
        f"{sum(row['task_retries'] + row['task_failures'] for row in ours)} retries or failures: "
        + (f"missed {_joined(missed)}" if missed else "goals met")
    )


def backfill_line(backfill: dict[str, Any]) -> str | None:
    """The last full run of ``bench backfill``, each of its levels (None: it ran no baseline)."""
    rows = [row for row in backfill["rows"] if not row.get("clean_days")]
    levels = sorted({row["max_active_runs"] for row in rows})
    parts = [line for line in (_level_line(rows, level) for level in levels) if line]
    if not parts:
        return None
    return (
        f"- Backfill under Airflow's scheduler (`airflow backfill create`, {rows[0]['changes']} changes over "
        f"{backfill['days']} days, PostgreSQL, LocalExecutor), the warm engine, run of "
        f"{backfill['created'][:10]}: "
        + "; ".join(parts)
        + f" (goals: at least {SUBMIT_GOAL:g}x spark-submit's changes per minute, half the no-op floor's, no "
        "retry or failure; see [A backfill under Airflow's scheduler](#a-backfill-under-airflows-scheduler))."
    )


def writers_line(writers: dict[str, Any]) -> str:
    """Group commit against racing, and what racing lost, at each number of writers."""
    by_mode: dict[str, list[dict[str, Any]]] = {}
    for row in writers["rows"]:
        by_mode.setdefault(row["mode"], []).append(row)
    counts = _joined([str(row["writers"]) for row in by_mode["group commit"]])
    every_first_try = all(
        row["first_try_succeeded"] == row["writers"] for row in by_mode["group commit"] + by_mode["turns"]
    )
    return (
        f"- Many writers on one table ({counts} changes at once, one warm engine), run of "
        f"{writers['created'][:10]}: group commit (the default) made "
        f"{_joined([format_ratio(row['throughput_vs_racing']) for row in by_mode['group commit']])} "
        f"racing's changes per minute; racing lost "
        f"{_joined([str(row['failed']) for row in by_mode['racing']])} writers"
        + (", taking turns and group commit none: every change on its first try" if every_first_try else "")
        + " (see [Many writers on one table](#many-writers-on-one-table))."
    )


def engine_hours_line(hours: dict[str, Any]) -> str:
    """The server's memory over many changes, and the sessions it kept."""
    sessions = hours["max_live_sessions_at_samples"]
    first, last = format_bytes(hours["rss_first_bytes"]), format_bytes(hours["rss_last_bytes"])
    growth = format_bytes(hours["rss_growth_second_half_bytes"])
    return (
        f"- A warm engine over {hours['changes']} changes: server RSS {first} after the first, {last} after "
        f"the last (+{growth} over the second half), "
        + (
            "no live session at any sample"
            if sessions == 0
            else f"at most {sessions} live sessions at its samples"
        )
        + " (see [A warm engine over 500 changes](#a-warm-engine-over-500-changes))."
    )


def many_changes_summary_lines() -> list[str]:
    """The lines of the results present (a benchmark never run has none)."""
    lines = []
    backfill, writers, hours = read_results("backfill"), read_results("writers"), read_results("engine_hours")
    if backfill and (line := backfill_line(backfill)):
        lines.append(line)
    if writers:
        lines.append(writers_line(writers))
    if hours:
        lines.append(engine_hours_line(hours))
    return lines
