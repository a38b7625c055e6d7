"""The PNG plots of ``docs/benchmarks.md``, drawn from the results files with matplotlib."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from matplotlib.axes import Axes

_SIZE = (8.0, 3.2)
_DPI = 80


def _selectivity_axis(axes: Axes, percents: list[float]) -> None:
    axes.set_xscale("log")
    axes.set_xticks(percents, [f"{p:g}%" for p in percents])
    axes.minorticks_off()
    axes.set_xlabel("rows changed (share of lineitem)")
    axes.grid(alpha=0.3)


def _percent(case: str) -> float:
    return float(case.rstrip("%"))


def time_against_selectivity(tpch: dict[str, Any], target: Path) -> None:
    """DELETE (three ways) and UPDATE (two ways): median wall time against the share of rows changed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (deletes, updates) = plt.subplots(1, 2, figsize=_SIZE, dpi=_DPI, sharey=True)
    for axes, cases, title in (
        (deletes, tpch["delete"], "DELETE"),
        (updates, tpch["update"], "UPDATE"),
    ):
        percents = [_percent(case["case"]) for case in cases]
        for method in cases[0]["methods"]:
            seconds = [case["methods"][method]["seconds"]["median"] for case in cases]
            axes.plot(percents, seconds, marker="o", label=method)
        _selectivity_axis(axes, percents)
        axes.set_title(f"{title}, TPC-H SF {tpch['scale_factor']:g} lineitem")
        axes.legend(fontsize="small")
    deletes.set_ylabel("wall time, s (this machine)")
    deletes.set_ylim(bottom=0)
    figure.tight_layout()
    figure.savefig(target)
    plt.close(figure)


def reads_against_deletes(tpch: dict[str, Any], target: Path) -> None:
    """Full scan and Q6 time as merge-on-read deletes pile up, and after each compaction."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    series = tpch["reads_against_deletes"]
    counts = [point["deletes"] for point in series["points"]]
    figure, axes_pair = plt.subplots(1, 2, figsize=(_SIZE[0], _SIZE[1] + 0.6), dpi=_DPI)
    for axes, key, title in zip(
        axes_pair,
        ("full_scan_seconds", "selective_seconds"),
        ("full scan of lineitem", "TPC-H Q6 (one year)"),
        strict=True,
    ):
        axes.plot(counts, [point[key] for point in series["points"]], marker="o", label="merge-on-read")
        axes.axhline(series["points"][0][key], linestyle="--", color="grey", label="no deletes")
        for (variant, point), style in zip(series["after_compaction"].items(), (":", "-."), strict=True):
            axes.axhline(point[key], linestyle=style, color="green", label=f"compacted, {variant}")
        axes.set_xlabel("merge-on-read DELETEs committed")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_title(title)
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
    axes_pair[0].set_ylabel("query time, s (this machine)")
    handles, labels = axes_pair[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=2, fontsize="small")
    figure.tight_layout(rect=(0, 0.16, 1, 1))
    figure.savefig(target)
    plt.close(figure)
