"""The summary lines of docs/benchmarks.md for many changes at once (bench/report/many_changes.py): pure
logic on results shaped as `bench backfill`, `bench writers` and `bench engine_hours` write them."""

from __future__ import annotations

from typing import Any

from bench.report.many_changes import backfill_line, engine_hours_line, writers_line


def _row(engine: str, level: int, rate: float, **fields: Any) -> dict[str, Any]:
    return {
        "engine": engine,
        "max_active_runs": level,
        "changes": 60,
        "changes_per_minute": rate,
        "task_retries": 0,
        "task_failures": 0,
        **fields,
    }


def _backfill(*rows: dict[str, Any]) -> dict[str, Any]:
    return {"created": "2026-12-05T12:52:30+00:00", "days": 30, "rows": list(rows)}


def test_each_level_says_which_goal_it_met_and_which_it_missed() -> None:
    line = backfill_line(
        _backfill(
            _row("connect", 8, 170.9, vs_submit=10.84, vs_noop=0.57),
            _row("submit", 8, 15.8),
            _row("connect", 16, 235.8, vs_submit=8.72, vs_noop=0.64),
            _row("connect", 16, 224.0, vs_submit=10.2, vs_noop=0.45, task_retries=1),
        )
    )
    assert line is not None
    at_8, at_16 = line.split("; at 16")
    assert "at 8 max active runs, 170.9 changes per minute, 10.84x spark-submit's" in at_8
    assert at_8.endswith("0 retries or failures: goals met")
    assert "235.8 and 224.0 changes per minute, 8.72x and 10.20x (median 9.46x) spark-submit's" in at_16
    assert "and 0.64x and 0.45x (median 0.55x) the no-op floor's" in at_16
    assert "1 retries or failures: missed 10x spark-submit, half the floor and no retry or failure" in at_16
    assert "run of 2026-12-05" in line


def test_a_backfill_without_baselines_or_only_remediation_reruns_has_no_line() -> None:
    assert backfill_line(_backfill(_row("connect", 8, 170.9))) is None
    rerun = _row("connect", 8, 300.0, vs_submit=20.0, vs_noop=0.9, clean_days=24)
    assert backfill_line(_backfill(rerun)) is None


def test_writers_say_what_racing_lost_and_whether_every_change_took_one_try() -> None:
    def row(writers: int, mode: str, first_try: int, failed: int, vs_racing: float) -> dict[str, Any]:
        return {
            "writers": writers,
            "mode": mode,
            "first_try_succeeded": first_try,
            "failed": failed,
            "throughput_vs_racing": vs_racing,
        }

    results = {
        "created": "2026-12-06T11:26:25+00:00",
        "rows": [
            row(8, "racing", 8, 0, 1.0),
            row(8, "turns", 8, 0, 0.98),
            row(8, "group commit", 8, 0, 4.06),
            row(16, "racing", 11, 5, 1.0),
            row(16, "turns", 16, 0, 1.45),
            row(16, "group commit", 16, 0, 6.57),
        ],
    }
    line = writers_line(results)
    assert "(8 and 16 changes at once" in line
    assert "made 4.06x and 6.57x racing's changes per minute; racing lost 0 and 5 writers" in line
    assert "every change on its first try" in line
    results["rows"][-1]["first_try_succeeded"] = 15
    assert "first try" not in writers_line(results)


def test_the_engine_over_many_changes_names_live_sessions_only_when_there_were_some() -> None:
    hours = {
        "changes": 500,
        "rss_first_bytes": 700 * 2**20,
        "rss_last_bytes": 1.7 * 2**30,
        "rss_growth_second_half_bytes": 115 * 2**20,
        "max_live_sessions_at_samples": 0,
    }
    assert "700.0 MiB after the first, 1.7 GiB after the last (+115.0 MiB" in engine_hours_line(hours)
    assert "no live session at any sample" in engine_hours_line(hours)
    assert "at most 2 live sessions" in engine_hours_line({**hours, "max_live_sessions_at_samples": 2})
