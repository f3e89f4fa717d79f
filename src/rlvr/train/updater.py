"""The update half of the RL step: PPO epochs × mini-batches × micro-batches, one optimizer step
per mini-batch, losses with global normalisers (docs/design.md §2, the ``reweight``, ``loss`` and
``update`` stages).

``Updater`` is built once by ``Trainer`` (src/rlvr/train/trainer.py) from explicit parts (the
prepared model, its optimizer and schedule, the objective and weightings, the backend, the scorer)
and changes only the weights, the optimizer's state and the batch's ``old_logprobs`` /
``answer_mask``.

Two exact savings plan the micro-batches (``rlvr.batching.UpdatePlan``), each on by default:

- ``optim.skip_zero_rows``: a row whose advantage is 0 on every trained token adds exactly zero loss
  and gradient when no plug-in needs every row (``needs_every_row``: no KL penalty, no entropy bonus,
  a policy loss linear in A, row-local weightings, no critic), so it is left out of the forward and
  backward; the normalisers still count it (globally over ranks). Each rank computes at least one row
  per mini-batch (a zero-gradient one when none is left) and synchronises on its last backward, so
  DDP's all-reduce lines up and every parameter still gets a (zero) gradient for the optimizer.
  The additive ``loss/total`` and ``loss/policy`` are unchanged (a skipped row adds 0); the
  diagnostics ``loss/entropy``, ``loss/kl`` (shares of the global normaliser), ``rollout/entropy``,
  ``loss/behaviour_kl``, ``loss/clipfrac``, ``loss/approx_kl`` and the weightings' ``adv/…`` then
  cover the rows computed only (those with a non-zero advantage).
- ``optim.trim_padding``: rows are sorted by length into micro-batches and each forward is cut to its
  own longest prompt (left) and completion (right); positions count real tokens only, so log-probs
  equal the padded computation up to float rounding. With one micro-batch (``micro_batch_size`` 0),
  ``optim.length_buckets`` splits the sorted rows into up to that many forwards of at least 8 rows,
  each trimmed on its own (measured in benchmarks/step_speed.py: padding 24 % → 10 % of the update's
  positions in the quickstart regime).

- ``optim.packing`` (``auto``: where the model takes it): each micro-batch is one padding-free
  sequence (``rlvr.packing``, ``rlvr.rollout.scoring.packed_logprobs``), of at most
  ``optim.max_tokens_per_micro_batch`` tokens where that is set; the no-grad scoring passes likewise
  (``optim.max_tokens_per_scoring_pass``). The loss sees the same (n, T') tensors as a trimmed
  micro-batch and the same global normalisers, so only float rounding changes.

``update/skipped_row_frac``, ``update/padding_frac`` and ``update/tokens`` report what the update
computed (all epochs and mini-batches of the step).
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any

import torch

from rlvr.batching import UpdatePlan, mini_batches, row_lengths
from rlvr.losses.objective import NonFiniteLossError
from rlvr.ops import kl_estimate, masked_mean
from rlvr.packing import packed_lengths
from rlvr.rollout.lockstep import forward_count
from rlvr.train.config import ConfigError
from rlvr.train.global_batch import global_normalisers
from rlvr.train.scorer import Scorer
from rlvr.types import LossInputs, Rollouts
from rlvr.weighting import WeightingInputs

# Loss terms that add up over micro-batches (each is its share of the global value); every other
# per-call metric is averaged by row share.
_ADDITIVE = {"loss/total", "loss/policy", "loss/kl", "loss/entropy"}


class Updater:
    """Gradient steps on a collected, scored batch.

    ``cfg``: the run's ``Config`` (``optim``, ``rollout.sampler`` / ``max_new_tokens``); ``model``: the
    prepared (possibly wrapped) policy and ``policy`` the same module unwrapped; ``optimizer`` /
    ``scheduler`` / ``scaler`` (fp16 only, else None) step it; ``acc`` and ``sharding`` are the run's
    accelerator and backend; ``objective`` the policy loss and ``weightings`` the token weightings;
    ``scorer`` the no-grad scoring pass; ``critic`` (or None) only says whether every row is needed;
    ``timer`` times the stages.
    """

    def __init__(self, *, cfg: Any, model: torch.nn.Module, policy: torch.nn.Module, optimizer: Any, scheduler: Any,
                 scaler: Any, acc: Any, sharding: Any, objective: Any, weightings: list, tokenizer: Any,
                 scorer: Scorer, timer: Any, critic: Any = None) -> None:
        self.cfg, self.model, self.policy = cfg, model, policy
        self.optimizer, self.scheduler, self.scaler = optimizer, scheduler, scaler
        self.acc, self.sharding, self.scorer, self.timer = acc, sharding, scorer, timer
        self.objective, self.weightings, self.tokenizer, self.critic = objective, weightings, tokenizer, critic

    def update(self, batch: Rollouts) -> dict[str, float]:
        """``ppo_epochs`` × ``mini_batches`` optimizer steps on ``batch``, each with global normalisers.

        Behaviour log-probs (the ratio's denominator) are fixed before the first step: the sampler's
        own, the rollout's (``optim.old_logprobs: rollout``), a no-grad pass (several mini-batches),
        or else the first epoch's forward (weights do not change within it: no extra pass). Rows the
        plan leaves out (``optim.skip_zero_rows``) are the same in every epoch, so a row never trained
        never needs behaviour log-probs.
        """
        o = self.cfg.optim
        minis = mini_batches(batch.num_rows, o.mini_batches)
        fill_old = self._behaviour_logprobs(batch)
        plan = self.plan(batch)
        out: dict[str, float] = {}
        for epoch in range(o.ppo_epochs):
            sums: dict[str, float] = {}
            for rows in minis:  # metrics: the mean over mini-batches
                for key, value in self._mini_step(batch, rows, fill_old and epoch == 0, plan).items():
                    sums[key] = sums.get(key, 0.0) + value / len(minis)
            out.update(sums)
        return {**out, **plan.metrics(batch.num_rows * o.ppo_epochs)}

    def _behaviour_logprobs(self, batch: Rollouts) -> bool:
        """Fill ``batch.old_logprobs`` before any step; True when the first epoch's forward must fill them."""
        if batch.old_logprobs is not None:
            return False
        if self.cfg.optim.old_logprobs == "rollout":
            if batch.rollout_logprobs is None:
                raise ConfigError(f"optim.old_logprobs=rollout needs the sampler's log-probs, but "
                                  f"'{self.cfg.rollout.sampler.name}' gives none; use recompute")
            batch.old_logprobs = batch.rollout_logprobs.detach().float()
            return False
        if self.cfg.optim.mini_batches > 1:  # the policy moves between mini-batches: score all rows first
            with self.timer("loss"):
                batch.old_logprobs = self.scorer(batch)[0]
            return False
        batch.old_logprobs = torch.zeros_like(batch.completion_mask, dtype=torch.float32)
        return True

    def plan(self, batch: Rollouts) -> UpdatePlan:
        """Which rows the update computes and in what order (``optim.skip_zero_rows``, ``trim_padding``)."""
        o = self.cfg.optim
        keep = None
        if o.skip_zero_rows and not self.needs_every_row():
            keep = ((batch.advantages != 0) & batch.completion_mask).any(-1)  # (N,) rows with any gradient
        if self.scorer.packs(self.policy, batch):  # no padding to cut: length buckets would only add passes
            return UpdatePlan(o.micro_batch_size, keep, packed_lengths(batch.prompt_mask, batch.attention),
                              budget=o.max_tokens_per_micro_batch, packed=True)
        budget = o.max_tokens_per_micro_batch
        lengths = row_lengths(batch) if o.trim_padding or budget else None
        return UpdatePlan(o.micro_batch_size, keep, lengths, o.length_buckets, budget=budget)

    def needs_every_row(self) -> bool:
        """True when a row with zero advantage may still move the loss: the objective (KL, entropy
        bonus, an unproven policy loss), a token weighting or a critic says so."""
        parts = [self.objective, *self.weightings, self.critic]
        return any(getattr(part, "needs_every_row", True) for part in parts if part is not None)

    def _mini_step(self, batch: Rollouts, rows: torch.Tensor, fill_old: bool, plan: UpdatePlan) -> dict[str, float]:
        """Gradient accumulation over the micro-batches of ``rows``, then one optimizer step.

        The normalisers count every row of the mini-batch over all ranks, the rows the plan leaves out
        included; each rank runs at least one micro-batch and synchronises on its last backward only,
        so ranks with different numbers of micro-batches still all-reduce once, together.
        """
        norm = self.normalisers(batch.completion_mask[rows])
        mbs = plan.micro_batches(rows)
        computed = sum(idx.numel() for idx in mbs)
        passes = forward_count(len(mbs))  # sharded: as many forward/backward passes as any rank runs
        sums: dict[str, float] = {}
        for i in range(passes):
            sync = i == passes - 1
            with (nullcontext() if sync else self.acc.no_sync(self.model)):
                if i >= len(mbs):
                    self._idle_micro_step(batch, rows[:1], sync)
                    continue
                idx = mbs[i]
                step_metrics = self._micro_step(batch, idx, fill_old, norm, idx.numel() / computed, plan, sync)
            for key, value in step_metrics.items():
                sums[key] = sums.get(key, 0.0) + value
        with self.timer("update"):
            sums.update(self.optimizer_step())
        return sums

    def _micro_step(self, batch: Rollouts, rows: torch.Tensor, fill_old: bool, norm: dict,
                    share: float, plan: UpdatePlan, last: bool = True) -> dict[str, float]:
        mb = plan.view(batch, rows)  # (n, P') prompts, (n, T') completions
        t = mb.completion_mask.shape[1]
        with self.timer("loss"):
            logp, ent = self.scorer.forward(self.model, mb, entropy=True, packed=plan.packed)
        if fill_old:
            batch.old_logprobs[rows, :t] = logp.detach()
        old = batch.old_logprobs[rows, :t]
        answer = self._answer_mask(batch)
        advantages, weighted = self._reweight(mb, None if answer is None else answer[rows, :t], logp, ent)
        inputs = LossInputs(logprobs=logp, old_logprobs=old, advantages=advantages, mask=mb.completion_mask,
                            entropy=ent, ref_logprobs=mb.ref_logprobs, rollout_logprobs=mb.rollout_logprobs,
                            token_origin=mb.token_origin, behaviour_logprobs=mb.behaviour_logprobs)
        with self.timer("loss"):
            loss, metrics = self.objective(inputs, dp_size=self.acc.num_processes, **norm)
            self.sharding.backward(self.model, loss, last, self.scaler)
        # Loss terms are already this micro-batch's share of the mini-batch's global value (they add
        # up); per-call diagnostics (clip fractions, entropy means) are averaged by row share over the
        # rows computed (with optim.skip_zero_rows: the rows with a non-zero advantage).
        out = {}
        for key, value in {"loss/total": loss.detach(), **metrics}.items():
            out[key] = float(value) if key in _ADDITIVE else float(value) * share
        out["rollout/entropy"] = ent.detach()[inputs.mask].mean().item() * share if ent is not None else 0.0
        out.update({key: value * share for key, value in weighted.items()})  # the weightings' adv/… too
        # How far the policy has moved from the behaviour policy: k3 estimate of KL(π_old ‖ π_θ) on the
        # sampled tokens, >= 0 (loss/approx_kl is verl's signed ppo_kl); 0 before the first step.
        moved = kl_estimate(old, logp.detach(), "k3", clamp=None)
        out["loss/behaviour_kl"] = masked_mean(moved, inputs.mask).item() * share
        plan.count(mb)
        return out

    def _idle_micro_step(self, batch: Rollouts, rows: torch.Tensor, last: bool) -> None:
        """A forward and backward that add nothing to the gradients (loss × 0), so a sharded rank with
        fewer micro-batches than another keeps its collectives in line with theirs."""
        logp, _ = self.scorer.forward(self.model, batch, rows=rows)
        self.sharding.backward(self.model, logp.sum() * 0.0, last, self.scaler)

    def _reweight(self, mb: Rollouts, answer: torch.Tensor | None, logp: torch.Tensor,
                  ent: torch.Tensor | None) -> tuple[torch.Tensor, dict[str, float]]:
        """The reweight stage: token weightings on this micro-batch's advantages (n, T'), and their
        ``adv/…`` metrics on this micro-batch (the caller averages them over micro-batches by row share)."""
        adv, metrics = mb.advantages, {}
        weightings = self.weightings
        if not weightings:
            return adv, metrics
        with self.timer("reweight"):
            for weighting in weightings:
                out = weighting(WeightingInputs(advantages=adv, mask=mb.completion_mask, logprobs=logp.detach(),
                                                answer_mask=answer, entropy=None if ent is None else ent.detach()))
                adv = out.advantages
                metrics.update({f"adv/{k}": float(v) for k, v in out.metrics.items()})
        return adv, metrics

    def _answer_mask(self, batch: Rollouts) -> torch.Tensor | None:
        """(N, T) answer-span tokens, located once per batch for the weighting that asks for them."""
        spotter = next((w for w in self.weightings if w.needs_answer_mask), None)
        if spotter is None:
            return None
        if batch.answer_mask is None:  # micro-batches and PPO epochs share one batch
            from rlvr.weighting.answer_mask import answer_mask_from_ids
            batch.answer_mask = answer_mask_from_ids(self.tokenizer, batch.completion_ids, batch.attention,
                                                     marker=spotter.config.marker, span=spotter.config.span)
        return batch.answer_mask

    def optimizer_step(self) -> dict[str, float]:
        """Clip (unscale under fp16) and step; a non-finite gradient norm skips the step (fp16) or raises."""
        total = self.sharding.engine_step(self.model)  # an engine that clips and steps itself (DeepSpeed)
        if total is not None:
            if not math.isfinite(total):
                raise NonFiniteLossError(f"gradient norm is {total}; the engine skipped the update")
            self.scheduler.step()
            return {"optim/grad_norm": total}
        clip = self.cfg.optim.grad_clip
        if self.scaler is not None:  # fp16: true gradients before clipping
            self.scaler.unscale_(self.optimizer)
        # Through the accelerator (a DTensor-aware global norm under FSDP2): the same on every rank.
        total = self.sharding.clip_grad_norm(self.model, clip if clip > 0 else float("inf"))
        if not torch.isfinite(total):
            self.optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None:  # an fp16 overflow: skip this step with a smaller scale
                self.scaler.update()
                return {"optim/grad_norm": 0.0, "optim/skipped": 1.0}
            raise NonFiniteLossError(f"gradient norm is {total.item()}; the update was skipped")
        if self.scaler is None:
            self.optimizer.step()
        else:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"optim/grad_norm": total.item()}

    def normalisers(self, mask: torch.Tensor) -> dict[str, Any]:
        """Trained tokens and rows of ``mask`` (N, T) over all ranks and the fixed-norm length constant
        (``rollout.max_new_tokens``): what every loss of the step divides by."""
        return global_normalisers(self.acc, mask, self.cfg.rollout.max_new_tokens)
