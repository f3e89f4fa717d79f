"""Shared plumbing of the benchmarks that are thin configs over `rlvr compare`: the comparison spec on
the arithmetic testbed, the run, its results.json, and per-run metric curves from metrics.jsonl.

Imported by the scripts beside it (``python benchmarks/<name>.py`` puts this folder on sys.path)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]  # the repository: `rlvr compare` runs from here


def compare_spec(out_dir: str, methods: dict[str, dict], seeds: list[int], budget: dict[str, int], jobs: int,
                 run: dict[str, Any], warm_steps: int = 400, warm_target: float = 0.2,
                 warm_max_steps: int = 1000) -> dict[str, Any]:
    """A comparison spec on the arithmetic task: one shared warm start per seed, then every method
    under the same budget."""
    return {
        "out_dir": out_dir,
        "base": {"task": {"name": "arithmetic"},
                 "warm_start": {"steps": warm_steps, "target_accuracy": warm_target, "max_steps": warm_max_steps},
                 "run": run},
        "methods": methods,
        "seeds": seeds,
        "budget": budget,
        "jobs": jobs,
    }


def write_spec(spec: dict[str, Any], out_dir: Path, name: str) -> Path:
    """Write ``spec`` as ``out_dir/<name>.yaml`` (creating ``out_dir``); returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    config = out_dir / f"{name}.yaml"
    config.write_text(yaml.safe_dump(spec, sort_keys=False))
    return config


def run_compare(config: Path, quiet: bool = False) -> int:
    """``python -m rlvr compare <config>`` from the repository root; its exit code (``quiet``: no stdout)."""
    stdout = subprocess.DEVNULL if quiet else None
    return subprocess.run([sys.executable, "-m", "rlvr", "compare", str(config)], cwd=ROOT, stdout=stdout).returncode


def read_results(out_dir: Path) -> dict[str, Any]:
    """The comparison's results.json."""
    return json.loads((out_dir / "results.json").read_text())


def metric_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of a run's metrics.jsonl (the file must exist)."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def metric_curve(run_dir: Path, key: str, pieces: int, missing_ok: bool = False) -> list[float]:
    """Mean of metric ``key`` over each of ``pieces`` equal spans of a run's steps ([] when it was never
    logged, or, with ``missing_ok``, when the run has no metrics.jsonl)."""
    if missing_ok and not (run_dir / "metrics.jsonl").exists():
        return []
    values = [r[key] for r in metric_rows(run_dir) if key in r]
    if not values:
        return []
    size = max(len(values) // pieces, 1)
    return [sum(values[i:i + size]) / len(values[i:i + size]) for i in range(0, len(values), size)][:pieces]


def seed_mean(curves: list[list[float]]) -> list[float]:
    """Pointwise mean over the non-empty curves, cut to the shortest, rounded to 4 places ([] if none)."""
    curves = [c for c in curves if c]
    if not curves:
        return []
    n = min(len(c) for c in curves)
    return [round(sum(c[i] for c in curves) / len(curves), 4) for i in range(n)]
