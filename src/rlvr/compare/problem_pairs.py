"""Pairing two methods problem by problem, beside the seed-level test (which stays the verdict).

Each finished run's held-out outcomes (``rlvr.eval.outcomes``, RUN/eval_outcomes.jsonl) enter its
results.json record in a compact form (``compact_outcomes``): one character per problem, so a
1,000-problem run adds about 3 kB. Where a method and the baseline were scored on the same problems
of a seed (the same problem ids in the same order), ``pair_problems`` gives per seed the problems only
the method got right (b) and only the baseline did (c), the exact McNemar p of that seed, and pooled
over seeds: the summed b and c with their McNemar p (a stratified test of "no problem differs"), the
mean difference with its evaluation-noise standard error √(Σ seᵢ²)/S, and the share of the seed-level
variance of the paired differences that evaluation noise alone explains (mean seᵢ² / s²): near 1, more
problems would sharpen the comparison; near 0, only more seeds will.

The problem-level p treats the trained models as fixed: it asks whether these two models differ on
this problem distribution, not whether the methods differ across RL seeds, hence never the verdict.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

from rlvr.compare.stats import mcnemar_p, problem_paired
from rlvr.eval.metrics import pass_at_k
from rlvr.eval.outcomes import read_outcomes

MAX_COMPACT = 5000  # problems per run kept in results.json (beyond: the run folder's jsonl only)


def compact_outcomes(run_dir: str | Path) -> dict[str, Any] | None:
    """The after-RL outcomes of a run folder as strings of digits (None: none saved, or too many):
    ``greedy`` / ``maj`` one 0/1 per problem (None where a reward is not 0 or 1), ``correct`` the
    right samples of k per problem (k ≤ 9), ``ids`` a digest of the problem ids in order."""
    rows = read_outcomes(run_dir)
    if not rows or len(rows) > MAX_COMPACT:
        return None
    k = rows[0].get("k") or 0
    out = {"n": len(rows), "ids": _digest([r["id"] for r in rows]), "k": k,
           "greedy": _bits([r["greedy"] for r in rows]), "maj": None, "correct": None}
    if k and all("correct" in r for r in rows):
        out["maj"] = _bits([r.get("maj") for r in rows])
        out["correct"] = "".join(str(r["correct"]) for r in rows) if k <= 9 else None
    return out


def _digest(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


def _bits(values: list[Any]) -> str | None:
    if any(v not in (0.0, 1.0) for v in values):
        return None
    return "".join("1" if v == 1.0 else "0" for v in values)


def per_problem(compact: dict[str, Any] | None, metric: str) -> list[float] | None:
    """One value per problem for ``metric``: ``accuracy_after`` (greedy), ``pass@j`` (j ≤ k, the unbiased
    estimate from the problem's correct samples) or ``maj@k``; None where the outcomes do not give it."""
    if not compact:
        return None
    k = compact.get("k") or 0
    if metric == "accuracy_after" and compact.get("greedy"):
        return [float(ch) for ch in compact["greedy"]]
    if metric == f"maj@{k}" and compact.get("maj"):
        return [float(ch) for ch in compact["maj"]]
    if metric.startswith("pass@") and metric[5:].isdigit() and compact.get("correct") and 1 <= int(metric[5:]) <= k:
        return [pass_at_k(k, int(ch), int(metric[5:])) for ch in compact["correct"]]
    return None


def pair_problems(records: list[dict[str, Any]], method: str, baseline: str, metric: str,
                  sign: float = 1.0) -> dict[str, Any] | None:
    """Problem-level pairing of ``method`` against ``baseline`` on ``metric`` over the seeds where both
    finished with outcomes on the same problems (None where no seed has them); ``sign`` −1 orients a
    lower-is-better metric. Seeds whose problem ids differ are listed in ``mismatched``."""
    runs = {(r["method"], r["seed"]): r.get("outcomes") for r in records if r.get("status") == "done"}
    seeds, mismatched = [], []
    for (name, seed), ours in sorted(runs.items(), key=lambda kv: str(kv[0][1])):
        theirs = runs.get((baseline, seed))
        if name != method or not ours or not theirs:
            continue
        if ours["ids"] != theirs["ids"]:
            mismatched.append(seed)
            continue
        a, b = per_problem(ours, metric), per_problem(theirs, metric)
        if a is not None and b is not None:
            pair = problem_paired([sign * x for x in a], [sign * x for x in b])
            seeds.append({"seed": seed, **pair})
    if not seeds:
        return {"seeds": [], "mismatched": mismatched} if mismatched else None
    return {"seeds": seeds, "mismatched": mismatched, **_pooled(seeds)}


def _pooled(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    b, c, s = sum(x["b"] for x in seeds), sum(x["c"] for x in seeds), len(seeds)
    means = [x["mean"] for x in seeds]
    ses = [x["se"] for x in seeds if x["se"] is not None]
    eval_var = sum(se ** 2 for se in ses) / len(ses) if ses else None
    mean = sum(means) / s
    seed_var = sum((m - mean) ** 2 for m in means) / (s - 1) if s > 1 else None
    share = None if eval_var is None or not seed_var else eval_var / seed_var
    return {"b": b, "c": c, "p": mcnemar_p(b, c), "mean": mean,
            "se_eval": math.sqrt(sum(se ** 2 for se in ses)) / s if ses else None,
            "eval_share": share}


def problem_table(records: list[dict[str, Any]], methods: list[str], baseline: str, metrics: list[str],
                  lower: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """Per method other than the baseline and per metric, ``pair_problems`` (left out where None);
    metrics in ``lower`` are lower-is-better."""
    out: dict[str, dict[str, Any]] = {}
    for method in methods:
        if method == baseline:
            continue
        pairs = {m: pair_problems(records, method, baseline, m, -1.0 if m in lower else 1.0) for m in metrics}
        if any(pairs.values()):
            out[method] = {m: p for m, p in pairs.items() if p}
    return out


def problem_lines(table: dict[str, dict[str, Any]], baseline: str) -> list[str]:
    """results.md's problem-level section (empty when no pair of runs has outcomes)."""
    if not table:
        return []
    lines = [f"## Problem-level pairing against {baseline} (beside the seed-level test, not a verdict)", "",
             "Per metric: b / c = problems only the method / only the baseline got right (pass@j: scored "
             "higher), summed over seeds, with the exact McNemar p of the sums; per seed b/c in order; Δ the "
             "mean difference ± its evaluation-noise standard error (the models held fixed); eval share = "
             "the part of the seed-level variance of the paired differences that evaluation noise explains.",
             "", "| method | metric | b / c (p) | per seed b/c | Δ ± SE (eval) | eval share |",
             "|---|---|---|---|---|---|"]
    for method, per_metric in table.items():
        for metric, pair in per_metric.items():
            if not pair["seeds"]:
                lines.append(f"| {method} | {metric} | — | problem ids differ on seeds {pair['mismatched']} "
                             "| — | — |")
                continue
            seeds = " ".join(f"{x['b']}/{x['c']}" for x in pair["seeds"])
            se = "—" if pair["se_eval"] is None else f"{pair['se_eval']:.3f}"
            share = "—" if pair["eval_share"] is None else f"{pair['eval_share']:.2f}"
            lines.append(f"| {method} | {metric} | {pair['b']} / {pair['c']} ({pair['p']:.3g}) | {seeds} "
                         f"| {pair['mean']:+.3f} ± {se} | {share} |")
    return lines + [""]
