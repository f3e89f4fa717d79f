"""``rlvr compare --dry-run``: what a comparison would run, reuse, resume or set aside, as text.

It reads the plan of ``rlvr.compare.runner.plan_comparison`` and runs, builds and writes nothing, so a
long comparison can be checked before it starts and its progress read while it goes.
"""

from __future__ import annotations

from typing import Any

# How each action reads, in the order the lines list them.
_ACTIONS = {"start": "to start", "resume": "to resume from a checkpoint", "archive": "to set aside and start again",
            "reuse": "finished (reused)"}


def dry_run_text(plan: dict[str, Any]) -> str:
    """The plan as lines: the warm starts (cached or to build), the runs by action, then each method's
    seeds by action and the keys of every run whose saved config changed."""
    lines = []
    if plan["warm"]:
        by = _group(plan["warm"].items())
        parts = [f"{len(by[a])} {word} ({seed_ranges(by[a])})" for a, word in (("cached", "cached"),
                                                                            ("build", "to build")) if a in by]
        lines.append(f"warm starts in {plan['warm_root']}: {', '.join(parts)}")
    runs = plan["runs"]
    counts = [f"{sum(r['action'] == a for r in runs)} {word}" for a, word in _ACTIONS.items()]
    lines.append(f"runs ({len(runs)}): {', '.join(counts)}")
    width = max((len(r["method"]) for r in runs), default=0)
    for method in dict.fromkeys(r["method"] for r in runs):
        by = _group((r["seed"], r["action"]) for r in runs if r["method"] == method)
        lines.append(f"  {method:<{width}}  " + "; ".join(f"{a} {seed_ranges(by[a])}" for a in _ACTIONS if a in by))
    for r in runs:
        if r["changed"]:
            lines.append(f"  {r['method']} seed {r['seed']} changed: {', '.join(r['changed'])}")
    return "\n".join(lines)


def seed_ranges(seeds: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` as ``0-2, 5, 7-8``."""
    out: list[str] = []
    for seed in sorted(seeds):
        if out and seed == last + 1:
            first = out.pop().split("-")[0]
            out.append(f"{first}-{seed}")
        else:
            out.append(str(seed))
        last = seed
    return ", ".join(out)


def _group(pairs: Any) -> dict[str, list[int]]:
    by: dict[str, list[int]] = {}
    for seed, action in pairs:
        by.setdefault(action, []).append(seed)
    return by
