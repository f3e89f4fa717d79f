"""A LoRA policy from config (model.lora): adapter-only training and checkpoints, the adapter-disabled
reference, exact resume, and every preset either trains with it or refuses it in one clear line."""

from __future__ import annotations

import copy

import pytest
import torch
import yaml
from safetensors.torch import load_file

pytest.importorskip("peft")

from rlvr.models.lora import is_lora
from rlvr.rollout import sequence_logprobs
from rlvr.train.build import build_model
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.config import ConfigError
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer

from tests.e2e.resume import crash_then_resume, weights
from tests.e2e.test_trainer import PRESETS
from tests.helpers.tiny import tiny_config

LORA = ["model.lora.r=4", "model.lora.alpha=8", "optim.lr=1e-2"]


def _base_and_adapter(state: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    return ({k: v for k, v in state.items() if "lora_" not in k}, {k: v for k, v in state.items() if "lora_" in k})


def test_lora_trains_only_the_adapter(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, [*LORA, "run.steps=2"]))
    assert is_lora(trainer.policy)
    base0, adapter0 = _base_and_adapter(weights(trainer.policy))
    assert adapter0 and base0
    trainer.train()
    base1, adapter1 = _base_and_adapter(weights(trainer.policy))
    assert all(torch.equal(base0[k], base1[k]) for k in base0)  # the base is bit-identical
    assert any(not torch.equal(adapter0[k], adapter1[k]) for k in adapter0)
    saved = load_file(str(latest_checkpoint(tmp_path) / "model.safetensors"))
    assert set(saved) == {n for n, p in trainer.policy.named_parameters() if p.requires_grad}
    assert all("lora_" in k for k in saved)  # adapter-only checkpoint


def test_reference_is_the_base_with_the_adapter_off(tmp_path):
    cfg = tiny_config(tmp_path, [*LORA, "run.steps=2", "algorithm.kl_coef=0.1"])
    torch.manual_seed(cfg.run.seed)
    plain, tokenizer = build_model(cfg)
    base = copy.deepcopy(plain).eval()
    trainer = Trainer(cfg, model=plain, tokenizer=tokenizer)
    trainer.train()  # the adapter moves away from zero
    rows = read_metrics(tmp_path)
    assert rows[-1]["loss/kl"] > 0  # the policy differs from its reference
    assert sum(p.numel() for p in trainer.ref_model.parameters()) == sum(p.numel() for p in trainer.policy.parameters())
    ids = torch.randint(4, 100, (3, 6))
    prompt, mask = ids[:, :3], torch.ones(3, 3, dtype=torch.bool)
    comp, attn = ids[:, 3:], torch.ones(3, 3, dtype=torch.bool)
    trainer.policy.eval()
    with torch.no_grad():
        ref = sequence_logprobs(trainer.ref_model, prompt, mask, comp, attn)[0]
        want = sequence_logprobs(base, prompt, mask, comp, attn)[0]
        policy = sequence_logprobs(trainer.policy, prompt, mask, comp, attn)[0]
    assert torch.allclose(ref, want, atol=1e-6, rtol=0)
    assert not torch.allclose(policy, want, atol=1e-4)


@pytest.mark.parametrize("extra", [[], ["warm_start.steps=5"]])
def test_lora_resume_is_exact(tmp_path, monkeypatch, extra):
    """Crash at step 3, resume: the same weights and metrics as the uninterrupted run (with a KL term).
    With a warm-started base (not rebuildable from model.path) the run keeps it once in RUN/reference."""
    overrides = [*LORA, "run.steps=4", "run.save_every=2", "algorithm.kl_coef=0.1", "optim.schedule=cosine", *extra]

    def make(folder):
        cfg = tiny_config(folder, overrides)
        if not extra:
            return Trainer(cfg)
        from rlvr.train.run import warm_start_model
        model, tokenizer, _ = warm_start_model(cfg)
        return Trainer(cfg, model=model, tokenizer=tokenizer)

    full = make(tmp_path / "full")
    full.train()
    resumed = crash_then_resume(monkeypatch, lambda: make(tmp_path / "crash"))
    expected, got = weights(full.policy), weights(resumed.policy)
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    volatile = ("timing/", "time/", "memory/")
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith(volatile)} for r in rows]  # noqa: E731
    assert strip(read_metrics(tmp_path / "crash")) == strip(read_metrics(tmp_path / "full"))
    assert read_metrics(tmp_path / "full")[-1]["loss/kl"] > 0
    assert (tmp_path / "crash" / "reference" / "model.safetensors").exists()


@pytest.mark.parametrize("bad, message", [
    (["model.lora.r=0"], "model.lora.r must be >= 1"),
    (["model.lora.target_modules=[]"], "model.lora.target_modules"),
    (["model.lora.rank=4"], "unknown key(s) ['model.lora.rank']"),
])
def test_bad_lora_config_is_named(tmp_path, bad, message):
    with pytest.raises(ConfigError) as err:
        tiny_config(tmp_path, bad)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_empty_lora_is_full_fine_tuning(tmp_path):
    assert tiny_config(tmp_path, ["model.lora={}"]).model.lora is None
    assert tiny_config(tmp_path, []).model.lora is None
    assert tiny_config(tmp_path, ["model.lora.r=2"]).model.lora.r == 2


def _optimizer(preset: str) -> str:
    return ((yaml.safe_load((PRESETS / f"{preset}.yaml").read_text()) or {}).get("optim") or {}).get("name", "gradient")


@pytest.mark.parametrize("preset", sorted(p.stem for p in PRESETS.glob("*.yaml")))
def test_every_preset_takes_lora_or_refuses_it(tmp_path, preset):
    """Gradient presets train one step with a LoRA policy (adapter moves, base stays); presets whose
    optimizer runs its own loop on the full weights refuse model.lora in one line at config time."""
    path = str(PRESETS / f"{preset}.yaml")
    if _optimizer(preset) != "gradient":
        with pytest.raises(ConfigError, match="model.lora: loop") as err:
            tiny_config(tmp_path, [*LORA, "run.steps=1"], path=path)
        assert "\n" not in str(err.value)
        return
    trainer = Trainer(tiny_config(tmp_path, [*LORA, "run.steps=1", "critic.warmup_steps=0"], path=path))
    base0, adapter0 = _base_and_adapter(weights(trainer.policy))
    trainer.train()
    rows = read_metrics(tmp_path)
    assert len(rows) == 1 and torch.isfinite(torch.tensor(rows[0]["loss/total"]))
    base1, adapter1 = _base_and_adapter(weights(trainer.policy))
    assert all(torch.equal(base0[k], base1[k]) for k in base0)
    if rows[0]["adv/abs_mean"] > 0:
        assert any(not torch.equal(adapter0[k], adapter1[k]) for k in adapter0)
