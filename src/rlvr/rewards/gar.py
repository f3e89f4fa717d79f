"""GAR: a bonus for correct rollouts whose output-layer gradient signature points where an expert's does."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from rlvr.registry import param, register
from rlvr.rewards.base import RewardShaper
from rlvr.rewards.gar_signature import output_layer_inputs, pack_spans, saliency_signatures
from rlvr.types import BatchError, Problem, Rollouts

AGGREGATIONS = ("aux_residual", "real_only", "aux_max")
PRIMARY_KEYS = ("gt_response", "gt_cot", "gt_solution", "solution")  # problem.meta keys after Problem.solution
AUX_KEYS = ("gar_aux_responses", "teacher_roll_responses", "teacher_anchors")


@dataclass(frozen=True)
class GARConfig:
    base_reward: float = param(1.0, "reward of a passing rollout before the bonus (gar_base_reward)")
    beta: float = param(0.5, "bonus scale: reward = base + beta * max(0, c - group mean) (gar_beta)")
    anchor_aggregation: str = param("aux_residual", "combine primary/aux cosines: aux_residual (c_real + "
                                                    "w_aux*max(0, c_aux - c_real)) | real_only | aux_max")
    aux_weight: float = param(0.5, "w_aux, weight of auxiliary anchors (gar_aux_weight)")
    max_anchors_per_type: int = param(4, "at most this many distinct primary (and aux) anchors per problem")
    max_response_tokens: int = param(16384, "signature over the last this-many response tokens (<= 0: all)")
    chunk_tokens: int = param(1024, "tokens per output-layer chunk: the memory budget is a (chunk, V) block")
    column: int = param(0, "reward objective gated (> 0 passes) and replaced by the GAR reward")

    def __post_init__(self) -> None:
        if self.anchor_aggregation not in AGGREGATIONS:
            raise ValueError(f"gar: anchor_aggregation must be one of {AGGREGATIONS}, got '{self.anchor_aggregation}'")
        if self.chunk_tokens < 1:
            raise ValueError(f"gar: chunk_tokens must be >= 1, got {self.chunk_tokens}")


def gar_rewards(cosine: Tensor, passing: Tensor, group_ids: Tensor, base: float, beta: float) -> tuple[Tensor, Tensor]:
    """(N,) rewards and (N,) relative cosines ``rel = c − m_g``.

    ``cosine`` (N,) aggregated anchor cosine c; ``passing`` (N,) bool (verifier gate and a usable
    anchor); ``group_ids`` (N,). ``m_g`` is the mean c over the passing rows of the group when it has
    more than one, else 0. Passing rows get ``base + beta·max(0, rel)``; the others 0 (and rel 0).
    """
    _, inv = torch.unique(group_ids, return_inverse=True)  # (N,)
    w = passing.float()
    sums = torch.zeros(int(inv.max()) + 1, device=cosine.device).index_add_(0, inv, cosine.float() * w)
    counts = torch.zeros_like(sums).index_add_(0, inv, w)
    mean = torch.where(counts > 1, sums / counts.clamp(min=1), torch.zeros_like(sums))[inv]  # (N,)
    rel = torch.where(passing, cosine.float() - mean, torch.zeros_like(mean))
    reward = torch.where(passing, base + beta * rel.clamp(min=0.0), torch.zeros_like(rel))
    return reward, rel


def aggregate_cosines(real: float | None, aux: float | None, mode: str, aux_weight: float) -> float | None:
    """Combine the best primary and auxiliary anchor cosines (None = no anchor of that type)."""
    if real is None:
        return aux
    if aux is None or mode == "real_only":
        return real
    if mode == "aux_max":
        return max(real, aux_weight * aux)
    return real + aux_weight * max(0.0, aux - real)  # aux_residual


def anchor_texts(problem: Problem, keys: tuple[str, ...], limit: int, with_solution: bool) -> list[str]:
    """Distinct non-empty anchors (whitespace-normalised duplicates dropped), at most ``limit`` (<= 0: all)."""
    found: list[str] = [problem.solution] if with_solution and problem.solution else []
    for key in keys:
        value = problem.meta.get(key)
        found.extend([value] if isinstance(value, str) else [v for v in (value or []) if isinstance(v, str)])
    out, seen = [], set()
    for text in (t.strip() for t in found):
        norm = " ".join(text.split())
        if text and norm not in seen:
            seen.add(norm)
            out.append(text)
    return out[:limit] if limit > 0 else out


@register("shaper", "gar")
class GAR(RewardShaper):
    """Gradient-Aligned Reward: base reward plus a group-relative gradient-alignment bonus for correct rollouts.

    Paper: GAR, Gradient-Aligned Reward (arXiv id unknown; seed abstract); math EXACT-CODE from
    LQgdwind/GAR @7c1dce8 ``gar/online_reward.py`` (docs/methods.md §2.1).

    Equation: per rollout, ``g_t = Wᵀ(softmax(W h_t) − e_{y_t})/T'`` (mean-CE gradient through the
    output layer only), ``S = Σ_t g_t ⊙ h_t / T'``, ``s = S/‖S‖``; the same for each anchor (the
    problem's expert solution(s), teacher-forced after the rollout's prompt under the current
    policy); ``c = agg(max_a cos(s, s_a) primary, max_a cos aux)``; for a passing rollout
    (verdict > 0) ``r = base + β·max(0, c − m_g)``, ``m_g`` = mean c over the group's passing
    rollouts when more than one, else 0; other rollouts ``r = 0``.

    Hidden states: ``Rollouts.hidden`` (N, T, H) captured while decoding (plain sampler with
    ``keep_hidden: true``; no second forward of the rollouts); without it one teacher-forced forward.
    Anchors: ``Problem.solution`` then ``problem.meta`` keys gt_response | gt_cot | gt_solution |
    solution (primary) and gar_aux_responses | teacher_roll_responses | teacher_anchors (aux).
    Cache: one anchor signature per (prompt tokens, anchor text, max_response_tokens), rebuilt at
    every call (one call = one rollout round of one step, under the policy of that step) as in the
    reference code, so every rollout of a prompt shares one anchor forward and none is stale.

    Differs from the raw verifier reward:
      * objective ``column`` becomes the GAR reward (named ``gar``); the verdict is kept as a last
        objective ``correct``;
      * passing rollouts of a problem with no anchor get ``base`` (no bonus) and stay out of ``m_g``;
      * the rollout-side format / think-length penalties (``reward_post_process.py``) and think-span
        targeting are not applied (the testbed has no think tags): add them as separate shapers.

    Shapes: rewards (N, K), completion ids (N, T), hidden (N, T, H) → rewards (N, K + 1).
    Metrics: ``reward/gar_mean``, ``reward/gar_cosine``, ``reward/gar_relative``, ``reward/gar_passing``,
    ``reward/gar_bonus_frac``, ``reward/gar_anchor_forwards``.
    """

    Config = GARConfig
    paper = "GAR: Gradient-Aligned Reward (arXiv id unknown; code LQgdwind/GAR @7c1dce8)"
    needs_policy: ClassVar[bool] = True  # the Collector passes policy= and tokenizer=

    def __init__(self, config: GARConfig | None = None) -> None:
        super().__init__(config)
        self.anchor_forwards = 0  # anchor signatures computed so far (the cache test reads it)
        self._last_forwards = 0  # ... in the latest call (logged)

    def __call__(self, rollouts: Rollouts, policy: torch.nn.Module | None = None, tokenizer: Any = None) -> Rollouts:
        if policy is None or tokenizer is None or rollouts.rewards is None:
            raise BatchError("gar: needs the policy, the tokenizer and verified rewards (N, K)")
        cfg, n = self.config, rollouts.num_rows
        self._last_forwards = 0
        hidden, rollouts.hidden = rollouts.hidden, None  # (N, T, H) captured while decoding; freed here
        verdict = rollouts.rewards[:, cfg.column].float()  # (N,)
        cos = torch.zeros(n, device=verdict.device)  # (N,)
        usable = torch.zeros(n, dtype=torch.bool, device=verdict.device)
        rows = (verdict > 0).nonzero().flatten().tolist()
        if rows:
            for i, c in zip(rows, self._cosines(rollouts, rows, hidden, policy, tokenizer)):
                if c is not None:
                    cos[i], usable[i] = c, True
        reward, rel = gar_rewards(cos, usable, rollouts.group_ids, cfg.base_reward, cfg.beta)
        reward = torch.where((verdict > 0) & ~usable, torch.full_like(reward, cfg.base_reward), reward)
        rewards = torch.cat([rollouts.rewards.clone(), verdict[:, None]], dim=1)  # (N, K + 1)
        rewards[:, cfg.column] = reward
        names = list(rollouts.reward_names) or [f"objective_{k}" for k in range(rollouts.rewards.shape[1])]
        names = [*names[:cfg.column], "gar", *names[cfg.column + 1:], "correct"]
        metrics = _metrics(reward, cos, rel, usable, verdict > 0, self._last_forwards)
        meta = {**rollouts.meta, "shaper_metrics": {**rollouts.meta.get("shaper_metrics", {}), **metrics}}
        return replace(rollouts, rewards=rewards, reward_names=names, meta=meta)

    def _cosines(self, batch: Rollouts, rows: list[int], hidden: Tensor | None, policy: torch.nn.Module,
                 tokenizer: Any) -> list[float | None]:
        """Aggregated anchor cosine of each given row (None when its problem has no anchor)."""
        cfg = self.config
        head = policy.get_output_embeddings()
        weight, bias = head.weight.detach(), getattr(head, "bias", None)
        index = torch.tensor(rows, device=batch.completion_ids.device)
        real = batch.attention[index]  # (R, T)
        if hidden is None:  # fallback: one teacher-forced forward of the passing rollouts
            h_rows = output_layer_inputs(policy, batch.prompt_ids[index], batch.prompt_mask[index],
                                         batch.completion_ids[index], real)
        else:
            h_rows = hidden[index.to(hidden.device)]
        spans = pack_spans([h_rows[k][real[k]] for k in range(len(rows))],
                           [batch.completion_ids[i][real[k]] for k, i in enumerate(rows)], cfg.max_response_tokens)
        sigs = saliency_signatures(*spans, weight, bias, chunk_tokens=cfg.chunk_tokens)  # (R, H)
        prompts = [tuple(batch.prompt_ids[i][batch.prompt_mask[i]].tolist()) for i in rows]
        anchors = {i: (anchor_texts(batch.problems[i], PRIMARY_KEYS, cfg.max_anchors_per_type, True),
                       anchor_texts(batch.problems[i], AUX_KEYS, cfg.max_anchors_per_type, False)) for i in rows}
        cache = self._anchor_signatures(policy, tokenizer, {(p, a) for p, i in zip(prompts, rows)
                                                            for kind in anchors[i] for a in kind}, weight, bias)
        out = []
        for k, (i, p) in enumerate(zip(rows, prompts)):
            best = [max((F.cosine_similarity(sigs[k], cache[(p, a)].to(sigs.device), dim=0).item() for a in kind),
                        default=None) for kind in anchors[i]]
            out.append(aggregate_cosines(best[0], best[1], cfg.anchor_aggregation, cfg.aux_weight))
        return out

    def _anchor_signatures(self, policy: torch.nn.Module, tokenizer: Any, pairs: set[tuple[tuple[int, ...], str]],
                           weight: Tensor, bias: Tensor | None) -> dict[tuple[tuple[int, ...], str], Tensor]:
        """Signature of each (prompt tokens, anchor text): one batched teacher-forced forward for all."""
        pairs_list = sorted(pairs)
        self._last_forwards = len(pairs_list)
        if not pairs_list:
            return {}
        device = weight.device
        anchor_ids = [tokenizer.encode(a, add_special_tokens=False) for _, a in pairs_list]
        width_p = max(len(p) for p, _ in pairs_list)
        width_a = max(max(len(a) for a in anchor_ids), 1)
        pad = tokenizer.pad_token_id or 0
        p_ids = torch.full((len(pairs_list), width_p), pad, dtype=torch.long, device=device)
        p_mask = torch.zeros_like(p_ids, dtype=torch.bool)
        a_ids = torch.full((len(pairs_list), width_a), pad, dtype=torch.long, device=device)
        a_mask = torch.zeros_like(a_ids, dtype=torch.bool)
        for k, ((p, _), a) in enumerate(zip(pairs_list, anchor_ids)):
            p_ids[k, width_p - len(p):], p_mask[k, width_p - len(p):] = torch.tensor(p, device=device), True
            a_ids[k, :len(a)], a_mask[k, :len(a)] = torch.tensor(a, dtype=torch.long, device=device), True
        h = output_layer_inputs(policy, p_ids, p_mask, a_ids, a_mask)  # (A, T_a, H)
        spans = pack_spans([h[k][a_mask[k]] for k in range(len(pairs_list))],
                           [a_ids[k][a_mask[k]] for k in range(len(pairs_list))], self.config.max_response_tokens)
        sigs = saliency_signatures(*spans, weight, bias, chunk_tokens=self.config.chunk_tokens)  # (A, H)
        self.anchor_forwards += len(pairs_list)
        return {pair: sigs[k] for k, pair in enumerate(pairs_list)}


def _metrics(reward: Tensor, cos: Tensor, rel: Tensor, usable: Tensor, passing: Tensor,
             forwards: int) -> dict[str, float]:
    n_use = int(usable.sum())
    return {"reward/gar_mean": reward.mean().item(),
            "reward/gar_cosine": cos[usable].mean().item() if n_use else 0.0,
            "reward/gar_relative": rel[usable].mean().item() if n_use else 0.0,
            "reward/gar_passing": passing.float().mean().item(),
            "reward/gar_bonus_frac": (rel[usable] > 0).float().mean().item() if n_use else 0.0,
            "reward/gar_anchor_forwards": float(forwards)}
