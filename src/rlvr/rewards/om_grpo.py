"""OM-GRPO's rewards: soft consensus plus a contrast term from pairwise judgements of existing rollouts.

The answer-span mask, OM-GRPO's third part, is the ``answer_mask`` token weighting
(rlvr.weighting.answer_mask); the ``om_grpo`` preset combines the two.
"""

from __future__ import annotations

import importlib
import zlib
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch
from torch import Tensor

from rlvr.ops import masked_mean
from rlvr.registry import make_config, param, register
from rlvr.rewards.base import RewardShaper
from rlvr.rewards.pairwise_judge import DEFAULT_PAIR_TEMPLATE, PairwiseJudge
from rlvr.rewards.chat_client import ChatClient, ChatConfig
from rlvr.rewards.consensus import (agreement_counts, answer_keys, consensus_metrics, gold_metrics, groups,
                                    majority_labels, parsed_answers, with_pseudo_reward)
from rlvr.types import BatchError, Rollouts

CONSENSUS = ("leave_one_out", "inclusive")
JUDGES = ("policy", "small_llm", "self_certainty")
PAIR_POOLS = ("disagreeing", "any")
Judge = Callable[[Any, str, str], float]  # (problem, text_a, text_b) -> P(a is the sounder reasoning)


@dataclass(frozen=True)
class OMGRPOConfig:
    contrast_pairs: int | None = param(None, "P: random pairs (i, j) judged per group (required; all "
                                             "G(G-1)/2 pairs when P exceeds them)")
    consensus: str = param("leave_one_out", "RECONSTRUCTION: leave_one_out (count(a_i)-1)/(G-1) | "
                                            "inclusive count(a_i)/G")
    contrast_eta: float = param(0.2, "RECONSTRUCTION: eta in r = r_cons + eta*(w - 0.5); 0 = soft consensus only")
    judge: str = param("policy", "who picks the sounder reasoning of a pair: policy (the policy itself, shown "
                                 "both solutions with judge_template, greedy) | small_llm (a named model: "
                                 "judge_model, or the callable judge_fn) | self_certainty (no judgement: the "
                                 "rollout with the higher mean token log-prob wins; no generation)")
    judge_model: dict = param({}, "judge=small_llm: the model, as chat-client settings {backend: http | hf, "
                                  "base_url, model, model_path, api_key_env, timeout_s, ...} "
                                  "(rlvr.rewards.chat_client.ChatConfig)")
    judge_fn: str = param("", "judge=small_llm without judge_model: 'pkg.module:function' taking (problem, "
                              "text_a, text_b) and returning P(a is sounder) in [0, 1]")
    judge_template: str = param(DEFAULT_PAIR_TEMPLATE, "the pairwise prompt; fields {problem}, {a}, {b}; the "
                                                       "reply is parsed for 'better: A|B'")
    judge_max_new_tokens: int = param(16, "judge=policy: longest verdict, in tokens")
    judge_both_orders: bool = param(True, "RECONSTRUCTION: ask (a, b) and (b, a) and average (cancels a "
                                          "position preference); false = one call per pair")
    pairs: str = param("disagreeing", "RECONSTRUCTION: which rows of a group may be paired: disagreeing "
                                      "(different answers; a unanimous group gets no contrast, so r ≡ 1 and "
                                      "zero advantage as docs/methods.md §2.13 test 2 requires) | any")
    normalise: bool = param(True, "compare answers after normalisation (case, spaces, $, trailing '.')")
    seed: int = param(0, "seed of the pair draws (mixed with a hash of the batch's texts: reproducible)")

    def __post_init__(self) -> None:
        if self.contrast_pairs is None or self.contrast_pairs < 0:
            raise ValueError(f"om_grpo: contrast_pairs (P) is required and must be >= 0, got {self.contrast_pairs}")
        if self.consensus not in CONSENSUS:
            raise ValueError(f"om_grpo: consensus must be one of {CONSENSUS}, got '{self.consensus}'")
        if self.judge not in JUDGES:
            raise ValueError(f"om_grpo: judge must be one of {JUDGES}, got '{self.judge}'")
        if self.pairs not in PAIR_POOLS:
            raise ValueError(f"om_grpo: pairs must be one of {PAIR_POOLS}, got '{self.pairs}'")
        if self.judge_max_new_tokens < 1:
            raise ValueError(f"om_grpo: judge_max_new_tokens must be >= 1, got {self.judge_max_new_tokens}")
        if self.judge == "small_llm":
            if bool(self.judge_model) == (":" in self.judge_fn):
                raise ValueError("om_grpo: judge 'small_llm' needs exactly one of judge_model (teacher-client "
                                 "settings of a named model) or judge_fn = 'pkg.module:function'")
            if self.judge_model:
                make_config(ChatConfig, dict(self.judge_model), where="om_grpo judge_model").check_source(
                    "om_grpo judge_model")


def soft_consensus(count: Tensor, size: Tensor, mode: str = "leave_one_out") -> Tensor:
    """(N,) soft consensus from (N,) agreement counts (itself included; 0 = unparsed) and group sizes.

    ``leave_one_out``: ``(count − 1)/(G − 1)``, the share of *other* rows agreeing (0 when G = 1);
    ``inclusive``: ``count/G``. An unparsed answer scores 0 either way.
    """
    if mode not in CONSENSUS:
        raise ValueError(f"soft_consensus: mode must be one of {CONSENSUS}, got '{mode}'")
    if mode == "inclusive":
        return count / size.clamp(min=1)
    return torch.where(count > 0, (count - 1).clamp(min=0) / (size - 1).clamp(min=1), torch.zeros_like(count))


def win_rates(pairs: list[tuple[int, int, float]], n: int) -> Tensor:
    """(N,) win rate ``w_i`` of each row over the pairs it took part in; ``(i, j, p)`` means i beat j
    with probability p (j gets 1 − p). A row in no pair gets 0.5 (no contrast)."""
    wins, games = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    for i, j, p in pairs:
        wins[i] += p
        wins[j] += 1.0 - p
        games[i] += 1
        games[j] += 1
    return torch.where(games > 0, wins / games.clamp(min=1), torch.full_like(wins, 0.5)).float()


def draw_pairs(rows: list[int], p: int, gen: torch.Generator,
               keys: list[str | None] | None = None) -> list[tuple[int, int]]:
    """``min(P, #candidates)`` distinct unordered pairs of the group's rows, uniformly without
    replacement; candidates are all G(G−1)/2 pairs, or with ``keys`` (answer per row of the batch)
    only pairs whose answers differ (an unparsed answer differs from every other)."""
    every = [(rows[a], rows[b]) for a in range(len(rows)) for b in range(a + 1, len(rows))]
    if keys is not None:
        every = [(i, j) for i, j in every if keys[i] is None or keys[i] != keys[j]]
    if p >= len(every):
        return every
    pick = torch.randperm(len(every), generator=gen)[:p].tolist()
    return [every[k] for k in sorted(pick)]


@register("shaper", "om_grpo")
class OMGRPO(RewardShaper):
    """OM-GRPO reward: soft consensus plus a contrast-augmented term from pairwise judgements.

    Paper: OM-GRPO, answer-masked label-free GRPO with soft consensus and a contrast-augmented
    reward (seed abstract; title and arXiv id not known to us), docs/methods.md §2.13.

    Equation: ``r_i = r_i^cons + η·(w_i − 0.5)`` with ``r_i^cons = (count(a_i) − 1)/(G − 1)``
    (leave-one-out; or ``count(a_i)/G``) and ``w_i`` the win rate of row i over P random pairs of
    its group judged for sounder reasoning. Then GRPO on r, with the ``answer_mask`` weighting
    removing credit from the answer span (the preset).

    RECONSTRUCTION (abstract only): the soft-consensus form, η = 0.2, the ``w − 0.5`` centring, how
    pairs are drawn (uniform without replacement among rows with *different* answers, seeded by the
    batch: a unanimous group gets no contrast, so r ≡ 1 and zero advantage, docs/methods.md §2.13 test 2) and the
    judge prompt. The default judge, ``policy``, is a pairwise judgement: the current policy is shown
    the problem and both solutions (``judge_template``) and answers "better: A|B" greedily, asked in
    both orders and averaged (:class:`rlvr.rewards.pairwise_judge.PairwiseJudge`; an unparsable or
    failed verdict is a tie). ``small_llm`` asks a named model the same way (``judge_model``: an HTTP
    server or a local checkpoint, through ``rlvr.rewards.chat_client.ChatClient``) or calls a user function
    (``judge_fn``). ``self_certainty`` is the old no-generation rule, kept as an explicit option: the
    rollout with the higher mean token log-prob wins (self-certainty, not a judgement of reasoning).

    Label-free: reads the parsed answers (``Rollouts.parsed``), texts and rollout log-probs, never
    ``problem.answer`` nor the verdict; the verdict stays as a last, metric-only objective ``correct``.

    Differs from TTRL:
      * a graded consensus instead of the 0/1 majority match (a minority answer still earns credit);
      * a contrast term ranks rollouts that give the same answer by judged reasoning quality.

    Shapes: parsed (N,), group_ids (N,), rollout_logprobs / completion_mask (N, T), rewards (N, K) →
    rewards (N, K + 1). Metrics: ``reward/consensus``, ``reward/answer_entropy``,
    ``reward/answered_frac``, ``reward/soft_consensus_mean``, ``reward/contrast_abs_mean``,
    ``reward/contrast_pairs`` (pairs judged per group), ``reward/om_grpo_mean``; with gold answers
    ``reward/gold_accuracy`` and ``reward/label_accuracy`` (of the group's majority answer).
    """

    Config = OMGRPOConfig
    paper = "OM-GRPO: answer-masked label-free GRPO (arXiv id unknown; seed abstract)"

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._judge: Judge | None = None

    @property
    def needs_policy(self) -> bool:
        """The collector passes ``policy=`` and ``tokenizer=`` when the policy is the judge."""
        return self.config.judge == "policy"

    def __call__(self, rollouts: Rollouts, policy: Any = None, tokenizer: Any = None) -> Rollouts:
        cfg = self.config
        keys = answer_keys(parsed_answers(rollouts, "om_grpo"), cfg.normalise)
        group_ids = rollouts.group_ids.cpu()
        count, size = agreement_counts(keys, group_ids)  # (N,), (N,)
        cons = soft_consensus(count, size, cfg.consensus)  # (N,)
        judging = cfg.contrast_eta != 0 and cfg.contrast_pairs
        pairs = self._judged_pairs(rollouts, group_ids, keys, policy, tokenizer) if judging else []
        contrast = cfg.contrast_eta * (win_rates(pairs, rollouts.num_rows) - 0.5)  # (N,)
        reward = cons + contrast
        rewards, names = with_pseudo_reward(rollouts, reward, "om_grpo")
        agrees, strength, _ = majority_labels(keys, group_ids)
        n_groups = max(len(groups(group_ids)), 1)
        metrics = {**consensus_metrics(keys, group_ids, strength), "reward/soft_consensus_mean": cons.mean().item(),
                   "reward/contrast_abs_mean": contrast.abs().mean().item(),
                   "reward/contrast_pairs": len(pairs) / n_groups, "reward/om_grpo_mean": reward.mean().item(),
                   **gold_metrics(rollouts, agrees), **self._judge_metrics()}
        meta = {**rollouts.meta, "shaper_metrics": {**rollouts.meta.get("shaper_metrics", {}), **metrics}}
        return replace(rollouts, rewards=rewards, reward_names=names, meta=meta,
                       row_stats={**rollouts.row_stats, "soft_consensus": cons, "contrast": contrast})

    def _judged_pairs(self, rollouts: Rollouts, group_ids: Tensor, keys: list[str | None], policy: Any,
                      tokenizer: Any) -> list[tuple[int, int, float]]:
        """P pairs per group with the judge's P(first is sounder)."""
        cfg = self.config
        gen = torch.Generator().manual_seed(cfg.seed ^ zlib.crc32("\x1e".join(rollouts.texts).encode()))
        pool = keys if cfg.pairs == "disagreeing" else None
        pairs = [pq for rows in groups(group_ids) for pq in draw_pairs(rows, cfg.contrast_pairs, gen, pool)]
        if cfg.judge == "self_certainty":
            score = self_certainty(rollouts)  # (N,)
            return [(i, j, 1.0 if score[i] > score[j] else 0.0 if score[i] < score[j] else 0.5) for i, j in pairs]
        judge = self._load_judge(policy, tokenizer)
        out = []
        for i, j in pairs:
            p = float(judge(rollouts.problems[i], rollouts.texts[i], rollouts.texts[j]))
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"om_grpo: the judge returned {p}, expected a probability in [0, 1]")
            out.append((i, j, p))
        return out

    def _load_judge(self, policy: Any, tokenizer: Any) -> Judge:
        cfg = self.config
        if cfg.judge == "policy":  # the current policy: a new client each step (the weights move)
            if policy is None or tokenizer is None:
                raise BatchError("om_grpo: judge 'policy' needs the policy and tokenizer (the trainer passes them)")
            client = ChatClient(ChatConfig(backend="hf", max_new_tokens=cfg.judge_max_new_tokens, temperature=0.0),
                                model=policy, tokenizer=tokenizer)
            self._judge = PairwiseJudge(client, cfg.judge_template, cfg.judge_both_orders)
        elif self._judge is None and cfg.judge_model:
            client = ChatClient(make_config(ChatConfig, dict(cfg.judge_model), where="om_grpo judge_model"))
            self._judge = PairwiseJudge(client, cfg.judge_template, cfg.judge_both_orders)
        elif self._judge is None:
            module, _, attr = cfg.judge_fn.partition(":")
            self._judge = getattr(importlib.import_module(module), attr)
        return self._judge

    def _judge_metrics(self) -> dict[str, float]:
        """Verdicts of a model judge since the last batch: calls, unparsable and failed shares."""
        if not isinstance(self._judge, PairwiseJudge):
            return {}
        s = self._judge.pop_stats()
        calls = max(s["calls"], 1)
        return {"reward/judge_calls": float(s["calls"]), "reward/judge_unparsable_frac": s["unparsable"] / calls,
                "reward/judge_error_frac": s["error"] / calls}


def self_certainty(rollouts: Rollouts) -> Tensor:
    """(N,) the policy's mean log-prob of each rollout's trained tokens (the ``policy`` judge's score)."""
    if rollouts.rollout_logprobs is None:
        raise BatchError("om_grpo: judge 'self_certainty' needs rollout_logprobs (N, T) from the sampler")
    mask = rollouts.completion_mask
    return masked_mean(rollouts.rollout_logprobs.float(), mask, dim=-1).detach().cpu()  # (N,)
