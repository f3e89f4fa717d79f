"""Did every run of a seed start from one model? A check on what the runs measured before RL.

With a shared warm start every method of a seed trains from the same model and is evaluated on the same
held-out problems before RL, so their before-RL numbers (greedy accuracy, pass@j, maj@j, subsets) are equal;
that is what lets the report pair them seed by seed. A run whose numbers differ started elsewhere: a warm
start rebuilt on another machine (``--records`` pairs a new arm with runs made elsewhere), or evaluated
under other rounding (another CPU or thread count can move a sampled pass@j or a greedy near-tie). The check
cannot tell these apart; it names the runs so a reader looks before trusting their pairs.
"""

from __future__ import annotations

from typing import Any

BEFORE = ("pass_at_k_before", "maj_at_k_before", "subsets_before")  # the dict-valued before-RL fields


def before_numbers(record: dict[str, Any]) -> dict[str, float]:
    """A finished run's before-RL numbers by name (``accuracy_before``, ``pass@4``, ``maj@4``, ...)."""
    out = {"accuracy_before": record.get("accuracy_before")}
    for field in BEFORE:
        out.update(record.get(field) or {})
    return {k: float(v) for k, v in out.items() if v is not None}


def differing_starts(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per seed, the finished runs whose before-RL numbers differ from the seed's first finished run's (on
    the names both report; exact, as equal starts evaluated alike give equal counts):
    ``[{"seed", "reference", "differ": {method: {name: [its value, the reference's]}}}]``; empty when all agree."""
    out = []
    for seed in dict.fromkeys(r["seed"] for r in records):
        done = [r for r in records if r["seed"] == seed and r.get("status") == "done"]
        if len(done) < 2:
            continue
        ref = before_numbers(done[0])
        differ = {}
        for rec in done[1:]:
            mine = before_numbers(rec)
            gaps = {k: [mine[k], ref[k]] for k in sorted(set(mine) & set(ref)) if mine[k] != ref[k]}
            if gaps:
                differ[rec["method"]] = gaps
        if differ:
            out.append({"seed": seed, "reference": done[0]["method"], "differ": differ})
    return out


def differing_lines(found: list[dict[str, Any]]) -> list[str]:
    """results.md's warning section for ``differing_starts``'s findings (none when the list is empty)."""
    if not found:
        return []
    lines = ["", "## Warning: runs of one seed that did not start alike", "",
             "These runs share a warm start, so their before-RL numbers should equal the seed's first run's; they "
             "do not. Either the model they started from differs (a warm start rebuilt elsewhere) or its "
             "evaluation rounded otherwise (another CPU or thread count). Their pairs are not trustworthy until "
             "that is settled.", ""]
    for item in found:
        for method, gaps in item["differ"].items():
            shown = ", ".join(f"{k} {a:.4f} vs {b:.4f}" for k, (a, b) in list(gaps.items())[:4])
            lines.append(f"- seed {item['seed']}: {method} against {item['reference']}: {shown}")
    return lines
