"""LURE's self-play collector (docs/methods.md §2.7): the data half of the gradient ``Trainer``'s step
for ``optim.name: lure`` (``rlvr.loops.lure``), a ``StepCollector`` (``rlvr.train.collect``).

Each step it re-anchors the frozen reference to the policy at a round's first step, lets the evader
propose a difficulty level per prompt, runs the pursuer's episodes on the tasks at those levels, and
returns both roles' rows joined, with rewards and advantages set (``sets_advantages``): the trainer's
advantage stage only reports them, its loss stage adds the KL to the round's anchor, its update trains
both roles at once. It also owns LURE's environment-made warm start and its held-out pursuit measure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from typing import Any, ClassVar

import torch

from rlvr.batching import concat_rollouts
from rlvr.envs.base import EPISODE_KEY, build_env
from rlvr.envs.lure import LureEnvironment
from rlvr.envs.lure_credit import anchor_due, evader_reward, pursuer_advantages
from rlvr.envs.lure_demos import evader_prompt, parse_level, warm_start
from rlvr.loops.lure_eval import pursuit_heldout
from rlvr.loops.lure_warm import cached_warm_start
from rlvr.registry import build
from rlvr.rollout.samplers import GenerationCount, SampleContext
from rlvr.rollout.samplers.base import with_origin
from rlvr.train.collect import step_seed
from rlvr.types import AdvantageInputs, Problem, Rollouts


class SelfPlayCollector:
    """Evader proposals and pursuer episodes in place of select → rollout → verify; sets the advantages.

    Built by the ``Trainer`` with the ``Collector``'s keyword arguments (``functools.partial`` binds
    ``lure``, the ``LUREConfig``, and ``run_seed``, the seed of the warm start and held-out tasks); it
    reads ``rollout_cfg``, ``tokenizer``, ``seed`` (the RL seed), ``rank``, ``world_size``, ``timer``
    and ``reference`` (the frozen copy it re-anchors)."""

    sets_advantages: ClassVar[bool] = True
    moves_reference: ClassVar[bool] = True

    def __init__(self, *, lure: Any, run_seed: int, rollout_cfg: Any, tokenizer: Any, seed: int, rank: int,
                 world_size: int, timer: Any, reference: torch.nn.Module | None, **_: Any) -> None:
        self.lure, self.run_seed, self.rollout = lure, run_seed, rollout_cfg
        self.tokenizer, self.seed, self.rank, self.world_size = tokenizer, seed, rank, world_size
        self.timer, self.reference = timer, reference
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

    # --- the StepCollector protocol ---------------------------------------------------------

    def session(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def begin(self, policy: torch.nn.Module, resume: bool) -> None:
        if resume:  # the checkpoint holds the warm-started (and trained) weights
            self._warmed = True
        self.warm_up(policy)

    def heldout_metrics(self, policy: torch.nn.Module) -> dict[str, float]:
        """The held-out pursuit capture of ``policy`` (``rlvr train`` adds it to the evaluations before
        and after training; the warm start runs first); empty when ``eval_tasks_per_level`` is 0."""
        self.warm_up(policy)
        if not self.lure.eval_tasks_per_level:
            return {}
        return pursuit_heldout(policy, self.tokenizer, self.envs, self.pursuers, self.rollout,
                               tasks_per_level=self.lure.eval_tasks_per_level, samples=self.lure.eval_samples,
                               seed=self.run_seed)

    def collect(self, model: torch.nn.Module, step: int,
                budget: int | None = None) -> tuple[Rollouts, dict[str, float]]:
        """The joined evader and pursuer rows of ``step`` (advantages set); the round's first step
        re-anchors the reference, pi_ref^(k) <- pi_theta, first."""
        anchored = anchor_due(step, self.lure.round_steps)
        if anchored:
            self.reference.load_state_dict(model.state_dict())
        with self.timer("rollout"):
            batch, metrics = self.self_play(model, step)
        metrics["lure/anchored"] = float(anchored)
        return batch, metrics

    # --- warm start ---------------------------------------------------------------------------

    def warm_up(self, policy: torch.nn.Module) -> None:
        """Run LURE's warm start once (on ``run.seed``: another ``run.rl_seed`` keeps it), before the first
        evaluation or training step, whichever comes first: ``rlvr train``'s evaluation before RL then
        measures the warm-started pursuer, the point self-play starts from."""
        if self._warmed:
            return
        lure, seed = self.lure, self.run_seed

        def warm() -> None:
            warm_start(policy, self.tokenizer, list(self.envs.values()), steps=lure.warm_start_steps,
                       batch_size=lure.warm_start_batch, lr=lure.warm_start_lr, seed=seed)

        if lure.warm_start_cache and self.world_size == 1:
            settings = {"envs": lure.envs, "env_params": lure.env_params, "steps": lure.warm_start_steps,
                        "batch": lure.warm_start_batch, "lr": lure.warm_start_lr, "seed": seed}
            cached_warm_start(policy, self.tokenizer, lure.warm_start_cache, settings, warm)
        else:
            warm()
        self._warmed = True

    # --- self-play --------------------------------------------------------------------------

    def self_play(self, model: torch.nn.Module, step: int) -> tuple[Rollouts, dict[str, float]]:
        """One round of proposals and pursuits: the joined batch (advantages set) and its metrics."""
        lure, rank = self.lure, self.rank
        seed = step_seed(self.seed, step, rank)  # run.rl_seed where set
        evaders = [Problem(prompt=evader_prompt(env), uid=f"lure:evade:{name}", meta={"lure_env": name})
                   for name, env in self.envs.items() for _ in range(lure.evader_states)]
        rollout = dataclasses.replace(self.rollout, max_new_tokens=lure.evader_tokens)
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
            ctx = SampleContext(tokenizer=self.tokenizer, rollout=self.rollout, seed=seed + 31 * (k + 1),
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
