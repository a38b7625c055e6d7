"""The no-op pre-check block of docs/benchmarks.md."""

from __future__ import annotations

from typing import Any

from bench.bench_noop_check import Side
from bench.common import (
    format_percent,
    format_ratio,
    format_seconds,
    markdown_table,
)


def _median_of(table: dict[str, Any], side: Side) -> str:
    return format_seconds(table["sides"][side]["median"])


def _jobs_table(tables: list[dict[str, Any]]) -> str:
    """The DELETE job with the check and without it, on a match and on a no-match."""
    return markdown_table(
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
                _median_of(table, Side.JOB_MATCH),
                _median_of(table, Side.JOB_MATCH_UNCHECKED),
                format_ratio(table["ratios"]["job_over_job_without_check"]),
                _median_of(table, Side.JOB_NO_MATCH),
                _median_of(table, Side.JOB_NO_MATCH_UNCHECKED),
                format_ratio(table["ratios"]["job_no_match_over_without_check"]),
            ]
            for table in tables
        ],
    )


def noop_check_block(noop: dict[str, Any]) -> str:
    """The existence check alone, and the DELETE job with and without it, per table."""
    tables = noop["tables"]

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
                *(
                    _median_of(table, side)
                    for side in (Side.CHECK_NO_MATCH, Side.CHECK_MATCH, Side.JOB_MATCH)
                ),
                format_percent(table["ratios"]["check_no_match_over_job"]),
                format_percent(table["ratios"]["check_match_over_job"]),
            ]
            for table in tables
        ],
    )
    jobs = _jobs_table(tables)
    return (
        f"TPC-H scale factor {noop['scale_factor']:g}, merge-on-read, every job from the tagged base "
        f"snapshot; median of {noop['runs']} runs of each side, interleaved, after "
        f"{noop['warm_up_runs']} warm-up run each. Predicates: {predicates}. This run took "
        f"{noop['runtime_seconds'] / 60:.0f} min.\n\n"
        f"The check alone, against the matching DELETE job:\n\n{check}\n\n"
        f"The DELETE job with the check and without it (as before the check):\n\n{jobs}"
    )
