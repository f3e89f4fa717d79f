"""Method presets: YAML files in ``configs/methods/`` that pick values for the knobs, paper cited."""

from __future__ import annotations

import os
from pathlib import Path

import yaml


def presets_dir() -> Path | None:
    """``$RLVR_CONFIGS/methods``, ``./configs/methods`` or the repository's ``configs/methods``."""
    candidates = [Path(os.environ["RLVR_CONFIGS"]) / "methods"] if os.environ.get("RLVR_CONFIGS") else []
    candidates += [Path.cwd() / "configs" / "methods", Path(__file__).resolve().parents[2] / "configs" / "methods"]
    return next((c for c in candidates if c.is_dir()), None)


def resolve_config(name_or_path: str | None) -> str | None:
    """A config path as given, or the preset file of that name (``dapo`` → configs/methods/dapo.yaml)."""
    if name_or_path is None or Path(name_or_path).exists():
        return name_or_path
    folder = presets_dir()
    if folder is not None and (folder / f"{name_or_path}.yaml").exists():
        return str(folder / f"{name_or_path}.yaml")
    known = sorted(p.stem for p in folder.glob("*.yaml")) if folder else []
    raise FileNotFoundError(f"config '{name_or_path}' is neither a file nor a preset; presets: {', '.join(known)}")


def preset_table() -> list[dict[str, str]]:
    folder = presets_dir()
    if folder is None:
        return []
    rows = []
    for path in sorted(folder.glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        rows.append({"name": path.stem, "paper": str(data.get("paper", "")), "path": str(path)})
    return rows
