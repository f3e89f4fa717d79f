"""The methods catalogue, ``docs/catalogue.md``, generated from the registries and the presets.

The same data as ``rlvr list``: every registered plug-in by kind with its one-line summary and
paper, plus the presets in ``configs/methods/`` that name it. Regenerate after adding or renaming a
plug-in or a preset::

    PYTHONPATH=src python -m rlvr.catalogue > docs/catalogue.md

``tests/unit/test_catalogue.py`` fails while the committed file differs from what this writes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from rlvr.aggregation import AGGREGATION_MODES
from rlvr.registry import KINDS, entries

REGENERATE = "PYTHONPATH=src python -m rlvr.catalogue > docs/catalogue.md"

# Where a preset names a plug-in of each kind (the key that holds its ``{name: ...}`` spec).
_PRESET_KEYS = {
    "advantage": "advantage", "loss": "loss", "filters": "filter", "selector": "selector",
    "shapers": "shaper", "weightings": "weighting", "optim": "loop", "sampler": "sampler",
    "engine": "engine", "task": "task", "verifier": "verifier", "teacher": "teacher",
}
# Keys that name plug-ins by bare names (not ``{name: ...}`` specs): rollout.engine, optim.optimizer,
# a multi-turn sampler's ``env`` and LURE's ``envs``.
_BARE_KEYS = {"engine": "engine", "optimizer": "optimizer", "env": "environment", "envs": "environment"}


def preset_uses(folder: Path) -> dict[tuple[str, str], list[str]]:
    """``(kind, plug-in name) -> [preset names]`` for every ``{name: ...}`` spec in the presets."""
    uses: dict[tuple[str, str], list[str]] = {}

    def note(kind: str, name: str, preset: str) -> None:
        names = uses.setdefault((kind, name), [])
        if preset not in names:
            names.append(preset)

    def walk(node: Any, key: str | None, preset: str) -> None:
        if isinstance(node, dict):
            kind = _PRESET_KEYS.get(key or "")
            if kind is not None and isinstance(node.get("name"), str):
                note(kind, node["name"], preset)
            for k, v in node.items():
                bare = [v] if isinstance(v, str) else v if isinstance(v, list) else []
                for name in (bare if k in _BARE_KEYS else []):
                    if isinstance(name, str):
                        note(_BARE_KEYS[k], name, preset)
                walk(v, str(k), preset)
        elif isinstance(node, list):
            for v in node:
                walk(v, key, preset)

    for path in sorted(folder.glob("*.yaml")):
        walk(yaml.safe_load(path.read_text()) or {}, None, path.stem)
    return uses


def builtin_entries() -> list:
    """rlvr's own plug-ins (a test or user module registered in this process is not part of the catalogue)."""
    return [e for e in entries() if e.cls.__module__.split(".")[0] == "rlvr"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def render(presets_folder: Path | None = None) -> str:
    """The catalogue as Markdown (deterministic: sorted by kind order, then name)."""
    folder = presets_folder or Path(__file__).resolve().parents[2] / "configs" / "methods"
    uses = preset_uses(folder) if folder.is_dir() else {}
    lines = ["# Plug-in catalogue", "",
             "Generated from the registries (the data of `rlvr list`) and `configs/methods/`; do not edit by",
             f"hand. Regenerate with `{REGENERATE}`. The math of each method is in",
             "[methods.md](methods.md); the stages are described in [design.md](design.md) §2.", ""]
    all_entries = builtin_entries()
    for kind in KINDS:
        rows = [e for e in all_entries if e.kind == kind]
        if not rows:
            continue
        lines += [f"## {kind} ({len(rows)})", "", "| name | summary | paper | presets |", "|---|---|---|---|"]
        for e in rows:
            used = ", ".join(f"`{p}`" for p in uses.get((kind, e.name), []))
            lines.append(f"| `{e.name}` | {_cell(e.summary)} | {_cell(e.paper)} | {used} |")
        lines.append("")
    lines += ["## aggregation modes", "",
              "`algorithm.aggregation.mode`, separate from the per-token loss ([methods.md](methods.md) §0.2): "
              + ", ".join(f"`{m}`" for m in AGGREGATION_MODES) + ".", ""]
    if folder.is_dir():
        lines += ["## presets", "", "| preset | paper |", "|---|---|"]
        for path in sorted(folder.glob("*.yaml")):
            data = yaml.safe_load(path.read_text()) or {}
            lines.append(f"| [`{path.stem}`](../configs/methods/{path.name}) | {_cell(str(data.get('paper', '')))} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
