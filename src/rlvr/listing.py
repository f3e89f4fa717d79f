"""The plug-in listing behind ``rlvr list``: every built-in plug-in described, and the aggregation modes.

Describing the plug-ins means importing every plug-in module (torch, transformers: about 6 s on 2
cores), so the description is generated once and committed next to this file as ``listing.json``;
``rlvr list`` reads that file and imports nothing heavy, the first call included. Regenerate it after
adding, renaming or re-documenting a plug-in (its summary, paper, a field's default or help)::

    PYTHONPATH=src python -m rlvr.listing > src/rlvr/listing.json

``tests/unit/test_listing.py`` fails while the committed file differs from what this writes, so the
fast listing is the registry's exactly. Where the file is missing (a copy of the package without its
data) the listing is built from the registry on the spot.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

LISTING = Path(__file__).resolve().parent / "listing.json"
REGENERATE = "PYTHONPATH=src python -m rlvr.listing > src/rlvr/listing.json"


def build_listing() -> dict[str, Any]:
    """The listing from the live registry (imports every plug-in module): ``{"plugins": [describe(e) +
    a ``shown`` string per field], "aggregation_modes": [...]}``, as JSON-ready data."""
    from rlvr.aggregation import AGGREGATION_MODES
    from rlvr.catalogue import builtin_entries
    from rlvr.registry import describe
    plugins = [describe(e) for e in builtin_entries()]
    for item in plugins:
        for f in item["params"]:
            f["shown"] = str(f["default"])  # as Python prints it (a tuple stays a tuple)
    data = {"plugins": plugins, "aggregation_modes": list(AGGREGATION_MODES)}
    return json.loads(json.dumps(data, default=str))  # what a JSON round trip gives (tuples → lists)


def render_listing(listing: dict[str, Any]) -> str:
    """The text of ``listing.json``: deterministic, one field per line, a final newline."""
    return json.dumps(listing, indent=1, ensure_ascii=False) + "\n"


def load_listing() -> dict[str, Any]:
    """The committed listing (fast: JSON only), or the live registry's when the file is absent."""
    try:
        text = LISTING.read_text(encoding="utf-8")
    except FileNotFoundError:
        return build_listing()
    return json.loads(text)


def main() -> int:
    sys.stdout.write(render_listing(build_listing()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
