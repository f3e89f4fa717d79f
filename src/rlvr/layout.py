"""docs/design.md §5, generated from ``rlvr.layers.LAYERS``: every folder and top-level module of
``src/rlvr`` by layer, each with the first line of its own docstring.

``python -m rlvr.layout`` rewrites the section between its two markers in docs/design.md (the rest of
the page is written by hand); ``tests/unit/test_layout.py`` fails when the committed section differs
from what the code gives now, so a new folder, a moved layer or a changed docstring means regenerating.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from rlvr.layers import LAYER_NAMES, LAYERS

REGENERATE = "PYTHONPATH=src python -m rlvr.layout"
BEGIN = "<!-- generated from rlvr.layers.LAYERS by `python -m rlvr.layout`: do not edit by hand -->"
END = "<!-- end of the generated layout -->"
PACKAGE = Path(__file__).resolve().parent
DESIGN_PAGE = PACKAGE.parents[1] / "docs" / "design.md"


def summary(key: str) -> str:
    """The first docstring line of the folder's ``__init__.py`` or of the module named by ``key``."""
    path = PACKAGE / "__init__.py" if key == "" else PACKAGE / key / "__init__.py"
    if not path.exists():
        path = PACKAGE / f"{key}.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip()


def render() -> str:
    """The generated part of §5: one row per layer key, lowest layer first, then by name."""
    lines = [BEGIN, "",
             f"The layers of `src/rlvr/`, lowest first, from `src/rlvr/layers.py`; regenerate with `{REGENERATE}`.",
             "A module imports only from its own layer or a lower one, and no two modules import each other,",
             "directly or around a circle (`tests/unit/test_layers.py` checks every import statement); a layer",
             "that needs something of a higher one is handed it (a callable, a Protocol). A folder is one layer.",
             "", "| layer | | folder or module | what it is |", "|---|---|---|---|"]
    for key in sorted(LAYERS, key=lambda k: (LAYERS[k], k)):
        name = "the package root" if key == "" else f"`{key}/`" if (PACKAGE / key).is_dir() else f"`{key}.py`"
        text = summary(key).replace("|", "\\|")
        lines.append(f"| {LAYERS[key]} | {LAYER_NAMES[LAYERS[key]]} | {name} | {text} |")
    return "\n".join([*lines, "", END])


def splice(text: str) -> str:
    """``text`` (docs/design.md) with its generated section replaced by ``render()``."""
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not (begin and end):
        raise ValueError(f"docs/design.md lacks the markers of the generated layout ({BEGIN!r} ... {END!r})")
    return head + render() + tail


def main() -> int:
    DESIGN_PAGE.write_text(splice(DESIGN_PAGE.read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
