"""Erased keys in the forms a table's metadata may hold them, as salted digests (never the keys).

The purge's Spark job knows the keys (it may have read them with ``subjects_query``); the worker that
reads the table's metadata files must not. The job hands the worker keyed hashes (HMAC-SHA256 with a
random salt of this run only, which no report or XCom keeps) of every text form of every key; the
worker hashes each value it finds with the same salt and compares. No Airflow or Spark import: the
job imports this module.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable
    from collections.abc import Set as AbstractSet

    from pyiceberg.table import Table

#: Iceberg truncates string column bounds to this many characters (``truncate(16)``, the default
#: metrics mode); the lower bound is the prefix, the upper bound the prefix with its last one raised.
TRUNCATED_BOUND_LENGTH = 16


def key_forms(key: int | str) -> set[str]:
    """The text forms of ``key`` in metadata: itself (a partition value, a bound, a path segment) and,
    for a longer string, its truncated lower and upper bounds."""
    text = str(key)
    forms = {text}
    if isinstance(key, str) and len(key) > TRUNCATED_BOUND_LENGTH:
        prefix = key[:TRUNCATED_BOUND_LENGTH]
        forms.add(prefix)
        upper = _raised_last(prefix)
        if upper is not None:
            forms.add(upper)
    return forms


def _raised_last(prefix: str) -> str | None:
    """The truncated upper bound of a longer string: the last character that can be raised, raised."""
    for end in range(len(prefix), 0, -1):
        point = ord(prefix[end - 1]) + 1
        if point == 0xD800:  # surrogates are not characters: Iceberg skips to the next one
            point = 0xE000
        if point <= 0x10FFFF:
            return prefix[: end - 1] + chr(point)
    return None


@dataclass(frozen=True)
class KeyDigests:
    """Salted digests of every form of some keys; ``salt_id`` tells which salt made them."""

    salt_id: str
    digests: frozenset[str]

    @classmethod
    def of(cls, keys: Iterable[int | str], salt: str) -> KeyDigests:
        return cls(salt_id(salt), frozenset(_digest(salt, form) for key in keys for form in key_forms(key)))

    def to_json(self) -> dict[str, object]:
        return {"salt_id": self.salt_id, "digests": sorted(self.digests)}

    @classmethod
    def from_json(cls, value: object) -> KeyDigests | None:
        if not isinstance(value, dict) or not isinstance(value.get("digests"), list):
            return None
        return cls(str(value.get("salt_id")), frozenset(str(item) for item in value["digests"]))


class KeyMatcher:
    """Whether a text found in metadata is a form of an erased key (with the salt the job used)."""

    def __init__(self, digests: KeyDigests, salt: str) -> None:
        if digests.salt_id != salt_id(salt):
            raise ValueError("the key digests were made with another salt (an earlier try's job)")
        self._digests = digests.digests
        self._salt = salt

    def __call__(self, text: str) -> bool:
        return _digest(self._salt, text) in self._digests


def new_salt() -> str:
    return secrets.token_hex(16)


def salt_id(salt: str) -> str:
    return hashlib.sha256(b"iceberg-dml-salt:" + salt.encode()).hexdigest()[:16]


def _digest(salt: str, text: str) -> str:
    return hmac.new(salt.encode(), text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def key_names(table: Table, column: str) -> set[str]:
    """The names a path segment ``name=value`` has when its value may be a key: the key column's, and
    those of the partition fields of every spec that keep its values (lowercase)."""
    key_id = table.schema().find_field(column, case_sensitive=False).field_id
    return {column.lower()} | {
        spec_field.name.lower()
        for spec in table.metadata.specs().values()
        for spec_field in spec.fields
        if spec_field.source_id == key_id and keeps_value(str(spec_field.transform))
    }


def keeps_value(transform: str) -> bool:
    """Whether a partition transform's values may be a key (or a string key's prefix): ``identity`` and
    ``truncate[W]``; a bucket number, a year or a day is not a key, and comparing it would only find
    coincidences."""
    return transform == "identity" or transform.startswith("truncate")


def redacted(path: str, names: AbstractSet[str]) -> str:
    """``path`` with the value of every ``name=value`` segment named in ``names`` replaced: a report or
    a log line may name a file of a table partitioned by the key, never the key."""
    return "/".join(
        f"{name}=<redacted>" if equals and name.lower() in names else f"{name}{equals}{value}"
        for name, equals, value in (segment.partition("=") for segment in path.split("/"))
    )
