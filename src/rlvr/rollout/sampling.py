"""Picking the next token from raw logits: temperature, top-k, top-p, min-p, repetition penalty.

Pure tensor math shared by the engines (:mod:`rlvr.rollout.engines`). The order follows Hugging
Face ``generate``: repetition penalty on the raw logits, then temperature, then top-k, top-p and
min-p. The *reported* log-prob is always ``log softmax(z / T)[y]`` of the raw logits ``z`` (before
the penalty and the filters; see :mod:`rlvr.rollout.hf`), so with a penalty or a filter the tokens
are drawn from a distribution that differs from the reported one, as with top-k in verl and TRL.
"""

from __future__ import annotations

import torch
from torch import Tensor


class Sampler:
    """Picks the next token from raw logits (B, V); returns (token (B,), log-prob (B,)).

    ``seen`` (B, V) bool marks the tokens a row already holds (its prompt and what it generated):
    needed only when ``repetition_penalty != 1``.
    """

    def __init__(self, temperature: float, top_p: float, top_k: int, do_sample: bool, seed: int | None,
                 device: torch.device, min_p: float = 0.0, repetition_penalty: float = 1.0) -> None:
        self.temperature, self.top_p, self.top_k, self.do_sample = temperature, top_p, top_k, do_sample
        self.min_p, self.repetition_penalty = min_p, repetition_penalty
        self.seed, self.forks = seed, 0
        self.gen = None
        if seed is not None:
            self.gen = torch.Generator(device=device)
            self.gen.manual_seed(seed)

    @property
    def penalised(self) -> bool:
        return self.repetition_penalty != 1.0

    @property
    def filtered(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0

    def fork_seed(self) -> int | None:
        """A seed for an engine that seeds its own RNG (hf, vLLM): ``seed`` on the first call, then a
        different one per call, so micro-batches of one generate call do not repeat each other."""
        if self.seed is None:
            return None
        self.forks += 1
        return self.seed + 1_000_003 * (self.forks - 1)

    def __call__(self, logits: Tensor, seen: Tensor | None = None) -> tuple[Tensor, Tensor]:
        logp = torch.log_softmax(logits.float() / self.temperature, dim=-1)  # (B, V) reported distribution
        if self.do_sample:
            token = torch.multinomial(self.probs(logits, seen, logp), 1, generator=self.gen).squeeze(-1)
        elif self.penalised:  # greedy on the penalised logits
            token = self.probs(logits, seen).argmax(-1)
        else:
            token = logp.argmax(-1)
        return token, logp.gather(-1, token.unsqueeze(-1)).squeeze(-1)

    def probs(self, logits: Tensor, seen: Tensor | None = None, logp: Tensor | None = None) -> Tensor:
        """(..., V) the distribution tokens are drawn from (one-hot argmax when greedy)."""
        if self.penalised:
            if seen is None:
                raise ValueError("sampler: repetition_penalty needs the tokens each row has seen")
            logits = repetition_penalty(logits.float(), seen, self.repetition_penalty)
            logp = None
        if not self.do_sample:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
        if logp is None:
            logp = torch.log_softmax(logits.float() / self.temperature, dim=-1)
        if not self.filtered:
            return logp.exp()
        return filter_logp(logp, self.top_k, self.top_p, self.min_p).softmax(-1)


def filter_logp(logp: Tensor, top_k: int, top_p: float, min_p: float = 0.0) -> Tensor:
    """Set to -inf every token outside the top-k, outside the smallest top-p nucleus, or below
    ``min_p`` × the most likely token's probability (HF ``MinPLogitsWarper``; the top token stays)."""
    if top_k > 0 and top_k < logp.shape[-1]:
        kth = torch.topk(logp, top_k, dim=-1).values[..., -1:]
        logp = logp.masked_fill(logp < kth, float("-inf"))
    if top_p < 1.0:
        sorted_lp, order = torch.sort(logp, descending=True, dim=-1)
        cum = sorted_lp.softmax(-1).cumsum(-1)
        drop_sorted = (cum - sorted_lp.softmax(-1)) >= top_p  # mass before this token already ≥ top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logp = logp.masked_fill(drop, float("-inf"))
    if min_p > 0.0:
        probs = logp.softmax(-1)  # (..., V)
        logp = logp.masked_fill(probs < min_p * probs.amax(-1, keepdim=True), float("-inf"))
    return logp


def repetition_penalty(logits: Tensor, seen: Tensor, penalty: float) -> Tensor:
    """HF's repetition penalty (CTRL, arXiv:1909.05858): on every token a row has seen, a positive
    logit is divided by ``penalty`` and a negative one multiplied by it. (B, V) → (B, V)."""
    penalised = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalised, logits)


def seen_tokens(prompt_ids: Tensor, prompt_mask: Tensor, vocab_size: int) -> Tensor:
    """(N, V) bool: True on every token id among a row's real prompt tokens."""
    counts = torch.zeros((prompt_ids.shape[0], vocab_size), dtype=torch.float32, device=prompt_ids.device)
    return counts.scatter_add_(1, prompt_ids, prompt_mask.float()) > 0
