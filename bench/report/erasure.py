"""The privacy erasure blocks of docs/benchmarks.md."""

from __future__ import annotations

from typing import Any

from bench.common import (
    format_ratio,
    format_seconds,
    markdown_table,
)


def _files(writes: dict[str, Any]) -> str:
    written = writes["data_files_written"] + writes["delete_files_written"]
    data, deletes = writes["data_files_written"], writes["delete_files_written"]
    return f"{written:,.0f} ({data:,.0f} data + {deletes:,.0f} delete)"


def _setup(erasure: dict[str, Any]) -> str:
    tables, naive = erasure["tables"], erasure["naive"]
    erased, sample_rows = erasure["erased_rows"], erasure["sample_rows"]
    orders, lineitem = tables["orders"], tables["lineitem"]
    return (
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


def _erase_table(erasure: dict[str, Any]) -> str:
    batched, naive = erasure["batched"], erasure["naive"]
    extrapolated = naive["extrapolated"]
    scale = extrapolated["customers"] / naive["customers"]
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
    return markdown_table(
        ["way", "customers", "tasks", "wall time", "per customer", "commits", "files written"], erase_rows
    )


def _naive_text(erasure: dict[str, Any]) -> str:
    batched, naive, ratios = erasure["batched"], erasure["naive"], erasure["ratios"]
    trend = naive["task_trend_seconds"]
    medians = naive["task_median_seconds"]
    return (
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


def _left(entry: dict[str, Any]) -> str:
    return f"{entry['after']['total-data-files']} data, {entry['after']['total-delete-files']} delete"


def _maintenance_table(erasure: dict[str, Any]) -> str:
    compaction, purge = erasure["compaction"], erasure["purge"]
    purge_tables, compaction_tables = purge["tables"], compaction["tables"]
    maintenance_rows = [
        [
            'purge (`mode="purge"`)',
            format_seconds(purge["seconds"]),
            f"{purge['data_files_rewritten']}",
            " / ".join(
                f"{purge_tables[kind]['data_files_with_erased_rows']}" for kind in ("orders", "lineitem")
            ),
            "; ".join(f"`{kind}` {_left(purge_tables[kind])}" for kind in ("orders", "lineitem")),
        ],
        [
            "full compaction (`force=True, rewrite_all=True`)",
            format_seconds(compaction["seconds"]),
            f"{compaction['data_files_rewritten']}",
            "-",
            "; ".join(f"`{kind}` {_left(compaction_tables[kind])}" for kind in ("orders", "lineitem")),
        ],
    ]
    return markdown_table(
        [
            "from the table after the batched erasure",
            "wall time",
            "data files rewritten",
            "data files that held erased rows (orders / lineitem)",
            "live files afterwards",
        ],
        maintenance_rows,
    )


def _check_lines(erasure: dict[str, Any]) -> str:
    naive, purge = erasure["naive"], erasure["purge"]
    purge_tables = purge["tables"]
    expiry = "; ".join(
        f"`{kind}`: {purge_tables[kind]['snapshots_expired']} snapshots expired, "
        f"{purge_tables[kind]['files_deleted_by_expiry']} files deleted by the expiry, verification read "
        f"{purge_tables[kind]['verification']['files_referenced']} referenced and "
        f"{purge_tables[kind]['verification']['files_on_storage']} stored files for "
        f"{purge_tables[kind]['verification']['keys_checked']:,} keys"
        for kind in ("orders", "lineitem")
    )
    checks = erasure["checks"]
    return "\n".join(
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


def erasure_block(erasure: dict[str, Any]) -> str:
    """Batched against naive erasure, the purge against a full compaction, the checks."""
    purge, ratios = erasure["purge"], erasure["ratios"]
    steps = markdown_table(
        ["purge step", "seconds"],
        [[purge["step_labels"][key], format_seconds(value)] for key, value in purge["steps"].items()],
    )
    return "\n\n".join(
        [
            _setup(erasure),
            "Erasing the customers from `orders` and `lineitem`:\n\n" + _erase_table(erasure),
            _naive_text(erasure),
            "Removing the erased rows from the data files:\n\n"
            + _maintenance_table(erasure)
            + f"\n\n**Purge / full compaction: {format_ratio(ratios['purge_over_compaction_seconds'])} the "
            "time.**",
            "Where the purge's time goes (from the job's own lines; the steps add up to its wall time):\n\n"
            + steps,
            "Checked in the run (not timed):\n\n" + _check_lines(erasure),
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
