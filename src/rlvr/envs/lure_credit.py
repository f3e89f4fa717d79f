"""LURE's credit (docs/methods.md §2.7, RECONSTRUCTION): the evader's capture-frontier reward, the pursuer's
capture-anchored monotone progress credit with joint group normalisation, and the round anchor.

Pure math on numbers and tensors; ``rlvr.loops.lure`` wires it into the self-play loop.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from rlvr.ops import group_stats

EVADER_REWARDS = ("triangle", "quadratic")
PROGRESS_CREDITS = ("monotone",)


def evader_reward(capture_rate: Tensor, form: str = "triangle") -> Tensor:
    """Capture-frontier reward of an evader proposal from its pursuer capture rate ĉ ∈ [0, 1]:
    ``triangle`` R_E = 1 − |2ĉ − 1|, ``quadratic`` R_E = 4ĉ(1 − ĉ); both peak at ĉ = 0.5 with value 1
    and are 0 at ĉ = 0 and ĉ = 1. Shapes: any → same."""
    c = capture_rate.float()
    if bool(((c < 0) | (c > 1)).any()):
        raise ValueError("evader_reward: capture rates must lie in [0, 1]")
    if form == "triangle":
        return 1.0 - (2.0 * c - 1.0).abs()
    if form == "quadratic":
        return 4.0 * c * (1.0 - c)
    raise ValueError(f"evader_reward: unknown form '{form}'; valid: {', '.join(EVADER_REWARDS)}")


def progress_credit(progress: Sequence[float], initial: float = 0.0) -> list[float]:
    """Monotone progress credit ``p_s = max(0, v_s − max(v_0, v_1..v_{s−1}))`` per step s = 1..S;
    every p_s ≥ 0 and Σ_s p_s = max(v_0, max_s v_s) − v_0."""
    best, out = initial, []
    for v in progress:
        out.append(max(0.0, float(v) - best))
        best = max(best, float(v))
    return out


def capture_returns(credit: Sequence[float], capture: float) -> list[float]:
    """Capture-anchored return of each step: ``g_s = Σ_{s' ≥ s} p_{s'} + C``."""
    out, acc = [], float(capture)
    for p in reversed(credit):
        acc += float(p)
        out.append(acc)
    return out[::-1]


def joint_normalise(returns: Sequence[Sequence[float]], group_ids: Sequence[int], *, ddof: int = 1,
                    eps: float = 1e-6) -> list[list[float]]:
    """``A_s^{(j)} = (g_s^{(j)} − mean) / (std + eps)``, mean and std over every step of every row of
    the same group (the G pursuer rollouts of one task). A group with a single step overall gets
    mean 0 and std 1 (GRPO's singleton convention)."""
    flat = torch.tensor([g for row in returns for g in row], dtype=torch.float64)  # (Σ S_j,)
    ids = torch.tensor([gid for row, gid in zip(returns, group_ids) for _ in row], dtype=torch.long)
    if flat.numel() == 0:
        return [[] for _ in returns]
    stats = group_stats(flat, ids, ddof=ddof)
    single = stats.count == 1
    mean = torch.where(single, torch.zeros_like(stats.mean), stats.mean)
    std = torch.where(single, torch.ones_like(stats.std), stats.std)
    adv = ((flat - mean) / (std + eps)).tolist()
    out, k = [], 0
    for row in returns:
        out.append(adv[k:k + len(row)])
        k += len(row)
    return out


def pursuer_advantages(turn_scores: Sequence[Sequence[float]], captures: Sequence[float],
                       spans: Sequence[Sequence[tuple[int, int]]], group_ids: Sequence[int], mask: Tensor, *,
                       initial: float = 0.0, ddof: int = 1, eps: float = 1e-6) -> tuple[Tensor, list[list[float]]]:
    """(N, T) token advantages: row j's turn s gets ``A_s^{(j)}`` on its tokens (span [start, end)),
    0 on untrained tokens; also returns each row's step credits p_s (for diagnostics).
    ``turn_scores[j]`` are the verifier progress values v_1..v_S of row j, ``captures[j]`` its C."""
    credits = [progress_credit(v, initial) for v in turn_scores]
    returns = [capture_returns(p, c) for p, c in zip(credits, captures)]
    adv = joint_normalise(returns, group_ids, ddof=ddof, eps=eps)
    out = torch.zeros(mask.shape, dtype=torch.float32)
    for i, (row_spans, row_adv) in enumerate(zip(spans, adv)):
        for (start, end), a in zip(row_spans, row_adv):
            out[i, start:end] = a
    return out.to(mask.device) * mask, credits


def anchor_due(step: int, round_steps: int) -> bool:
    """True at the first step of every round (steps counted from 0): the reference is re-anchored."""
    if round_steps < 1:
        raise ValueError(f"anchor_due: round_steps must be >= 1, got {round_steps}")
    return step % round_steps == 0
