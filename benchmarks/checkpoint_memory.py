"""Peak resident memory a checkpoint save adds, on a Llama-shaped model of about 134 M parameters with its
AdamW state (a fresh process; the model is built from a config, nothing downloaded):

    python benchmarks/checkpoint_memory.py [--layers 12] [--hidden 768]

Prints JSON: parameters, bytes of weights + optimizer state, the growth of the process's peak resident
memory during ``save_checkpoint`` and the seconds it took. Resident memory counts pages, not float results,
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
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3,
                      num_hidden_layers=args.layers, num_attention_heads=12, num_key_value_heads=12,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model(torch.randint(0, 32000, (1, 8)), labels=torch.randint(0, 32000, (1, 8))).loss.backward()
    opt.step()
    params = sum(p.numel() for p in model.parameters())
    with tempfile.TemporaryDirectory() as run:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        save_checkpoint(run, 1, model, opt, {})
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"parameters": params, "state_bytes": 3 * 4 * params,
                      "save_peak_growth_bytes": (after - before) * 1024, "save_s": round(seconds, 2)}))


if __name__ == "__main__":
    main()
