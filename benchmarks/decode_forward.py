"""Seconds to sample one batch with the ``loop`` engine: its lean forward (rollout/engines/lean.py)
against the model's own forward (``rollout.engine_params.lean=false``), the basis of ``lean``'s default.

One process: the tiny Llama (``--hidden``, ``--layers``, ``--heads``) briefly warm-started on the
arithmetic task (``--sft-steps``) so completions end at varied lengths, ``--prompts`` prompts sampled
once each with the same seed on both paths (the lean forward gives the same logits, so the same
tokens: the script checks it and reports the completions' mean length). The two settings run in
turn ``--repeats`` times and the fastest of each is reported, the least disturbed by other load on
a shared machine; the 1-minute load average is printed beside them.

    python benchmarks/decode_forward.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

import torch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=64, help="prompts in the batch (one completion each)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--sft-steps", type=int, default=150, help="warm-start steps (0: untrained model)")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    from rlvr.models import build_char_tokenizer, build_tiny_model
    from rlvr.rollout import generate
    from rlvr.sft import warm_start
    from rlvr.tasks import Arithmetic
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, hidden=args.hidden, layers=args.layers, heads=args.heads, seed=0)
    if args.sft_steps:
        warm_start(model, tok, Arithmetic(), steps=args.sft_steps, seed=0, progress=False)
    model.eval()
    task, rng = Arithmetic(), random.Random(0)
    prompts = [task.sample(rng).prompt for _ in range(args.prompts)]
    best = {"lean": float("inf"), "model_forward": float("inf")}
    outputs = {}
    load = [round(os.getloadavg()[0], 2)]
    for _ in range(args.repeats):
        for name, lean in (("lean", True), ("model_forward", False)):
            start = time.perf_counter()
            gen = generate(model, tok, prompts, max_new_tokens=args.max_new_tokens, seed=0,
                           engine_params={"lean": lean})
            best[name] = min(best[name], time.perf_counter() - start)
            outputs[name] = gen
    load.append(round(os.getloadavg()[0], 2))
    same = torch.equal(outputs["lean"].completion_ids, outputs["model_forward"].completion_ids)
    print(json.dumps({
        "seconds_fastest": {k: round(v, 4) for k, v in best.items()},
        "lean_over_model_forward": round(best["lean"] / best["model_forward"], 3),
        "same_tokens": same, "mean_completion_length": round(float(outputs["lean"].lengths.float().mean()), 1),
        "prompts": args.prompts, "max_new_tokens": args.max_new_tokens, "threads": args.threads,
        "repeats": args.repeats, "load_avg_1min_before_after": load,
    }, indent=2))


if __name__ == "__main__":
    main()
