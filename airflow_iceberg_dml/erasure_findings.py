"""What the purge's layer check (:mod:`~airflow_iceberg_dml.erasure_layers`) found: where an erased key
remains, by file and layer, never the key; and the files it read or could not read."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from airflow_iceberg_dml.erasure_keys import redacted


@dataclass
class Residue:
    """A place where an erased key remains: the file, its layer and what in it (never the key)."""

    file: str
    layer: str
    where: str
    referenced: bool = True
    modified_ms: int = 0

    def to_json(self, names: set[str]) -> dict[str, Any]:
        file = redacted(self.file, names)
        return {"file": file, "layer": self.layer, "where": self.where, "referenced": self.referenced}


@dataclass
class LayerCheck:
    """What one pass over a table's storage found: files read per layer, and the residues."""

    files: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    residues: list[Residue] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    def to_json(self, names: set[str]) -> dict[str, Any]:
        return {
            "files_read": dict(sorted(self.files.items())),
            "residues": [residue.to_json(names) for residue in self.residues],
            "unreadable": self.unreadable,
        }


def unique(residues: list[Residue]) -> list[Residue]:
    """Each residue once per file, layer and place in the file, the first found kept."""
    seen: dict[tuple[str, str, str], Residue] = {}
    for residue in residues:
        seen.setdefault((residue.file, residue.layer, residue.where), residue)
    return list(seen.values())
