"""The training objective: policy loss + KL penalty − entropy bonus, each aggregated one way.

``loss = agg(ℓ_policy) + kl_coef · agg(KL_est(log π, log π_ref)) − entropy_coef · agg(H)``

All three terms go through the same ``Aggregation`` with the same global normalisers, so a batch
split into micro-batches (or data-parallel shards with ``dp_size``) sums to the full-batch value and
gradient. Metrics are namespaced ``loss/…``. ``loss/total``, ``loss/policy``, ``loss/kl`` and
``loss/entropy`` are this call's *contribution* (normalised globally, times ``dp_size``): sum them
over micro-batches and average over ranks to get the full-batch value. The policy loss's own
diagnostics (``loss/clipfrac``, ``loss/approx_kl``, …) are means over this call's trained tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from rlvr.aggregation import Aggregation
from rlvr.losses.base import PolicyLoss
from rlvr.ops import KL_ESTIMATORS, kl_estimate
from rlvr.registry import make_config, param
from rlvr.types import BatchError, LossInputs


class NonFiniteLossError(RuntimeError):
    """A loss term is NaN or infinite; the step must stop before it corrupts the weights."""


@dataclass(frozen=True)
class ObjectiveConfig:
    aggregation: Aggregation = field(default_factory=Aggregation,
                                     metadata={"help": "how per-token terms become scalars (rlvr.aggregation)"})
    kl_coef: float = param(0.0, "weight of the KL(pi || pi_ref) penalty in the loss; 0 = off")
    kl_estimator: str = param("k3", f"per-token KL estimator: one of {', '.join(KL_ESTIMATORS)}")
    kl_clamp: float | None = param(10.0, "clamp the k3 estimate to +-this (verl: 10); None = no clamp (TRL)")
    kl_straight_through: bool = param(False, "forward value of the estimator, gradient of k2 (verl's 'k3+')")
    entropy_coef: float = param(0.0, "weight of the entropy bonus (subtracted from the loss); 0 = off")

    def __post_init__(self) -> None:
        if isinstance(self.aggregation, str):  # a bare mode name is accepted for convenience
            object.__setattr__(self, "aggregation", Aggregation(mode=self.aggregation))
        if not isinstance(self.aggregation, Aggregation):
            raise TypeError(f"objective: aggregation must be an Aggregation or a mode name, "
                            f"got {type(self.aggregation).__name__}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"objective: unknown kl_estimator '{self.kl_estimator}'; valid: {', '.join(KL_ESTIMATORS)}")
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise ValueError(f"objective: kl_coef and entropy_coef must be >= 0, got {self.kl_coef}, {self.entropy_coef}")


class Objective:
    """Combines a built ``PolicyLoss`` with aggregation, a KL penalty and an entropy bonus.

    ``Objective(loss, ObjectiveConfig(...))`` or ``Objective(loss, kl_coef=0.01, ...)`` (keyword
    parameters are checked against ``ObjectiveConfig``; unknown keys are errors).
    """

    def __init__(self, policy_loss: PolicyLoss, config: ObjectiveConfig | None = None, **params: Any) -> None:
        if not isinstance(policy_loss, PolicyLoss):
            raise TypeError(f"objective: policy_loss must be a built PolicyLoss, got {type(policy_loss).__name__}")
        if config is not None and params:
            raise TypeError("objective: pass either a config or keyword parameters, not both")
        self.policy_loss = policy_loss
        self.config = config if config is not None else make_config(ObjectiveConfig, params, where="objective")

    def __repr__(self) -> str:
        return f"Objective({self.policy_loss!r}, {self.config})"

    @property
    def needs_every_row(self) -> bool:
        """True when a row whose advantage is 0 on every trained token can still move the loss: a KL
        penalty or an entropy bonus (a term on every row), or a policy loss not proven zero there."""
        cfg = self.config
        return cfg.kl_coef > 0 or cfg.entropy_coef > 0 or self.policy_loss.needs_every_row

    def __call__(self, inputs: LossInputs, *, num_tokens: float | Tensor | None = None,
                 num_seqs: float | Tensor | None = None, horizon: float | None = None,
                 dp_size: int = 1) -> tuple[Tensor, dict[str, Tensor]]:
        """The scalar loss of this (micro-)batch and its ``loss/…`` metrics (detached scalars)."""
        cfg, mask = self.config, inputs.mask
        self._check_inputs(inputs)

        def agg(per_token: Tensor) -> Tensor:
            return cfg.aggregation(per_token, mask, num_tokens=num_tokens, num_seqs=num_seqs, horizon=horizon,
                                   dp_size=dp_size)

        out = self.policy_loss(inputs)
        terms = {"policy": agg(out.per_token)}  # name → aggregated term (with grad)
        metrics: dict[str, Tensor] = {}
        if inputs.ref_logprobs is not None:  # logged even when not in the loss
            with torch.set_grad_enabled(torch.is_grad_enabled() and cfg.kl_coef > 0):
                kl = agg(kl_estimate(inputs.logprobs, inputs.ref_logprobs, cfg.kl_estimator,
                                     clamp=cfg.kl_clamp, straight_through=cfg.kl_straight_through))
            if cfg.kl_coef > 0:
                terms["kl"] = kl
            metrics["loss/kl"] = kl.detach()
        if inputs.entropy is not None:
            with torch.set_grad_enabled(torch.is_grad_enabled() and cfg.entropy_coef > 0):
                ent = agg(inputs.entropy)
            if cfg.entropy_coef > 0:
                terms["entropy"] = ent
            metrics["loss/entropy"] = ent.detach()
        _check_finite(terms)
        loss = terms["policy"]
        if "kl" in terms:
            loss = loss + cfg.kl_coef * terms["kl"]
        if "entropy" in terms:
            loss = loss - cfg.entropy_coef * terms["entropy"]
        metrics["loss/policy"] = terms["policy"].detach()
        metrics["loss/total"] = loss.detach()
        metrics.update({f"loss/{k}": v.detach() for k, v in out.metrics.items()})
        return loss, metrics

    def _check_inputs(self, inputs: LossInputs) -> None:
        cfg = self.config
        if cfg.kl_coef > 0 and inputs.ref_logprobs is None:
            raise BatchError(f"objective: kl_coef={cfg.kl_coef} needs LossInputs.ref_logprobs (a reference "
                             "policy's log-probs); set kl_coef=0 or compute them")
        if cfg.entropy_coef > 0 and inputs.entropy is None:
            raise BatchError(f"objective: entropy_coef={cfg.entropy_coef} needs LossInputs.entropy; "
                             "set entropy_coef=0 or compute the entropy in the forward pass")


def _check_finite(terms: dict[str, Tensor]) -> None:
    bad = {name: float(value.detach()) for name, value in terms.items() if not bool(torch.isfinite(value))}
    if bad:
        shown = ", ".join(f"'{k}' = {'nan' if math.isnan(v) else v}" for k, v in bad.items())
        raise NonFiniteLossError(f"non-finite loss term(s): {shown}; the step is stopped before any update "
                                 "(check log-probs, advantages and the learning rate)")
