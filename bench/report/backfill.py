"""The backfill benchmark's report: each backfill's ratios against spark-submit and the no-op floor, the
tables it prints (and docs/benchmarks.md quotes), and its plot ``docs/img/backfill.png``."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from bench.common import markdown_table
from bench.cpu_use import PART_HEADERS, ROLE_LABELS, SERVER_PARTS, per_change
from bench.task_phases import JOB_PARTS, PHASES

if TYPE_CHECKING:
    from pathlib import Path

LABELS = {"connect": "warm engine", "submit": "spark-submit", "noop": "no-op task"}


def _median_rate(
    rows: list[dict[str, Any]], engine_kind: str, level: int, clean_days: int = 0
) -> float | None:
    """The median changes per minute of ``engine_kind``'s backfills at ``level`` with ``clean_days``
    (None: none ran)."""
    rates = [
        r["changes_per_minute"]
        for r in rows
        if (r["engine"], r["max_active_runs"], r.get("clean_days", 0)) == (engine_kind, level, clean_days)
    ]
    return statistics.median(rates) if rates else None


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Each backfill's changes per minute against the median of spark-submit's with as many clean days and
    the no-op's, at the same level (one backfill each unless ``--repeat``)."""
    for row in rows:
        for baseline in ("submit", "noop"):
            clean = row.get("clean_days", 0) if baseline == "submit" else 0
            rate = _median_rate(rows, baseline, row["max_active_runs"], clean)
            if rate is not None and row["engine"] != baseline:
                row[f"vs_{baseline}"] = row["changes_per_minute"] / rate


def label(row: dict[str, Any]) -> str:
    """The engine's label, and the days already clean of a re-run (``--clean-days``)."""
    clean = row.get("clean_days", 0)
    return LABELS[row["engine"]] + (f", {clean} of {row['days']} days clean" if clean else "")


def _commits_cell(row: dict[str, Any]) -> str:
    return f"{row['commits']} ({row['largest_group']})" if row.get("commits") else ""


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a markdown table (docs/benchmarks.md)."""
    return markdown_table(
        ["engine", "max active runs", "changes/min", "vs spark-submit", "vs no-op", "task p50", "task p95",
         "commits (largest group)", "conflicts re-planned", "retries", "failures", "peak memory"],
        [
            [
                label(row),
                str(row["max_active_runs"]),
                f"{row['changes_per_minute']:.1f}",
                f"{row['vs_submit']:.1f}x" if "vs_submit" in row else "",
                f"{row['vs_noop']:.2f}x" if "vs_noop" in row else "",
                f"{row['task_p50_s']:.1f} s",
                f"{row['task_p95_s']:.1f} s",
                _commits_cell(row),
                str(row["conflicts_replanned"]),
                str(row["task_retries"]),
                str(row["task_failures"]),
                f"{row['peak_memory_bytes'] / 2**30:.1f} GiB",
            ]
            for row in rows
        ],
    )  # fmt: skip


def phases_table(rows: list[dict[str, Any]]) -> str:
    """Where a warm-engine task's time went (medians, bench/task_phases.py)."""
    measured = [row for row in rows if row.get("task_phases")]
    return markdown_table(
        ["max active runs", "tasks with a job", "applied by another", *PHASES, "said it needs compaction"],
        [
            [
                str(row["max_active_runs"]),
                str(row["task_phases"]["tasks_with_job"]),
                f"{row['task_phases']['tasks_applied_by_another']} "
                f"({row['task_phases']['applied_by_another_median_s']:.1f} s)",
                *(f"{row['task_phases']['median_s'][name]:.1f} s" for name in PHASES),
                f"{row['task_phases'].get('tasks_saying_needs_compaction', '')} of {row['changes']}",
            ]
            for row in measured
        ],
    )


def chain_table(rows: list[dict[str, Any]]) -> str:
    """The warm engine's jobs one after another (bench/task_phases.py): the commits its task logs show,
    the time between two of them, and a job's two parts (medians)."""
    measured = [row for row in rows if (row.get("task_phases") or {}).get("commit_interval_median_s")]
    return markdown_table(
        ["max active runs", "commits", "between two commits", "checks and count", "statement and commit",
         "a group's last task after its commit"],
        [
            [
                str(row["max_active_runs"]),
                str(row["task_phases"]["commits_logged"]),
                f"{row['task_phases']['commit_interval_median_s']:.2f} s",
                *(f"{row['task_phases']['job_parts_median_s'][name]:.2f} s" for name in JOB_PARTS),
                f"{lag:.2f} s" if (lag := row["task_phases"].get("group_last_end_after_commit_median_s"))
                is not None else "",
            ]
            for row in measured
        ],
    )  # fmt: skip


def remediation_table(rows: list[dict[str, Any]]) -> str:
    """A re-run's work (``--clean-days``): the tasks that ended as no-ops, the tasks that ran a job of their
    own (the warm engine's task logs), and the commits and the changes they applied."""
    return markdown_table(
        ["engine", "max active runs", "changes/min", "no-op tasks", "tasks with a job of their own",
         "commits (largest group)", "changes committed"],
        [
            [
                label(row),
                str(row["max_active_runs"]),
                f"{row['changes_per_minute']:.1f}",
                str(row["noop_tasks"]),
                str(row["task_phases"]["tasks_with_job"]) if row.get("task_phases") else "",
                _commits_cell(row),
                str(row["changes_committed"]),
            ]
            for row in rows
            if row["engine"] != "noop"
        ],
    )  # fmt: skip


def requests_table(rows: list[dict[str, Any]]) -> str:
    """What the tasks asked of Airflow's API server (bench/task_phases.py ``api_requests``): requests a
    task, and the routes, each with its requests a task."""
    return markdown_table(
        ["engine", "max active runs", "requests a task", "by route (a task)"],
        [
            [
                label(row),
                str(row["max_active_runs"]),
                f"{row['api_requests_per_task']:.1f}",
                ", ".join(
                    f"{route} {count / row['changes']:.2f}" for route, count in row["api_requests"].items()
                ),
            ]
            for row in rows
            if row.get("api_requests_per_task") is not None
        ],
    )


def cpu_per_change_table(rows: list[dict[str, Any]]) -> str:
    """Each process's CPU seconds per change (``bench/cpu_use.py``)."""
    return markdown_table(
        ["engine", "max active runs", "all", *ROLE_LABELS.values()],
        [
            [
                label(row),
                str(row["max_active_runs"]),
                f"{row['cpu_seconds']['machine'] / row['changes']:.2f} s",
                *(f"{seconds:.2f} s" for seconds in per_change(row["cpu_seconds"], row["changes"]).values()),
            ]
            for row in rows
            if "cpu_seconds" in row
        ],
    )


def cpu_table(rows: list[dict[str, Any]]) -> str:
    """How busy the machine's cores were during each backfill, and the warm engine's share."""
    return markdown_table(
        ["engine", "max active runs", "CPU busy", "of it, the warm engine's server", "the rest"],
        [
            [
                label(row),
                str(row["max_active_runs"]),
                f"{row['machine_cpu_share']:.0%}",
                f"{row['engine_cpu_share']:.0%}" if row["engine"] == "connect" else "",
                f"{row['machine_cpu_share'] - row['engine_cpu_share']:.0%}",
            ]
            for row in rows
            if "machine_cpu_share" in row
        ],
    )


def engine_threads_table(rows: list[dict[str, Any]]) -> str:
    """The warm engine's server's CPU per commit, and its shares by the JVM's threads that spent it."""
    return markdown_table(
        [
            "max active runs",
            "commits",
            "the server's CPU per commit",
            *(f"of it, {PART_HEADERS[p]}" for p in SERVER_PARTS),
        ],
        [
            [
                str(row["max_active_runs"]),
                str(row["commits"]),
                f"{row['cpu_seconds']['engine'] / max(row['commits'], 1):.2f} s",
                *(
                    f"{row['engine_cpu_seconds'][part] / max(row['cpu_seconds']['engine'], 1e-9):.0%}"
                    for part in SERVER_PARTS
                ),
            ]
            for row in rows
            if "engine_cpu_seconds" in row
        ],
    )


def slots_table(rows: list[dict[str, Any]]) -> str:
    """How long a task's executor slot stayed taken after the task's end."""
    return markdown_table(
        ["engine", "max active runs", "slot held after the end: median", "max", "tasks over 1 s"],
        [
            [
                label(row),
                str(row["max_active_runs"]),
                f"{row['slot_held_after_end_median_s']:.2f} s",
                f"{row['slot_held_after_end_max_s']:.2f} s",
                f"{row['slots_held_over_1s']} of {row['changes']}",
            ]
            for row in rows
            if row.get("slot_held_after_end_median_s") is not None
        ],
    )


def slot_use_table(rows: list[dict[str, Any]]) -> str:
    """How each backfill used the executor's slots (bench/task_phases.py ``slot_use``)."""
    return markdown_table(
        ["engine", "max active runs", "before the first task", "first task to last", "after the last task",
         "task mean", "slots busy"],
        [
            [
                label(row),
                str(row["max_active_runs"]),
                *(f"{use[name]:.1f} s" for name in ("before_first", "span", "after_last")),
                f"{use['mean_task']:.2f} s",
                f"{use['slots_busy']:.0%}",
            ]
            for row in rows
            if (use := row.get("slot_use"))
        ],
    )  # fmt: skip


def plot(rows: list[dict[str, Any]], target: Path) -> None:
    """Changes per minute per engine (the median of its backfills), one group of bars per max_active_runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted({row["max_active_runs"] for row in rows})
    kinds = [kind for kind in LABELS if any(row["engine"] == kind for row in rows)]
    figure, axes = plt.subplots(figsize=(8.0, 3.2), dpi=80)
    width = 0.8 / len(kinds)
    for offset, kind in enumerate(kinds):
        values = [_median_rate(rows, kind, level) or 0 for level in levels]
        axes.bar([i + offset * width for i in range(len(levels))], values, width, label=LABELS[kind])
    axes.set_xticks(
        [i + width * (len(kinds) - 1) / 2 for i in range(len(levels))],
        [f"max_active_runs {n}" for n in levels],
    )
    axes.set_ylabel("changes per minute")
    axes.set_yscale("log")
    axes.grid(alpha=0.3, axis="y")
    axes.legend()
    figure.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target)
    plt.close(figure)
