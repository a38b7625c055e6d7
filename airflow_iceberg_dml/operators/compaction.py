"""IcebergCompactionOperator: fold delete files back into data files and compact small files, when needed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

from airflow_iceberg_dml import procedures
from airflow_iceberg_dml.exceptions import InvalidMaintenanceOptionError, UnknownColumnError
from airflow_iceberg_dml.operators.maintenance_base import BaseIcebergMaintenanceOperator, MaintenanceResult
from airflow_iceberg_dml.spec import (
    CompactionStrategy,
    MaintenanceProcedure,
    ProcedureCall,
    RewriteDataFilesCall,
    RewriteManifestsCall,
    RewritePositionDeleteFilesCall,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from pyiceberg.table import Table

    from airflow_iceberg_dml.health import HealthReport
    from airflow_iceberg_dml.sort_order import SortOrder
    from airflow_iceberg_dml.spec import JobRecord


class CompactionResult(MaintenanceResult):
    """A :class:`MaintenanceResult` with ``rewrite_data_files``' output columns at the top level."""

    rewritten_data_files_count: int
    added_data_files_count: int
    rewritten_bytes_count: int
    failed_data_files_count: int
    removed_delete_files_count: int


_DATA_COLUMNS = (
    "rewritten_data_files_count",
    "added_data_files_count",
    "rewritten_bytes_count",
    "failed_data_files_count",
    "removed_delete_files_count",
)


class IcebergCompactionOperator(BaseIcebergMaintenanceOperator):
    """Compact an Iceberg table with ``rewrite_data_files``, when its metadata says it needs it.

    First, without Spark, the table's health is read from its metadata
    (:meth:`IcebergCatalogHook.health <airflow_iceberg_dml.hooks.catalog.IcebergCatalogHook.health>`):
    per partition, the share of deleted rows, the delete files per data file, the share of data
    files carrying a delete file and the small files; and the number of manifests. When no
    threshold is crossed the task returns a no-op result saying so and starts no Spark application;
    ``force=True`` compacts anyway. Otherwise one Spark application runs, in order:

    1. ``rewrite_data_files``: rewrites the files that are small or carry too many deletes, so that
       no delete file applies to the rewritten data any more;
    2. ``rewrite_position_delete_files`` (``rewrite_position_delete_files=True``), when position
       delete files remain: compacts them and drops those that apply to no live data file;
    3. ``rewrite_manifests``, when the table has too many manifests (or ``rewrite_manifests=True``).

    Each commit carries the run key in its snapshot summary, like the DML operators. A rewrite that
    conflicts with a concurrent commit (a DELETE on the same files) is refused by Iceberg, so the
    DELETE is never lost; the job then plans the rewrite again from the new table state, up to
    ``conflict_retries`` times, and fails with a retryable error after that.

    :param where: Only rewrite files that may hold rows matching this Spark SQL predicate, e.g.
        ``"event_date = DATE '{{ ds }}'"`` (best on partition columns). (templated)
    :param strategy: ``binpack`` (default) or ``sort``.
    :param sort_order: With ``strategy="sort"``: ``"col1 DESC NULLS LAST, col2"``, or
        ``"zorder(col1, col2)"`` for z-order. Default: the table's sort order. (templated)
    :param target_file_size_bytes: Size of the files written (default: the table's
        ``write.target-file-size-bytes``).
    :param delete_file_threshold: Rewrite a data file that this many delete files apply to
        (default: 1, every data file that carries a delete is rewritten, since
        ``health_thresholds.max_files_with_deletes_ratio`` is on by default (0.5), and with
        ``force=True``; with ``max_files_with_deletes_ratio=None`` and without ``force``,
        ``health_thresholds.delete_file_threshold``, 2).
    :param delete_ratio_threshold: Rewrite a data file whose deleted rows reach this fraction of its
        rows (default: ``health_thresholds.max_deleted_ratio``, 0.1).
    :param partial_progress: Commit file groups as they finish (``partial-progress.enabled``): a
        conflict or failure then costs one group, not the whole rewrite. A group whose commit fails is
        planned again with the files still to compact, within ``conflict_retries``
        (``partial-progress.max-failed-commits`` is 0 unless ``options`` sets it).
    :param max_concurrent_file_group_rewrites: File groups rewritten in parallel.
    :param min_input_files: Rewrite a group of small files only when it has this many (Iceberg's
        default 5).
    :param rewrite_all: Rewrite every file in scope, whatever its size or deletes, on a healthy table
        too (a new sort order or target file size is applied to every file).
    :param options: Any other ``rewrite_data_files`` option, by its Iceberg name (checked before
        Spark starts; an unknown or invalid option fails the task naming it). (templated)
    :param rewrite_position_delete_files: Run ``rewrite_position_delete_files`` after the data
        rewrite when position delete files remain.
    :param position_delete_options: Its options (default ``{"rewrite-all": "true"}``: every
        remaining delete file is rewritten, which drops the ones no data file needs any more).
    :param rewrite_manifests: True always, False never, None (default) when the health check
        counts too many manifests.
    :param conflict_retries: Plans of a rewrite after it lost to a concurrent commit.
    :param force: Compact even when the table is healthy, folding every delete file in scope.
    :param snapshot_properties: Your own entries for the summary of every commit; the run key is
        always added. (templated)

    Other parameters: see :class:`~airflow_iceberg_dml.operators.maintenance.BaseIcebergMaintenanceOperator`.
    Returns a :class:`CompactionResult` (the XCom value).
    """

    template_fields: Sequence[str] = ("table", "where", "sort_order", "options", "snapshot_properties")
    template_fields_renderers: ClassVar[dict[str, str]] = {"where": "sql", "options": "json"}
    maintenance_procedures: ClassVar[tuple[MaintenanceProcedure, ...]] = (
        MaintenanceProcedure.REWRITE_DATA_FILES,
        MaintenanceProcedure.REWRITE_MANIFESTS,
    )

    def __init__(
        self,
        *,
        where: str | None = None,
        strategy: CompactionStrategy | str = CompactionStrategy.BINPACK,
        sort_order: str | None = None,
        target_file_size_bytes: int | None = None,
        delete_file_threshold: int | None = None,
        delete_ratio_threshold: float | None = None,
        partial_progress: bool = False,
        max_concurrent_file_group_rewrites: int | None = None,
        min_input_files: int | None = None,
        rewrite_all: bool = False,
        options: Mapping[str, Any] | None = None,
        rewrite_position_delete_files: bool = True,
        position_delete_options: Mapping[str, Any] | None = None,
        rewrite_manifests: bool | None = None,
        conflict_retries: int = 2,
        force: bool = False,
        snapshot_properties: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.where = where
        self.strategy = strategy
        self.sort_order = sort_order
        self.target_file_size_bytes = target_file_size_bytes
        self.delete_file_threshold = delete_file_threshold
        self.delete_ratio_threshold = delete_ratio_threshold
        self.partial_progress = partial_progress
        self.max_concurrent_file_group_rewrites = max_concurrent_file_group_rewrites
        self.min_input_files = min_input_files
        self.rewrite_all = rewrite_all
        self.options = options
        self.rewrite_position_delete_files = rewrite_position_delete_files
        self.position_delete_options = position_delete_options
        self.rewrite_manifests = rewrite_manifests
        self.conflict_retries = conflict_retries
        self.force = force
        self.snapshot_properties = snapshot_properties

    @property
    def forced(self) -> bool:
        return self.force

    def _rewrites_all(self) -> bool:
        """Whether every file in scope is to be rewritten (``rewrite_all``, or ``rewrite-all`` in
        ``options``): asked for whatever the files' health, as a new sort order or file size may be."""
        given = self.options.get("rewrite-all") if isinstance(self.options, Mapping) else None
        return bool(self.rewrite_all) or str(given).lower() == "true"

    @property
    def conflict_retry_limit(self) -> int:
        if isinstance(self.conflict_retries, bool) or not isinstance(self.conflict_retries, int):
            raise InvalidMaintenanceOptionError(
                f"conflict_retries={self.conflict_retries!r} is not an integer."
            )
        if self.conflict_retries < 0:
            raise InvalidMaintenanceOptionError(f"conflict_retries={self.conflict_retries} must be >= 0.")
        return self.conflict_retries

    def _strategy(self) -> CompactionStrategy:
        try:
            return CompactionStrategy(self.strategy)
        except ValueError:
            choices = ", ".join(strategy.value for strategy in CompactionStrategy)
            raise InvalidMaintenanceOptionError(
                f"strategy={self.strategy!r} is not one of {choices}; z-order is strategy='sort' with "
                "sort_order='zorder(col1, col2)'."
            ) from None

    def _data_options(self, health: HealthReport) -> dict[str, Any]:
        """The explicit parameters as procedure options, on top of ``options``."""
        if self.options is not None and not isinstance(self.options, Mapping):
            raise InvalidMaintenanceOptionError(
                f"options must be a mapping of option name to value, not {self.options!r}."
            )
        options: dict[str, Any] = dict(self.options or {})
        thresholds = health.thresholds
        named = {
            "target-file-size-bytes": self.target_file_size_bytes,
            "delete-file-threshold": self.delete_file_threshold,
            "delete-ratio-threshold": self.delete_ratio_threshold,
            "partial-progress.enabled": True if self.partial_progress else None,
            "max-concurrent-file-group-rewrites": self.max_concurrent_file_group_rewrites,
            "min-input-files": self.min_input_files,
            "rewrite-all": True if self.rewrite_all else None,
        }
        for name, value in named.items():
            if value is None:
                continue
            if name in options and str(options[name]).lower() != str(value).lower():
                raise InvalidMaintenanceOptionError(
                    f"{name!r} is given twice, as a parameter ({value!r}) and in options ({options[name]!r})."
                )
            options[name] = value
        # Rewrite what the health check flags, unless told otherwise. Forced, or when any delete file
        # counts (max_files_with_deletes_ratio), fold every delete file.
        fold_all = self.force or thresholds.max_files_with_deletes_ratio is not None
        options.setdefault("delete-file-threshold", 1 if fold_all else thresholds.delete_file_threshold)
        options.setdefault("delete-ratio-threshold", thresholds.max_deleted_ratio)
        if str(options.get("partial-progress.enabled", "")).lower() == "true":
            # Iceberg only logs a file group whose commit failed; at 0 the rewrite then fails, after the
            # other groups committed, and the job plans again for the files left.
            options.setdefault("partial-progress.max-failed-commits", 0)
        return options

    def _sort_order(self, table: Table, strategy: CompactionStrategy) -> SortOrder | None:
        """``sort_order`` parsed and checked against the table (None: the table's own, or none)."""
        from pyiceberg.transforms import IdentityTransform

        if self.sort_order is not None and not isinstance(self.sort_order, str):
            raise InvalidMaintenanceOptionError(f"sort_order={self.sort_order!r} must be a string.")
        order = procedures.parse_sort_order(self.sort_order) if self.sort_order else None
        schema = table.schema()
        if order is not None:
            names = [field.name for field in schema.fields]
            missing = procedures.check_columns("sort_order", order.columns, names)
            if missing:
                raise UnknownColumnError(
                    f"sort_order={self.sort_order!r}: column(s) {missing} not in {self.table!r}."
                )
            problem = order.problem(
                [field.name for field in schema.fields if not field.field_type.is_primitive],
                [
                    schema.find_column_name(field.source_id) or ""
                    for field in table.spec().fields
                    if isinstance(field.transform, IdentityTransform)
                ],
            )
            if problem:
                raise InvalidMaintenanceOptionError(f"sort_order={self.sort_order!r}: {problem}")
        elif strategy is CompactionStrategy.SORT and table.sort_order().is_unsorted:
            raise InvalidMaintenanceOptionError(
                f"strategy='sort' needs a sort order and {self.table!r} has none: pass sort_order "
                "(e.g. 'col ASC' or 'zorder(a, b)') or set the table's (ALTER TABLE ... WRITE ORDERED BY)."
            )
        return order

    def procedure_calls(self, table: Table, health: HealthReport, now: datetime) -> list[ProcedureCall]:
        strategy = self._strategy()
        order = self._sort_order(table, strategy)
        data_options = procedures.normalize_options(
            MaintenanceProcedure.REWRITE_DATA_FILES,
            self._data_options(health),
            strategy=strategy,
            zorder=bool(order and order.zorder),
        )
        # Blank: the whole table, as None. Not text (a template rendered natively to a number): refused by
        # validate_call below, rather than taken for the whole table.
        where = (self.where.strip() or None) if isinstance(self.where, str) else self.where
        calls: list[ProcedureCall] = []
        flagged = MaintenanceProcedure.REWRITE_DATA_FILES in health.needs
        data_needed = flagged or self.force or self._rewrites_all()
        if data_needed:
            calls.append(
                RewriteDataFilesCall(
                    strategy=strategy,
                    sort_order=order.render() if order else None,
                    where=where,
                    options=data_options,
                )
            )
            if self.rewrite_position_delete_files:
                calls.append(
                    RewritePositionDeleteFilesCall(
                        where=where,
                        options=procedures.normalize_options(
                            MaintenanceProcedure.REWRITE_POSITION_DELETE_FILES,
                            self.position_delete_options
                            if self.position_delete_options is not None
                            else {"rewrite-all": "true"},
                        ),
                    )
                )
        manifests_needed = MaintenanceProcedure.REWRITE_MANIFESTS in health.needs
        if self.rewrite_manifests or (self.rewrite_manifests is None and (manifests_needed or self.force)):
            calls.append(RewriteManifestsCall())
        for call in calls:
            procedures.validate_call(call, now)
        return calls

    def not_needed_reason(self, health: HealthReport) -> str | None:
        if self.rewrite_manifests or self._rewrites_all():  # asked for always: never skipped as healthy
            return None
        wanted = [MaintenanceProcedure.REWRITE_DATA_FILES]
        if self.rewrite_manifests is None:
            wanted.append(MaintenanceProcedure.REWRITE_MANIFESTS)
        if health.needs_any(wanted):
            return None
        return f"the table is healthy by the thresholds ({health.describe()})"

    def to_result(self, record: JobRecord | None, **kwargs: Any) -> CompactionResult:
        """A :class:`MaintenanceResult` with ``rewrite_data_files``' output columns on top (0 for a no-op)."""
        result: dict[str, Any] = dict(super().to_result(record, **kwargs))
        data = result["outputs"].get(MaintenanceProcedure.REWRITE_DATA_FILES.value, {})
        for column in _DATA_COLUMNS:
            result[column] = int(data.get(column, 0))
        return cast("CompactionResult", result)
