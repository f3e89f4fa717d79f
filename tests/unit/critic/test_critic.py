"""The critic's parts: value model alignment and bounds, the clipped value loss and explained variance
(hand-derived), privileged templates, a learning update, and checkpoint round trips."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

from rlvr.critic import Critic, build_value_model, clipped_value_loss, explained_variance, privileged_text
from rlvr.critic.view import template_fields
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import encode_prompts
from rlvr.train.checkpoint import load_checkpoint, save_checkpoint
from rlvr.train.config import ConfigError, load_config
from rlvr.types import BatchError, Problem, Rollouts


@pytest.fixture(scope="module")
def tiny():
    tok = build_char_tokenizer()
    return build_tiny_model(tok, hidden=32, layers=1, heads=2, seed=0), tok


def rollouts(tok, prompts, completions, answers=None) -> Rollouts:
    ids, mask = encode_prompts(tok, prompts)
    enc = tok(completions, padding=True, padding_side="right", add_special_tokens=False, return_tensors="pt")
    problems = [Problem(p, answer=a) for p, a in zip(prompts, answers or [None] * len(prompts))]
    return Rollouts(problems=problems, prompt_ids=ids, prompt_mask=mask, completion_ids=enc["input_ids"],
                    completion_mask=enc["attention_mask"].bool(), group_ids=torch.arange(len(prompts)),
                    rewards=torch.tensor([[1.0], [0.0]][:len(prompts)]))


# --- value model ---------------------------------------------------------------------------------

def test_values_are_the_head_on_the_state_before_each_token(tiny):
    policy, tok = tiny
    vm = build_value_model(policy, bound="none")
    torch.nn.init.normal_(vm.head.weight, generator=torch.Generator().manual_seed(0))
    b = rollouts(tok, ["12+3=", "7*8="], ["15", "56<"])
    v = vm(b.prompt_ids, b.prompt_mask, b.completion_ids, b.attention)  # (2, 3)
    assert v.shape == (2, 3)
    # Row 1 alone (its own, shorter left padding): the state before completion token 0 is the
    # prompt's last token, position P−1; left padding must not change the values.
    alone = rollouts(tok, ["7*8="], ["56<"])
    v1 = vm(alone.prompt_ids, alone.prompt_mask, alone.completion_ids, alone.attention)
    torch.testing.assert_close(v1[0], v[1], atol=1e-5, rtol=1e-5)
    ids = torch.cat([alone.prompt_ids, alone.completion_ids], 1)
    hidden = vm.backbone(input_ids=ids).last_hidden_state  # no padding: plain positions
    p = alone.prompt_ids.shape[1]
    torch.testing.assert_close(vm.head(hidden[0, p - 1:p + 2]).squeeze(-1), v1[0], atol=1e-5, rtol=1e-5)


def test_value_model_is_a_copy_and_starts_constant(tiny):
    policy, tok = tiny
    vm = build_value_model(policy, bound="sigmoid", reward_range=(-1.0, 3.0))
    assert vm.backbone is not policy.model
    assert vm.backbone.embed_tokens.weight.data_ptr() != policy.model.embed_tokens.weight.data_ptr()
    b = rollouts(tok, ["1+1="], ["2"])
    # zero head → sigmoid(0) = 0.5 → lo + (hi − lo)·0.5 = −1 + 4·0.5 = 1
    torch.testing.assert_close(vm(b.prompt_ids, b.prompt_mask, b.completion_ids, b.attention), torch.tensor([[1.0]]))


def test_bounds_keep_values_in_the_reward_range(tiny):
    policy, tok = tiny
    b = rollouts(tok, ["1+1=", "2+2="], ["2", "4"])
    for bound in ("sigmoid", "clamp"):
        vm = build_value_model(policy, bound=bound, reward_range=(0.0, 1.0))
        torch.nn.init.constant_(vm.head.bias, 25.0)  # raw output far above the range
        raw = vm(b.prompt_ids, b.prompt_mask, b.completion_ids, b.attention)
        seen = vm.bounded(raw.detach())
        assert float(seen.max()) <= 1.0 and float(seen.min()) >= 0.0
    assert float(raw.detach().min()) > 1.0  # clamp trains the raw head; only what GAE reads is clamped


# --- value loss ----------------------------------------------------------------------------------

def test_clipped_value_loss_golden():
    # v_old = 0, clip 0.5, R = 1. Token 0: v = 0.8 → (0.8 − 1)² = 0.04, clipped v = 0.5 → 0.25: max 0.25.
    # Token 1: v = 0.3 (inside the clip) → (0.3 − 1)² = 0.49 both. Token 2 untrained.
    # token-mean: 0.5·(0.25 + 0.49)/2 = 0.185; clipped fraction (clipped > unclipped): 1/2.
    v = torch.tensor([[0.8, 0.3, 5.0]])
    mask = torch.tensor([[True, True, False]])
    loss, frac = clipped_value_loss(v, torch.zeros(1, 3), torch.ones(1, 3), mask, clip=0.5)
    assert float(loss) == pytest.approx(0.185)
    assert float(frac) == pytest.approx(0.5)
    # Clip off: 0.5·(0.04 + 0.49)/2 = 0.1325.
    loss, _ = clipped_value_loss(v, torch.zeros(1, 3), torch.ones(1, 3), mask, clip=0.0)
    assert float(loss) == pytest.approx(0.1325)


def test_explained_variance_golden():
    # R = (0, 1, 2, 3): Var (ddof 1) = 5/3. V = R: 1. V ≡ 1.5 (mean): Var(R − V) = Var(R) → 0.
    # V = R + (1, −1, 1, −1)·0.5: residual (−0.5, 0.5, −0.5, 0.5), Var = 1/3 → 1 − 0.2 = 0.8.
    r = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    m = torch.ones(1, 4, dtype=torch.bool)
    assert float(explained_variance(r, r, m)) == pytest.approx(1.0)
    assert float(explained_variance(torch.full_like(r, 1.5), r, m)) == pytest.approx(0.0, abs=1e-6)
    assert float(explained_variance(r + torch.tensor([[0.5, -0.5, 0.5, -0.5]]), r, m)) == pytest.approx(0.8)


# --- privileged view -----------------------------------------------------------------------------

def test_privileged_templates():
    p = Problem("3*4=", answer="12", solution="3*4=12;#12")
    assert privileged_text(p, "ans={answer};{prompt}") == "ans=12;3*4="
    assert privileged_text(p, "{solution}|{prompt}") == "3*4=12;#12|3*4="
    with pytest.raises(BatchError, match="needs 'answer'"):
        privileged_text(Problem("3*4="), "ans={answer};{prompt}")
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['rubric'\]"):
        template_fields("{rubric}{prompt}")


def test_critic_config_errors_are_named():
    with pytest.raises(ConfigError, match="critic.bound must be one of"):
        load_config(None, ["critic.bound=tanh"])
    with pytest.raises(ConfigError, match="reads critic values; set critic.enabled=true"):
        from rlvr.train.build import build_pipeline
        build_pipeline(load_config(None, ["algorithm.advantage.name=la_gae"]))


# --- the critic: update and checkpoint -------------------------------------------------------------

def make_critic(policy, tok, **overrides):
    cfg = load_config(None, [f"critic.{k}={v}" for k, v in {"enabled": True, "lr": 1e-2, **overrides}.items()])
    return Critic(cfg.critic, policy, tok, Accelerator(cpu=True), total_steps=10)


def test_critic_update_fits_the_returns(tiny):
    policy, tok = tiny
    critic = make_critic(policy, tok, template="'ans={answer};{prompt}'", value_clip=0.0)
    b = rollouts(tok, ["12+3=", "7*8="], ["15", "57"], answers=["15", "56"])
    returns = torch.tensor([[1.0, 1.0], [0.0, 0.0]]) * b.completion_mask
    norm = {"num_tokens": b.completion_mask.sum(), "num_seqs": torch.tensor(2)}
    losses = []
    for _ in range(15):
        critic.predict(b)
        losses.append(critic.update(b, returns, norm)["critic/loss"])
    assert losses[-1] < 0.2 * losses[0]
    assert "ans=15;12+3=" in tok.decode(b.value_prompt_ids[0], skip_special_tokens=True)


def test_checkpoint_round_trips_the_critic(tiny, tmp_path):
    policy, tok = tiny
    a = make_critic(policy, tok)
    b = rollouts(tok, ["1+2="], ["3"])
    a.predict(b)
    a.update(b, torch.ones(1, 1), {"num_tokens": torch.tensor(1), "num_seqs": torch.tensor(1)})
    opt = torch.optim.AdamW(policy.parameters())
    save_checkpoint(tmp_path, 1, policy, opt, {"critic": a.state_dict()}, extras=a.checkpoint_parts())
    c = make_critic(policy, tok)
    state = load_checkpoint(tmp_path / "checkpoints" / "step_000001", policy, opt, extras=c.checkpoint_parts())
    c.load_state_dict(state["critic"])
    for (k, x), (_, y) in zip(a.value_model.state_dict().items(), c.value_model.state_dict().items()):
        assert torch.equal(x, y), k
    assert torch.equal(a.optimizer.state_dict()["state"][0]["exp_avg"], c.optimizer.state_dict()["state"][0]["exp_avg"])
    assert c.scheduler.state_dict()["last_epoch"] == 1
    with pytest.raises(RuntimeError, match="has no 'other' weights"):
        load_checkpoint(tmp_path / "checkpoints" / "step_000001", policy, opt,
                        extras={"critic": c.checkpoint_parts()["critic"], "other": c.checkpoint_parts()["critic"]})
