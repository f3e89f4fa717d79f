"""What the trainer hands the methods of issue 18: the completion-cap normaliser, the policy's movement
for KGPS, the policy's token entropies for FADE, CVPO's curriculum as a loss weight — each checked
against an independent recomputation on a tiny run."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import torch

from rlvr.ops import masked_mean
from rlvr.rollout import sequence_logprobs
from rlvr.train.movement import kl_new_old
from rlvr.train.trainer import Trainer
from rlvr.types import AdvantageInputs
from tests.e2e.mechanisms import MIXED
from tests.helpers.batches import fixed_global_batch
from tests.helpers.tiny import tiny_config

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "methods"


def _preset(tmp_path: Path, name: str, *overrides: str) -> Trainer:
    return Trainer(tiny_config(tmp_path / name, list(overrides), path=str(PRESETS / f"{name}.yaml")))


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _scores(model, batch, entropy=False):
    return sequence_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.attention,
                             with_entropy=entropy)


def test_fixed_norm_update_ignores_extra_padding(tmp_path):
    """Dr. GRPO's constant is the completion cap: the same rows padded 5 columns wider give the same update
    (with the padded width as C, the wider batch's gradient was 8/13 of the narrower one's)."""
    results = []
    for extra in (0, 5):
        trainer = _preset(tmp_path / str(extra), "dr_grpo")
        grads: list[torch.Tensor] = []  # the gradient each optimizer step applies (flattened)
        opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
        opt.register_step_pre_hook(lambda *_: grads.append(
            torch.cat([p.grad.flatten() for p in trainer.policy.parameters() if p.grad is not None])))
        batch = fixed_global_batch(trainer.policy.config.vocab_size)  # T = 8, rows of 2..8 tokens
        if extra:
            pad = lambda x, v: torch.cat([x, torch.full((x.shape[0], extra), v, dtype=x.dtype)], dim=1)  # noqa: E731
            batch.completion_ids, batch.completion_mask = pad(batch.completion_ids, 0), pad(batch.completion_mask, False)
        batch.advantages = trainer.parts.advantage(AdvantageInputs(
            rewards=batch.rewards, mask=batch.completion_mask, group_ids=batch.group_ids)).advantages
        before = _flat(trainer.policy)
        metrics = trainer.update(batch)
        results.append((metrics["loss/total"], _flat(trainer.policy) - before, torch.stack(grads)))
    assert abs(results[0][0]) > 1e-4 and results[0][1].abs().max() > 0
    # The two runs reduce the same real tokens in a different order (other shapes, other kernels), so
    # they agree to float32 rounding, not bitwise: a sum of n terms moves by at most n·eps·Σ|terms|. The
    # loss has n = N·(T+5) terms with Σ|terms| ≤ the token-mean |A| (Dr. GRPO divides by N·C ≥ the token
    # count, and the ratios are 1 on-policy); each gradient entry is such a sum scaled by at most max|g|.
    # (The bug this guards against scaled the wider batch's update by 8/13, far outside both bars.)
    eps, n = torch.finfo(torch.float32).eps, batch.completion_mask.numel()
    mask = batch.completion_mask
    scale = float((batch.advantages.abs() * mask).sum() / mask.sum())
    assert abs(results[0][0] - results[1][0]) <= n * eps * scale
    g0, g1 = results[0][2], results[1][2]
    assert g0.shape == g1.shape and g0.abs().max() > 0
    torch.testing.assert_close(g1, g0, rtol=0, atol=n * eps * float(g0.abs().max()))
    # The weight change itself: Adam's first step is -lr·g/(|g|+ε), sign-like wherever |g| ≫ ε, so rows
    # whose gradients agree to rounding move the same; compare the signs where |g| is far above ε.
    assert g0.shape == (1, results[0][1].numel())  # one optimizer step, every parameter
    clear = g0[-1].abs() > 1e3 * 1e-8
    assert torch.equal(results[0][1].sign()[clear], results[1][1].sign()[clear]) and bool(clear.any())


def test_kgps_noise_follows_measured_policy_movement(tmp_path):
    """u_t is KL(π_t‖π_{t−1}) on the step's tokens (recomputed here from the two policies) or ‖Δθ‖²; the process
    noise Q_t = q0 + κ·u_t is positive and changes from step to step (before: Q_t = q0 every step)."""
    # toy_mixed_test (tests/e2e/tiny.py): rewards 1, 0, 1, 0 in every group, so every step updates the
    # policy whatever is sampled (with toy_digit_test a step whose groups all missed the '7' left it still).
    trainer = _preset(tmp_path, "kgps", MIXED)
    qs = []
    for step in range(3):
        trainer.step = step
        before = copy.deepcopy(trainer.policy)
        metrics, batch = trainer.train_step()
        with torch.no_grad():
            total, count = kl_new_old(_scores(trainer.policy, batch)[0], _scores(before, batch)[0],
                                      batch.completion_mask)
        assert metrics["optim/policy_kl"] == metrics["select/kgps_update_size"] > 0
        assert abs(metrics["optim/policy_kl"] - float(total / count)) < 1e-6
        qs.append(metrics["select/kgps_q"])
    assert min(qs) > 1e-3 and len({round(q, 9) for q in qs}) == 3
    moved = _preset(tmp_path / "sq", "kgps", MIXED, "algorithm.selector.update_magnitude=param_sq_norm")
    start = _flat(moved.policy)
    metrics, _ = moved.train_step()
    delta = float(((_flat(moved.policy) - start) ** 2).sum())
    assert metrics["select/kgps_update_size"] == metrics["optim/param_delta_sq"]
    # Both sum the same positive squares in float32, in another order (per parameter vs all at once):
    # a cascade sum of n positive terms is off by at most ~log2(n)·eps relative, each side.
    rel = 2 * math.ceil(math.log2(start.numel())) * torch.finfo(torch.float32).eps
    assert abs(metrics["optim/param_delta_sq"] - delta) <= rel * delta and delta > 0


def test_fade_reads_the_policys_token_entropies(tmp_path):
    """FADE's H̄ is the mean entropy of the sampling policy over trained tokens, not −mean(sampled log-probs)."""
    trainer = _preset(tmp_path, "fade")
    start = copy.deepcopy(trainer.policy)
    metrics, batch = trainer.train_step()
    with torch.no_grad():
        logp, ent = _scores(start, batch, entropy=True)
    mask = batch.completion_mask  # past a row's last real token the values are padding (0 from a packed pass)
    torch.testing.assert_close(batch.entropy[mask], ent[mask])  # float32 defaults: |Δ| ≤ 1e-5 + 1.3e-6·|H|
    # H̄ is the mean of the sampling pass's float32 entropies, recomputed here by another forward pass:
    # the mean can differ by what assert_close allows per token (two forwards of other shapes round
    # differently), plus float64 rounding of the mean.
    tol = 1e-5 + 1.3e-6 * float(ent[mask].abs().max())
    assert abs(metrics["adv/entropy"] - float(masked_mean(ent.double(), mask))) <= tol
    assert abs(metrics["adv/entropy"] - float(-masked_mean(logp.double(), mask))) > 1e-3  # the old estimate


def test_cvpo_curriculum_weights_the_loss_and_is_not_uniform(tmp_path):
    """ω_q reaches the loss (advantages scaled by each row's question weight) and differs across questions."""
    trainer = _preset(tmp_path, "cvpo")
    spreads = []
    for step in range(3):
        trainer.step = step
        selector = copy.deepcopy(trainer.parts.selector)  # its estimates before this step's observe
        metrics, batch = trainer.train_step()
        omega = selector.row_weights({"problems": batch.problems, "rewards": batch.rewards})  # (N,)
        plain = trainer.parts.advantage(AdvantageInputs(rewards=batch.rewards, mask=batch.completion_mask,
                                                           group_ids=batch.group_ids, values=batch.values))
        torch.testing.assert_close(batch.advantages, plain.advantages * omega.unsqueeze(-1))
        spreads.append(metrics["select/loss_weight_std"])
        assert metrics["select/loss_weight_min"] < 1.0 < metrics["select/loss_weight_max"] or spreads[-1] == 0
    assert max(spreads) > 0.05
    assert len(trainer.parts.selector.success) > 0
