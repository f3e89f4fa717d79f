"""Multi-turn episodes: the policy acts, an environment answers, the policy acts again, as one sequence."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from rlvr.advantages.tcpo import CF_SELECTORS, retrospective_credit, select_counterfactual_turns
from rlvr.envs.base import EPISODE_KEY, ROLE_POLICY, Environment, build_env
from rlvr.models import format_prompt
from rlvr.registry import param, register
from rlvr.rollout.hf import Generation, encode_prompts, generate_ids
from rlvr.rollout.samplers.base import SampleContext, Sampler, engine_kwargs, left_pad, trained_mask
from rlvr.types import Origin, Problem, Rollouts

REWARDS = ("final", "best")
TOKEN_REWARDS = ("none", "turn_scores")


@dataclass(frozen=True)
class MultiTurnConfig:
    env: str = param("refine_arithmetic", "the environment episodes run in (rlvr.envs registry)")
    env_params: dict = param({}, "hyperparameters of the environment (its Config fields)")
    max_turns: int = param(3, "most policy turns per episode (the environment may end it sooner)")
    turn_tokens: int = param(0, "token budget of one policy turn; 0 = rollout.max_new_tokens")
    reward: str = param("final", "the episode's reward: 'final' = the last turn's score, 'best' = the best one")
    token_rewards: str = param("none", "'turn_scores' puts each turn's score s_j on its last token "
                                       "(Rollouts.token_rewards, read by tcpo); 'none' leaves them unset")
    plans: int = param(0, "D-GRPO: 0 = G independent episodes per problem; P > 0 = P first turns (plans) per "
                          "problem, each continued by G/P episodes; rows get Rollouts.plan_ids")
    planner_roles: tuple = param(("planner",), "environment roles whose turns are planner tokens "
                                               "(Rollouts.role_mask True), stored when a role is not 'policy'")
    cf_samples: int | None = param(None, "TCPO's M (required, docs/methods.md §2.16): alternatives re-sampled from the "
                                         "same history for each selected turn (counterfactual baseline); 0 = none")
    cf_selector: str = param("surprisal_top_q", "which turns get counterfactuals: 'surprisal_top_q' (top q "
                                                "of −mean log π over a group's turns) or 'credit_threshold' "
                                                "(|c^R| > cf_threshold)")
    cf_top_q: float = param(0.2, "fraction of a group's turns re-sampled under 'surprisal_top_q'")
    cf_threshold: float | None = param(None, "|c^R| above which a turn is re-sampled under 'credit_threshold' "
                                             "(required with that selector)")
    initial_score: float = param(0.0, "s_0 for the credit_threshold selector (match tcpo's initial_score)")

    def __post_init__(self) -> None:
        if self.cf_samples is None:
            raise ValueError("multi_turn: cf_samples (TCPO's M, counterfactuals per selected turn) is required; "
                             "0 = no counterfactual re-sampling")
        if self.cf_samples and self.cf_selector == "credit_threshold" and self.cf_threshold is None:
            raise ValueError("multi_turn: cf_threshold is required with cf_selector 'credit_threshold'")
        for name, value, valid in (("reward", self.reward, REWARDS), ("token_rewards", self.token_rewards, TOKEN_REWARDS),
                                   ("cf_selector", self.cf_selector, CF_SELECTORS)):
            if value not in valid:
                raise ValueError(f"multi_turn: {name} must be one of {valid}, got '{value}'")
        for name in ("max_turns",):
            if getattr(self, name) < 1:
                raise ValueError(f"multi_turn: {name} must be >= 1, got {getattr(self, name)}")
        for name in ("turn_tokens", "plans", "cf_samples"):
            if getattr(self, name) < 0:
                raise ValueError(f"multi_turn: {name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.cf_top_q <= 1.0:
            raise ValueError(f"multi_turn: cf_top_q must be in [0, 1], got {self.cf_top_q}")
        object.__setattr__(self, "planner_roles", tuple(self.planner_roles))
        object.__setattr__(self, "env_params", dict(self.env_params))


@dataclass
class _Episode:
    """One row being built: the context the policy sees is ``prompt + ids``."""

    problem: Problem
    group: int  # index b of the problem in this call
    plan: int  # the first-turn branch it continues (its own index without plans)
    seed: int  # the environment seed (shared by the group: every row faces the same instance)
    env: Environment
    prompt: list[int]
    ids: list[int] = field(default_factory=list)  # completion so far: actions and observations
    origin: list[int] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of each policy turn in ids
    scores: list[float] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    done: bool = False
    ended_by_env: bool = False

    def add(self, tokens: list[int], origin: Origin, logp: list[float]) -> None:
        self.ids += tokens
        self.origin += [int(origin)] * len(tokens)
        self.logp += logp


@register("sampler", "multi_turn")
class MultiTurnSampler(Sampler):
    """G episodes per problem in an environment, each one token sequence with masked observations.

    The completion of a row is ``[action_1][obs_1][action_2][obs_2]…[action_J]``: actions are sampled
    by the policy (origin POLICY, trained), observations are the environment's replies tokenized once
    (origin ENV, never trained); each turn is generated from exactly the ids the trainer will score
    (``prompt ⊕ completion so far``), so the training sequence is the conversation the model saw.
    ``env.reset`` gives the prompt (formatted like any prompt), ``env.step`` the reply, the turn's score
    and the end of the episode; the episode stops at ``done`` or after ``max_turns`` turns.

    Differs from the plain sampler:
      * several policy turns per row, with environment tokens (masked) between them;
      * the row's reward is the episode's final (or best) score, filed on a per-row copy of the
        problem (``problem.meta['episode']``) for the task's verifier (``rlvr.envs.episode_score``);
      * optional plan branching (D-GRPO: ``plans`` first turns, each continued G/P times) and
        counterfactual re-sampling of selected turns (TCPO: ``cf_samples``);
      * with one turn and no branching, a row is a plain completion of the reset observation.
    Per row, in its episode record (``rlvr.envs.episode_of``, so it moves with the row): ``spans``
    [(start, end)] of its turns in the completion, ``scores`` and ``roles`` (one per turn).
    Fields: ``plan_ids`` (N,) with plans; ``role_mask`` (N, T) when the environment names roles;
    ``turn_baselines`` (N, T) (NaN = none) with counterfactuals (``Rollouts.select`` slices them).

    Shapes: B problems → N = B·G rows; completion ids / mask / origin (N, T).
    """

    Config = MultiTurnConfig

    def sample(self, policy: torch.nn.Module, problems: list[Problem], group_size: int,
               ctx: SampleContext) -> Rollouts:
        cfg = self.config
        if cfg.plans and group_size % cfg.plans:
            raise ValueError(f"multi_turn: group_size {group_size} is not a multiple of plans {cfg.plans}")
        eps = self._start(problems, cfg.plans or group_size, ctx)
        for turn in range(cfg.max_turns):
            if turn == 1 and cfg.plans:
                eps = [c for e in eps for c in self._branch(e, group_size // cfg.plans)]
            active = [e for e in eps if not e.done]
            if not active:
                break
            gen = self._generate(policy, [e.prompt + e.ids for e in active], ctx, ctx.seed + 7_919 * turn)
            ctx.spent.add(gen, rows=False)  # turns continue episodes; the episodes are counted below
            for k, e in enumerate(active):
                self._play(e, gen, k, ctx.tokenizer, last=turn == cfg.max_turns - 1)
        if cfg.plans and cfg.max_turns == 1:  # no second turn to branch at: still G rows
            eps = [c for e in eps for c in self._branch(e, group_size // cfg.plans)]
        ctx.spent.completions += len(eps)
        baselines = self._counterfactuals(policy, eps, ctx) if cfg.cf_samples else None
        return self._rollouts(eps, baselines, ctx)

    # --- episodes ---------------------------------------------------------------------------

    def _start(self, problems: list[Problem], per_problem: int, ctx: SampleContext) -> list[_Episode]:
        eps = []
        for b, p in enumerate(problems):
            seed = (ctx.seed * 1_000_003 + (ctx.group_offset + b) * 7_919) % (2**31 - 1)
            envs = [build_env(self.config.env, **self.config.env_params) for _ in range(per_problem)]
            obs = [env.reset(p, seed) for env in envs]
            ids, mask = encode_prompts(ctx.tokenizer, [format_prompt(ctx.tokenizer, obs[0])])
            prompt = ids[0][mask[0]].tolist()
            eps += [_Episode(p, b, k, seed, env, prompt) for k, env in enumerate(envs)]
        return eps

    def _play(self, e: _Episode, gen: Generation, k: int, tok: Any, last: bool) -> None:
        """Apply row k of ``gen`` as e's next action; append the observation unless the episode ends."""
        n = int(gen.completion_mask[k].sum())
        start = len(e.ids)
        e.roles.append(e.env.role())
        text = gen.texts[k]
        obs, score, done = e.env.step(text)
        e.add(gen.completion_ids[k, :n].tolist(), Origin.POLICY, gen.logprobs[k, :n].float().tolist())
        e.spans.append((start, len(e.ids)))
        e.scores.append(float(score))
        e.actions.append(text)
        if done or last:
            e.done, e.ended_by_env = True, bool(done)
            return
        obs_ids = tok(obs, add_special_tokens=False)["input_ids"]
        if not obs_ids:
            raise ValueError(f"multi_turn: environment '{self.config.env}' returned an empty observation "
                             f"mid-episode; turns must be separated by at least one environment token")
        e.add(list(obs_ids), Origin.ENV, [0.0] * len(obs_ids))

    def _replay(self, e: _Episode, n_actions: int) -> Environment:
        """A fresh environment in the state after e's first ``n_actions`` actions (the protocol
        requires determinism given the problem, the seed and the actions)."""
        env = build_env(self.config.env, **self.config.env_params)
        env.reset(e.problem, e.seed)
        for a in e.actions[:n_actions]:
            env.step(a)
        return env

    def _branch(self, e: _Episode, m: int) -> list[_Episode]:
        """e and m − 1 copies sharing its first turn (the plan), each with its own environment."""
        out = [e]
        for _ in range(m - 1):
            c = dataclasses.replace(e, env=self._replay(e, len(e.actions)), ids=list(e.ids), origin=list(e.origin),
                                    logp=list(e.logp), spans=list(e.spans), scores=list(e.scores),
                                    roles=list(e.roles), actions=list(e.actions))
            out.append(c)
        return out

    def _generate(self, policy: torch.nn.Module, contexts: list[list[int]], ctx: SampleContext,
                  seed: int) -> Generation:
        r = ctx.rollout
        ids, mask = left_pad(contexts, ctx.tokenizer.pad_token_id)
        return generate_ids(policy, ctx.tokenizer, ids, mask, max_new_tokens=self.config.turn_tokens or r.max_new_tokens,
                            temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, do_sample=True, seed=seed,
                            **engine_kwargs(r))

    def _counterfactuals(self, policy: torch.nn.Module, eps: list[_Episode],
                         ctx: SampleContext) -> list[list[float | None]]:
        """TCPO: for selected turns, the mean score of M alternatives sampled from the same history."""
        cfg = self.config
        surprisal = [[-sum(e.logp[s:t]) / max(t - s, 1) for s, t in e.spans] for e in eps]
        retro = [retrospective_credit(e.scores, cfg.initial_score) for e in eps]
        chosen = select_counterfactual_turns([e.group for e in eps], surprisal, retro, cfg.cf_selector,
                                             cfg.cf_top_q, cfg.cf_threshold)
        out: list[list[float | None]] = [[None] * len(e.spans) for e in eps]
        jobs = [(i, j) for i, e in enumerate(eps) for j in range(len(e.spans)) if chosen[i][j]]
        if not jobs:
            return out
        m = cfg.cf_samples
        contexts = [eps[i].prompt + eps[i].ids[:eps[i].spans[j][0]] for i, j in jobs for _ in range(m)]
        gen = self._generate(policy, contexts, ctx, ctx.seed + 104_729)
        ctx.spent.add(gen)  # each alternative is a generated completion the batch does not keep
        for k, (i, j) in enumerate(jobs):
            alt = [self._replay(eps[i], j).step(gen.texts[k * m + r])[1] for r in range(m)]
            out[i][j] = sum(float(s) for s in alt) / m
        return out

    # --- the batch --------------------------------------------------------------------------

    def _rollouts(self, eps: list[_Episode], baselines: list[list[float | None]] | None,
                  ctx: SampleContext) -> Rollouts:
        cfg, tok = self.config, ctx.tokenizer
        width = max(max(len(e.ids) for e in eps), 1)
        n = len(eps)
        ids = torch.full((n, width), tok.pad_token_id, dtype=torch.long)
        real = torch.zeros((n, width), dtype=torch.bool)
        origin = torch.full((n, width), int(Origin.POLICY), dtype=torch.uint8)
        logp = torch.zeros((n, width), dtype=torch.float32)
        for i, e in enumerate(eps):
            k = len(e.ids)
            ids[i, :k] = torch.tensor(e.ids, dtype=torch.long)
            real[i, :k] = True
            origin[i, :k] = torch.tensor(e.origin, dtype=torch.uint8)
            logp[i, :k] = torch.tensor(e.logp, dtype=torch.float32)
        prompt_ids, prompt_mask = left_pad([e.prompt for e in eps], tok.pad_token_id)
        batch = Rollouts(problems=[self._with_episode(e) for e in eps], prompt_ids=prompt_ids, prompt_mask=prompt_mask,
                         completion_ids=ids, completion_mask=trained_mask(real, origin), completion_attention=real,
                         group_ids=torch.tensor([ctx.group_offset + e.group for e in eps], dtype=torch.long),
                         rollout_logprobs=logp, token_origin=origin,
                         behaviour_logprobs=torch.zeros_like(logp),
                         texts=[tok.decode(e.ids, skip_special_tokens=True) for e in eps])
        if cfg.token_rewards == "turn_scores":
            batch.token_rewards = _at_turn_ends(eps, width)
        if cfg.plans:
            batch.plan_ids = torch.tensor([(ctx.group_offset + e.group) * cfg.plans + e.plan for e in eps],
                                          dtype=torch.long)
        if any(r != ROLE_POLICY for e in eps for r in e.roles):
            batch.role_mask = _role_mask(eps, width, cfg.planner_roles) & batch.completion_mask
        if baselines is not None:
            batch.turn_baselines = _baseline_tensor(eps, baselines, width)
        batch.meta["sampler_metrics"] = _metrics(eps, batch, baselines)
        return batch

    def _with_episode(self, e: _Episode) -> Problem:
        reward = e.scores[-1] if self.config.reward == "final" else max(e.scores)
        record = {"reward": float(reward), "scores": list(e.scores), "roles": list(e.roles), "spans": list(e.spans),
                  "info": dict(e.env.info)}
        return dataclasses.replace(e.problem, meta={**e.problem.meta, EPISODE_KEY: record})


def _at_turn_ends(eps: list[_Episode], width: int) -> Tensor:
    """(N, T) each turn's score s_j on the turn's last token, 0 elsewhere."""
    out = torch.zeros((len(eps), width), dtype=torch.float32)
    for i, e in enumerate(eps):
        for (_, end), s in zip(e.spans, e.scores):
            out[i, end - 1] = s
    return out


def _role_mask(eps: list[_Episode], width: int, planner_roles: tuple) -> Tensor:
    out = torch.zeros((len(eps), width), dtype=torch.bool)
    for i, e in enumerate(eps):
        for (s, t), role in zip(e.spans, e.roles):
            if role in planner_roles:
                out[i, s:t] = True
    return out


def _baseline_tensor(eps: list[_Episode], baselines: list[list[float | None]], width: int) -> Tensor:
    """(N, T) counterfactual baseline at the first token of each selected turn, NaN elsewhere."""
    out = torch.full((len(eps), width), float("nan"), dtype=torch.float32)
    for i, e in enumerate(eps):
        for (s, _), b in zip(e.spans, baselines[i]):
            if b is not None:
                out[i, s] = b
    return out


def _metrics(eps: list[_Episode], batch: Rollouts, baselines: list[list[float | None]] | None) -> dict[str, float]:
    n = len(eps)
    real = batch.attention.sum().clamp(min=1).item()
    env_tokens = (batch.token_origin == int(Origin.ENV)).sum().item()
    out = {"rollout/turns_mean": sum(len(e.spans) for e in eps) / n,
           "rollout/env_token_frac": env_tokens / real,
           "rollout/first_turn_score": sum(e.scores[0] for e in eps) / n,
           "rollout/final_turn_score": sum(e.scores[-1] for e in eps) / n,
           "rollout/best_turn_score": sum(max(e.scores) for e in eps) / n,
           "rollout/improved_frac": sum(e.scores[-1] > e.scores[0] for e in eps) / n,
           "rollout/ended_by_env_frac": sum(e.ended_by_env for e in eps) / n}
    if baselines is not None:
        turns = [b for row in baselines for b in row]
        out["rollout/cf_turn_frac"] = sum(b is not None for b in turns) / max(len(turns), 1)
    return out
