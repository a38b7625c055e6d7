"""Pure builders and checks for the maintenance procedures. No Spark, no Airflow: unit-tested directly.

Everything a user can get wrong (an option name, an option value, a sort order, an ``older_than``
too recent) is checked here, before any Spark application starts, and again by the job.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from enum import Enum
from typing import TYPE_CHECKING

from airflow_iceberg_dml.exceptions import InvalidMaintenanceOptionError, UnsafeRetentionError
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
from airflow_iceberg_dml.sql import literal, quote_identifier, split_table_name

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

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


def _option_value(procedure: str, name: str, value: object, kind: _Value) -> str:
    """The option's value as Iceberg reads it (a string), or a clear error naming the option."""

    def bad() -> InvalidMaintenanceOptionError:
        return InvalidMaintenanceOptionError(
            f"{procedure}: option {name!r} must be {kind.value}, not {value!r}."
        )

    text = str(value).strip().lower() if isinstance(value, bool) else str(value).strip()
    if kind is _Value.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise bad()
        return text.lower()
    if kind is _Value.JOB_ORDER:
        if text not in _JOB_ORDERS:
            raise bad()
        return text
    if kind is _Value.RATIO:
        if isinstance(value, bool):
            raise bad()
        try:
            ratio = float(text)
        except ValueError:
            raise bad() from None
        if not 0 < ratio <= 1:
            raise bad()
        return repr(ratio) if isinstance(value, float) else text
    if isinstance(value, bool) or not re.fullmatch(r"[+-]?\d+", text):
        raise bad()
    number = int(text)
    if number < 0 or (kind is _Value.POSITIVE_INT and number == 0):
        raise bad()
    return str(number)


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


# -- sort orders ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SortField:
    """One column of a sort order."""

    column: str
    descending: bool = False
    nulls_first: bool | None = None

    def render(self) -> str:
        text = f"{quote_identifier(self.column)} {'DESC' if self.descending else 'ASC'}"
        if self.nulls_first is not None:
            text += " NULLS FIRST" if self.nulls_first else " NULLS LAST"
        return text


@dataclass(frozen=True)
class SortOrder:
    """A parsed ``sort_order``: either z-order columns or sort fields."""

    zorder: tuple[str, ...] = ()
    fields: tuple[SortField, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        return self.zorder or tuple(field.column for field in self.fields)

    def render(self) -> str:
        """The canonical text, as ``rewrite_data_files``'s ``sort_order`` argument reads it."""
        if self.zorder:
            return "zorder(" + ", ".join(quote_identifier(column) for column in self.zorder) + ")"
        return ", ".join(field.render() for field in self.fields)


#: A function call other than zorder(...): a transform such as bucket(4, id) or days(ts).
_TRANSFORM = re.compile(r"(?<![`\w])(?!zorder\s*\()[A-Za-z_]\w*\s*\(", re.IGNORECASE)
_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)+`)|([A-Za-z_][A-Za-z0-9_]*)|([(),.]))")


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise InvalidMaintenanceOptionError(
                f"sort_order={text!r}: unexpected {text[position:].strip()[:20]!r}; expected column names, "
                "ASC/DESC, NULLS FIRST/LAST, or zorder(col, ...)."
            )
        tokens.append(match.group(0).strip())
        position = match.end()
    return tokens


def _column(tokens: list[str], index: int, text: str) -> tuple[str, int]:
    """A possibly dotted (nested) column name starting at ``index``; returns it and the next index."""
    parts: list[str] = []
    while True:
        if index >= len(tokens) or tokens[index] in "(),.":
            raise InvalidMaintenanceOptionError(f"sort_order={text!r}: a column name is missing.")
        token = tokens[index]
        parts.append(token[1:-1].replace("``", "`") if token.startswith("`") else token)
        index += 1
        if index < len(tokens) and tokens[index] == ".":
            index += 1
            continue
        return ".".join(parts), index


def parse_sort_order(text: str) -> SortOrder:
    """Parse ``zorder(a, b)`` or ``a [ASC|DESC] [NULLS FIRST|LAST], ...``.

    :raises InvalidMaintenanceOptionError: when the text is neither.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidMaintenanceOptionError("sort_order must be a non-empty string.")
    if _TRANSFORM.search(text):
        raise InvalidMaintenanceOptionError(
            f"sort_order={text!r}: only column names and zorder(...) are supported here; to sort by a "
            "transform, set the table's sort order (ALTER TABLE ... WRITE ORDERED BY ...) and leave "
            "sort_order empty."
        )
    tokens = _tokens(text)
    if len(tokens) >= 2 and tokens[0].lower() == "zorder" and tokens[1] == "(":
        if tokens[-1] != ")":
            raise InvalidMaintenanceOptionError(f"sort_order={text!r}: zorder(...) is not closed.")
        columns: list[str] = []
        index = 2
        while index < len(tokens) - 1:
            column, index = _column(tokens, index, text)
            columns.append(column)
            if index < len(tokens) - 1:
                if tokens[index] != ",":
                    raise InvalidMaintenanceOptionError(
                        f"sort_order={text!r}: zorder takes plain column names separated by commas."
                    )
                index += 1
        if not columns:
            raise InvalidMaintenanceOptionError(f"sort_order={text!r}: zorder needs at least one column.")
        return SortOrder(zorder=tuple(columns))
    fields: list[SortField] = []
    index = 0
    while index < len(tokens):
        column, index = _column(tokens, index, text)
        descending, nulls_first = False, None
        words = []
        while index < len(tokens) and tokens[index] != ",":
            words.append(tokens[index].upper())
            index += 1
        if words[:1] in (["ASC"], ["DESC"]):
            descending = words.pop(0) == "DESC"
        if words in (["NULLS", "FIRST"], ["NULLS", "LAST"]):
            nulls_first = words[1] == "FIRST"
        elif words:
            raise InvalidMaintenanceOptionError(
                f"sort_order={text!r}: unexpected {' '.join(words)!r} after column {column!r}; "
                "expected ASC, DESC, NULLS FIRST or NULLS LAST."
            )
        fields.append(SortField(column, descending, nulls_first))
        index += 1  # the comma
        if index == len(tokens) and tokens[-1] == ",":
            raise InvalidMaintenanceOptionError(f"sort_order={text!r}: a column name is missing.")
    return SortOrder(fields=tuple(fields))


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


def call_statement(catalog: str, table: str, call: ProcedureCall) -> str:
    """The ``CALL <catalog>.system.<procedure>(...)`` statement that runs ``call``."""
    table_name = ".".join(quote_identifier(part) for part in split_table_name(table))
    arguments: list[tuple[str, str]] = [("table", literal(table_name))]
    if isinstance(call, RewriteDataFilesCall):
        arguments.append(("strategy", literal(CompactionStrategy(call.strategy).value)))
        if call.sort_order is not None:
            arguments.append(("sort_order", literal(parse_sort_order(call.sort_order).render())))
        if call.where is not None:
            arguments.append(("where", literal(call.where)))
        if call.options:
            arguments.append(("options", _map(call.options)))
    elif isinstance(call, RewritePositionDeleteFilesCall):
        if call.where is not None:
            arguments.append(("where", literal(call.where)))
        if call.options:
            arguments.append(("options", _map(call.options)))
    elif isinstance(call, RewriteManifestsCall):
        if call.use_caching is not None:
            arguments.append(("use_caching", literal(call.use_caching)))
    elif isinstance(call, ExpireSnapshotsCall):
        arguments.append(("older_than", timestamp_literal(call.older_than_ms)))
        arguments.append(("retain_last", literal(call.retain_last)))
        if call.max_concurrent_deletes is not None:
            arguments.append(("max_concurrent_deletes", literal(call.max_concurrent_deletes)))
        if call.clean_expired_metadata:
            arguments.append(("clean_expired_metadata", literal(True)))
    elif isinstance(call, RemoveOrphanFilesCall):
        arguments.append(("older_than", timestamp_literal(call.older_than_ms)))
        arguments.append(("dry_run", literal(call.dry_run)))
        if call.location is not None:
            arguments.append(("location", literal(call.location)))
        if call.max_concurrent_deletes is not None:
            arguments.append(("max_concurrent_deletes", literal(call.max_concurrent_deletes)))
    body = ",\n  ".join(f"{name} => {value}" for name, value in arguments)
    return f"CALL {quote_identifier(catalog)}.system.{call.procedure.value}(\n  {body}\n)"
