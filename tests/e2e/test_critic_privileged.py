"""Privileged value functions (docs/methods.md §2.8): the policy never receives a privileged token, and a
baseline that reads privileged information leaves the policy gradient unbiased while lowering its
variance (Monte Carlo on a toy bandit)."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

import torch

from rlvr import AdvantageInputs, build
from rlvr.registry import register
from rlvr.tasks import Task
from rlvr.tasks.base import TaskConfig
from rlvr.types import Problem, Score
from tests.helpers.tiny import tiny_config


@dataclass(frozen=True)
class _SecretConfig(TaskConfig):
    """Only the split fraction."""


@register("task", "secret_answer_test")
class SecretAnswer(Task):
    """Problems whose answer is a random 10-letter upper-case word that never occurs in the prompt
    (the leak test looks for it). Reward 1 when the completion holds an upper-case letter.

    Differs from arithmetic: a trivial check, for tests only. Shapes: n/a.
    """

    Config = _SecretConfig
    needs_timeout = False

    def sample(self, rng: random.Random) -> Problem:
        secret = "".join(rng.choice(string.ascii_uppercase) for _ in range(10))
        return Problem(prompt=f"{rng.randint(0, 10**6)}:", answer=secret, solution=f"say {secret}")

    def verify(self, problem: Problem, completion: str) -> Score:
        return Score(float(any(c.isupper() for c in completion)))

    def demonstration(self, problem: Problem) -> str:
        return problem.answer


def _record_inputs(module: torch.nn.Module, seen: list[torch.Tensor]) -> None:
    def hook(_mod, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            seen.append(ids.detach().clone())
    module.register_forward_pre_hook(hook, with_kwargs=True)


def test_no_privileged_token_reaches_the_policy(tmp_path):
    from rlvr.train.trainer import Trainer
    cfg = tiny_config(tmp_path, ["run.steps=2", "task.name=secret_answer_test", "critic.warmup_steps=0",
                                 "rollout.batch_size=8"], path="configs/methods/bpco_privileged.yaml")
    trainer = Trainer(cfg)
    policy_inputs: list[torch.Tensor] = []
    critic_inputs: list[torch.Tensor] = []
    _record_inputs(trainer.policy, policy_inputs)  # generation and every training forward
    _record_inputs(trainer.critic.value_model.backbone, critic_inputs)
    problems: list[Problem] = []
    original = trainer.collector.collect

    def collect(model, step, budget=None):
        batch, metrics = original(model, step, budget)
        problems.extend(batch.problems)
        return batch, metrics

    trainer.collector.collect = collect
    trainer.train()
    tok = trainer.tokenizer
    secrets = {p.answer for p in problems}
    assert len(secrets) == 16  # 2 steps x 8 problems, every one seen by both models
    policy_text = [t for ids in policy_inputs for t in tok.batch_decode(ids, skip_special_tokens=True)]
    critic_text = [t for ids in critic_inputs for t in tok.batch_decode(ids, skip_special_tokens=True)]
    assert len(policy_inputs) > 2 and critic_inputs  # both models actually ran
    for secret in secrets:
        assert not any(secret in t for t in policy_text), secret
        assert any(f"ans={secret};" in t for t in critic_text), secret  # the critic did read it
    assert not any("ans=" in t for t in policy_text)


def test_privileged_baseline_is_unbiased_and_lowers_variance():
    # Bandit: a hidden difficulty z ∈ {hard, easy} (prob. ½ each) that only the critic sees; the
    # policy π = softmax(θ), θ = (0.4, −0.3), picks an arm a; r ~ Bernoulli(q[z, a]) with
    # q = [[0.2, 0.05], [0.9, 0.7]]. Score-function gradient per sample: (r − b)·(e_a − π).
    # Privileged baseline b = V(z) = Σ_a π_a q[z, a] (it reads z, never a); exact
    # E[g] = ½ Σ_{z,a} π_a q[z, a] (e_a − π). Compared: no baseline, the best constant E[r], V(z).
    gen = torch.Generator().manual_seed(0)
    m = 20_000
    pi = torch.softmax(torch.tensor([0.4, -0.3]), 0)
    q = torch.tensor([[0.2, 0.05], [0.9, 0.7]])  # (z, a)
    z = torch.randint(0, 2, (m,), generator=gen)
    a = torch.multinomial(pi.expand(m, 2), 1, generator=gen).squeeze(-1)
    r = torch.bernoulli(q[z, a], generator=gen)
    score = torch.nn.functional.one_hot(a, 2).float() - pi  # (m, 2) ∇θ log π(a)
    value = q @ pi  # (2,) V(z)
    exact = 0.5 * sum(pi[k] * q[h, k] * (torch.eye(2)[k] - pi) for k in range(2) for h in range(2))

    # The privileged advantage through the library: TETHER at w = 1 with V(z) (one-token rows).
    inputs = AdvantageInputs(rewards=r.unsqueeze(-1), mask=torch.ones(m, 1, dtype=torch.bool),
                             group_ids=torch.arange(m), values=value[z].unsqueeze(-1))
    adv = build("advantage", "tether", weight="fixed", fixed_weight=1.0)(inputs).advantages[:, 0]  # (m,)
    grads = {"none": r.unsqueeze(-1) * score, "constant": (r - value.mean()).unsqueeze(-1) * score,
             "privileged": adv.unsqueeze(-1) * score,
             "peeks_at_action": (r - q[z, 0] * (a == 0)).unsqueeze(-1) * score}  # reads a: biased
    mean = {k: g.mean(0) for k, g in grads.items()}
    se = {k: g.std(0) / m**0.5 for k, g in grads.items()}
    for k in ("none", "constant", "privileged"):
        assert ((mean[k] - exact).abs() < 4 * se[k]).all(), (k, mean[k], exact, se[k])
    assert ((mean["peeks_at_action"] - exact).abs() > 10 * se["peeks_at_action"]).any()  # the test has power
    var = {k: float(g.var(0).sum()) for k, g in grads.items()}
    assert var["privileged"] < 0.5 * var["none"] and var["privileged"] < 0.7 * var["constant"], var
