"""What ``model.recompute`` saves: one bf16-autocast forward and backward of a SmolLM2-shaped decoder
stack (the folder's config, random weights, ``--layers`` of its layers) at ``--rows`` x ``--tokens``,
without checkpointing and with each recompute mode, each in a fresh process. For each: resident memory the
forward added (what the backward will need), the peak through the backward, and seconds.

    python benchmarks/recompute_memory.py --model models/smollm2        # prints one JSON object

Resident memory is read from /proc (Linux); glibc's mmap threshold is fixed at 64 KiB in the workers so
freed blocks leave the resident set at once and the figures follow what is live.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

MODES = ("none", "all", "elementwise")


def _status(field: str) -> float:
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024


def worker(args: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlvr.models.recompute import checkpoint_kwargs
    config = AutoConfig.from_pretrained(args.model)
    config.num_hidden_layers = args.layers
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).float().train()
    if args.worker != "none":
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=checkpoint_kwargs(args.worker))
    ids = torch.randint(0, config.vocab_size, (args.rows, args.tokens))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # gradients allocated before the clock: the same in every mode
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM)
    start, clock = _status("VmRSS"), time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(input_ids=ids, logits_to_keep=args.tokens // 2, use_cache=False).logits
    held = _status("VmRSS") - start
    logits.float().logsumexp(-1).mean().backward()
    return {"forward_held_mb": round(held), "peak_above_start_mb": round(_status("VmHWM") - start),
            "seconds": round(time.perf_counter() - clock, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a Llama/Qwen2 folder (its config.json is read)")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--tokens", type=int, default=83)
    p.add_argument("--worker", choices=MODES, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    flags = ["--model", args.model, "--layers", str(args.layers), "--rows", str(args.rows), "--tokens", str(args.tokens)]
    out = {"setting": {**{k: getattr(args, k) for k in ("model", "layers", "rows", "tokens")},
                       "threads": env["OMP_NUM_THREADS"]}}
    for mode in MODES:
        proc = subprocess.run([sys.executable, __file__, *flags, "--worker", mode], env=env, capture_output=True,
                              text=True, check=True)
        out[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
