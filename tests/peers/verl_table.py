"""docs/scaling.md's table of the rlvr names inside verl's trainer, read for the verl tests: the names
a test runs through verl's dispatch are the ones the documentation marks, so the two cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "scaling.md"
STATUSES = ("works", "works without state", "refused")
ROW = re.compile(r"^\| `(rlvr_\w+)` \| ([a-z ]+?) \| (.+) \|$")


def verl_table() -> dict[str, str]:
    """{verl name: status} from the table's rows, in the table's order."""
    rows: dict[str, str] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line.strip())
        if match:
            name, status = match.group(1), match.group(2)
            assert name not in rows, f"{name} appears twice in {DOC.name}'s verl table"
            assert status in STATUSES, f"{name}: status '{status}' is not one of {STATUSES}"
            rows[name] = status
    return rows


def built_in(kind: str) -> list[str]:
    """The registered names of rlvr's own plug-ins of ``kind`` (not those a test in the same process registers)."""
    from rlvr.registry import get, names

    return [n for n in names(kind) if get(kind, n).__module__.startswith("rlvr.")]


def rlvr_names(kind: str, status: str) -> list[str]:
    """rlvr names (without the prefix) of ``kind`` whose row says ``status``."""
    from rlvr.registry import names

    table = verl_table()
    return [n for n in names(kind) if table.get(f"rlvr_{n}") == status]
