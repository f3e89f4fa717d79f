"""Metropolis–Hastings over a language model's power-transformed prefix distribution ``p^α``.

Target: ``π_α(y) ∝ p(y | x)^α`` over prefixes y of at most ℓ tokens (a prefix that reaches eos
earlier ends there). Proposal (after Karan & Du 2025, "Reasoning with Sampling", SECONDARY in
docs/methods.md §2.12): draw a position j uniformly from {0, …, ℓ−1}, keep ``y_<j``, resample
``y′_{j:} ~ q(· | x, y_<j)`` with q the model at temperature ``τ/α`` (its tokenwise power), accept with

    A = min(1, p(y′)^α q(y_{j:} | y_<j) / (p(y)^α q(y′_{j:} | y_<j))).

Only the resampled suffix enters the ratio (the kept prefix cancels). Drawing j independently of
the state makes every fixed-j move a reversible kernel for π_α (a state that ended before j stays
put), so the uniform mixture leaves π_α invariant with exactly the ratio above. With α = 1, q = p
and every proposal is accepted. The chains start from a draw of q.

The model is abstract (:class:`PrefixModel`) so the sampler can be checked exactly on a toy
categorical language; :class:`PolicyPrefixes` adapts a Hugging Face causal LM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import torch
from torch import Tensor

from rlvr.rollout.hf import generate_ids
from rlvr.ops import logprobs_from_logits


class PrefixModel(Protocol):
    """A family of autoregressive distributions, one per chain context."""

    def extend(self, chains: Sequence[int], prefixes: Sequence[Sequence[int]], max_tokens: Sequence[int],
               temperature: float, seed: int) -> list[list[int]]:
        """For each (chain, prefix): up to ``max_tokens`` sampled tokens continuing it at
        ``temperature`` (stopping after eos, eos included)."""

    def token_logprobs(self, chains: Sequence[int], seqs: Sequence[Sequence[int]],
                       temperatures: Sequence[float]) -> list[list[Tensor]]:
        """Per temperature, for each (chain, sequence): (L,) log-probs of its tokens at that
        temperature (one forward can serve every temperature)."""


@dataclass
class ChainResult:
    states: list[list[int]]  # the final prefix of each chain (eos included when it ended)
    proposed: int  # proposals made (moves at a position inside the state)
    accepted: int

    @property
    def accept_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 1.0


def mh_log_accept(alpha: float, logp_new: Any, logq_new: Any, logp_old: Any, logq_old: Any) -> Any:
    """``log A = α(log p(y′_{j:}) − log p(y_{j:})) + log q(y_{j:}) − log q(y′_{j:})`` (before the min
    with 0); each argument is a resampled suffix's summed log-prob (floats or matching tensors)."""
    return alpha * (logp_new - logp_old) + (logq_old - logq_new)


def power_mh(model: PrefixModel, lengths: Sequence[int], alpha: float, steps: int, seed: int,
             temperature: float = 1.0) -> ChainResult:
    """Run one chain per entry of ``lengths`` (its ℓ) for ``steps`` MH steps targeting
    ``p^α`` with p = the model at ``temperature``; returns the final states and acceptance counts."""
    if alpha <= 0 or temperature <= 0:
        raise ValueError(f"power_mh: alpha and temperature must be > 0, got {alpha}, {temperature}")
    if any(n < 1 for n in lengths):
        raise ValueError(f"power_mh: every prefix length must be >= 1, got {list(lengths)}")
    n, q_temp = len(lengths), temperature / alpha
    chains, ells = list(range(n)), torch.tensor(list(lengths), dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    states = model.extend(chains, [[] for _ in chains], lengths, q_temp, seed)
    logp, logq = _scores(model, chains, states, temperature, q_temp)  # per chain: token log-probs (floats)
    proposed = accepted = 0
    for step in range(steps):
        js = (torch.rand(n, generator=gen, dtype=torch.float64) * ells).long().tolist()  # j ~ U{0..ℓ-1}, state-free
        log_u = torch.rand(n, generator=gen, dtype=torch.float64).log().tolist()
        live = [i for i in chains if js[i] < len(states[i])]
        if not live:
            continue
        prefixes = [states[i][:js[i]] for i in live]
        suffixes = model.extend(live, prefixes, [lengths[i] - js[i] for i in live], q_temp, seed + 7_919 * (step + 1))
        props = [p + s for p, s in zip(prefixes, suffixes)]
        new_p, new_q = _scores(model, live, props, temperature, q_temp)
        proposed += len(live)
        for k, i in enumerate(live):
            j = js[i]
            log_a = mh_log_accept(alpha, sum(new_p[k][j:]), sum(new_q[k][j:]), sum(logp[i][j:]), sum(logq[i][j:]))
            if log_u[i] < log_a:  # log u < 0 <= log A always accepts (alpha = 1: log A = 0 exactly)
                states[i], logp[i], logq[i] = props[k], new_p[k], new_q[k]
                accepted += 1
    return ChainResult(states, proposed, accepted)


def _scores(model: PrefixModel, chains: Sequence[int], seqs: Sequence[Sequence[int]], temperature: float,
            q_temp: float) -> tuple[list[list[float]], list[list[float]]]:
    """Token log-probs of each sequence under p (``temperature``) and q (``q_temp``), as float lists."""
    temps = (temperature,) if q_temp == temperature else (temperature, q_temp)
    scored = [[t.double().tolist() for t in per_temp] for per_temp in model.token_logprobs(chains, seqs, temps)]
    return scored[0], scored[-1]


class PolicyPrefixes:
    """:class:`PrefixModel` over a Hugging Face causal LM; chain k continues context ``ctx_ids[k]``
    (left-padded (C, P) ids with their bool mask), sampling with no top-k / top-p filter so the
    proposal is exactly the temperature-scaled model."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, ctx_ids: Tensor, ctx_mask: Tensor,
                 spent: Any = None) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.ctx_ids, self.ctx_mask = ctx_ids.cpu(), ctx_mask.cpu()
        self.spent = spent  # a GenerationCount that every draw and proposal is added to (the rollout budget)

    def extend(self, chains: Sequence[int], prefixes: Sequence[Sequence[int]], max_tokens: Sequence[int],
               temperature: float, seed: int) -> list[list[int]]:
        from rlvr.rollout.samplers.base import extend_contexts  # samplers import this module

        rows = torch.tensor(list(chains), dtype=torch.long)
        ids, mask = extend_contexts(self.ctx_ids[rows], self.ctx_mask[rows], prefixes, self.tokenizer.pad_token_id)
        gen = generate_ids(self.model, self.tokenizer, ids, mask, max_new_tokens=max(max_tokens),
                           temperature=temperature, top_p=1.0, top_k=0, do_sample=True, seed=seed)
        if self.spent is not None:
            self.spent.add(gen)
        ids_out, real = gen.completion_ids.cpu(), gen.completion_mask.cpu()
        return [ids_out[r][real[r]].tolist()[:m] for r, m in enumerate(max_tokens)]

    @torch.no_grad()
    def token_logprobs(self, chains: Sequence[int], seqs: Sequence[Sequence[int]],
                       temperatures: Sequence[float]) -> list[list[Tensor]]:
        rows = torch.tensor(list(chains), dtype=torch.long)
        width = max(len(s) for s in seqs)
        comp = torch.full((len(seqs), width), self.tokenizer.pad_token_id, dtype=torch.long)
        real = torch.zeros((len(seqs), width), dtype=torch.bool)
        for r, s in enumerate(seqs):
            comp[r, :len(s)] = torch.tensor(list(s), dtype=torch.long)
            real[r, :len(s)] = True
        device = next(self.model.parameters()).device
        ids = torch.cat([self.ctx_ids[rows], comp], dim=1).to(device)  # (C, P + L)
        mask = torch.cat([self.ctx_mask[rows], real], dim=1).long().to(device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)  # as at generation (left padding), cf. sequence_logprobs
        was_training = self.model.training
        self.model.eval()
        try:
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos,
                                logits_to_keep=width + 1).logits[:, :-1].float()  # (C, L, V)
        finally:
            self.model.train(was_training)
        out = []
        for temp in temperatures:
            logp = logprobs_from_logits(logits / temp, comp.to(device)).cpu()  # (C, L)
            out.append([logp[r, :len(s)] for r, s in enumerate(seqs)])
        return out


def total_variation(p: dict[Any, float], q: dict[Any, float]) -> float:
    """½ Σ |p − q| over the union of supports (for checking chains against a target)."""
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def power_target(logprob: dict[Any, float], alpha: float) -> dict[Any, float]:
    """The normalised ``p^α`` of an enumerated distribution given as log-probs."""
    top = max(alpha * v for v in logprob.values())
    w = {k: math.exp(alpha * v - top) for k, v in logprob.items()}
    z = sum(w.values())
    return {k: v / z for k, v in w.items()}
