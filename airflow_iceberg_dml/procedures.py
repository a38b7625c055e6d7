"""Pure builders and checks for the maintenance procedures. No Spark, no Airflow: unit-tested directly.

Everything a user can get wrong (an option name, an option value, a sort order, an ``older_than``
too recent) is checked here, before any Spark application starts, and again by the job.
"""

from __future__ import annotations

import difflib
import re
from datetime import UTC, date, datetime, timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.exceptions import InvalidMaintenanceOptionError, UnsafeRetentionError
from airflow_iceberg_dml.sort_order import SortField, SortOrder, parse_sort_order
from airflow_iceberg_dml.spec import (
    CompactionStrategy,
    ExpireSnapshotsCall,
    MaintenanceProcedure,
    ProcedureCall,
    RemoveOrphanFilesCall,
    RewriteDataFilesCall,
    RewriteManifestsCall,
    RewritePositionDeleteFilesCall,
)
from airflow_iceberg_dml.specs.parameters import literal
from airflow_iceberg_dml.sql import quote_identifier, split_table_name

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["SortField", "SortOrder", "parse_sort_order"]

#: Never remove orphans, nor expire snapshots, younger than this unless told so explicitly: a
#: running write's files are not referenced yet, and a running job may still read an old snapshot.
SAFETY_FLOOR = timedelta(days=3)
#: remove_orphan_files itself refuses anything younger (Iceberg's own check); no override goes lower.
ICEBERG_ORPHAN_FLOOR = timedelta(hours=24)


class _Value(Enum):
    """The type an option's value must have."""

    POSITIVE_INT = "a positive integer"
    NON_NEGATIVE_INT = "an integer >= 0"
    BOOLEAN = "true or false"
    RATIO = "a number in (0, 1]"
    JOB_ORDER = "one of none, bytes-asc, bytes-desc, files-asc, files-desc"


_JOB_ORDERS = ("none", "bytes-asc", "bytes-desc", "files-asc", "files-desc")

# Options of Iceberg 1.11's rewrite actions (planner, runner and action), by procedure.
_FILE_GROUP_OPTIONS: dict[str, _Value] = {
    "target-file-size-bytes": _Value.POSITIVE_INT,
    "min-file-size-bytes": _Value.NON_NEGATIVE_INT,
    "max-file-size-bytes": _Value.POSITIVE_INT,
    "min-input-files": _Value.POSITIVE_INT,
    "rewrite-all": _Value.BOOLEAN,
    "max-file-group-size-bytes": _Value.POSITIVE_INT,
    "max-file-group-input-files": _Value.POSITIVE_INT,
    "max-concurrent-file-group-rewrites": _Value.POSITIVE_INT,
    "partial-progress.enabled": _Value.BOOLEAN,
    "partial-progress.max-commits": _Value.POSITIVE_INT,
    "rewrite-job-order": _Value.JOB_ORDER,
}
REWRITE_DATA_FILES_OPTIONS: dict[str, _Value] = {
    **_FILE_GROUP_OPTIONS,
    "partial-progress.max-failed-commits": _Value.NON_NEGATIVE_INT,
    "delete-file-threshold": _Value.NON_NEGATIVE_INT,
    "delete-ratio-threshold": _Value.RATIO,
    "max-files-to-rewrite": _Value.POSITIVE_INT,
    "use-starting-sequence-number": _Value.BOOLEAN,
    "remove-dangling-deletes": _Value.BOOLEAN,
    "output-spec-id": _Value.NON_NEGATIVE_INT,
}
#: Options that only the shuffling rewriters (sort, z-order) accept.
SORT_OPTIONS: dict[str, _Value] = {"shuffle-partitions-per-file": _Value.POSITIVE_INT}
#: Options that only the z-order rewriter accepts.
ZORDER_OPTIONS: dict[str, _Value] = {
    "var-length-contribution": _Value.POSITIVE_INT,
    "max-output-size": _Value.POSITIVE_INT,
}
REWRITE_POSITION_DELETE_FILES_OPTIONS: dict[str, _Value] = dict(_FILE_GROUP_OPTIONS)


# -- options ---------------------------------------------------------------------------------------------


def _boolean(text: str, value: object) -> str | None:
    return text.lower() if text.lower() in ("true", "false") else None


def _job_order(text: str, value: object) -> str | None:
    return text if text in _JOB_ORDERS else None


def _ratio(text: str, value: object) -> str | None:
    if isinstance(value, bool):
        return None
    try:
        ratio = float(text)
    except ValueError:
        return None
    if not 0 < ratio <= 1:
        return None
    return repr(ratio) if isinstance(value, float) else text


def _integer(text: str, value: object, positive: bool) -> str | None:
    if isinstance(value, bool) or not re.fullmatch(r"[+-]?\d+", text):
        return None
    number = int(text)
    return None if number < 0 or (positive and number == 0) else str(number)


#: Each kind of option value: its text as Iceberg reads it, or None when it is not of that kind.
_CHECKS: dict[_Value, Any] = {
    _Value.BOOLEAN: _boolean,
    _Value.JOB_ORDER: _job_order,
    _Value.RATIO: _ratio,
    _Value.POSITIVE_INT: lambda text, value: _integer(text, value, positive=True),
}


def _option_value(procedure: str, name: str, value: object, kind: _Value) -> str:
    """The option's value as Iceberg reads it (a string), or a clear error naming the option."""
    text = str(value).strip().lower() if isinstance(value, bool) else str(value).strip()
    check = _CHECKS.get(kind, lambda text, value: _integer(text, value, positive=False))
    checked: str | None = check(text, value)
    if checked is None:
        raise InvalidMaintenanceOptionError(
            f"{procedure}: option {name!r} must be {kind.value}, not {value!r}."
        )
    return checked


def normalize_options(
    procedure: MaintenanceProcedure,
    options: Mapping[str, object] | None,
    *,
    strategy: CompactionStrategy | None = None,
    zorder: bool = False,
) -> dict[str, str]:
    """Check every option against the procedure (and strategy) and return them as strings.

    :raises InvalidMaintenanceOptionError: naming the first unknown or invalid option.
    """
    if procedure is MaintenanceProcedure.REWRITE_DATA_FILES:
        known = dict(REWRITE_DATA_FILES_OPTIONS)
        if strategy is CompactionStrategy.SORT:
            known.update(SORT_OPTIONS)
            if zorder:
                known.update(ZORDER_OPTIONS)
    elif procedure is MaintenanceProcedure.REWRITE_POSITION_DELETE_FILES:
        known = dict(REWRITE_POSITION_DELETE_FILES_OPTIONS)
    else:
        known = {}
    if options is not None and not hasattr(options, "items"):
        raise InvalidMaintenanceOptionError(
            f"{procedure.value}: options must be a mapping of option name to value, not {options!r}."
        )
    normalized: dict[str, str] = {}
    for name, value in (options or {}).items():
        if name not in known:
            message = _unknown_option_message(procedure, name, known, strategy, zorder)
            raise InvalidMaintenanceOptionError(message)
        normalized[name] = _option_value(procedure.value, name, value, known[name])
    minimum, maximum = normalized.get("min-file-size-bytes"), normalized.get("max-file-size-bytes")
    if minimum is not None and maximum is not None and int(minimum) >= int(maximum):
        raise InvalidMaintenanceOptionError(
            f"{procedure.value}: option 'min-file-size-bytes' ({minimum}) must be below "
            f"'max-file-size-bytes' ({maximum})."
        )
    return normalized


def _unknown_option_message(
    procedure: MaintenanceProcedure,
    name: str,
    known: Mapping[str, _Value],
    strategy: CompactionStrategy | None,
    zorder: bool,
) -> str:
    if not known:
        return f"{procedure.value} takes no options; {name!r} is not one."
    if procedure is MaintenanceProcedure.REWRITE_DATA_FILES:
        if name in SORT_OPTIONS:
            return f"{procedure.value}: option {name!r} applies only to strategy 'sort', not {strategy}."
        if name in ZORDER_OPTIONS and not zorder:
            return (
                f"{procedure.value}: option {name!r} applies only to a z-order sort "
                "(sort_order='zorder(...)')."
            )
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return (
        f"{procedure.value}: {name!r} is not an option of this procedure.{hint} "
        f"Known options: {', '.join(sorted(known))}."
    )


def check_columns(what: str, columns: Iterable[str], table_columns: Iterable[str]) -> list[str]:
    """The columns not in the table (top-level name of nested ones, case-insensitive)."""
    known = {column.lower() for column in table_columns}
    return [column for column in columns if column.split(".")[0].lower() not in known]


# -- older_than and the safety floor ----------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(d|h|m|s|days?|hours?|minutes?|seconds?)\s*$", re.IGNORECASE)
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_age(value: str) -> timedelta | None:
    """An age such as ``"30d"``, ``"72h"``, ``"90m"``, ``"0s"`` as a timedelta; None for other text."""
    duration = _DURATION.match(value)
    if duration is None:
        return None
    return timedelta(**{_UNITS[duration.group(2)[0].lower()]: float(duration.group(1))})


def resolve_older_than(value: object, now: datetime) -> datetime:
    """``older_than`` as an aware UTC datetime.

    Accepts a :class:`~datetime.timedelta` (an age: ``now - value``), a datetime or date (naive means
    UTC), an ISO 8601 string (a rendered template such as ``{{ macros.ds_add(ds, -7) }}``), or an age
    such as ``"3d"``, ``"72h"``, ``"90m"``.
    """
    if isinstance(value, timedelta):
        return now - value
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if isinstance(value, str):
        age = parse_age(value)
        if age is not None:
            return now - age
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            pass
        else:
            return resolve_older_than(parsed, now)
    raise InvalidMaintenanceOptionError(
        f"older_than={value!r} is not a timedelta, a datetime, an ISO 8601 timestamp or an age like '3d'."
    )


def check_age(
    older_than: datetime, now: datetime, floor: timedelta, *, what: str, override: str | None = None
) -> None:
    """Refuse an ``older_than`` more recent than ``now - floor``."""
    if older_than > now - floor:
        hint = f" Pass {override}=True to go below it (not below 24 hours for orphans)." if override else ""
        raise UnsafeRetentionError(
            f"{what}: older_than={older_than.isoformat()} is less than {_human(floor)} ago; files that "
            f"young may belong to a write or a read still running.{hint}"
        )


def _human(age: timedelta) -> str:
    hours = age.total_seconds() / 3600
    return f"{hours / 24:g} days" if hours >= 48 and hours % 24 == 0 else f"{hours:g} hours"


def epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def timestamp_literal(epoch_millis: int) -> str:
    """A Spark SQL TIMESTAMP literal for an instant, with its UTC offset (independent of the session zone)."""
    moment = datetime.fromtimestamp(epoch_millis / 1000, tz=UTC)
    return f"TIMESTAMP '{moment.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]}+00:00'"


# -- validation of a whole call, and its CALL statement ------------------------------------------------------


def validate_call(call: ProcedureCall, now: datetime | None = None) -> None:
    """Everything that can be checked without the table. Raises the package's own errors."""
    if isinstance(call, RewriteDataFilesCall):
        strategy = CompactionStrategy(call.strategy)
        sort_order = parse_sort_order(call.sort_order) if call.sort_order is not None else None
        if sort_order is not None and strategy is not CompactionStrategy.SORT:
            raise InvalidMaintenanceOptionError(
                f"sort_order={call.sort_order!r} needs strategy='sort' (binpack keeps the rows' order)."
            )
        normalize_options(
            call.procedure, call.options, strategy=strategy, zorder=bool(sort_order and sort_order.zorder)
        )
        _check_where(call.where)
    elif isinstance(call, RewritePositionDeleteFilesCall):
        normalize_options(call.procedure, call.options)
        _check_where(call.where)
    elif isinstance(call, ExpireSnapshotsCall | RemoveOrphanFilesCall):
        retain_last = getattr(call, "retain_last", 1)
        if isinstance(retain_last, bool) or not isinstance(retain_last, int) or retain_last < 1:
            raise InvalidMaintenanceOptionError(
                f"expire_snapshots: retain_last must be an integer >= 1, not {retain_last!r}."
            )
        if call.max_concurrent_deletes is not None and call.max_concurrent_deletes < 1:
            raise InvalidMaintenanceOptionError(
                f"{call.procedure.value}: max_concurrent_deletes must be >= 1, "
                f"not {call.max_concurrent_deletes}."
            )
        current = now or datetime.now(tz=UTC)
        older_than = datetime.fromtimestamp(call.older_than_ms / 1000, tz=UTC)
        check_age(older_than, current, timedelta(milliseconds=call.min_age_ms), what=call.procedure.value)


def _check_where(where: str | None) -> None:
    if where is not None and (not isinstance(where, str) or not where.strip()):
        raise InvalidMaintenanceOptionError(
            "where must be a non-empty Spark SQL predicate on partition columns, or None for the whole table."
        )


def _map(options: Mapping[str, str]) -> str:
    return "map(" + ", ".join(f"{literal(key)}, {literal(value)}" for key, value in options.items()) + ")"


def _optional(arguments: list[tuple[str, str]], name: str, value: object, render: Any = None) -> None:
    """Add ``name => value`` when ``value`` is given (not None, not empty)."""
    if value is None or value == {}:
        return
    arguments.append((name, (render or literal)(value)))


def _rewrite_data_arguments(call: RewriteDataFilesCall) -> list[tuple[str, str]]:
    arguments = [("strategy", literal(CompactionStrategy(call.strategy).value))]
    if call.sort_order is not None:
        arguments.append(("sort_order", literal(parse_sort_order(call.sort_order).render())))
    _optional(arguments, "where", call.where)
    _optional(arguments, "options", call.options or None, _map)
    return arguments


def _rewrite_position_deletes_arguments(call: RewritePositionDeleteFilesCall) -> list[tuple[str, str]]:
    arguments: list[tuple[str, str]] = []
    _optional(arguments, "where", call.where)
    _optional(arguments, "options", call.options or None, _map)
    return arguments


def _rewrite_manifests_arguments(call: RewriteManifestsCall) -> list[tuple[str, str]]:
    arguments: list[tuple[str, str]] = []
    _optional(arguments, "use_caching", call.use_caching)
    return arguments


def _expire_arguments(call: ExpireSnapshotsCall) -> list[tuple[str, str]]:
    arguments = [
        ("older_than", timestamp_literal(call.older_than_ms)),
        ("retain_last", literal(call.retain_last)),
    ]
    _optional(arguments, "max_concurrent_deletes", call.max_concurrent_deletes)
    _optional(arguments, "clean_expired_metadata", True if call.clean_expired_metadata else None)
    if call.snapshot_ids:
        arguments.append(("snapshot_ids", f"array({', '.join(str(int(i)) for i in call.snapshot_ids)})"))
    return arguments


def _orphans_arguments(call: RemoveOrphanFilesCall) -> list[tuple[str, str]]:
    arguments = [("older_than", timestamp_literal(call.older_than_ms)), ("dry_run", literal(call.dry_run))]
    _optional(arguments, "location", call.location)
    _optional(arguments, "max_concurrent_deletes", call.max_concurrent_deletes)
    return arguments


#: Each call type's arguments, after ``table``.
_ARGUMENTS: dict[type, Any] = {
    RewriteDataFilesCall: _rewrite_data_arguments,
    RewritePositionDeleteFilesCall: _rewrite_position_deletes_arguments,
    RewriteManifestsCall: _rewrite_manifests_arguments,
    ExpireSnapshotsCall: _expire_arguments,
    RemoveOrphanFilesCall: _orphans_arguments,
}


def call_statement(catalog: str, table: str, call: ProcedureCall) -> str:
    """The ``CALL <catalog>.system.<procedure>(...)`` statement that runs ``call``."""
    table_name = ".".join(quote_identifier(part) for part in split_table_name(table))
    arguments: list[tuple[str, str]] = [("table", literal(table_name)), *_ARGUMENTS[type(call)](call)]
    body = ",\n  ".join(f"{name} => {value}" for name, value in arguments)
    return f"CALL {quote_identifier(catalog)}.system.{call.procedure.value}(\n  {body}\n)"
