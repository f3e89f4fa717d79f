"""Log-prob scoring of a batch by a model: the one forward every pass of the trainer uses, and the
no-grad scoring pass built on it (behaviour, reference, entropy and movement log-probs).

``Scorer.forward`` is one forward of some rows (with gradients when the caller is the update);
``Scorer.__call__`` scores every row without gradients, ``rollout.micro_batch_size`` rows a forward
(with ``optim.trim_padding``: rows sorted by length, each forward cut to its own longest row; 0 at
the cut columns, which are padding), or packed (``optim.packing``) into padding-free sequences of at
most ``optim.max_tokens_per_scoring_pass`` tokens where that is set.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.batching import UpdatePlan, row_lengths
from rlvr.packing import packed_lengths, packing_problem
from rlvr.rollout.lockstep import forward_count
from rlvr.rollout.scoring import (ROW_WISE_ATTENTION, attention_implementation, packed_logprobs,
                                  packing_unsupported, sequence_logprobs)
from rlvr.train.config import ConfigError
from rlvr.train.precision import autocast
from rlvr.types import Rollouts


class Scorer:
    """Forwards of ``policy`` (or another model: the reference) over a ``Rollouts`` batch.

    ``cfg`` is the run's ``Config`` (``rollout.temperature``, ``rollout.micro_batch_size``,
    ``optim.packing`` / ``trim_padding`` / ``max_tokens_per_scoring_pass``, the precision settings and
    ``algorithm.entropy_coef``); ``device`` the accelerator's device (autocast).
    """

    def __init__(self, cfg: Any, policy: torch.nn.Module, device: torch.device) -> None:
        self.cfg, self.policy, self.device = cfg, policy, device

    def packs(self, model: torch.nn.Module, batch: Rollouts) -> bool:
        """Whether passes of ``model`` over ``batch`` are packed (``optim.packing``): ``always`` packs and
        fails where the model or the batch cannot take it; ``auto`` packs where it can and the
        attention implementation computes each row alone (flash-attention, row-wise sdpa:
        ``rlvr.models.rowwise_attention``; eager would compute the pack's whole L x L score matrix);
        ``never`` never packs."""
        mode = self.cfg.optim.packing
        if mode == "never":
            return False
        reason = packing_unsupported(model) or packing_problem(batch.prompt_mask, batch.attention,
                                                               batch.completion_mask)
        if mode == "always" and reason is not None:
            raise ConfigError(f"optim.packing=always cannot pack this pass: {reason}; optim.packing=auto falls "
                              f"back to padded micro-batches (optim.micro_batch_size, optim.trim_padding)")
        return reason is None and (mode == "always" or attention_implementation(model) in ROW_WISE_ATTENTION)

    def forward(self, model: torch.nn.Module, batch: Rollouts, rows: torch.Tensor | None = None,
                entropy: bool = False, packed: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(n, T) log-probs (and entropies) of ``batch``'s rows ``rows`` (all by default), padded or
        packed into one padding-free sequence (``packed``: the caller checked the model takes it)."""
        sel = slice(None) if rows is None else rows
        fn = packed_logprobs if packed else sequence_logprobs
        with autocast(self.cfg, self.device):
            return fn(model, batch.prompt_ids[sel], batch.prompt_mask[sel], batch.completion_ids[sel],
                      batch.attention[sel], temperature=self.cfg.rollout.temperature, with_entropy=entropy,
                      entropy_grad=entropy and self.cfg.algorithm.entropy_coef > 0)

    def __call__(self, batch: Rollouts, model: torch.nn.Module | None = None,
                 entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """No-grad log-probs (and entropies) (N, T) float32 of every row under ``model`` (default: the
        policy), which is put in eval mode for the pass and then back as it was."""
        model = self.policy if model is None else model
        training = model.training
        model.eval()
        plan = self.plan(model, batch)
        logp = torch.zeros(batch.completion_mask.shape, dtype=torch.float32, device=batch.completion_mask.device)
        ent = torch.zeros_like(logp) if entropy else None
        chunks = plan.micro_batches(torch.arange(batch.num_rows, device=logp.device))
        with torch.no_grad():
            for rows in chunks:
                lp, en = self.forward(model, plan.view(batch, rows), entropy=entropy, packed=plan.packed)
                t = lp.shape[1]  # (n, T') of a trimmed view
                logp[rows, :t] = lp.float()
                if entropy:
                    ent[rows, :t] = en.float()
            for _ in range(forward_count(len(chunks)) - len(chunks)):  # sharded: as many forwards as any rank
                self.forward(model, plan.view(batch, chunks[0][:1]))
        model.train(training)
        return logp, ent

    def plan(self, model: torch.nn.Module, batch: Rollouts) -> UpdatePlan:
        """The scoring pass's micro-batches: every row, ``rollout.micro_batch_size`` rows or
        ``optim.max_tokens_per_scoring_pass`` positions a forward, packed where ``packs`` says so."""
        o = self.cfg.optim
        size, budget = self.cfg.rollout.micro_batch_size, o.max_tokens_per_scoring_pass
        if self.packs(model, batch):
            return UpdatePlan(size, None, packed_lengths(batch.prompt_mask, batch.attention), budget=budget,
                              packed=True)
        return UpdatePlan(size, None, row_lengths(batch) if o.trim_padding or budget else None, budget=budget)
