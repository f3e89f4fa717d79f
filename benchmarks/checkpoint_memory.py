"""Peak resident memory a checkpoint save adds, on a Llama-shaped model of about 134 M parameters with its
AdamW state (a fresh process; the model is built from a config, nothing downloaded); with ``--lora-merge``,
what walking the LoRA-merged weights a vLLM sync sends adds instead (all-linear adapter, rank 8); with
``--vllm-sync``, what a whole LoRA weight sync adds (``VLLMEngine.sync`` into a stand-in engine that holds
its own weights in ``--engine-dtype``, allocated and touched before the measurement, and copies each
received tensor in, as vLLM's ``load_weights`` does):

    python benchmarks/checkpoint_memory.py [--layers 12] [--hidden 768] [--lora-merge | --vllm-sync]

Prints JSON: parameters, bytes of weights + optimizer state (or of the adapted weights), the growth of the
process's peak resident memory during the save (or the merge walk, or the sync) above its resident set
when it started (the peak is reset first where Linux allows) and the seconds it took.
Resident memory counts pages, not float results, so the figure does not depend on the processor's
rounding. ``--vllm-sync`` uses only ``VLLMEngine.sync``, so the same file measures an older rlvr too
(``PYTHONPATH=OLD/src``).
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import rlvr.models.lora  # noqa: F401 -- the save imports it; loaded before the measurement
from rlvr.train.checkpoint import save_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--lora-merge", action="store_true", help="measure the LoRA merge walk instead of a save")
    ap.add_argument("--vllm-sync", action="store_true", help="measure a LoRA weight sync into a stand-in engine")
    ap.add_argument("--engine-dtype", default="bfloat16", help="the stand-in engine's weight dtype")
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3,
                      num_hidden_layers=args.layers, num_attention_heads=12, num_key_value_heads=12,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    params = sum(p.numel() for p in model.parameters())
    if args.vllm_sync:
        result = vllm_sync(model, getattr(torch, args.engine_dtype))
    else:
        result = merge_walk(model) if args.lora_merge else save(model)
    print(json.dumps({"parameters": params, **result}))


def save(model: torch.nn.Module) -> dict:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model(torch.randint(0, 32000, (1, 8)), labels=torch.randint(0, 32000, (1, 8))).loss.backward()
    opt.step()
    with tempfile.TemporaryDirectory() as run:
        grew, seconds = _peak_growth(lambda: save_checkpoint(run, 1, model, opt, {}))
    return {"state_bytes": 3 * sum(p.numel() * p.element_size() for p in model.parameters()),
            "save_peak_growth_bytes": grew, "save_s": seconds}


def merge_walk(model: torch.nn.Module) -> dict:
    from rlvr.models.lora import add_lora, named_merged_weights
    from rlvr.models.lora_spec import LoraSpec
    policy = add_lora(model, LoraSpec(r=8, alpha=16, target_modules=("all-linear",)))
    adapted = [m for m in policy.modules() if hasattr(m, "get_delta_weight")]
    adapted[0].get_delta_weight(adapted[0].active_adapters[0])  # first-call allocations are not the walk's

    def walk() -> None:
        for _, tensor in named_merged_weights(policy):
            del tensor  # a consumer that sends each tensor on and keeps nothing
    grew, seconds = _peak_growth(walk)
    return {"adapted_bytes": sum(m.base_layer.weight.numel() * 4 for m in adapted),
            "merge_peak_growth_bytes": grew, "merge_s": seconds}


class EngineStandIn:
    """vLLM's side of a sync: its weights in ``dtype`` (allocated and written before the measurement) and
    ``collective_rpc("reload_weights", ...)`` that copies each received tensor in, holding it until the
    next arrives, as vLLM's ``load_weights`` loop does."""

    def __init__(self, shapes: dict[str, torch.Size], dtype: torch.dtype) -> None:
        from types import SimpleNamespace
        self.llm_engine = SimpleNamespace(model_config=SimpleNamespace(dtype=dtype))
        self.weights = {name: torch.zeros(shape, dtype=dtype).fill_(1.0) for name, shape in shapes.items()}

    def collective_rpc(self, method: str, kwargs: dict) -> None:
        for name, tensor in kwargs["weights_iterator"]:
            self.weights[name].copy_(tensor)

    def reset_prefix_cache(self) -> None:
        pass


def vllm_sync(model: torch.nn.Module, dtype: torch.dtype) -> dict:
    from rlvr.models.lora import add_lora
    from rlvr.models.lora_spec import LoraSpec
    from rlvr.rollout.engines.vllm import VLLMConfig, VLLMEngine
    shapes = {name: p.shape for name, p in model.state_dict().items()}
    weights_bytes = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    policy = add_lora(model, LoraSpec(r=8, alpha=16, target_modules=("all-linear",)))
    adapted = [m for m in policy.modules() if hasattr(m, "get_delta_weight")]
    with torch.no_grad():
        for m in adapted:  # a trained adapter: B away from zero
            m.lora_B[m.active_adapters[0]].weight.normal_(std=1e-3)
        adapted[0].get_delta_weight(adapted[0].active_adapters[0])  # first-call allocations are not the sync's
    engine = VLLMEngine(VLLMConfig(sync="manual"))
    engine.llm = EngineStandIn(shapes, dtype)
    grew, seconds = _peak_growth(lambda: engine.sync(policy))
    return {"engine_dtype": str(dtype).removeprefix("torch."),
            "weights_bytes": weights_bytes,
            "sync_peak_growth_bytes": grew, "sync_s": seconds}


def _peak_growth(fn) -> tuple[int, float]:
    """Bytes the process's peak resident set grew by while ``fn`` ran, and its seconds. On Linux the peak
    (VmHWM) is first reset to the present resident set (``clear_refs`` 5), so the figure is ``fn``'s own
    even when an earlier step (building the model) peaked higher; elsewhere it is ``ru_maxrss``'s growth."""
    reset = _reset_peak()
    before = _vm("VmRSS") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    after = _vm("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return max(0, after - before), round(seconds, 2)


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _vm(key: str) -> int:
    """A ``/proc/self/status`` memory field in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


if __name__ == "__main__":
    main()
