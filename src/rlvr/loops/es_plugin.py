"""The ES loop plug-ins (kind "loop"): ``es`` and sequential ``grpo_then_es``.

The math is ``rlvr.optim.es``; the loops are ``rlvr.loops.es_trainer`` (ES) and
``rlvr.loops.sequential`` (gradient steps, then ES). A plug-in reads its config and builds its loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlvr.train.loop_plugin import LoopPlugin
from rlvr.optim.es import ESConfig
from rlvr.loops.es_trainer import ESTrainer
from rlvr.loops.sequential import SequentialTrainer
from rlvr.registry import param, register


@register("loop", "es")
class ES(LoopPlugin):
    """Evolution strategies on the weights: seeded Gaussian perturbations scored by verifier reward.

    Paper: Qiu et al., "Evolution Strategies at Scale: LLM Fine-Tuning Beyond Reinforcement
    Learning" (arXiv:2509.24372); reference code VsonicV/es-fine-tuning-paper (docs/methods.md §1.9).

    Equation: members ``θ_k = θ + σ ε(seed_k)``; ``F_k`` = mean verifier reward of ``θ_k`` on one
    shared prompt batch; ``z_k = (F_k − mean F)/(std F + eps)``;
    ``θ ← θ + (α/N) Σ_k z_k ε(seed_k)`` (no 1/σ; noise regenerated from the seed, summed in fp32).

    Differs from the gradient trainer (GRPO and friends):
      * no backward pass, no log-probs, no optimizer state: only the integer seeds of a step;
      * the reward of a whole weight perturbation is the signal (no per-token credit);
      * a population is split over processes (torch.distributed), fitness all-gathered;
      * ``include`` / ``exclude`` restrict the search to some layers or LoRA adapters;
      * ``grpo_steps > 0`` runs that many gradient steps first (the sequential schedule of §2.5).

    Shapes: per member a fitness row (X,) over the step's prompts; fitness (N,), seeds (S,),
    update shaped like each selected parameter.
    """

    Config = ESConfig
    paper = "Evolution Strategies at Scale: LLM Fine-Tuning Beyond Reinforcement Learning (arXiv:2509.24372)"

    def trainer(self, cfg: Any, *, model: torch.nn.Module | None = None, tokenizer: Any = None) -> Any:
        if self.config.grpo_steps > 0:
            return SequentialTrainer(cfg, self.config, model=model, tokenizer=tokenizer)
        return ESTrainer(cfg, self.config, model=model, tokenizer=tokenizer)


@dataclass(frozen=True)
class GRPOThenESConfig(ESConfig):
    grpo_steps: int | None = param(None, "gradient (GRPO) steps S₁ before ES takes over (required, docs/methods.md "
                                         "§2.5); ES runs the rest of run.steps")

    def __post_init__(self) -> None:
        if self.grpo_steps is None:
            raise ValueError("grpo_then_es: grpo_steps (S₁) is required: the gradient steps before ES takes over")
        super().__post_init__()
        if self.grpo_steps < 1:
            raise ValueError(f"grpo_then_es: grpo_steps must be >= 1, got {self.grpo_steps}")


@register("loop", "grpo_then_es")
class GRPOThenES(ES):
    """Sequential schedule: GRPO for S₁ steps, then ES from θ_{S₁} (a RECONSTRUCTION).

    Paper: "ES vs GRPO: coverage, JS diversity, sequential GRPO→ES" (docs/methods.md §2.5; abstract only),
    building on Qiu et al. (arXiv:2509.24372). Reconstructed: the switch point S₁ (``grpo_steps``;
    the abstract gives none) and that ES restarts with no memory of the gradient phase.

    Equation: θ_{S₁} = GRPO^{S₁}(θ_0); then θ ← θ + (α/N) Σ_k z_k ε(seed_k) for run.steps − S₁ iterations.

    Differs from es:
      * the first ``grpo_steps`` steps are gradient-trainer steps (``algorithm.*``, ``optim.lr``);
      * ``grpo_steps`` defaults to 100 and must be >= 1 and < run.steps.

    Shapes: as es.
    """

    Config = GRPOThenESConfig
    paper = ("ES vs GRPO: coverage, JS diversity, sequential GRPO→ES (arXiv id unknown; seed abstract); "
             "ES of arXiv:2509.24372")
