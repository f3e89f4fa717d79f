"""The trainer's critic: value model, its optimizer and schedule, value forward and value update.

The trainer calls two phases per step: ``predict`` (value forward, before advantages) and
``update`` (clipped value regression on the estimator's returns, after the policy update). During
the first ``warmup_steps`` steps only the critic trains (BPCO's ``critic_warmup``). Data-parallel:
the value model is prepared by the same ``Accelerator`` as the policy and its loss uses global
normalisers, so the gradient equals the single-process one.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Protocol

import torch
from torch import Tensor

from rlvr.batching import micro_batches
from rlvr.critic.value_loss import clipped_value_loss, explained_variance
from rlvr.critic.value_model import ValueModel, build_value_model
from rlvr.critic.view import POLICY_VIEW, critic_prompts, template_fields
from rlvr.losses.objective import NonFiniteLossError
from rlvr.lr_schedule import lr_schedule
from rlvr.ops import masked_mean
from rlvr.rollout.lockstep import forward_count
from rlvr.types import Rollouts

class GradClipper(Protocol):
    """What the critic needs of the run's backend (``rlvr.train.sharding.Sharding`` provides it)."""

    def clip_grad_norm(self, model: torch.nn.Module, max_norm: float) -> Tensor:
        """Clip the gradients of ``model`` to ``max_norm`` (inf: measure only); the global norm."""


class WholeParameters:
    """One process or DDP, parameters whole on every rank: accelerate clips (``Sharding``'s default)."""

    def __init__(self, accelerator: Any) -> None:
        self.acc = accelerator

    def clip_grad_norm(self, model: torch.nn.Module, max_norm: float) -> Tensor:
        total = self.acc.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], max_norm)
        return total.full_tensor() if hasattr(total, "full_tensor") else total


class Critic:
    """Owns the value model; ``cfg`` is the run's ``CriticConfig``."""

    # Conservative: value-based advantages are rarely exactly 0 on a whole row, so the policy update
    # keeps every row (optim.skip_zero_rows is off with a critic).
    needs_every_row = True

    def __init__(self, cfg: Any, policy: torch.nn.Module, tokenizer: Any, accelerator: Any, total_steps: int,
                 sharding: GradClipper | None = None) -> None:
        """``sharding``: the trainer's backend (``rlvr.train.sharding``), by default whole parameters."""
        template_fields(cfg.template)  # a bad template fails before any work
        self.cfg, self.tokenizer, self.acc = cfg, tokenizer, accelerator
        model = build_value_model(policy, init=cfg.init, path=cfg.path, bound=cfg.bound,
                                  reward_range=tuple(cfg.reward_range))
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=tuple(cfg.betas),
                                      weight_decay=cfg.weight_decay)
        self.scheduler = lr_schedule(optimizer, cfg.schedule, cfg.lr_warmup_steps, max(total_steps * cfg.epochs, 1))
        self.model, self.optimizer = accelerator.prepare(model, optimizer)  # sharded like the policy (FSDP2)
        self.sharding = sharding if sharding is not None else WholeParameters(accelerator)

    @property
    def value_model(self) -> ValueModel:
        return self.acc.unwrap_model(self.model)

    @property
    def privileged(self) -> bool:
        return self.cfg.template != POLICY_VIEW

    def warming_up(self, step: int) -> bool:
        """True while only the critic trains (``step`` counts completed steps)."""
        return step < self.cfg.warmup_steps

    # --- phases -------------------------------------------------------------------------------

    @torch.no_grad()
    def predict(self, batch: Rollouts) -> dict[str, float]:
        """Value forward: ``batch.values`` (N, T) for the advantage estimator (bounded as configured);
        also fills the critic's prompt view ``batch.value_prompt_ids`` / ``_mask`` (N, P') and its raw
        outputs ``batch.old_values`` (N, T), the clip anchor of the update."""
        ids, mask = critic_prompts(batch, self.tokenizer, self.cfg.template)
        batch.value_prompt_ids, batch.value_prompt_mask = ids, mask
        self.model.eval()
        raw = self._forward(batch, torch.arange(batch.num_rows))  # (N, T)
        batch.old_values = raw
        values = self.value_model.bounded(raw) * batch.completion_mask
        batch.values = values
        return {"critic/value_mean": masked_mean(values, batch.completion_mask).item(),
                "critic/prompt_tokens": mask.sum(-1).float().mean().item()}

    def update(self, batch: Rollouts, returns: Tensor, norm: dict[str, Tensor]) -> dict[str, float]:
        """``epochs`` passes of clipped value regression on ``returns`` (N, T); global normalisers ``norm``."""
        mask = batch.completion_mask
        out = {"critic/explained_var": explained_variance(batch.values, returns, mask).item(),
               "critic/return_mean": masked_mean(returns, mask).item()}
        self.model.train()
        for _ in range(self.cfg.epochs):
            mbs = micro_batches(batch.num_rows, self.cfg.micro_batch_size)
            passes = forward_count(len(mbs))  # sharded: as many forward/backward passes as any rank
            loss_sum, frac_sum = 0.0, 0.0
            for i in range(passes):
                with (nullcontext() if i == passes - 1 else self.acc.no_sync(self.model)):
                    if i >= len(mbs):  # an idle pass: adds nothing to the gradients
                        self.acc.backward(self._forward(batch, mbs[0][:1]).sum() * 0.0)
                        continue
                    rows = mbs[i]
                    loss, frac = clipped_value_loss(
                        self._forward(batch, rows), batch.old_values[rows], returns[rows], mask[rows],
                        clip=self.cfg.value_clip, mode=self.cfg.loss_agg, dp_size=self.acc.num_processes, **norm)
                    if not torch.isfinite(loss):
                        self.optimizer.zero_grad(set_to_none=True)
                        raise NonFiniteLossError(f"critic value loss is {loss.item()}; the critic update was skipped")
                    self.acc.backward(loss)
                loss_sum += loss.item()
                frac_sum += frac.item() * rows.numel() / batch.num_rows
            out.update({"critic/loss": loss_sum, "critic/clipfrac": frac_sum, **self._step()})
        return out

    def _forward(self, batch: Rollouts, rows: Tensor) -> Tensor:
        return self.model(batch.value_prompt_ids[rows], batch.value_prompt_mask[rows], batch.completion_ids[rows],
                          batch.attention[rows])

    def _step(self) -> dict[str, float]:
        clip = self.cfg.grad_clip
        total = self.sharding.clip_grad_norm(self.model, clip if clip > 0 else float("inf"))
        lr = self.scheduler.get_last_lr()[0]
        if not torch.isfinite(total):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError(f"critic gradient norm is {total.item()}; the critic update was skipped")
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"critic/grad_norm": total.item(), "critic/lr": lr}

    # --- state --------------------------------------------------------------------------------

    def checkpoint_parts(self) -> dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]]:
        """What ``save_checkpoint`` / ``load_checkpoint`` store next to the policy."""
        return {"critic": (self.value_model, self.optimizer)}

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state["scheduler"])
