"""Peak resident memory a checkpoint save adds, on a Llama-shaped model of about 134 M parameters with its
AdamW state (a fresh process; the model is built from a config, nothing downloaded); with ``--lora-merge``,
what walking the LoRA-merged weights a vLLM sync sends adds instead (all-linear adapter, rank 8):

    python benchmarks/checkpoint_memory.py [--layers 12] [--hidden 768] [--lora-merge]

Prints JSON: parameters, bytes of weights + optimizer state (or of the adapted weights), the growth of the
process's peak resident memory during the save (or the merge walk) and the seconds it took. Resident memory counts pages, not float results,
so the figure does not depend on the processor's rounding.
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
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3,
                      num_hidden_layers=args.layers, num_attention_heads=12, num_key_value_heads=12,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"parameters": params, **(merge_walk(model) if args.lora_merge else save(model))}))


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


def _peak_growth(fn) -> tuple[int, float]:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024, round(seconds, 2)


if __name__ == "__main__":
    main()
