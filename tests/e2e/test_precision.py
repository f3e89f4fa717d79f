"""Precision and memory knobs: fp32 master weights under mixed precision, the half-precision warning,
the attention kernel, gradient checkpointing (same loss and gradients, fewer saved activations)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import generate_ids, sequence_logprobs
from rlvr.rollout.engines.lean import lean_refusal
from rlvr.train.config import ConfigError
from rlvr.train.run import train_run
from rlvr.train.trainer import Trainer
from rlvr.types import AdvantageInputs
from tests.helpers.batches import fixed_global_batch
from tests.helpers.tiny import tiny_config

TINY_LR = ["optim.lr=1e-7", "optim.grad_clip=0", "algorithm.aggregation.mode=token-mean"]


def _one_update(tmp_path, overrides: list[str]) -> tuple[Trainer, dict[str, torch.Tensor]]:
    """One optimizer step on the fixed batch; returns the trainer and the weights before it (float32)."""
    trainer = Trainer(tiny_config(tmp_path, overrides))
    before = {k: v.detach().float().clone() for k, v in trainer.policy.named_parameters()}
    batch = fixed_global_batch(trainer.policy.config.vocab_size)
    batch.advantages = trainer.parts.advantage(AdvantageInputs(
        rewards=batch.rewards, mask=batch.completion_mask, group_ids=batch.group_ids)).advantages
    trainer.update(batch)
    return trainer, before


def _max_change(trainer: Trainer, before: dict[str, torch.Tensor]) -> float:
    return max((p.detach().float() - before[k]).abs().max().item() for k, p in trainer.policy.named_parameters())


def _moved_frac(trainer: Trainer, before: dict[str, torch.Tensor]) -> float:
    """Fraction of weights of size > 1e-3 that the step changed (near-zero ones move even in bf16)."""
    moved = total = 0
    for k, p in trainer.policy.named_parameters():
        big = before[k].abs() > 1e-3
        moved += ((p.detach().float() != before[k]) & big).sum().item()
        total += big.sum().item()
    return moved / total


def test_mixed_precision_keeps_float32_master_weights(tmp_path):
    # AdamW's first step moves every weight with a gradient by ~lr = 1e-7: far below bf16's spacing
    # near the init scale (~0.02 → 1.2e-4), so bf16 parameters lose it and float32 masters keep it.
    trainer, before = _one_update(tmp_path / "mixed", ["run.mixed_precision=bf16", *TINY_LR])
    assert all(p.dtype == torch.float32 for p in trainer.policy.parameters())
    state = trainer.optimizer.state_dict()["state"]
    assert all(s["exp_avg"].dtype == torch.float32 for s in state.values())
    change = _max_change(trainer, before)
    assert 1e-8 < change < 2e-7, change
    assert _moved_frac(trainer, before) > 0.5

    with pytest.warns(UserWarning, match="updates bfloat16 parameters in bfloat16"):
        half, before = _one_update(tmp_path / "half", ["model.dtype=bfloat16", *TINY_LR])
    assert all(p.dtype == torch.bfloat16 for p in half.policy.parameters())
    assert _moved_frac(half, before) == 0.0  # the update rounded away


def test_mixed_precision_runs_the_forward_in_bf16(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, ["run.mixed_precision=bf16"]))
    seen = []
    trainer.policy.lm_head.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    batch = fixed_global_batch(trainer.policy.config.vocab_size)
    logp, _ = trainer.scorer.forward(trainer.model, batch)
    assert seen == [torch.bfloat16] and logp.dtype == torch.float32
    with torch.no_grad():
        exact = sequence_logprobs(trainer.policy, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                  batch.attention)[0]
    diff = (logp - exact)[batch.completion_mask].abs().max().item()
    assert 0 < diff < 0.1  # bf16 rounding, not a different model


def test_fp16_mixed_precision_scales_the_loss(tmp_path):
    trainer, before = _one_update(tmp_path, ["run.mixed_precision=fp16"])
    assert trainer.scaler is not None and trainer.scaler.get_scale() > 1.0
    assert all(p.dtype == torch.float32 for p in trainer.policy.parameters())
    assert _max_change(trainer, before) > 0


def test_mixed_precision_with_half_parameters_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="keeps float32 master weights, but model.dtype=bfloat16"):
        Trainer(tiny_config(tmp_path, ["run.mixed_precision=bf16", "model.dtype=bfloat16"]))


def test_bad_precision_values_are_named(tmp_path):
    with pytest.raises(ConfigError, match="run.mixed_precision must be one of no | bf16 | fp16, got 'fp8'"):
        tiny_config(tmp_path, ["run.mixed_precision=fp8"])
    with pytest.raises(ConfigError, match="model.dtype must be one of"):
        tiny_config(tmp_path, ["model.dtype=half"])


def test_optimizer_plugins_refuse_gradient_trainer_knobs(tmp_path):
    cfg = tiny_config(tmp_path, ["optim.name=es", "run.mixed_precision=bf16", "optim.mini_batches=2"])
    with pytest.raises(ConfigError, match="optim.name=es trains with its own loop.*run.mixed_precision, "
                                          "optim.mini_batches"):
        train_run(cfg)
    assert not (tmp_path / "config.yaml").exists()


def test_missing_flash_attention_is_a_clear_error(tmp_path):
    from transformers.utils import is_flash_attn_2_available
    if is_flash_attn_2_available():
        pytest.skip("flash-attn is installed here")
    with pytest.raises(ConfigError, match="flash_attention_2 needs the flash-attn package"):
        Trainer(tiny_config(tmp_path, ["model.attn_implementation=flash_attention_2"]))


def test_eager_attention_scores_as_sdpa(tmp_path):
    sdpa = Trainer(tiny_config(tmp_path / "a"))
    eager = Trainer(tiny_config(tmp_path / "b", ["model.attn_implementation=eager"]))
    assert eager.policy.config._attn_implementation == "eager"
    batch = fixed_global_batch(sdpa.policy.config.vocab_size)
    with torch.no_grad():
        a, b = sdpa.scorer.forward(sdpa.model, batch)[0], eager.scorer.forward(eager.model, batch)[0]
    assert (a - b)[batch.completion_mask].abs().max().item() < 1e-5


def _loss_grads_saved(checkpointing: bool) -> tuple[float, dict[str, torch.Tensor], int]:
    """Loss, gradients and bytes saved for backward of one policy-gradient-like loss on a 4-layer model."""
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, hidden=64, layers=4, heads=4, seed=0)
    if checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    gen = torch.Generator().manual_seed(0)
    n, p, t = 4, 6, 40
    prompt = torch.randint(4, len(tok), (n, p), generator=gen)
    completion = torch.randint(4, len(tok), (n, t), generator=gen)
    saved = [0]

    def pack(x: torch.Tensor) -> torch.Tensor:
        saved[0] += x.numel() * x.element_size()
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        logp, ent = sequence_logprobs(model, prompt, torch.ones(n, p, dtype=torch.bool), completion,
                                      torch.ones(n, t, dtype=torch.bool), with_entropy=True, entropy_grad=True)
        loss = -(logp.mean() + 0.1 * ent.mean())
    loss.backward()
    return loss.item(), {k: v.grad for k, v in model.named_parameters()}, saved[0]


def test_gradient_checkpointing_same_loss_and_gradients_less_memory():
    loss, grads, saved = _loss_grads_saved(False)
    ck_loss, ck_grads, ck_saved = _loss_grads_saved(True)
    assert abs(loss - ck_loss) < 1e-5
    assert max((grads[k] - ck_grads[k]).abs().max().item() for k in grads) < 1e-5
    assert ck_saved < 0.5 * saved  # activations saved for backward (measured: 0.47 MB vs 7.6 MB)


@pytest.mark.parametrize("recompute", ["all", "elementwise"])
def test_checkpointing_leaves_the_weights_after_a_step_unchanged_bit_for_bit(tmp_path, recompute, monkeypatch):
    """An exact memory saving: one bf16-autocast update of the tiny model with gradient checkpointing
    (every op recomputed, or only the elementwise ones) gives the same weights as without, tolerance 0:
    the recomputed ops run the same kernels on the same inputs. Under ``elementwise`` the policy kept
    every matrix product's output from the forward and recomputed the rest (norms, RoPE, SiLU, casts)."""
    from rlvr.models import recompute as rc
    decisions: list[tuple[str, bool]] = []

    def counted(ctx, op, *args, **kwargs):
        decision = rc.CheckpointPolicy.MUST_SAVE if op in rc.KEPT_OPS else rc.CheckpointPolicy.PREFER_RECOMPUTE
        decisions.append((str(op), decision == rc.CheckpointPolicy.MUST_SAVE))
        return decision

    monkeypatch.setattr(rc, "_keep_products", counted)
    common = ["run.mixed_precision=bf16", "optim.lr=1e-3"]
    plain, _ = _one_update(tmp_path / "plain", common)
    ck, before = _one_update(tmp_path / "ck", [*common, "model.gradient_checkpointing=true",
                                               f"model.recompute={recompute}"])
    assert ck.policy.model.gradient_checkpointing and not plain.policy.model.gradient_checkpointing
    assert lean_refusal(ck.policy) is None  # generation keeps the lean decoder: no hook on the decoder
    assert _max_change(ck, before) > 1e-5  # the step moved the weights
    for (name, a), b in zip(plain.policy.named_parameters(), ck.policy.parameters()):
        assert torch.equal(a, b), name
    kept = {op for op, save in decisions if save}
    recomputed = {op for op, save in decisions if not save}
    if recompute == "all":
        assert decisions == []  # plain checkpointing: no selective policy
    else:
        assert {"aten.mm.default"} <= kept or {"aten.addmm.default"} <= kept, kept
        assert any("rsqrt" in op for op in recomputed) and any("silu" in op for op in recomputed), recomputed


def test_recompute_without_checkpointing_is_a_named_error(tmp_path):
    with pytest.raises(ConfigError, match="model.recompute=elementwise .* model.gradient_checkpointing is false"):
        Trainer(tiny_config(tmp_path, ["model.recompute=elementwise"]))
    with pytest.raises(ConfigError, match="model.recompute must be one of all . elementwise, got 'some'"):
        Trainer(tiny_config(tmp_path, ["model.gradient_checkpointing=true", "model.recompute=some"]))


def test_gradient_checkpointing_is_off_during_generation(tmp_path):
    plain = Trainer(tiny_config(tmp_path / "a"))
    ck = Trainer(tiny_config(tmp_path / "b", ["model.gradient_checkpointing=true"]))
    assert ck.policy.model.gradient_checkpointing and not plain.policy.model.gradient_checkpointing
    ids = torch.randint(4, plain.policy.config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids, dtype=torch.bool)
    outs = []
    for trainer in (plain, ck):
        trainer.policy.eval()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error")  # no "use_cache=True is incompatible" complaint
            outs.append(generate_ids(trainer.policy, trainer.tokenizer, ids, mask, max_new_tokens=8,
                                     do_sample=False))
    assert torch.equal(outs[0].completion_ids, outs[1].completion_ids)


def _bf16_checkpoint(folder) -> str:
    """The tiny model saved in bfloat16, as `rlvr model get` saves SmolLM2."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, hidden=32, layers=1, heads=2).to(torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_a_half_precision_checkpoint_trains_float32_master_weights_unless_asked_for_pure_bf16(tmp_path, capfd):
    path = _bf16_checkpoint(tmp_path / "bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no half-precision update warning: masters are float32
        trainer = Trainer(tiny_config(tmp_path / "auto", [f"model.path={path}"]))
    assert all(p.dtype == torch.float32 for p in trainer.policy.parameters())
    assert "holds bfloat16 weights: training float32 master weights" in capfd.readouterr().err
    with pytest.warns(UserWarning, match="updates bfloat16 parameters in bfloat16"):
        pure = Trainer(tiny_config(tmp_path / "pure", [f"model.path={path}", "model.dtype=bfloat16"]))
    assert all(p.dtype == torch.bfloat16 for p in pure.policy.parameters())
    lora = Trainer(tiny_config(tmp_path / "lora", [f"model.path={path}", "model.lora={r: 4, alpha: 8}"]))
    frozen = [p for p in lora.policy.parameters() if not p.requires_grad]
    assert frozen and all(p.dtype == torch.bfloat16 for p in frozen)  # a frozen LoRA base stays as saved


def _update_metrics(trainer: Trainer) -> dict[str, float]:
    batch = fixed_global_batch(trainer.policy.config.vocab_size)
    batch.advantages = trainer.parts.advantage(AdvantageInputs(
        rewards=batch.rewards, mask=batch.completion_mask, group_ids=batch.group_ids)).advantages
    if trainer.cfg.algorithm.kl_coef > 0:  # the KL term's reference log-probs (N, T), as train_step makes them
        batch.ref_logprobs = trainer.scorer(batch, trainer.ref_model)[0]
    return trainer.update(batch)


@pytest.mark.parametrize("setting", [["model.lora={r: 4, alpha: 8}"], ["algorithm.kl_coef=0.1"]])
def test_mixed_precision_holds_frozen_weights_in_bf16_and_the_update_is_unchanged(tmp_path, monkeypatch, setting):
    """A LoRA base (and with it the adapter-off reference) and a full fine-tuning run's KL reference hold
    their frozen Linear weights in bf16: bytes down by 2 per value, the update bit for bit the one of the
    float32 frozen weights (autocast rounds them to bf16 at every Linear call anyway: tolerance 0)."""
    overrides = ["run.mixed_precision=bf16", "optim.grad_clip=0", *setting]
    held = Trainer(tiny_config(tmp_path / "held", overrides))
    with monkeypatch.context() as m:
        m.setattr("rlvr.train.trainer.hold_frozen", lambda model, cfg: 0)  # the frozen weights before: float32
        plain = Trainer(tiny_config(tmp_path / "plain", overrides))
    lora = "model.lora" in setting[0]
    frozen = held.policy if lora else held.ref_model
    frozen_plain = plain.policy if lora else plain.ref_model

    def frozen_bytes(model):
        return sum(p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad)
    assert held.held_bytes > 0 and frozen_bytes(frozen) == frozen_bytes(frozen_plain) - held.held_bytes
    assert held.held_bytes == 2 * sum(p.numel() for p in frozen.parameters() if p.dtype == torch.bfloat16)
    assert all(p.dtype == torch.float32 for p in held.policy.parameters() if p.requires_grad)
    assert all(p.dtype == torch.float32 for p in frozen_plain.parameters())
    got, want = _update_metrics(held), _update_metrics(plain)
    assert math.isfinite(got["loss/total"]) and got["loss/total"] == want["loss/total"]
    assert 0 < got["optim/grad_norm"] == want["optim/grad_norm"] and got.get("loss/kl") == want.get("loss/kl")
    after, after_plain = dict(held.policy.named_parameters()), dict(plain.policy.named_parameters())
    assert all(torch.equal(p, after_plain[k]) for k, p in after.items() if p.requires_grad)


def test_a_held_lora_base_exports_float32(tmp_path):
    from safetensors.torch import load_file
    from rlvr.models.export import export_policy
    trainer = Trainer(tiny_config(tmp_path, ["run.mixed_precision=bf16", "model.lora={r: 4, alpha: 8}"]))
    assert trainer.held_bytes > 0
    out = export_policy(trainer.policy, trainer.tokenizer, tmp_path / "final")
    saved = load_file(str(out / "model.safetensors"))
    assert saved and all(t.dtype == torch.float32 for t in saved.values())
    assert any(t.dtype == torch.bfloat16 for t in trainer.policy.parameters())  # the run's own copy untouched
