"""LURE (docs/methods.md §2.7): zero-data pursuit–evasion self-play as a training loop of its own.

Each step: the **evader** (the policy, prompted ``evade <env>:``) proposes G difficulty levels per
environment; each proposal becomes a task at that level; the **pursuer** (the same policy) runs M
planner–executor episodes on it in the environment (``multi_turn`` sampler); the evader's reward is
the capture frontier of the task's capture rate and the pursuer's tokens get capture-anchored
progress credit. Both roles' rows are trained together by the gradient ``Trainer``'s update (the
configured loss and aggregation) with a KL penalty to a reference re-anchored to the policy at the
first step of every round.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.batching import concat_rollouts
from rlvr.envs.base import EPISODE_KEY, build_env
from rlvr.envs.lure import LURE_ENVS, LureEnvironment
from rlvr.envs.lure_credit import EVADER_REWARDS, PROGRESS_CREDITS, anchor_due, evader_reward, pursuer_advantages
from rlvr.envs.lure_demos import evader_prompt, parse_level, warm_start
from rlvr.train.loop_plugin import LoopPlugin
from rlvr.loops.lure_eval import pursuit_heldout
from rlvr.loops.lure_warm import cached_warm_start
from rlvr.registry import build, param, register
from rlvr.rollout.samplers import GenerationCount, SampleContext
from rlvr.rollout.samplers.base import with_origin
from rlvr.train.checkpoint import save_weights
from rlvr.train.collect import step_seed
from rlvr.train.config import Config, replace
from rlvr.train.trainer import Trainer
from rlvr.types import AdvantageInputs, Problem, Rollouts

INVALID = ("random", "skip")


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

    def trainer(self, cfg: Any, *, model: torch.nn.Module | None = None, tokenizer: Any = None) -> "LURETrainer":
        if self.config.kl_beta <= 0:
            raise ValueError("lure: kl_beta is required (docs/methods.md §2.7 lists no default); set optim.params.kl_beta > 0")
        return LURETrainer(cfg, self.config, model=model, tokenizer=tokenizer)


class LURETrainer(Trainer):
    """The gradient ``Trainer`` with the self-play step in place of select → rollout → verify."""

    def __init__(self, cfg: Config, lure: LUREConfig, *, model: torch.nn.Module | None = None,
                 tokenizer: Any = None, accelerator: Any = None) -> None:
        super().__init__(replace(cfg, algorithm={"kl_coef": lure.kl_beta}), model=model, tokenizer=tokenizer,
                         accelerator=accelerator)
        self.lure = lure
        self.envs: dict[str, LureEnvironment] = {n: build_env(n, **lure.env_params.get(n, {})) for n in lure.envs}
        for name, env in self.envs.items():
            if not isinstance(env, LureEnvironment):
                raise ValueError(f"lure: environment '{name}' has no difficulty axis (not a LureEnvironment)")
        self.proposer = build("sampler", "plain")
        self.pursuers = {n: build("sampler", "multi_turn", env=n, env_params=dict(lure.env_params.get(n, {})),
                                  max_turns=lure.max_turns, turn_tokens=lure.turn_tokens,
                                  cf_samples=0) for n in lure.envs}
        self.evader_advantage = build("advantage", "grpo", ddof=lure.ddof, eps=lure.eps)
        self._warmed = not lure.warm_start_steps  # the environment-made warm start is still to run

    def warm_up(self) -> None:
        """Run LURE's warm start once (on ``run.seed``: another ``run.rl_seed`` keeps it), before the first
        evaluation or training step, whichever comes first: ``rlvr train``'s evaluation before RL then
        measures the warm-started pursuer, the point self-play starts from."""
        if self._warmed:
            return
        lure, seed = self.lure, self.cfg.run.seed

        def warm() -> None:
            warm_start(self.policy, self.tokenizer, list(self.envs.values()), steps=lure.warm_start_steps,
                       batch_size=lure.warm_start_batch, lr=lure.warm_start_lr, seed=seed)

        if lure.warm_start_cache and self.acc.num_processes == 1:
            settings = {"envs": lure.envs, "env_params": lure.env_params, "steps": lure.warm_start_steps,
                        "batch": lure.warm_start_batch, "lr": lure.warm_start_lr, "seed": seed}
            cached_warm_start(self.policy, self.tokenizer, lure.warm_start_cache, settings, warm)
        else:
            warm()
        self._warmed = True

    def train(self, resume: bool = False, eval_fn: Any = None) -> dict[str, Any]:
        if resume:  # the checkpoint holds the warm-started (and trained) weights
            self._warmed = True
        self.warm_up()
        return super().train(resume=resume, eval_fn=eval_fn)

    def train_step(self) -> tuple[dict[str, float], Rollouts]:
        model = self.policy
        model.eval()
        anchored = anchor_due(self.step, self.lure.round_steps)
        if anchored:  # round k starts: pi_ref^(k) <- pi_theta
            self.ref_model.load_state_dict(model.state_dict())
        with torch.no_grad(), self.timer("rollout"):
            batch, metrics = self.self_play(model, self.step)
        with self.timer("logprobs"), torch.no_grad():
            batch.ref_logprobs = self.scorer.forward(self.ref_model, batch)[0]
        model.train()
        metrics.update(self.update(batch))
        metrics["lure/anchored"] = float(anchored)
        adv = batch.advantages[batch.completion_mask]
        metrics.update({"adv/mean": adv.mean().item() if adv.numel() else 0.0,
                        "adv/abs_mean": adv.abs().mean().item() if adv.numel() else 0.0})
        metrics.update(self.timer.pop())
        metrics["optim/lr"] = self.scheduler.get_last_lr()[0]
        return self._mean_over_ranks(metrics), batch

    def heldout_metrics(self) -> dict[str, float]:
        """The held-out pursuit capture of the current policy (``rlvr train`` adds it to the
        evaluations before and after training; the warm start runs first); empty when
        ``eval_tasks_per_level`` is 0."""
        self.warm_up()
        if not self.lure.eval_tasks_per_level:
            return {}
        return pursuit_heldout(self.policy, self.tokenizer, self.envs, self.pursuers, self.cfg.rollout,
                               tasks_per_level=self.lure.eval_tasks_per_level, samples=self.lure.eval_samples,
                               seed=self.cfg.run.seed)

    # --- self-play --------------------------------------------------------------------------

    def self_play(self, model: torch.nn.Module, step: int) -> tuple[Rollouts, dict[str, float]]:
        """One round of proposals and pursuits: the joined batch (advantages set) and its metrics."""
        lure, rank = self.lure, self.acc.process_index
        seed = step_seed(self.cfg.run.training_seed, step, rank)  # run.rl_seed where set
        evaders = [Problem(prompt=evader_prompt(env), uid=f"lure:evade:{name}", meta={"lure_env": name})
                   for name, env in self.envs.items() for _ in range(lure.evader_states)]
        rollout = dataclasses.replace(self.cfg.rollout, max_new_tokens=lure.evader_tokens)
        spent = GenerationCount()  # every completion this round generates (the rollout budget)
        evader = self.proposer.sample(model, evaders, lure.evader_group,
                                      SampleContext(tokenizer=self.tokenizer, rollout=rollout, seed=seed, spent=spent))
        tasks, owner = self._tasks(evader, seed)
        parts, caught_all = [], []
        captures = torch.zeros(evader.num_rows)  # (N_E,) capture rate of each proposal's task
        metrics: dict[str, float] = {}
        for k, name in enumerate(self.envs):
            rows = [i for i in tasks if tasks[i].meta["lure_env"] == name]
            if not rows:
                continue
            ctx = SampleContext(tokenizer=self.tokenizer, rollout=self.cfg.rollout, seed=seed + 31 * (k + 1),
                                group_offset=(k + 1) * 100_000 + rank * 10_000, spent=spent)
            pursuit = self.pursuers[name].sample(model, [tasks[i] for i in rows], lure.captures_per_task, ctx)
            caught = self._pursuer_credit(pursuit, metrics, name)  # (N_P_k,)
            caught_all.append(caught)
            for b, i in enumerate(rows):
                captures[i] = caught[b * lure.captures_per_task:(b + 1) * lure.captures_per_task].mean()
            parts.append(pursuit)
        self._evader_credit(evader, captures, owner, metrics)
        rewards = torch.cat([p.rewards.cpu() for p in [evader, *parts]])  # (N, 1): R_E, then captures C
        for p in [evader, *parts]:
            p.rewards = None  # joined below: concat would pad (N, 1) like an (N, T) field
        # The pursuers' multi-turn structure (roles, plans, turn baselines) is not trained on: the
        # roles' advantages are set here, so the joined batch carries none of it.
        joined = [dataclasses.replace(p, role_mask=None, plan_ids=None, turn_baselines=None) for p in [evader, *parts]]
        batch = concat_rollouts([with_origin(p.to(evader.completion_ids.device)) for p in joined],
                                self.tokenizer.pad_token_id)
        batch.rewards = rewards.to(batch.completion_mask.device)
        caught = torch.cat(caught_all) if caught_all else torch.zeros(0)
        metrics.update({"reward/mean": caught.mean().item() if caught.numel() else 0.0,
                        "lure/capture_rate": caught.mean().item() if caught.numel() else 0.0,
                        "rollout/sampled_rows": float(batch.num_rows),
                        "rollout/generated_completions": float(spent.completions),
                        "rollout/generated_tokens": float(spent.tokens),
                        "rollout/response_length": batch.attention.sum(-1).float().mean().item()})
        return batch, metrics

    def _tasks(self, evader: Rollouts, seed: int) -> tuple[dict[int, Problem], list[bool]]:
        """The pursuit task of each evader row (by row index) and whether its proposal was valid."""
        tasks, valid = {}, []
        for i, (problem, text) in enumerate(zip(evader.problems, evader.texts)):
            env = self.envs[problem.meta["lure_env"]]
            rng = random.Random(f"lure:{seed}:{i}")
            level = parse_level(text, env.config.levels)
            valid.append(level is not None)
            if level is None and self.lure.invalid == "skip":
                continue
            task = env.task_at(level if level is not None else rng.randint(1, env.config.levels), rng)
            task.uid = f"lure:{seed}:{i}"
            tasks[i] = task
        return tasks, valid

    def _evader_credit(self, evader: Rollouts, captures: torch.Tensor, valid: list[bool],
                       metrics: dict[str, float]) -> None:
        ok = torch.tensor(valid, dtype=torch.bool)
        reward = torch.where(ok, evader_reward(captures, self.lure.evader_reward), torch.zeros(len(valid)))  # (N_E,)
        evader.rewards = reward.unsqueeze(1).to(evader.completion_mask.device)  # (N_E, 1)
        evader.reward_names = ["lure"]
        out = self.evader_advantage(AdvantageInputs(rewards=evader.rewards, mask=evader.completion_mask,
                                                    group_ids=evader.group_ids))
        evader.advantages = out.advantages
        metrics.update({"lure/evader_reward": reward.mean().item(), "lure/valid_frac": ok.float().mean().item()})
        for name, env in self.envs.items():
            mine = torch.tensor([p.meta["lure_env"] == name for p in evader.problems])
            metrics[f"lure/evader_reward/{name}"] = reward[mine].mean().item()
            levels = [parse_level(t, env.config.levels) for t, m in zip(evader.texts, mine.tolist()) if m]
            levels = [lv for lv in levels if lv is not None]
            metrics[f"lure/level/{name}"] = sum(levels) / len(levels) if levels else 0.0

    def _pursuer_credit(self, pursuit: Rollouts, metrics: dict[str, float], name: str) -> torch.Tensor:
        """Sets the pursuit batch's rewards (capture) and advantages; returns the captures (N_P,)."""
        episodes = [p.meta[EPISODE_KEY] for p in pursuit.problems]
        captures = [float(ep["info"]["captured"]) for ep in episodes]
        scores, spans = [ep["scores"] for ep in episodes], [ep["spans"] for ep in episodes]  # per row, per turn
        adv, credits = pursuer_advantages(scores, captures, spans, pursuit.group_ids.tolist(),
                                          pursuit.completion_mask, ddof=self.lure.ddof, eps=self.lure.eps)
        pursuit.advantages = adv
        caught = torch.tensor(captures)
        pursuit.rewards = caught.unsqueeze(1).to(pursuit.completion_mask.device)  # (N_P, 1)
        pursuit.reward_names = ["lure"]
        metrics[f"lure/capture_rate/{name}"] = caught.mean().item()
        metrics[f"lure/progress/{name}"] = sum(max(s) for s in scores) / len(scores)
        metrics[f"lure/plan_ok/{name}"] = sum(float(ep["info"]["plan_ok"]) for ep in episodes) / len(episodes)
        metrics[f"lure/credit_sum/{name}"] = sum(sum(c) for c in credits) / len(credits)
        for key, value in pursuit.meta.get("sampler_metrics", {}).items():
            metrics[f"{key}/{name}"] = value
        return caught

    # --- state ------------------------------------------------------------------------------

    def save(self) -> Path | None:
        """The gradient trainer's checkpoint plus the round's anchor (resume continues the round)."""
        path = super().save()
        if self.acc.is_main_process:
            save_weights(self.run_dir / "reference", self.ref_model)
        self.acc.wait_for_everyone()
        return path
