"""The update phase of the RL trainer: PPO epochs × mini-batches × micro-batches, one optimizer step
per mini-batch, losses with global normalisers (DESIGN.md §2, the ``loss`` and ``update`` stages).

``UpdatePhase`` is a mixin of ``Trainer`` (src/rlvr/train/trainer.py); it reads the trainer's
``cfg``, ``acc`` (the accelerator), ``model`` (the prepared policy), ``policy`` (unwrapped),
``optimizer``, ``scheduler``, ``scaler``, ``parts`` (the pipeline's plug-ins), ``timer`` and
``tokenizer``, and changes only the weights, the optimizer's state and the batch's
``old_logprobs`` / ``meta``.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any

import torch

from rlvr.batching import micro_batches, mini_batches
from rlvr.losses.objective import NonFiniteLossError
from rlvr.ops import kl_estimate, masked_mean
from rlvr.rollout import sequence_logprobs
from rlvr.train import deepspeed_backend as ds
from rlvr.rollout.lockstep import forward_count
from rlvr.train.config import ConfigError
from rlvr.train.precision import autocast
from rlvr.types import LossInputs, Rollouts
from rlvr.weighting import WeightingInputs

# Loss terms that add up over micro-batches (each is its share of the global value); every other
# per-call metric is averaged by row share.
_ADDITIVE = {"loss/total", "loss/policy", "loss/kl", "loss/entropy"}


class UpdatePhase:
    """Gradient steps on a collected, scored batch (mixed into ``Trainer``)."""

    def update(self, batch: Rollouts) -> dict[str, float]:
        """``ppo_epochs`` × ``mini_batches`` optimizer steps on ``batch``, each with global normalisers.

        Behaviour log-probs (the ratio's denominator) are fixed before the first step: the sampler's
        own, the rollout's (``optim.old_logprobs: rollout``), a no-grad pass (several mini-batches),
        or else the first epoch's forward (weights do not change within it: no extra pass).
        """
        o = self.cfg.optim
        minis = mini_batches(batch.num_rows, o.mini_batches)
        fill_old = self._behaviour_logprobs(batch)
        out: dict[str, float] = {}
        for epoch in range(o.ppo_epochs):
            sums: dict[str, float] = {}
            for rows in minis:  # metrics: the mean over mini-batches
                for key, value in self._mini_step(batch, rows, fill_old and epoch == 0).items():
                    sums[key] = sums.get(key, 0.0) + value / len(minis)
            out.update(sums)
        return out

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
            with self.timer("old_logprobs"):
                batch.old_logprobs = self._scored(batch)[0]
            return False
        batch.old_logprobs = torch.zeros_like(batch.completion_mask, dtype=torch.float32)
        return True

    def _mini_step(self, batch: Rollouts, rows: torch.Tensor, fill_old: bool) -> dict[str, float]:
        """Gradient accumulation over the micro-batches of ``rows``, then one optimizer step."""
        norm = self._global_normalisers(batch.completion_mask[rows])
        mbs = micro_batches(rows.numel(), self.cfg.optim.micro_batch_size)
        passes = forward_count(len(mbs))  # sharded: as many forward/backward passes as any rank runs
        sums: dict[str, float] = {}
        for i in range(passes):
            sync = i == passes - 1
            with (nullcontext() if sync else self.acc.no_sync(self.model)):
                if i >= len(mbs):
                    self._idle_micro_step(batch, rows[:1], sync)
                    continue
                idx = mbs[i]
                step_metrics = self._micro_step(batch, rows[idx], fill_old, norm, idx.numel() / rows.numel(), sync)
            for key, value in step_metrics.items():
                sums[key] = sums.get(key, 0.0) + value
        with self.timer("optimizer"):
            sums.update(self._optimizer_step())
        return sums

    def _micro_step(self, batch: Rollouts, rows: torch.Tensor, fill_old: bool, norm: dict,
                    share: float, last: bool = True) -> dict[str, float]:
        with self.timer("forward"):
            logp, ent = self._logprobs(self.model, batch, rows=rows, entropy=True)
        if fill_old:
            batch.old_logprobs[rows] = logp.detach()
        old = batch.old_logprobs[rows]
        advantages = self._reweight(batch, rows, logp, ent)
        inputs = LossInputs(logprobs=logp, old_logprobs=old, advantages=advantages,
                            mask=batch.completion_mask[rows], entropy=ent,
                            ref_logprobs=None if batch.ref_logprobs is None else batch.ref_logprobs[rows],
                            rollout_logprobs=None if batch.rollout_logprobs is None else batch.rollout_logprobs[rows],
                            token_origin=None if batch.token_origin is None else batch.token_origin[rows],
                            behaviour_logprobs=None if batch.behaviour_logprobs is None else batch.behaviour_logprobs[rows])
        with self.timer("loss"):
            loss, metrics = self.parts["objective"](inputs, dp_size=self.acc.num_processes, **norm)
        with self.timer("backward"):
            self._backward(loss, last)
        # Loss terms are already this micro-batch's share of the mini-batch's global value (they add
        # up); per-call diagnostics (clip fractions, entropy means) are averaged by row share.
        out = {}
        for key, value in {"loss/total": loss.detach(), **metrics}.items():
            out[key] = float(value) if key in _ADDITIVE else float(value) * share
        out["rollout/entropy"] = ent.detach()[inputs.mask].mean().item() * share if ent is not None else 0.0
        # How far the policy has moved from the behaviour policy: k3 estimate of KL(π_old ‖ π_θ) on the
        # sampled tokens, >= 0 (loss/approx_kl is verl's signed ppo_kl); 0 before the first step.
        moved = kl_estimate(old, logp.detach(), "k3", clamp=None)
        out["loss/behaviour_kl"] = masked_mean(moved, inputs.mask).item() * share
        return out

    def _idle_micro_step(self, batch: Rollouts, rows: torch.Tensor, last: bool) -> None:
        """A forward and backward that add nothing to the gradients (loss × 0), so a sharded rank with
        fewer micro-batches than another keeps its collectives in line with theirs."""
        logp, _ = self._logprobs(self.model, batch, rows=rows)
        self._backward(logp.sum() * 0.0, last)

    def _backward(self, loss: torch.Tensor, last: bool) -> None:
        if ds.active(self.acc):  # unscaled shares, the boundary on the last micro-batch
            ds.backward(self.model, loss, last)
        else:
            self.acc.backward(loss if self.scaler is None else self.scaler.scale(loss))

    def _reweight(self, batch: Rollouts, rows: torch.Tensor, logp: torch.Tensor,
                  ent: torch.Tensor | None) -> torch.Tensor:
        """The reweight stage: token weightings on this micro-batch's advantages (N_mb, T)."""
        adv = batch.advantages[rows]
        weightings = self.parts["weightings"]
        if not weightings:
            return adv
        with self.timer("reweight"):
            answer = self._answer_mask(batch)
            for weighting in weightings:
                out = weighting(WeightingInputs(advantages=adv, mask=batch.completion_mask[rows],
                                                logprobs=logp.detach(),
                                                answer_mask=None if answer is None else answer[rows],
                                                entropy=None if ent is None else ent.detach()))
                adv = out.advantages
                batch.meta.setdefault("weighting_metrics", {}).update(
                    {f"adv/{k}": float(v) for k, v in out.metrics.items()})
        return adv

    def _answer_mask(self, batch: Rollouts) -> torch.Tensor | None:
        """(N, T) answer-span tokens, located once per batch for the weighting that asks for them."""
        spotter = next((w for w in self.parts["weightings"] if w.needs_answer_mask), None)
        if spotter is None:
            return None
        if "answer_mask" not in batch.meta:  # micro-batches and PPO epochs share one batch
            from rlvr.weighting.answer_mask import answer_mask_from_ids
            batch.meta["answer_mask"] = answer_mask_from_ids(self.tokenizer, batch.completion_ids, batch.attention,
                                                             marker=spotter.config.marker, span=spotter.config.span)
        return batch.meta["answer_mask"]

    def _optimizer_step(self) -> dict[str, float]:
        if ds.active(self.acc):  # DeepSpeed clips (optim.grad_clip) and steps its sharded optimizer
            total = ds.step(self.model)
            if not math.isfinite(total):
                raise NonFiniteLossError(f"gradient norm is {total}; DeepSpeed skipped the update")
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

    def _logprobs(self, model: torch.nn.Module, batch: Rollouts, rows: torch.Tensor | None = None,
                  entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        sel = slice(None) if rows is None else rows
        with autocast(self.cfg, self.acc.device):
            return sequence_logprobs(model, batch.prompt_ids[sel], batch.prompt_mask[sel], batch.completion_ids[sel],
                                     batch.attention[sel], temperature=self.cfg.rollout.temperature,
                                     with_entropy=entropy, entropy_grad=entropy and self.cfg.algorithm.entropy_coef > 0)

    def _scored(self, batch: Rollouts, entropy: bool = False,
                model: torch.nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """No-grad log-probs (and entropies) (N, T) of the batch under ``model`` (default: the current
        policy), ``rollout.micro_batch_size`` rows a forward."""
        policy = self.policy if model is None else model
        training = policy.training
        policy.eval()
        chunks = micro_batches(batch.num_rows, self.cfg.rollout.micro_batch_size)
        with torch.no_grad():
            parts = [self._logprobs(policy, batch, rows=rows, entropy=entropy) for rows in chunks]
            for _ in range(forward_count(len(chunks)) - len(chunks)):  # sharded: as many forwards as any rank
                self._logprobs(policy, batch, rows=chunks[0][:1])
        policy.train(training)
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]) if entropy else None

    def _trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.policy.parameters() if p.requires_grad]

    def _global_normalisers(self, mask: torch.Tensor) -> dict[str, Any]:
        """Trained tokens and rows over all ranks, and the length constant C of the fixed-norm
        aggregations: the completion cap (the same on every rank and step, not the padded width)."""
        local = torch.stack([mask.sum(), (mask.sum(-1) > 0).sum()]).float()
        total = self.acc.reduce(local, reduction="sum") if self.acc.num_processes > 1 else local
        return {"num_tokens": total[0], "num_seqs": total[1], "horizon": float(self.cfg.rollout.max_new_tokens)}
