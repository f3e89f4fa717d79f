"""Consensus over a group's parsed answers: the shared helpers of the label-free rewards
(TTRL majority vote, OM-GRPO soft consensus, Hi-TTRL's partial-group estimate).

Answers are compared as strings after :func:`rlvr.rewards.answer.normalise` (case, spaces, ``$``
and a trailing ``.``); an unparsed answer (None) never agrees with anything and never wins a vote.
Nothing here reads a gold answer: the gold verdict enters only :func:`gold_metrics`, which is
logging, never reward.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Sequence

import torch
from torch import Tensor

from rlvr.registry import param, register
from rlvr.rewards.answer import normalise
from rlvr.rewards.base import RewardShaper
from rlvr.types import BatchError, Rollouts

TIES = ("first", "skip")


def answer_keys(parsed: Sequence[str | None], normalised: bool = True) -> list[str | None]:
    """The comparison key of each answer: normalised text (or the raw text), None when unparsed."""
    return [None if a is None else (normalise(str(a)) if normalised else str(a)) for a in parsed]


def groups(group_ids: Tensor) -> list[list[int]]:
    """Row indices of each group, groups in order of first appearance, rows in batch order."""
    out: dict[int, list[int]] = {}
    for i, g in enumerate(group_ids.tolist()):
        out.setdefault(g, []).append(i)
    return list(out.values())


def vote(keys: Sequence[str | None], ties: str = "first") -> str | None:
    """The majority answer of one group's keys (None when no row has an answer).

    Ties: ``first`` — among the answers with the top count, the one that appears first in row
    order (Python's ``Counter.most_common`` rule); ``skip`` — a tie gives no label (None).
    """
    if ties not in TIES:
        raise ValueError(f"vote: ties must be one of {TIES}, got '{ties}'")
    counts = Counter(k for k in keys if k is not None)  # insertion order = first appearance
    if not counts:
        return None
    top = max(counts.values())
    leaders = [a for a, c in counts.items() if c == top]
    if len(leaders) > 1 and ties == "skip":
        return None
    return leaders[0]


def majority_labels(keys: Sequence[str | None], group_ids: Tensor,
                    ties: str = "first") -> tuple[Tensor, Tensor, list[str | None]]:
    """TTRL's pseudo-labels: per row (N,) bool ``agrees = 1[a_i = ŷ_g]`` and (N,) float consensus
    strength ``c_g = count(ŷ_g)/n_g`` of its group (0 when the group has no label), plus the label
    of each group (in :func:`groups` order)."""
    _check(keys, group_ids)
    agrees = torch.zeros(len(keys), dtype=torch.bool)
    strength = torch.zeros(len(keys), dtype=torch.float32)
    labels = []
    for rows in groups(group_ids):
        label = vote([keys[i] for i in rows], ties)
        labels.append(label)
        hit = [i for i in rows if label is not None and keys[i] == label]
        agrees[hit] = True
        strength[rows] = len(hit) / len(rows)
    return agrees, strength, labels


def agreement_counts(keys: Sequence[str | None], group_ids: Tensor) -> tuple[Tensor, Tensor]:
    """(N,) how many rows of the group share row i's answer (itself included; 0 when unparsed) and
    (N,) the group size G of row i."""
    _check(keys, group_ids)
    count = torch.zeros(len(keys), dtype=torch.float32)
    size = torch.zeros(len(keys), dtype=torch.float32)
    for rows in groups(group_ids):
        tally = Counter(keys[i] for i in rows if keys[i] is not None)
        for i in rows:
            count[i] = tally[keys[i]] if keys[i] is not None else 0.0
            size[i] = len(rows)
    return count, size


def answer_entropy(keys: Sequence[str | None]) -> float:
    """Shannon entropy (nats) of one group's answer distribution; unparsed rows form one class of
    their own ("no answer"). 0 = every row says the same thing (a collapsed group)."""
    counts = Counter("\0none" if k is None else k for k in keys)
    n = sum(counts.values())
    return -sum(c / n * math.log(c / n) for c in counts.values()) if n else 0.0


def consensus_metrics(keys: Sequence[str | None], group_ids: Tensor, strength: Tensor) -> dict[str, float]:
    """Collapse diagnostics: mean consensus strength and answer entropy over groups, answered share."""
    per_group = groups(group_ids)
    ent = [answer_entropy([keys[i] for i in rows]) for rows in per_group]
    first = [rows[0] for rows in per_group]
    return {"reward/consensus": strength[first].mean().item() if first else 0.0,
            "reward/answer_entropy": sum(ent) / max(len(ent), 1),
            "reward/answered_frac": sum(k is not None for k in keys) / max(len(keys), 1)}


def gold_metrics(rollouts: Rollouts, agrees: Tensor) -> dict[str, float]:
    """Metric-only gold diagnostics on rows whose problem has a gold answer (none when no row has):
    ``reward/gold_accuracy`` (mean verdict) and ``reward/label_accuracy`` (share of labelled groups
    whose pseudo-label the verifier scores correct). Reads the verdict column, never the answer text."""
    if rollouts.rewards is None:
        return {}
    has_gold = torch.tensor([p.answer is not None for p in rollouts.problems])  # (N,)
    if not bool(has_gold.any()):
        return {}
    verdict = rollouts.rewards[:, 0].detach().float().cpu() >= 0.5  # (N,)
    out = {"reward/gold_accuracy": verdict[has_gold].float().mean().item()}
    right = [bool(verdict[[i for i in rows if agrees[i]]].all()) for rows in groups(rollouts.group_ids.cpu())
             if has_gold[rows[0]] and agrees[rows].any()]
    if right:
        out["reward/label_accuracy"] = sum(right) / len(right)
    return out


def with_pseudo_reward(rollouts: Rollouts, reward: Tensor, name: str) -> tuple[Tensor, list[str]]:
    """(N, K + 1) rewards: objective 0 replaced by the label-free reward (named ``name``), the
    verifier's verdict kept as a last, metric-only objective ``correct`` (0 where there is no gold)."""
    n = rollouts.num_rows
    device = rollouts.completion_mask.device
    if rollouts.rewards is None:
        verdict = torch.zeros(n, 1, device=device)
        rest = torch.zeros(n, 0, device=device)
        names: list[str] = []
    else:
        verdict, rest = rollouts.rewards[:, :1].float(), rollouts.rewards[:, 1:].float()
        names = list(rollouts.reward_names[1:]) if rollouts.reward_names else []
    out = torch.cat([reward.to(device).float()[:, None], rest, verdict], dim=1)
    return out, [name, *names, "correct"]


def parsed_answers(rollouts: Rollouts, where: str) -> list[str | None]:
    """The verifier's parsed answers (``Rollouts.parsed`` (N,), written by the verify stage)."""
    parsed = rollouts.parsed
    if len(parsed) != rollouts.num_rows:
        raise BatchError(f"{where}: needs the verifier's parsed answers (Rollouts.parsed) for all "
                         f"{rollouts.num_rows} rows, got {len(parsed)} (run it as a shaper after verify)")
    return list(parsed)


def _check(keys: Sequence[str | None], group_ids: Tensor) -> None:
    if group_ids.dim() != 1 or len(keys) != group_ids.shape[0]:
        raise BatchError(f"consensus: {len(keys)} answers for group_ids of shape {tuple(group_ids.shape)}")


@dataclass(frozen=True)
class ConsensusStatsConfig:
    normalise: bool = param(True, "compare answers after normalisation (case, spaces, $, trailing '.')")


@register("shaper", "consensus")
class ConsensusStats(RewardShaper):
    """Consensus and answer-entropy diagnostics with the rewards left unchanged (metrics only).

    Logs what the label-free shapers log — ``reward/consensus`` (mean over groups of the majority
    answer's share ``c = count(ŷ)/n``), ``reward/answer_entropy`` (mean entropy of each group's
    answer distribution, nats), ``reward/answered_frac`` and, with gold answers,
    ``reward/label_accuracy`` (would the majority vote be right) — so a gold-label run can be
    compared with them for collapse. Paper: the consensus strength of TTRL (arXiv:2504.16084).

    Differs from ``ttrl``: the rewards are not touched. Shapes: parsed (N,), group_ids (N,) → metrics.
    """

    Config = ConsensusStatsConfig
    paper = "TTRL: Test-Time Reinforcement Learning (arXiv:2504.16084)"

    def __call__(self, rollouts: Rollouts) -> Rollouts:
        keys = answer_keys(parsed_answers(rollouts, "consensus"), self.config.normalise)
        group_ids = rollouts.group_ids.cpu()
        agrees, strength, _ = majority_labels(keys, group_ids)
        metrics = {**consensus_metrics(keys, group_ids, strength), **gold_metrics(rollouts, agrees)}
        meta = {**rollouts.meta, "shaper_metrics": {**rollouts.meta.get("shaper_metrics", {}), **metrics}}
        return replace(rollouts, meta=meta)
