"""Tiny-model end-to-end runs of the trainer: learning signal, presets, resume, bad input."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr.losses.objective import NonFiniteLossError
from rlvr.registry import param, register
from rlvr.tasks import Arithmetic
from rlvr.tasks.arithmetic import ArithmeticConfig
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.config import ConfigError
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer
from rlvr.types import LossOutput
from rlvr.losses.base import PolicyLoss

from tests.e2e.mechanisms import EVERY_ROW, MECHANISMS, METHOD_METRICS, NOT_IN_CI
from tests.e2e.resume import crash_then_resume, weights
from tests.helpers.tiny import tiny_config

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "methods"


def _gradient_presets() -> list[str]:
    """Presets trained by the gradient Trainer (loop plug-ins such as ES have their own e2e tests)."""
    import yaml
    out = []
    for path in sorted(PRESETS.glob("*.yaml")):
        optim = (yaml.safe_load(path.read_text()) or {}).get("optim", {}) or {}
        if optim.get("name", "gradient") == "gradient":
            out.append(path.stem)
    return out


def _run_preset(out_dir, preset: str, overrides=(), warm: bool = False) -> tuple[Trainer, list[dict]]:
    cfg = tiny_config(out_dir, ["run.steps=3", *overrides], path=str(PRESETS / f"{preset}.yaml"))
    model = tokenizer = None
    if warm:  # the policy the preset's run would start from (train_run warm-starts it the same way)
        from rlvr.train.run import warm_start_model
        model, tokenizer, _ = warm_start_model(cfg)
    trainer = Trainer(cfg, model=model, tokenizer=tokenizer)
    trainer.train()
    return trainer, read_metrics(out_dir)


@pytest.fixture(scope="module")
def grpo_rows(tmp_path_factory):
    """The plain GRPO preset's 3 steps (every row computed): step 1 samples the same batch as every
    plain-sampler preset."""
    return _run_preset(tmp_path_factory.mktemp("grpo"), "grpo", [EVERY_ROW])[1]


@pytest.mark.parametrize("preset", _gradient_presets())
def test_every_preset_runs_and_changes_weights(tmp_path, preset, grpo_rows):
    cfg = tiny_config(tmp_path, ["run.steps=3"], path=str(PRESETS / f"{preset}.yaml"))
    trainer = Trainer(cfg)
    before = weights(trainer.policy)
    trainer.train()
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(torch.isfinite(torch.tensor(r["loss/total"])) for r in rows)
    for key in ("reward/mean", "adv/abs_mean", "timing/rollout", "timing/loss", "rollout/response_length",
                *METHOD_METRICS.get(preset, [])):
        assert key in rows[-1], key
    assert all(r["rollout/response_length_std"] >= 0 for r in rows)  # length weighting's mechanism gate reads it
    after = weights(trainer.policy)
    if any(r["adv/abs_mean"] > 0 for r in rows):  # with any signal the weights must move
        assert any(not torch.equal(before[k], after[k]) for k in before)
    assert (tmp_path / "config.yaml").exists() and latest_checkpoint(tmp_path) is not None
    for check in MECHANISMS.get(preset, []):  # the mechanism at work in the plain 3-step run
        if not check.overrides and not check.xfail:
            assert check.active(rows, grpo_rows), f"{preset}: {check.what}"


def _checks_needing_their_own_run() -> list:
    out = []
    for preset, checks in MECHANISMS.items():
        for i, check in enumerate(checks):
            if check.overrides or check.xfail:
                marks = [pytest.mark.xfail(strict=True, reason=check.xfail)] if check.xfail else []
                out.append(pytest.param(preset, i, marks=marks, id=f"{preset}-{i}"))
    return out


@pytest.mark.parametrize("preset,index", _checks_needing_their_own_run())
def test_preset_mechanism_fires_with_what_it_needs(tmp_path, preset, index, grpo_rows):
    # The settings a mechanism needs to fire within 3 tiny steps (a warm start, a second objective, a
    # larger group, near-greedy sampling for unanimous groups, ...), or a known gap marked xfail.
    check = MECHANISMS[preset][index]
    _, rows = _run_preset(tmp_path, preset, check.overrides, check.warm)
    base = _run_preset(tmp_path / "base", "grpo", [EVERY_ROW, *check.base])[1] if check.base else grpo_rows
    assert check.active(rows, base), f"{preset}: {check.what}"


def test_every_preset_has_a_mechanism_check_or_a_reason():
    presets = set(_gradient_presets())
    assert presets <= set(MECHANISMS) | set(NOT_IN_CI), sorted(presets - set(MECHANISMS) - set(NOT_IN_CI))
    assert set(MECHANISMS) <= presets and set(NOT_IN_CI) <= presets


@pytest.mark.parametrize("advantage", ["grpo", "fade"])  # fade keeps state across steps (entropy target)
def test_resume_is_exact(tmp_path, monkeypatch, advantage):
    overrides = ["run.steps=4", "run.save_every=2", "optim.schedule=cosine", "optim.ppo_epochs=2",
                 "optim.micro_batch_size=8", "algorithm.kl_coef=0.1", "algorithm.entropy_coef=0.01",
                 f"algorithm.advantage.name={advantage}"]
    full = Trainer(tiny_config(tmp_path / "full", overrides))
    full.train()
    expected = weights(full.policy)

    resumed = crash_then_resume(monkeypatch, lambda: Trainer(tiny_config(tmp_path / "crash", overrides)))
    got = weights(resumed.policy)
    for key in expected:
        assert torch.equal(expected[key], got[key]), key

    rows = read_metrics(tmp_path / "full")
    assert rows[-1]["loss/kl"] > 0  # the policy drifts from the frozen reference
    assert (tmp_path / "crash" / "reference" / "model.safetensors").exists()

    def strip(rows):
        return [{k: v for k, v in r.items() if not k.startswith(("timing/", "time/", "memory/"))} for r in rows]

    assert strip(read_metrics(tmp_path / "crash")) == strip(read_metrics(tmp_path / "full"))


def test_rollout_budget_stops_the_run(tmp_path):
    # 4 prompts x 4 completions = 16 rollouts a step: a budget of 40 is a hard cap, so the run ends
    # after step 2 (32 spent; a third step would make 48 > 40).
    trainer = Trainer(tiny_config(tmp_path, ["run.steps=100", "run.max_rollouts=40"]))
    result = trainer.train()
    assert result["stopped_by"] == "rollouts" and result["steps"] == 2 and result["rollouts"] == 32
    assert [r["rollout/spent"] for r in read_metrics(tmp_path)] == [16, 32]


def test_time_budget_stops_the_run(tmp_path):
    result = Trainer(tiny_config(tmp_path, ["run.steps=100000", "run.max_seconds=1.0"])).train()
    assert result["stopped_by"] == "seconds" and 1 <= result["steps"] < 100000 and result["seconds"] >= 1.0


def test_checkpoint_is_safetensors_and_json(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, ["run.steps=1"]))
    trainer.train()
    ckpt = latest_checkpoint(tmp_path)
    weights = load_file(str(ckpt / "model.safetensors"))
    for key, value in trainer.policy.state_dict().items():
        if key in weights:
            assert torch.equal(weights[key], value.cpu())
    state = json.loads((ckpt / "state.json").read_text())
    assert state["step"] == 1 and "scheduler" in state


# --- bad input ------------------------------------------------------------------------------

def test_unknown_preset_key_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm:\n  advantage: {name: grpo}\n  clip_higher: 0.28\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['algorithm.clip_higher'\]; valid keys"):
        tiny_config(tmp_path, path=str(bad))


def test_unknown_plugin_parameter_fails_before_work(tmp_path):
    with pytest.raises(ConfigError, match=r"loss 'ppo_clip'.*unknown parameter\(s\) \['eps'\]"):
        Trainer(tiny_config(tmp_path, ["algorithm.loss.eps=0.3"]))
    assert not (tmp_path / "config.yaml").exists()


def test_group_size_must_divide_the_batch(tmp_path):
    with pytest.raises(ConfigError, match="rollout.batch_size=30 is not divisible by rollout.group_size=4"):
        tiny_config(tmp_path, ["rollout.batch_size=30"])


def test_dataset_without_answer_column(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "solution": "2"}) + "\n")
    with pytest.raises((ConfigError, ValueError), match="answer"):
        Trainer(tiny_config(tmp_path / "run", ["task.name=dataset", f"task.params.path={data}"]))


@dataclass(frozen=True)
class FlakyConfig(ArithmeticConfig):
    mode: str = param("raise", "raise | hang: what the verifier does on odd rows")


@register("task", "flaky_arithmetic_test")
class FlakyArithmetic(Arithmetic):
    """Arithmetic whose verifier raises or hangs on some completions (for the trainer's tests).

    Differs from arithmetic: verify misbehaves on purpose. Shapes: as arithmetic.
    """

    Config = FlakyConfig
    needs_timeout = True

    def verify(self, problem, completion):
        if random.Random(completion).random() < 0.75:
            if self.config.mode == "hang":
                time.sleep(30)
            raise RuntimeError("verifier exploded")
        return super().verify(problem, completion)


@pytest.mark.parametrize("mode", ["raise", "hang"])
def test_bad_verifier_scores_zero_and_run_goes_on(tmp_path, mode):
    cfg = tiny_config(tmp_path, ["task.name=flaky_arithmetic_test", f"task.params.mode={mode}", "run.steps=1",
                                 "rollout.verify_timeout_s=0.2", "rollout.prompts_per_step=2",
                                 "rollout.group_size=2"])
    start = time.perf_counter()
    Trainer(cfg).train()
    assert time.perf_counter() - start < 25  # a hung verifier did not hold the run
    rows = read_metrics(tmp_path)
    assert rows[-1]["reward/verifier_errors"] >= 1
    reasons = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert reasons


@dataclass(frozen=True)
class _NoParams:
    """No hyperparameters."""


@register("loss", "nan_loss_test")
class NaNLoss(PolicyLoss):
    """A loss that turns NaN on its second call (for the NaN guard's test).

    Paper: none (arXiv: n/a, test fixture). Differs from ppo_clip: returns NaN. Shapes: (N, T).
    """

    Config = _NoParams
    calls = 0

    def __call__(self, inputs):
        NaNLoss.calls += 1
        value = -(inputs.advantages * inputs.logprobs)
        if NaNLoss.calls >= 2:
            value = value + float("nan")
        return LossOutput(value)


def test_nan_loss_stops_with_clear_message_and_keeps_checkpoint(tmp_path):
    NaNLoss.calls = 0
    # one loss call per step (length buckets would call it once per bucket)
    cfg = tiny_config(tmp_path, ["algorithm.loss.name=nan_loss_test", "run.steps=3", "run.save_every=1",
                                 "optim.length_buckets=1"])
    trainer = Trainer(cfg)
    with pytest.raises(NonFiniteLossError, match=r"step 2: non-finite loss term\(s\): 'policy' = nan.*last checkpoint: .*step_000001"):
        trainer.train()
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.name == "step_000001"
    saved = load_file(str(ckpt / "model.safetensors"))
    assert all(torch.isfinite(v).all() for v in saved.values())
    assert all(torch.isfinite(p).all() for p in trainer.policy.parameters())
