"""Refreshes the generated parts of ``docs/benchmarks.md`` and its plots from the results files.

The page is written by hand; the tables and figures inside ``<!-- bench:<name> -->`` ...
``<!-- /bench:<name> -->`` markers are generated. Only those blocks are replaced, so the prose
and the sections other benchmarks add stay as they are. A block whose results are missing is
left unchanged.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from bench import plots
from bench.bench_engines import NAME as ENGINES
from bench.bench_erasure import NAME as ERASURE
from bench.bench_noop_check import NAME as NOOP_CHECK
from bench.bench_tpch import results_name
from bench.common import REPO, log, read_results, results_dir
from bench.report.engines import engines_block
from bench.report.erasure import erasure_block
from bench.report.noop import noop_check_block
from bench.report.summary import summary_block
from bench.report.tpch import (
    DELETE_PLOT,
    DOCS,
    IMAGES,
    READS_PLOT,
    SECONDARY_SCALE_FACTOR,
    changes_block,
    driver_memory_block,
    machine_block,
    overhead_block,
    reads_block,
    runtime_block,
    secondary_scale_block,
    tpch_setup_block,
)


def replace_block(text: str, name: str, content: str) -> str:
    """``text`` with the generated block ``name`` replaced by ``content``."""
    pattern = re.compile(rf"(<!-- bench:{re.escape(name)} -->\n).*?(<!-- /bench:{re.escape(name)} -->)", re.S)
    if not pattern.search(text):
        raise LookupError(f"{DOCS.name} has no generated block {name!r} (<!-- bench:{name} --> markers)")
    return pattern.sub(lambda match: match.group(1) + content.strip() + "\n" + match.group(2), text)


if TYPE_CHECKING:
    from collections.abc import Callable


def _tpch_blocks(tpch: dict[str, Any]) -> dict[str, str]:
    IMAGES.mkdir(parents=True, exist_ok=True)
    plots.time_against_selectivity(tpch, DELETE_PLOT)
    plots.reads_against_deletes(tpch, READS_PLOT)
    return {
        "tpch-setup": tpch_setup_block(tpch),
        "tpch-delete": changes_block([*tpch["delete"], tpch["rf2"]]),
        "tpch-update": changes_block(tpch["update"]),
        "tpch-reads": reads_block(tpch),
    }


#: Blocks made from one results file each: (block name, results name, block maker).
_ONE_FILE_BLOCKS: list[tuple[str, str, Callable[[dict[str, Any]], str]]] = [
    ("overhead", "overhead", overhead_block),
    ("driver-memory", "driver_memory", driver_memory_block),
    ("tpch-secondary", results_name(SECONDARY_SCALE_FACTOR), secondary_scale_block),
    ("noop-check", NOOP_CHECK, noop_check_block),
    ("engines", ENGINES, engines_block),
    ("erasure", ERASURE, erasure_block),
]


def update_docs() -> None:
    """Rewrite the generated blocks and the plots from the results of the last full runs."""
    overhead, tpch, memory = read_results("overhead"), read_results("tpch"), read_results("driver_memory")
    secondary, engines = read_results(results_name(SECONDARY_SCALE_FACTOR)), read_results(ENGINES)
    blocks: dict[str, str] = {"summary": summary_block(overhead, tpch, secondary, memory, engines)}
    newest = max((r for r in (overhead, tpch, memory) if r), key=lambda r: str(r["created"]), default=None)
    if newest:
        blocks["machine"] = machine_block(newest)
    runtimes_path = results_dir(quick=False) / "runtimes.json"
    if runtimes_path.is_file():
        blocks["runtime"] = runtime_block(json.loads(runtimes_path.read_text()))
    if tpch:
        blocks.update(_tpch_blocks(tpch))
    for block, name, make in _ONE_FILE_BLOCKS:
        results = read_results(name)
        if results:
            blocks[block] = make(results)
    text = DOCS.read_text()
    for name, content in blocks.items():
        text = replace_block(text, name, content)
    DOCS.write_text(text)
    log(f"updated {DOCS.relative_to(REPO)} ({', '.join(blocks)}) and the plots in {IMAGES.relative_to(REPO)}")
