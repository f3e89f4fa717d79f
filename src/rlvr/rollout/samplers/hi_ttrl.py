"""Hi-TTRL: regulate a group's consensus with hints drawn from the policy's power-transformed prefixes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.models import render_prompt
from rlvr.registry import param, register
from rlvr.rewards.answer import EXTRACT_MODES, extract_answer, normalise
from rlvr.rollout.hf import encode_prompts, generate_ids
from rlvr.rollout.mcmc import PolicyPrefixes, power_mh
from rlvr.rollout.samplers.base import (SampleContext, Sampler, assemble, engine_kwargs, extend_contexts,
                                        generation_rollouts, hinted_rollouts, row_group_ids, sample_plain)
from rlvr.types import Problem, Rollouts

CORRECTIONS = ("none", "oc_grpo")


@dataclass(frozen=True)
class HiTTRLConfig:
    partial_m: float | None = param(None, "m, rows of each group that estimate the consensus (required): an "
                                          "integer >= 1 is a count, a value in (0, 1) that share of G (rounded)")
    c_lo: float | None = param(None, "lower end of the target consensus band (required)")
    c_hi: float | None = param(None, "upper end of the target consensus band (required)")
    alpha_sharp: float | None = param(None, "alpha > 1 used when c_hat < c_lo: sharper hints (required)")
    alpha_flat: float | None = param(None, "alpha in (0, 1) used when c_hat > c_hi: flatter hints (required)")
    mh_steps: int | None = param(None, "S, Metropolis-Hastings steps per hint chain (required; 4-10 suggested)")
    hint_fraction: float = param(0.5, "RECONSTRUCTION: hint length l = max(1, round(fraction * mean token "
                                      "length of the group's first m rollouts))")
    hint_is_correction: str = param("none", "none: hint tokens kept in the completion with origin HINT "
                                            "(masked; the continuation is on-policy in [x][hint+y]) | oc_grpo: "
                                            "the trainer sees [x][y] (origin GUIDED, importance-corrected)")
    extract: str = param("auto", "how the partial estimate reads an answer: auto | boxed | marker | full "
                                 "(rlvr.rewards.answer.extract_answer)")
    marker: str = param("#", "final-answer marker for extract=auto|marker")

    def __post_init__(self) -> None:
        required = {k: getattr(self, k) for k in ("partial_m", "c_lo", "c_hi", "alpha_sharp", "alpha_flat", "mh_steps")}
        missing = [k for k, v in required.items() if v is None]
        if missing:
            raise ValueError(f"hi_ttrl: {missing} are required (docs/methods.md §2.12 lists no defaults)")
        m = float(self.partial_m)
        if not (0 < m < 1 or (m >= 1 and m.is_integer())):
            raise ValueError(f"hi_ttrl: partial_m must be an integer >= 1 or a share in (0, 1), got {self.partial_m}")
        if not 0.0 <= self.c_lo <= self.c_hi <= 1.0:
            raise ValueError(f"hi_ttrl: need 0 <= c_lo <= c_hi <= 1, got {self.c_lo}, {self.c_hi}")
        if self.alpha_sharp <= 1 or not 0 < self.alpha_flat < 1:
            raise ValueError(f"hi_ttrl: need alpha_sharp > 1 and 0 < alpha_flat < 1, got "
                             f"{self.alpha_sharp}, {self.alpha_flat}")
        if self.mh_steps < 1 or not 0 < self.hint_fraction <= 1:
            raise ValueError(f"hi_ttrl: need mh_steps >= 1 and 0 < hint_fraction <= 1, got "
                             f"{self.mh_steps}, {self.hint_fraction}")
        if self.hint_is_correction not in CORRECTIONS:
            raise ValueError(f"hi_ttrl: hint_is_correction must be one of {CORRECTIONS}, "
                             f"got '{self.hint_is_correction}'")
        if self.extract not in EXTRACT_MODES:
            raise ValueError(f"hi_ttrl: extract must be one of {EXTRACT_MODES}, got '{self.extract}'")


@register("sampler", "hi_ttrl")
class HiTTRLSampler(Sampler):
    """Hi-TTRL rollouts: estimate consensus on a partial group; outside the band, continue from MCMC hints.

    Paper: Hi-TTRL, hint-regulated consensus for test-time RL (seed abstract; arXiv id unknown),
    docs/methods.md §2.12; the power sampler after Karan & Du 2025, "Reasoning with Sampling"
    (SECONDARY: known from summaries; block schedule unverified).

    Per group of G: sample it plainly; on its first m rows ``ĉ = max_a count_m(a)/m``. If
    ``ĉ ∈ [c_lo, c_hi]`` the group is kept as sampled. Otherwise ``α = α_sharp`` (ĉ < c_lo) or
    ``α_flat`` (ĉ > c_hi), and each of the other G − m rows is replaced: a hint h ~ S steps of
    :func:`rlvr.rollout.mcmc.power_mh` targeting ``p(h | x)^α`` over prefixes of ℓ tokens (p = the
    policy at the rollout temperature), then ``y ~ π(· | x ⊕ h)``; the row is ``h ⊕ y`` with h of
    origin HINT (never trained). Rewards come from a label-free shaper over all G rows (the preset
    uses ``ttrl``: majority vote).

    RECONSTRUCTION: the hint length (``hint_fraction`` of the partial rows' mean length), one chain
    per replaced row, ĉ read with ``extract_answer`` (``extract``/``marker``), and the full plain
    group being drawn first (so an in-band group is the plain sampler's, token for token). The G − m
    discarded plain rows of an out-of-band group, the chains' initial draws and proposals are extra
    generation: ``ctx.spent`` counts them (``rollout/generated_completions``, the rollout budget), while
    ``rollout/sampled_rows`` counts the G rows kept per group.

    Differs from the plain sampler:
      * out-of-band groups get G − m rows continued from power-sampled hints (origin HINT, masked);
      * with ``hint_is_correction: oc_grpo`` those rows are trained as [x][y] with guided-context
        behaviour log-probs (origin GUIDED) for an importance-corrected loss;
      * when every group is in band (or m ≥ G) it is the plain sampler exactly.
    Differs from ``hint`` (OC-GRPO): the hint is the policy's own sharpened or flattened prefix, not a
    solution, and it is used to move consensus into a band, not to rescue failed groups.

    Shapes: B problems → N = B·G rows; completion = hint ⊕ continuation (N, T'), T' ≤ ℓ + T.
    Metrics (``rollout/``): ``hi_ttrl_partial_consensus``, ``hi_ttrl_sharpened_frac``,
    ``hi_ttrl_flattened_frac``, ``hi_ttrl_hinted_rows_frac`` and, when chains ran,
    ``hi_ttrl_accept_rate`` and ``hi_ttrl_hint_tokens_mean``.
    """

    Config = HiTTRLConfig
    paper = "Hi-TTRL: hint-regulated consensus for test-time RL (seed abstract; arXiv id unknown)"

    @property
    def produces_off_policy(self) -> bool:  # type: ignore[override]
        return self.config.hint_is_correction == "oc_grpo"

    def partial_size(self, group_size: int) -> int:
        m = float(self.config.partial_m)
        return min(group_size, int(m) if m >= 1 else max(1, round(m * group_size)))

    def band_alpha(self, c_hat: float) -> float | None:
        """The power α for a partial consensus ĉ, or None inside the band."""
        cfg = self.config
        return cfg.alpha_sharp if c_hat < cfg.c_lo else cfg.alpha_flat if c_hat > cfg.c_hi else None

    def partial_consensus(self, texts: list[str]) -> float:
        """``max_a count(a)/m`` over the given rollouts (unparsed answers never count)."""
        keys = [extract_answer(t, self.config.extract, self.config.marker) for t in texts]
        counts = Counter(normalise(k) for k in keys if k is not None)
        return max(counts.values()) / len(texts) if counts and texts else 0.0

    def sample(self, policy: torch.nn.Module, problems: list[Problem], group_size: int,
               ctx: SampleContext) -> Rollouts:
        b, m = len(problems), self.partial_size(group_size)
        rows = [p for p in problems for _ in range(group_size)]
        plain = generation_rollouts(rows, sample_plain(policy, rows, ctx, ctx.seed),
                                    row_group_ids(group_size, b, ctx.group_offset))
        c_hat = [self.partial_consensus(plain.texts[i * group_size:i * group_size + m]) for i in range(b)]
        alphas = [self.band_alpha(c) if m < group_size else None for c in c_hat]
        out = [i for i in range(b) if alphas[i] is not None]
        metrics = {"rollout/hi_ttrl_partial_consensus": sum(c_hat) / max(b, 1),
                   "rollout/hi_ttrl_sharpened_frac": sum(a is not None and a > 1 for a in alphas) / max(b, 1),
                   "rollout/hi_ttrl_flattened_frac": sum(a is not None and a < 1 for a in alphas) / max(b, 1),
                   "rollout/hi_ttrl_hinted_rows_frac": len(out) * (group_size - m) / max(b * group_size, 1)}
        if not out:
            plain.meta["sampler_metrics"] = metrics
            return plain
        rest = group_size - m
        owners = [i for i in out for _ in range(rest)]  # the problem of each replaced row
        lengths = plain.attention.sum(-1).view(b, group_size)[:, :m].float().mean(-1)  # (B,) tokens
        ells = [max(1, round(self.config.hint_fraction * float(lengths[i]))) for i in owners]
        hints, stats = self._hints(policy, [problems[i] for i in owners], ells, [alphas[i] for i in owners], ctx)
        g_ids = torch.tensor([ctx.group_offset + i for i in owners], dtype=torch.long)
        part = self._continue(policy, [problems[i] for i in owners], hints, g_ids, ctx)
        order, slot = [], {i: k for k, i in enumerate(out)}
        for i in range(b):  # an out-of-band group: its first m plain rows, then its G − m hinted rows
            order += [(0, i * group_size + j) for j in range(m if i in slot else group_size)]
            if i in slot:
                order += [(1, slot[i] * rest + j) for j in range(rest)]
        batch = assemble([plain, part], order, ctx.tokenizer.pad_token_id)
        metrics.update(stats)
        batch.meta["sampler_metrics"] = metrics
        return batch

    def _hints(self, policy: torch.nn.Module, rows: list[Problem], ells: list[int], alphas: list[float],
               ctx: SampleContext) -> tuple[list[list[int]], dict[str, float]]:
        """One power-MH chain per row (rows sharing an α run together); hints without a final eos."""
        tok = ctx.tokenizer
        ctx_ids, ctx_mask = encode_prompts(tok, [render_prompt(tok, p) for p in rows])
        hints: list[list[int]] = [[] for _ in rows]
        proposed = accepted = 0
        for k, alpha in enumerate(sorted(set(alphas))):
            sel = [i for i, a in enumerate(alphas) if a == alpha]
            index = torch.tensor(sel, dtype=torch.long)
            chains = PolicyPrefixes(policy, tok, ctx_ids[index], ctx_mask[index], spent=ctx.spent)
            result = power_mh(chains, [ells[i] for i in sel], alpha, self.config.mh_steps,
                              seed=ctx.seed + 104_729 * (k + 1), temperature=ctx.rollout.temperature)
            proposed, accepted = proposed + result.proposed, accepted + result.accepted
            for i, state in zip(sel, result.states):
                hints[i] = _without_eos(state, _eos_ids(policy, tok))
        stats = {"rollout/hi_ttrl_accept_rate": accepted / proposed if proposed else 1.0,
                 "rollout/hi_ttrl_hint_tokens_mean": sum(map(len, hints)) / max(len(hints), 1)}
        return hints, stats

    def _continue(self, policy: torch.nn.Module, rows: list[Problem], hints: list[list[int]],
                  group_ids: torch.Tensor, ctx: SampleContext) -> Rollouts:
        """``y ~ π(· | x ⊕ h)`` for each row; the completion as the trainer will see it."""
        tok, r = ctx.tokenizer, ctx.rollout
        base_ids, base_mask = encode_prompts(tok, [render_prompt(tok, p) for p in rows])
        ctx_ids, ctx_mask = extend_contexts(base_ids, base_mask, hints, tok.pad_token_id)
        gen = generate_ids(policy, tok, ctx_ids, ctx_mask, max_new_tokens=r.max_new_tokens, temperature=r.temperature,
                           top_p=r.top_p, top_k=r.top_k, do_sample=True, seed=ctx.seed + 7_919, **engine_kwargs(r))
        ctx.spent.add(gen)
        mode = "masked" if self.config.hint_is_correction == "none" else "drop"
        has_hint = torch.tensor([bool(h) for h in hints])  # (N_h,)
        return hinted_rollouts(policy, tok, rows, group_ids, (base_ids, base_mask), (ctx_ids, ctx_mask), hints,
                               has_hint, gen, mode, r.temperature)


def _eos_ids(model: torch.nn.Module, tokenizer: Any) -> set[int]:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = set([eos] if isinstance(eos, int) else list(eos or []))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def _without_eos(state: list[int], eos: set[int]) -> list[int]:
    """The prefix before its first eos (a chain that ended early gives a shorter hint)."""
    for k, t in enumerate(state):
        if t in eos:
            return state[:k]
    return list(state)
