"""Chess testbed diagnostics (docs/methods.md §2.22, harness RECONSTRUCTION).

* ``correct_move_rate``: a Monte-Carlo estimate of π(correct move | puzzle), the fraction of
  sampled completions whose final move the verifier accepts (the trace is marginalised out);
* ``amplify_vs_surface``: how RL moved that probability on easy versus hard puzzles (split by
  rating): *amplify* = mean gain on puzzles the SFT policy already preferred (p ≥ ``present``),
  *surface* = fraction of nearly absent puzzles (p < ``present``) that RL lifted to p ≥ ``present``;
* ``reward_slope``: least-squares slope of the RL reward curve over its first K steps;
* ``pretraining_report``: post-RL accuracy regressed on pretraining loss, and the reward-curve
  slope against pretraining tokens, over runs of several sizes and budgets.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from rlvr.models import render_prompt
from rlvr.rollout import generate
from rlvr.tasks import verify_all


@torch.no_grad()
def correct_move_rate(model: torch.nn.Module, tokenizer: Any, task: Any, problems: list, *, samples: int = 8,
                      seed: int = 0, max_new_tokens: int = 48, temperature: float = 1.0) -> list[float]:
    """(P,) per puzzle, the fraction of ``samples`` sampled completions the verifier accepts."""
    rows = [p for p in problems for _ in range(samples)]
    was_training = model.training
    model.eval()
    gen = generate(model, tokenizer, [render_prompt(tokenizer, p) for p in rows],
                   max_new_tokens=max_new_tokens, temperature=temperature, do_sample=True, seed=seed)
    model.train(was_training)
    scores = [s.value for s in verify_all(task, rows, gen.texts, 5.0)]
    return [sum(scores[i * samples:(i + 1) * samples]) / samples for i in range(len(problems))]


def amplify_vs_surface(p_before: Sequence[float], p_after: Sequence[float], ratings: Sequence[float], *,
                       split: float | None = None, present: float = 0.1) -> dict[str, dict[str, float]]:
    """Per bucket ("easy": rating ≤ split, "hard": rating > split; split defaults to the median
    rating): puzzles, mean p before/after, ``amplify`` (mean p_after − p_before over puzzles with
    p_before ≥ present; NaN if none), ``surface`` (fraction of puzzles with p_before < present that
    reach p_after ≥ present; NaN if none)."""
    if not len(p_before) == len(p_after) == len(ratings) or not len(ratings):
        raise ValueError("amplify_vs_surface: p_before, p_after and ratings need the same non-zero length")
    if split is None:
        split = sorted(ratings)[(len(ratings) - 1) // 2]
    out = {}
    for name, keep in (("easy", lambda r: r <= split), ("hard", lambda r: r > split)):
        idx = [i for i, r in enumerate(ratings) if keep(r)]
        pre = [i for i in idx if p_before[i] >= present]
        absent = [i for i in idx if p_before[i] < present]
        out[name] = {
            "puzzles": float(len(idx)),
            "p_before": _mean([p_before[i] for i in idx]), "p_after": _mean([p_after[i] for i in idx]),
            "amplify": _mean([p_after[i] - p_before[i] for i in pre]),
            "surface": _mean([float(p_after[i] >= present) for i in absent]),
        }
    return out


def fit_line(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """Least-squares ``y ≈ slope·x + intercept`` and Pearson r (NaN when x or y is constant)."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError("fit_line: need two or more (x, y) pairs of equal length")
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    slope = sxy / sxx if sxx > 0 else float("nan")
    r = sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else float("nan")
    return {"slope": slope, "intercept": my - slope * mx if sxx > 0 else float("nan"), "r": r}


def reward_slope(rewards: Sequence[float], window: int) -> float:
    """Slope per step of a linear fit to the first ``window`` rewards of an RL curve."""
    if window < 2:
        raise ValueError(f"reward_slope: window must be >= 2, got {window}")
    head = list(rewards[:window])
    return fit_line(list(range(len(head))), head)["slope"] if len(head) >= 2 else float("nan")


def pretraining_report(runs: list[dict[str, Any]], *, slope_window: int) -> dict[str, Any]:
    """Post-RL accuracy against pretraining loss, RL reward slope against pretraining tokens, and
    amplify/surface per run. Each run is ``rlvr.train.chess_pipeline.run_pipeline``'s output."""
    rows = []
    for run in runs:
        rows.append({"params": run["params"], "pretrain_tokens": run["pretrain_tokens"],
                     "pretrain_loss": run["pretrain_loss"], "accuracy_sft": run["accuracy_sft"],
                     "accuracy_rl": run["accuracy_rl"], "reward_slope": reward_slope(run["rl_rewards"], slope_window),
                     "amplify_vs_surface": amplify_vs_surface(run["p_sft"], run["p_rl"], run["ratings"])})
    out: dict[str, Any] = {"runs": rows}
    if len(rows) >= 2:
        out["accuracy_rl_vs_pretrain_loss"] = fit_line([r["pretrain_loss"] for r in rows],
                                                       [r["accuracy_rl"] for r in rows])
        out["slope_vs_pretrain_tokens"] = fit_line([r["pretrain_tokens"] for r in rows],
                                                   [r["reward_slope"] for r in rows])
    return out


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")
