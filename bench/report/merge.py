"""The MERGE benchmark's blocks of docs/benchmarks.md (``merge``, and ``merge-summary`` after the summary)
and its plot, from ``bench/results/merge.json``. The runner's own refresh of the page does not know these
blocks: ``bench/bench_merge.py`` rewrites them after a full run, or with ``--docs-only``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.common import (
    REPO,
    format_bytes,
    format_percent,
    format_ratio,
    format_seconds,
    log,
    markdown_table,
    ratio,
    read_results,
)
from bench.merge_tables import Mode

if TYPE_CHECKING:
    from pathlib import Path

#: The benchmark's results name (``bench/results/merge.json``).
NAME = "merge"
PLOT = REPO / "docs" / "img" / "bench_merge.png"
#: Generated blocks of docs/benchmarks.md this benchmark writes itself.
BLOCK, SUMMARY_BLOCK = "merge", "merge-summary"


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


_MOR, _COW = str(Mode.MERGE_ON_READ), str(Mode.COPY_ON_WRITE)


def _case_label(case: dict[str, Any]) -> str:
    return f"{format_percent(case['fraction'])} ({case['updated']:,} updated, {case['inserted']:,} inserted)"


def _seconds(case: dict[str, Any], mode: str, key: str = "seconds", *, steps: bool = False) -> float:
    values = case["modes"][mode]["steps"] if steps else case["modes"][mode]
    value: float = values[key]["median"] if key in values else 0.0  # a step older results lack
    return value


def _times_table(cases: list[dict[str, Any]]) -> str:
    rows = [
        [
            _case_label(case),
            format_seconds(_seconds(case, _MOR)),
            format_seconds(_seconds(case, _COW)),
            format_ratio(ratio(_seconds(case, _COW), _seconds(case, _MOR))),
            _files(case["modes"][_MOR]),
            _files(case["modes"][_COW]),
            f"{case['modes'][_COW]['data_files_removed']:g}",
            format_bytes(case["modes"][_MOR]["bytes_written"]),
            format_bytes(case["modes"][_COW]["bytes_written"]),
        ]
        for case in cases
    ]
    return markdown_table(
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
        rows,
    )


def _reads_table(cases: list[dict[str, Any]]) -> str:
    rows = [
        [
            _case_label(case),
            format_seconds(case["base_full_scan_seconds"]),
            format_seconds(_seconds(case, _MOR, "full_scan_seconds")),
            format_seconds(_seconds(case, _COW, "full_scan_seconds")),
            format_ratio(ratio(_seconds(case, _MOR, "full_scan_seconds"), case["base_full_scan_seconds"])),
            format_ratio(
                ratio(_seconds(case, _MOR, "full_scan_seconds"), _seconds(case, _COW, "full_scan_seconds"))
            ),
        ]
        for case in cases
    ]
    return markdown_table(
        [
            "share updated",
            "full scan before",
            "after MoR",
            "after CoW",
            "after MoR / before",
            "after MoR / after CoW",
        ],
        rows,
    )


def _steps_table(cases: list[dict[str, Any]], labels: dict[str, str]) -> str:
    columns = [(case, mode) for case in cases for mode in (_MOR, _COW)]
    rows = [
        [label_text, *(format_seconds(_seconds(case, mode, key, steps=True)) for case, mode in columns)]
        for key, label_text in labels.items()
    ]

    def before_merge(case: dict[str, Any], mode: str) -> str:
        spent = sum(
            _seconds(case, mode, key, steps=True)
            for key in ("_check_on_names_both_sides", "_change_is_certain", "_validate", "_count")
        )
        return f"**{format_percent(spent / _seconds(case, mode))}**"

    rows.append(
        [
            "**before the MERGE (validate, certain?, count) / job**",
            *(before_merge(case, mode) for case, mode in columns),
        ]
    )
    short = {_MOR: "MoR", _COW: "CoW"}
    return markdown_table(
        [
            "job step (median)",
            *(f"{format_percent(case['fraction'])} {short[mode]}" for case, mode in columns),
        ],
        rows,
    )


def modes_block(results: dict[str, Any]) -> str:
    cases = results["modes"]
    return (
        f"The MERGE job in one local SparkSession, {results['repeats']} trial(s) of each mode per share, "
        f"interleaved, after a warm-up trial of each; the full scan (`count(*)`, `sum(l_quantity)`) is the "
        f"median of {results['read_runs']} after each trial. The target: "
        f"{results['target']['rows']:,} rows in {results['target']['data_files']} data files.\n\n"
        "Time of the job and what it wrote (medians):\n\n"
        + _times_table(cases)
        + "\n\nA full scan of the target before and after the MERGE (medians):\n\n"
        + _reads_table(cases)
        + "\n\nWhere the job's time goes (medians; the steps add up to the job's time):\n\n"
        + _steps_table(cases, results["job_step_labels"])
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
    ratios = [
        ratio(case["modes"][_COW]["seconds"]["median"], case["modes"][_MOR]["seconds"]["median"])
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
        for mode in (_MOR, _COW):
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
