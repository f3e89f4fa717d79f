"""Verifier-projected Jensen–Shannon diversity of a population of policies (docs/methods.md §2.5).

RECONSTRUCTION (the paper is abstract-only): member k's behaviour on prompt x is projected through
the verifier onto a small outcome space 𝒜 — ``binary`` = {correct, incorrect}, i.e.
Bernoulli(p_k(x)), or ``distinct_answers`` = the parsed final answers — giving ``q_k(x) ∈ Δ(𝒜)``;

    JS(x) = H((1/N) Σ_k q_k(x)) − (1/N) Σ_k H(q_k(x)),   reported as E_x JS(x)   (nats).

JS is 0 when every member has the same q and at most log|𝒜| (log 2 for ``binary``).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

OUTCOME_SPACES = ("binary", "distinct_answers")


def entropy(q: Tensor, dim: int = -1) -> Tensor:
    """Shannon entropy in nats along ``dim`` with ``0 log 0 = 0``."""
    return -torch.special.xlogy(q, q).sum(dim)


def js_diversity(q: Tensor, atol: float = 1e-6) -> Tensor:
    """(X,) generalised JS divergence of N member distributions per prompt.

    ``q``: (N, X, A) — member, prompt, outcome; each ``q[k, x]`` sums to 1.
    """
    if q.dim() != 3:
        raise ValueError(f"js_diversity: expected q of shape (N, X, A), got {tuple(q.shape)}")
    q = q.double()
    if (q < 0).any() or not torch.allclose(q.sum(-1), torch.ones((), dtype=q.dtype), atol=atol):
        raise ValueError("js_diversity: every q[k, x] must be a probability vector")
    return entropy(q.mean(0)) - entropy(q).mean(0)  # (X,)


def bernoulli(p: Tensor) -> Tensor:
    """(..., 2) distributions [p, 1 − p] from success probabilities p (...) in [0, 1]."""
    return torch.stack([p, 1 - p], dim=-1)


def answer_distributions(answers: Sequence[Sequence[Sequence[Any]]]) -> Tensor:
    """(N, X, A) empirical answer distributions from ``answers[k][x]`` = member k's parsed answers
    on prompt x (one per sample; None = no parsable answer, itself one outcome). A = the most
    distinct answers on any prompt; unused outcome slots hold 0."""
    n, x = len(answers), len(answers[0]) if answers else 0
    vocab = [sorted({repr(a) for k in range(n) for a in answers[k][j]}) for j in range(x)]
    width = max((len(v) for v in vocab), default=1)
    out = torch.zeros(n, x, width, dtype=torch.float64)
    for k in range(n):
        for j in range(x):
            samples = answers[k][j]
            for a in samples:
                out[k, j, vocab[j].index(repr(a))] += 1.0 / len(samples)
    return out


@torch.no_grad()
def population_outcomes(model: torch.nn.Module, tokenizer: Any, task: Any, problems: list, params: list,
                        seeds: list[int], sigma: float, *, samples: int = 1, temperature: float = 0.0,
                        max_new_tokens: int = 48, per_tensor: bool = True,
                        seed: int = 0) -> tuple[Tensor, list[list[list[Any]]]]:
    """Correctness (N, X, S) and parsed answers [N][X][S] of the members ``θ + σ ε(seed_k)`` (ES
    perturbations of ``params``, restored afterwards). ``temperature`` 0 decodes greedily (S = 1)."""
    from rlvr.models import render_prompt
    from rlvr.optim.es import perturb, restore, snapshot
    from rlvr.rollout import generate
    from rlvr.tasks import verify_all
    rows = [p for p in problems for _ in range(samples)]
    prompts = [render_prompt(tokenizer, p) for p in rows]
    saved = snapshot(params)
    correct = torch.zeros(len(seeds), len(problems), samples, dtype=torch.float64)
    answers: list[list[list[Any]]] = []
    for k, s in enumerate(seeds):
        perturb(params, s, sigma, per_tensor)
        try:
            gen = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens, temperature=temperature or 1.0,
                           do_sample=temperature > 0, seed=seed)
            scores = verify_all(task, rows, gen.texts)
        finally:
            restore(params, saved)
        correct[k] = torch.tensor([sc.value for sc in scores], dtype=torch.float64).view(len(problems), samples)
        answers.append([[sc.parsed for sc in scores[j * samples:(j + 1) * samples]] for j in range(len(problems))])
    return correct, answers


def population_diversity(model: torch.nn.Module, tokenizer: Any, task: Any, problems: list, params: list,
                         seeds: list[int], sigma: float, **kwargs: Any) -> dict[str, float]:
    """E_x JS(x) of a σ-population around the model's weights, in both outcome spaces, plus the
    members' mean accuracy and its spread."""
    correct, answers = population_outcomes(model, tokenizer, task, problems, params, seeds, sigma, **kwargs)
    member_acc = correct.mean(dim=(1, 2))  # (N,)
    return {"js_binary": js_diversity(bernoulli(correct.mean(-1))).mean().item(),
            "js_answers": js_diversity(answer_distributions(answers)).mean().item(),
            "member_accuracy_mean": member_acc.mean().item(),
            "member_accuracy_std": member_acc.std(correction=0).item(), "members": len(seeds)}
