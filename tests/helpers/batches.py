"""Fixed batches shared by unit and end-to-end tests (the data-parallel worker, ``tests.e2e.ddp_worker``,
re-exports them): the same global batch in every process."""

from __future__ import annotations

import torch

from rlvr.types import Problem, Rollouts

B, G, P, T = 4, 4, 5, 8


def fixed_global_batch(vocab: int) -> Rollouts:
    """The same global batch in every process: random tokens, uneven lengths, mixed rewards."""
    gen = torch.Generator().manual_seed(1234)
    n = B * G
    lengths = torch.randint(2, T + 1, (n,), generator=gen)
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)  # (N, T)
    return Rollouts(problems=[Problem(prompt=f"p{i // G}") for i in range(n)],
                    prompt_ids=torch.randint(4, vocab, (n, P), generator=gen),
                    prompt_mask=torch.ones(n, P, dtype=torch.bool),
                    completion_ids=torch.randint(4, vocab, (n, T), generator=gen), completion_mask=mask,
                    group_ids=torch.arange(B).repeat_interleave(G),
                    rewards=torch.randint(0, 2, (n, 1), generator=gen).float())


def savings_global_batch(vocab: int) -> Rollouts:
    """The fixed batch with left-padded prompts of 2..P tokens, groups 0 and 1 mixed and groups 2 and 3
    unanimous (all wrong, all correct): on 2 ranks, rank 0 runs two micro-batches per mini-batch and
    rank 1, holding only rows the zero-advantage skip leaves out, one (a single zero-gradient row)."""
    batch = fixed_global_batch(vocab)
    gen = torch.Generator().manual_seed(99)
    starts = torch.randint(0, P - 1, (batch.num_rows,), generator=gen)  # (N,) first real prompt column
    batch.prompt_mask = torch.arange(P).unsqueeze(0) >= starts.unsqueeze(1)  # (N, P) left-padded
    batch.prompt_ids = torch.where(batch.prompt_mask, batch.prompt_ids, torch.zeros_like(batch.prompt_ids))
    batch.rewards = torch.tensor([1., 0., 0., 1., 1., 1., 0., 1., 0., 0., 0., 0., 1., 1., 1., 1.]).unsqueeze(1)
    return batch
