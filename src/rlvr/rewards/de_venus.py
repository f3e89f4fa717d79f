"""DE-Venus weak supervision: majority-vote targets for unlabelled problems in a mixed batch, and the
per-group notes (majority, consensus, contradiction) that the supervision state learns from."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from rlvr.registry import param, register
from rlvr.rewards.base import RewardShaper
from rlvr.rewards.consensus import TIES, answer_keys, groups, majority_labels, parsed_answers
from rlvr.types import BatchError, Rollouts


@dataclass(frozen=True)
class DEVenusConfig:
    pseudo_labels: bool = param(True, "reward rows of unlabelled problems (answer None) by agreement with "
                                      "their group's majority answer (TTRL); False = keep the verifier's 0")
    ties: str = param("first", "a tied vote: 'first' (first tied answer in row order) | 'skip' (no label)")
    normalise: bool = param(True, "compare answers after normalisation (case, spaces, $, trailing '.')")

    def __post_init__(self) -> None:
        if self.ties not in TIES:
            raise ValueError(f"de_venus: ties must be one of {TIES}, got '{self.ties}'")


@register("shaper", "de_venus")
class DEVenus(RewardShaper):
    """Mixed gold / pseudo supervision: labelled groups keep the verifier's reward, unlabelled groups
    are rewarded by agreement with their majority answer.

    Paper: "DE-Venus: a data-efficient RLVR framework" (arXiv id unknown; seed abstract), docs/methods.md §2.2
    ("Weak Supervision Construction"). RECONSTRUCTION: the abstract names the module family, not
    its equations; the majority-vote target is TTRL's (§1.8).

    Equation, per group g of problem q with parsed answers a_1..a_n: ``ŷ_g = mode(a)``,
    ``c_g = count(ŷ_g)/n``. If q has no label (``answer is None``): ``r_i ← 1[a_i = ŷ_g]`` and the
    target confidence is c_g; else r_i is the verifier's verdict against the label in use (gold or
    corrected) and the confidence is the label's (1 for gold; a corrected label's consensus at
    correction, from ``problem.meta["supervision"]``). A labelled group *contradicts* its label when
    ŷ_g exists and every row answering ŷ_g was scored wrong.

    Differs from the verifier reward:
      * only objective 0 of unlabelled rows changes (same K); a fully labelled batch is untouched;
      * ``row_stats["target_confidence"]`` (N,) and ``meta["supervision_groups"]`` (one note per group:
        uid, majority, consensus, contradicts, rewards) are added for the low-confidence filter and
        the supervision state (``selector.observe``).

    Shapes: rewards (N, K) → (N, K); parsed answers (N,) from ``Rollouts.parsed``. Metrics:
    ``reward/pseudo_frac``, ``reward/target_confidence``, ``reward/corrected_frac``,
    ``reward/contradicted_frac``.
    """

    Config = DEVenusConfig
    paper = "DE-Venus: a data-efficient RLVR framework (arXiv id unknown; seed abstract)"

    def __call__(self, rollouts: Rollouts) -> Rollouts:
        if rollouts.rewards is None:
            raise BatchError("de_venus: the batch has no rewards (run it as a shaper after verify)")
        keys = answer_keys(parsed_answers(rollouts, "de_venus"), self.config.normalise)
        gids = rollouts.group_ids.cpu()
        agrees, strength, labels = majority_labels(keys, gids, self.config.ties)  # (N,), (N,), (G,)
        rewards = rollouts.rewards.clone()  # (N, K)
        verdict = rollouts.rewards[:, 0].detach().float().cpu()  # (N,) before shaping
        confidence = torch.ones(rollouts.num_rows)  # (N,)
        notes: list[dict[str, Any]] = []
        pseudo_rows = contradicted = corrected_rows = 0
        for rows, label in zip(groups(gids), labels):
            problem = rollouts.problems[rows[0]]
            sup = problem.meta.get("supervision", {})
            unlabelled = problem.answer is None
            if unlabelled and self.config.pseudo_labels:
                rewards[rows, 0] = agrees[rows].to(rewards.dtype).to(rewards.device)
                pseudo_rows += len(rows)
            conf = float(strength[rows[0]]) if unlabelled else float(sup.get("confidence", 1.0))
            confidence[rows] = conf
            wrong = [verdict[i] < 0.5 for i in rows if label is not None and keys[i] == label]
            contra = (not unlabelled) and bool(wrong) and all(wrong)
            contradicted += contra
            corrected_rows += len(rows) * (sup.get("source") == "corrected")
            notes.append({"uid": problem.uid, "majority": label, "consensus": float(strength[rows[0]]),
                          "contradicts": contra, "labelled": not unlabelled,
                          "rewards": rewards[rows, 0].float().cpu().tolist()})
        n = max(rollouts.num_rows, 1)
        metrics = {"reward/pseudo_frac": pseudo_rows / n,
                   "reward/target_confidence": sum(confidence[g[0]].item() for g in groups(gids)) / max(len(notes), 1),
                   "reward/corrected_frac": corrected_rows / n,
                   "reward/contradicted_frac": contradicted / max(len(notes), 1)}
        meta = {**rollouts.meta, "supervision_groups": notes,
                "shaper_metrics": {**rollouts.meta.get("shaper_metrics", {}), **metrics}}
        return replace(rollouts, rewards=rewards, meta=meta,
                       row_stats={**rollouts.row_stats, "target_confidence": confidence})
