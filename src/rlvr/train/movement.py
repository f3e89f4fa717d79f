"""How far one update moved the policy (KGPS's update magnitude u_t, docs/methods.md §2.17).

* ``policy_kl``: ``KL(π_t ‖ π_{t−1})`` on the step's trained tokens, estimated from the tokens the
  batch sampled (≈ π_{t−1}): with ``ρ = π_t(x)/π_{t−1}(x)``, ``E_{π_{t−1}}[ρ log ρ − (ρ − 1)]`` — unbiased
  (``E[ρ − 1] = 0``) and non-negative per token; averaged over the global batch's trained tokens.
* ``param_delta_sq``: ``‖θ_t − θ_{t−1}‖²`` over the trainable parameters (identical on every
  data-parallel rank, whose weights are the same).

A plug-in asks for one by name (``Selector.update_measure``); the trainer measures it only then:
``policy_kl`` costs a no-grad forward before and after the update, ``param_delta_sq`` a copy of the
trainable weights. The result is logged as ``optim/policy_kl`` or ``optim/param_delta_sq``.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from rlvr.ops import masked_sum

MEASURES = ("policy_kl", "param_delta_sq")


def kl_new_old(new_logp: Tensor, old_logp: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Σ over trained tokens of ``ρ log ρ − (ρ − 1)``, ``ρ = exp(new − old)`` (float64), and the token count."""
    log_ratio = (new_logp.double() - old_logp.double())  # (N, T)
    ratio = log_ratio.exp()
    return masked_sum(ratio * log_ratio - (ratio - 1.0), mask), mask.sum().double()


class Movement:
    """Snapshot before the update (``start``), measure after it (``finish``)."""

    def __init__(self, measure: str | None, params: list[torch.nn.Parameter],
                 logprobs: Callable[[], Tensor], mask: Tensor,
                 reduce: Callable[[dict[str, Tensor]], dict[str, Tensor]]) -> None:
        if measure is not None and measure not in MEASURES:
            raise ValueError(f"update measure must be one of {MEASURES} or None, got '{measure}'")
        self.measure, self.params, self.logprobs, self.mask, self.reduce = measure, params, logprobs, mask, reduce
        self.before: list[Tensor] | Tensor | None = None

    def start(self) -> None:
        if self.measure == "param_delta_sq":
            self.before = [p.detach().clone() for p in self.params]
        elif self.measure == "policy_kl":
            with torch.no_grad():
                self.before = self.logprobs()

    def finish(self) -> dict[str, float]:
        if self.measure == "param_delta_sq":
            delta = sum(float(((p.detach() - b) ** 2).sum()) for p, b in zip(self.params, self.before))
            return {"optim/param_delta_sq": delta}
        if self.measure == "policy_kl":
            with torch.no_grad():
                total, count = kl_new_old(self.logprobs(), self.before, self.mask)
            sums = self.reduce({"kl": total, "count": count})
            return {"optim/policy_kl": float(sums["kl"] / sums["count"].clamp(min=1))}
        return {}
