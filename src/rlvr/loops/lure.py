"""LURE (docs/methods.md §2.7): zero-data pursuit–evasion self-play, the gradient ``Trainer``'s step
fed by a self-play collector (``rlvr.loops.lure_self_play``).

Each step: the **evader** (the policy, prompted ``evade <env>:``) proposes G difficulty levels per
environment; each proposal becomes a task at that level; the **pursuer** (the same policy) runs M
planner–executor episodes on it in the environment (``multi_turn`` sampler); the evader's reward is
the capture frontier of the task's capture rate and the pursuer's tokens get capture-anchored
progress credit. Both roles' rows are trained together by the gradient ``Trainer``'s update (the
configured loss and aggregation) with a KL penalty to a reference re-anchored to the policy at the
first step of every round.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from rlvr.envs.lure import LURE_ENVS
from rlvr.envs.lure_credit import EVADER_REWARDS, PROGRESS_CREDITS
from rlvr.loops.lure_self_play import SelfPlayCollector
from rlvr.registry import param, register
from rlvr.train.config import replace
from rlvr.train.loop_plugin import LoopPlugin
from rlvr.train.trainer import Trainer

INVALID = ("random", "skip")  # what a proposal naming no level does (LUREConfig.invalid)


@dataclass(frozen=True)
class LUREConfig:
    envs: list = param(list(LURE_ENVS), "environments with a difficulty axis the evader positions tasks on")
    env_params: dict = param({}, "per-environment hyperparameters: {env name: {field: value}}")
    evader_states: int = param(1, "evader prompts per environment per step (each is one evader group)")
    evader_group: int = param(4, "G: difficulty proposals per evader prompt (GRPO over them)")
    captures_per_task: int = param(4, "M: pursuer episodes per proposed task; capture rate c = captures / M")
    evader_reward: str = param("triangle", "capture-frontier shape: triangle 1-|2c-1| | quadratic 4c(1-c)")
    progress_credit: str = param("monotone", "pursuer step credit: monotone p_s = max(0, v_s - best earlier v)")
    kl_beta: float = param(0.0, "beta of the round-anchored KL(pi || pi_ref^(k)) (k3) in the loss (required, > 0)")
    round_steps: int = param(4, "optimizer steps per self-play round; the KL anchor is re-set to the policy "
                                "at each round's first step (RECONSTRUCTION)")
    invalid: str = param("random", "a proposal naming no level on the axis: 'random' still runs the pursuer on a "
                                   "random level (evader reward 0), 'skip' runs nothing")
    max_turns: int = param(8, "most pursuer turns per episode (plan + executor steps)")
    turn_tokens: int = param(24, "token budget of one pursuer turn")
    evader_tokens: int = param(4, "token budget of an evader proposal")
    ddof: int = param(1, "std estimator of the evader GRPO and the pursuer joint normalisation")
    eps: float = param(1e-6, "added to the std before dividing")
    warm_start_steps: int = param(0, "supervised steps on environment-made demonstrations before self-play "
                                     "(lure_demos; 0 = none, pure zero-data)")
    warm_start_batch: int = param(32, "demonstrations per warm-start step")
    warm_start_lr: float = param(3e-3, "warm-start AdamW learning rate")
    warm_start_cache: str = param("", "a folder keeping warm-started weights, keyed by all they depend on and "
                                      "reused by runs that agree (one process; '' = none; rlvr.loops.lure_warm)")
    eval_tasks_per_level: int = param(8, "held-out pursuit measure: tasks per level of each environment's axis "
                                         "(0 = none; rlvr.loops.lure_eval)")
    eval_samples: int = param(4, "held-out pursuit measure: episodes per task")

    def __post_init__(self) -> None:
        checks = (("evader_reward", self.evader_reward, EVADER_REWARDS),
                  ("progress_credit", self.progress_credit, PROGRESS_CREDITS), ("invalid", self.invalid, INVALID))
        for name, value, valid in checks:
            if value not in valid:
                raise ValueError(f"lure: {name} must be one of {valid}, got '{value}'")
        for name in ("evader_states", "evader_group", "captures_per_task", "round_steps", "max_turns",
                     "turn_tokens", "evader_tokens", "eval_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"lure: {name} must be >= 1, got {getattr(self, name)}")
        if self.eval_tasks_per_level < 0:
            raise ValueError(f"lure: eval_tasks_per_level must be >= 0, got {self.eval_tasks_per_level}")
        if not self.envs:
            raise ValueError("lure: envs must name at least one environment")


@register("loop", "lure")
class LURE(LoopPlugin):
    """Pursuit–evasion self-play: evader proposes difficulty, planner–executor pursuer captures.

    Paper: "LURE: pursuit–evasion self-play for zero-data RLVR" (seed abstract; arXiv id unknown).
    RECONSTRUCTION (docs/methods.md §2.7): the reward shapes, the progress credit, the joint normaliser, the
    round length, the evader's text protocol (``evade <env>:`` → a level) and the environments.

    Equations: evader ``R_E = 1 − |2ĉ − 1|`` (or ``4ĉ(1 − ĉ)``), ĉ = captures / M, GRPO over the G
    proposals of one evader prompt; pursuer ``p_s = max(0, v_s − max_{s'<s} v_{s'})``,
    ``g_s = Σ_{s'≥s} p_{s'} + C``, ``A_s = (g_s − mean) / (std + eps)`` over every step of the M
    episodes of a task, on the tokens of step s; loss = the run's policy loss + β·KL_k3(π ‖ π_ref^{(k)}),
    ``π_ref^{(k)} ← π_θ`` at the first step of round k.

    Differs from the gradient trainer (GRPO):
      * no dataset: the evader's proposals make the tasks; one policy plays both roles;
      * evader rows (short proposals) and pursuer rows (multi-turn episodes, environment tokens masked)
        are trained in one update with their own advantages;
      * the KL reference is the policy at the start of the round, not the initial model.

    Shapes: evader rows (N_E, T_E), pursuer rows (N_P, T_P) joined into one batch (N_E + N_P, T).
    """

    Config = LUREConfig
    paper = "LURE: pursuit-evasion self-play for zero-data RLVR (arXiv id unknown; seed abstract)"

    def trainer(self, cfg: Any, *, model: torch.nn.Module | None = None, tokenizer: Any = None) -> Trainer:
        """The gradient ``Trainer`` (the round-anchored KL as its ``kl_coef``) with the self-play collector."""
        lure = self.config
        if lure.kl_beta <= 0:
            raise ValueError("lure: kl_beta is required (docs/methods.md §2.7 lists no default); set optim.params.kl_beta > 0")
        return Trainer(replace(cfg, algorithm={"kl_coef": lure.kl_beta}), model=model, tokenizer=tokenizer,
                       collector=partial(SelfPlayCollector, lure=lure, run_seed=cfg.run.seed))
