"""The multi_turn sampler on a tiny model: the training sequence is the conversation the model saw,
environment tokens are masked (and get exactly zero gradient), per-turn records, plan branching,
counterfactual baselines, and the one-turn reduction to the plain sampler."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

import rlvr.rollout.samplers.multi_turn as multi_turn
from rlvr.envs import EPISODE_KEY, EnvError, Environment, build_env, register_env
from rlvr.registry import RegistryError, build, param
from rlvr.rollout.samplers import SampleContext
from rlvr.types import Origin, Problem
from tests.helpers.tiny_models import logit_grads

ROLLOUT = SimpleNamespace(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=0)


@dataclass(frozen=True)
class ScriptedConfig:
    scores: tuple = param((0.5, 0.2, 0.4), "the score after turn j (independent of the action)")
    obs: str = param(" ok{j}:", "the observation after turn j ({j} = turn number)")
    roles: tuple = param(("policy",), "role of turn j (the last one repeats)")


@register_env("scripted_test")
class Scripted(Environment):
    """Scores and observations fixed by turn number; records what it was shown (for the tests)."""

    Config = ScriptedConfig

    def reset(self, problem: Problem, seed: int) -> str:
        self.turn, self.info = 0, {"actions": [], "seed": seed}
        return problem.prompt

    def role(self) -> str:
        roles = self.config.roles
        return roles[min(self.turn, len(roles) - 1)]

    def step(self, action: str) -> tuple[str, float, bool]:
        if self.turn >= len(self.config.scores):
            raise EnvError("scripted_test: step after done")
        self.info["actions"].append(action)
        score = self.config.scores[self.turn]
        self.turn += 1
        return self.config.obs.format(j=self.turn), score, self.turn == len(self.config.scores)


def _problems(n: int = 2) -> list[Problem]:
    return [Problem(prompt=f"{11 * i + 3}+{i}=", answer=str(12 * i + 3), uid=f"p{i}") for i in range(n)]


def _ctx(tok, seed: int = 5) -> SampleContext:
    return SampleContext(tokenizer=tok, rollout=ROLLOUT, seed=seed, group_offset=100)


def _full(batch, i: int) -> list[int]:
    """prompt ⊕ completion over real tokens of row i."""
    return batch.prompt_ids[i][batch.prompt_mask[i]].tolist() + batch.completion_ids[i][batch.attention[i]].tolist()


def _turns(batch, key: str) -> list:
    """Each row's per-turn ``key`` (spans, scores, roles) from its episode record: it moves with the row."""
    return [p.meta[EPISODE_KEY][key] for p in batch.problems]


def test_training_sequence_is_the_conversation_the_model_saw(tok, policy, monkeypatch):
    seen: list[tuple[tuple[int, ...], tuple[int, ...]]] = []  # (context ids, generated ids) per generated row
    original = multi_turn.generate_ids

    def record(model, tokenizer, ids, mask, **kw):
        gen = original(model, tokenizer, ids, mask, **kw)
        for k in range(ids.shape[0]):
            n = int(gen.completion_mask[k].sum())
            seen.append((tuple(ids[k][mask[k]].tolist()), tuple(gen.completion_ids[k, :n].tolist())))
        return gen

    monkeypatch.setattr(multi_turn, "generate_ids", record)
    sampler = build("sampler", "multi_turn", env="scripted_test", cf_samples=0, max_turns=3)
    batch = sampler.sample(policy, _problems(), 3, _ctx(tok))
    assert batch.num_rows == 6
    for i in range(batch.num_rows):
        full = _full(batch, i)
        p = int(batch.prompt_mask[i].sum())
        spans = _turns(batch, "spans")[i]
        assert len(spans) == 3
        for s, t in spans:  # each turn was generated from exactly the ids before it in the training sequence
            assert (tuple(full[:p + s]), tuple(full[p + s:p + t])) in seen
        # ...and the sequence decodes to prompt, actions and observations in order.
        actions = batch.problems[i].meta[EPISODE_KEY]["info"]["actions"]
        text = batch.problems[i].prompt + actions[0] + " ok1:" + actions[1] + " ok2:" + actions[2]
        assert tok.decode(full, skip_special_tokens=True) == text
        assert batch.texts[i] == text[len(batch.problems[i].prompt):]


def test_env_tokens_are_masked_with_origin_env_and_get_zero_gradient(tok, policy):
    model = copy.deepcopy(policy)
    batch = build("sampler", "multi_turn", env="scripted_test", cf_samples=0, max_turns=3).sample(model, _problems(), 2, _ctx(tok))
    env_tok = batch.token_origin == int(Origin.ENV)
    assert bool(env_tok.any())
    assert not bool((batch.completion_mask & env_tok).any())
    assert torch.equal(batch.completion_mask, batch.attention & ~env_tok)
    for i, spans in enumerate(_turns(batch, "spans")):  # observations lie exactly between the turns
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert bool(env_tok[i, end:start].all()) and end < start
    grads, _ = logit_grads(model, batch, "ppo_clip", {})  # position t predicts completion token t
    assert grads[env_tok].abs().max().item() == 0.0
    assert grads[batch.completion_mask].abs().max().item() > 0.0


@pytest.mark.parametrize("reward, expected", [("final", 0.4), ("best", 0.5)])
def test_episode_reward_turn_scores_and_token_rewards(tok, policy, reward, expected):
    sampler = build("sampler", "multi_turn", env="scripted_test", cf_samples=0, max_turns=5, reward=reward,
                    token_rewards="turn_scores")
    batch = sampler.sample(policy, _problems(1), 2, _ctx(tok))
    for i in range(2):
        episode = batch.problems[i].meta[EPISODE_KEY]
        assert episode["reward"] == pytest.approx(expected)
        assert _turns(batch, "scores")[i] == pytest.approx([0.5, 0.2, 0.4])  # the env ended it after 3 turns
        ends = [t - 1 for _, t in _turns(batch, "spans")[i]]
        assert batch.token_rewards[i, ends].tolist() == pytest.approx([0.5, 0.2, 0.4])
        others = torch.ones(batch.token_rewards.shape[1], dtype=torch.bool)
        others[ends] = False
        assert batch.token_rewards[i, others].abs().sum().item() == 0.0
    assert batch.meta["sampler_metrics"]["rollout/ended_by_env_frac"] == 1.0
    assert batch.problems[0] is not batch.problems[1] and "episode" not in _problems(1)[0].meta
    # every row of a group faces the same environment seed
    assert batch.problems[0].meta[EPISODE_KEY]["info"]["seed"] == batch.problems[1].meta[EPISODE_KEY]["info"]["seed"]


def test_max_turns_stops_the_episode_without_a_trailing_observation(tok, policy):
    batch = build("sampler", "multi_turn", env="scripted_test", cf_samples=0, max_turns=2).sample(policy, _problems(1), 2, _ctx(tok))
    for i in range(2):
        assert len(_turns(batch, "spans")[i]) == 2
        last_end = _turns(batch, "spans")[i][-1][1]
        assert int(batch.attention[i].sum()) == last_end  # nothing after the last action
    assert batch.meta["sampler_metrics"]["rollout/ended_by_env_frac"] == 0.0


def test_one_turn_is_the_plain_sampler(tok, policy):
    problems = _problems(3)
    plain = build("sampler", "plain").sample(policy, problems, 2, _ctx(tok))
    one = build("sampler", "multi_turn", env="scripted_test", cf_samples=0, max_turns=1).sample(policy, problems, 2, _ctx(tok))
    assert torch.equal(plain.prompt_ids, one.prompt_ids) and torch.equal(plain.prompt_mask, one.prompt_mask)
    assert torch.equal(plain.completion_ids, one.completion_ids)
    assert torch.equal(plain.completion_mask, one.completion_mask)
    assert torch.equal(plain.group_ids, one.group_ids)
    assert plain.texts == one.texts


def test_plans_share_the_first_turn_and_nest_in_groups(tok, policy):
    sampler = build("sampler", "multi_turn", env="scripted_test", cf_samples=0, max_turns=3, plans=2,
                    env_params={"roles": ["planner", "executor"]})
    batch = sampler.sample(policy, _problems(2), 4, _ctx(tok))
    plan_ids, groups = batch.plan_ids, batch.group_ids
    assert plan_ids.tolist() == [200, 200, 201, 201, 202, 202, 203, 203]  # (offset + b)·P + plan
    for pid in plan_ids.unique():
        rows = (plan_ids == pid).nonzero().flatten().tolist()
        assert len({int(groups[r]) for r in rows}) == 1
        first = [tuple(batch.completion_ids[r, slice(*_turns(batch, "spans")[r][0])].tolist()) for r in rows]
        assert len(set(first)) == 1  # the plan (turn 1) is shared by its executions
    role = batch.role_mask
    for i, spans in enumerate(_turns(batch, "spans")):
        s, t = spans[0]
        assert bool(role[i, s:t].all()) and int(role[i].sum()) == t - s  # planner tokens = turn 1 exactly
    with pytest.raises(ValueError, match="not a multiple of plans"):
        sampler.sample(policy, _problems(1), 3, _ctx(tok))


def test_counterfactual_baselines_sit_at_selected_turn_starts(tok, policy):
    sampler = build("sampler", "multi_turn", env="scripted_test", max_turns=3, cf_samples=2,
                    cf_selector="surprisal_top_q", cf_top_q=0.5)
    batch = sampler.sample(policy, _problems(1), 2, _ctx(tok))
    base = batch.turn_baselines
    marked = (~base.isnan()).nonzero().tolist()
    assert len(marked) == 3  # ceil(0.5 · 6 turns)
    starts = {(i, s) for i, spans in enumerate(_turns(batch, "spans")) for s, _ in spans}
    for i, t in marked:
        assert (i, t) in starts
        j = [s for s, _ in _turns(batch, "spans")[i]].index(t)
        assert base[i, t].item() == pytest.approx([0.5, 0.2, 0.4][j])  # scripted: any alternative scores s_j
    assert batch.meta["sampler_metrics"]["rollout/cf_turn_frac"] == pytest.approx(0.5)


def test_bad_setups_are_clear_errors(tok, policy):
    with pytest.raises(ValueError, match="empty observation"):
        build("sampler", "multi_turn", env="scripted_test", cf_samples=0, env_params={"obs": ""}).sample(
            policy, _problems(1), 1, _ctx(tok))
    with pytest.raises(RegistryError, match="unknown environment 'nope'"):
        build("sampler", "multi_turn", env="nope", cf_samples=0).sample(policy, _problems(1), 1, _ctx(tok))
    with pytest.raises(RegistryError, match=r"unknown parameter\(s\) \['bogus'\]"):
        build_env("scripted_test", bogus=1)
    with pytest.raises(ValueError, match="reward must be one of"):
        build("sampler", "multi_turn", cf_samples=0, reward="mean")
