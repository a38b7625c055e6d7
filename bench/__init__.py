"""Benchmarks of airflow-iceberg-dml: ``make bench`` (``python -m bench``), results in docs/benchmarks.md.

Each ``bench/bench_<name>.py`` is one benchmark with ``main(argv: list[str] | None = None) -> None``;
``python -m bench`` runs them all (or those named) and passes every option to each, so a
benchmark parses its options with ``parse_known_args`` and honours ``--quick`` (a small smoke
run). Results go to ``bench/results/<name>.json`` (``bench/results/quick/`` for ``--quick``)
through :func:`bench.common.write_results`, which records the machine and versions.
"""
