"""SpecRoll against plain decoding on the testbed: generation throughput and GRPO step time.

One warm-started tiny arithmetic model (the testbed's default size unless told otherwise) is shared
by every measurement:

* generation: ``B·G`` prompts (and a small batch), ``--gen-repeats`` calls per engine in
  alternating order (loop, specroll, loop, ...) so load drift hits both alike; tokens per second
  counts generated tokens (through the first eos). SpecRoll's first call fits its heads (the
  bootstrap of the slow path) and is timed apart as the head-update cost;
* GRPO: the gradient trainer, ``--rl-warmup`` + ``--rl-steps`` steps per engine from the same
  starting weights; the median step time of the timed steps, plus SpecRoll's statistics from
  ``metrics.jsonl`` (acceptance, tokens per target forward, head refits and their seconds).

Greedy outputs are checked to be identical across engines (SpecRoll is exact).

    python benchmarks/specroll.py            # prints one JSON object on stdout
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--sft-steps", type=int, default=100, help="warm-start steps of the shared model")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--prompts", type=int, default=8, help="prompts per step (B)")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    p.add_argument("--small-batch", type=int, default=8, help="rows of the small-batch generation test (0 = skip)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--num-heads", type=int, default=3, help="SpecRoll draft heads K")
    p.add_argument("--gen-repeats", type=int, default=4, help="timed generation calls per engine and batch size")
    p.add_argument("--rl-steps", type=int, default=4, help="timed GRPO steps per engine")
    p.add_argument("--rl-warmup", type=int, default=1, help="untimed GRPO steps per engine (SpecRoll's bootstrap)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def prepare_model(args: argparse.Namespace) -> tuple[Any, Any, dict[str, Any]]:
    import torch
    from rlvr.models import build_char_tokenizer, build_tiny_model, count_parameters
    from rlvr.sft import warm_start
    from rlvr.tasks import Arithmetic
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, hidden=args.hidden, layers=args.layers, heads=args.heads, seed=args.seed)
    model.to(torch.device(args.device))
    start = time.perf_counter()
    result = warm_start(model, tok, Arithmetic(), steps=args.sft_steps, seed=args.seed, progress=False) \
        if args.sft_steps else {"loss": float("nan")}
    info = {"parameters": count_parameters(model), "sft_steps": args.sft_steps,
            "sft_seconds": round(time.perf_counter() - start, 1), "sft_loss": round(float(result["loss"]), 4)}
    return model, tok, info


def engine_params(args: argparse.Namespace) -> dict[str, Any]:
    """SpecRoll's settings as the preset (configs/methods/specroll.yaml) has them, the comparison's own
    (Reflex's eta and eps are required there), with ``--num-heads``."""
    import yaml
    from rlvr.presets import resolve_config
    engine = dict(yaml.safe_load(Path(resolve_config("specroll")).read_text())["rollout"]["engine"])
    engine.pop("name")
    return {**engine, "num_heads": args.num_heads}


def generation(model: Any, tok: Any, rows: int, args: argparse.Namespace) -> dict[str, Any]:
    """Tokens per second of both engines on ``rows`` arithmetic prompts (alternating calls)."""
    from rlvr.models import format_prompt
    from rlvr.rollout import generate
    from rlvr.rollout.engines.specroll import engine_for
    from rlvr.tasks import Arithmetic
    problems = Arithmetic().problems(max(rows // args.group, 1), seed=args.seed + 1)
    prompts = [format_prompt(tok, p.prompt) for p in problems for _ in range(args.group)][:rows]
    params = engine_params(args)
    engine_for(model, params).reset()  # fresh heads: this measurement pays its own bootstrap fit

    def call(name: str, seed: int) -> tuple[float, int, dict]:
        start = time.perf_counter()
        gen = generate(model, tok, prompts, max_new_tokens=args.max_new_tokens, seed=seed, engine=name,
                       engine_params=params if name == "specroll" else None)
        return time.perf_counter() - start, int(gen.completion_mask.sum()), gen.stats

    boot_s, _, boot = call("specroll", 10_000)  # the first call: drafts from fresh heads, then the fit
    call("loop", 10_000)
    totals = {"loop": [0.0, 0], "specroll": [0.0, 0]}
    accept, per_forward, refits = [], [], 0.0
    for rep in range(args.gen_repeats):
        for name in (("loop", "specroll") if rep % 2 == 0 else ("specroll", "loop")):
            seconds, tokens, stats = call(name, rep)
            totals[name][0] += seconds
            totals[name][1] += tokens
            if name == "specroll":
                accept.append(stats["rollout/spec_accept_rate"])
                per_forward.append(stats["rollout/spec_tokens_per_forward"])
                refits += stats["rollout/spec_head_updates"]
    tps = {name: tokens / seconds for name, (seconds, tokens) in totals.items()}
    return {"rows": rows, "tokens_per_s": {k: round(v, 1) for k, v in tps.items()},
            "speedup": round(tps["specroll"] / tps["loop"], 3),
            "spec_accept_rate": round(statistics.mean(accept), 4),
            "spec_tokens_per_forward": round(statistics.mean(per_forward), 3),
            "first_call_accept_rate_fresh_heads": round(boot["rollout/spec_accept_rate"], 4),
            "head_fit_s": round(boot["rollout/spec_head_update_s"], 3),
            "first_call_s_including_fit": round(boot_s, 3), "refits_during_timed_calls": refits}


def greedy_identical(model: Any, tok: Any, args: argparse.Namespace) -> bool:
    from rlvr.models import format_prompt
    from rlvr.rollout import generate
    from rlvr.tasks import Arithmetic
    prompts = [format_prompt(tok, p.prompt) for p in Arithmetic().problems(32, seed=args.seed + 2)]
    outs = [generate(model, tok, prompts, max_new_tokens=args.max_new_tokens, do_sample=False, engine=name,
                     engine_params=engine_params(args) if name == "specroll" else None)
            for name in ("loop", "specroll")]
    return bool((outs[0].completion_ids == outs[1].completion_ids).all())


def grpo(model: Any, tok: Any, engine: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Median seconds per GRPO step (select → update) with the given rollout engine."""
    from rlvr.train.config import load_config
    from rlvr.train.logging import read_metrics
    from rlvr.train.trainer import Trainer
    out_dir = folder / engine
    total = args.rl_warmup + args.rl_steps
    base = {"task": {"name": "arithmetic"}, "warm_start": {"steps": 0},
            "rollout": {"prompts_per_step": args.prompts, "group_size": args.group,
                        "max_new_tokens": args.max_new_tokens,
                        "engine": {"name": engine, **(engine_params(args) if engine == "specroll" else {})}},
            "algorithm": {"loss": {"name": "ppo_clip"}, "aggregation": {"mode": "token-mean"}},
            "optim": {"lr": 1e-4, "schedule": "constant"},
            "run": {"steps": total, "seed": args.seed, "out_dir": str(out_dir), "eval_every": 0, "save_every": 0,
                    "log_samples": 0, "threads": args.threads}}
    trainer = Trainer(load_config(None, None, base=base), model=copy.deepcopy(model), tokenizer=tok)
    spans: list[float] = []
    inner = trainer.train_step

    def timed_step():
        start = time.perf_counter()
        result = inner()
        spans.append(time.perf_counter() - start)
        return result

    trainer.train_step = timed_step
    trainer.train()
    rows = read_metrics(out_dir)
    timed = rows[args.rl_warmup:]
    out = {"median_step_s": round(statistics.median(spans[args.rl_warmup:]), 4),
           "mean_rollout_s": round(statistics.mean(r.get("timing/rollout", 0.0) for r in timed), 4),
           "reward_mean": round(statistics.mean(r["reward/mean"] for r in timed), 4),
           "response_length": round(statistics.mean(r["rollout/response_length"] for r in timed), 2)}
    if engine == "specroll":
        out.update({"spec_accept_rate": round(statistics.mean(r["rollout/spec_accept_rate"] for r in timed), 4),
                    "spec_tokens_per_forward": round(statistics.mean(r["rollout/spec_tokens_per_forward"]
                                                                     for r in timed), 3),
                    "head_updates_all_steps": sum(r["rollout/spec_head_updates"] for r in rows),
                    "head_update_s_all_steps": round(sum(r["rollout/spec_head_update_s"] for r in rows), 3),
                    "warmup_step_s": round(statistics.mean(spans[:args.rl_warmup]), 3) if args.rl_warmup else None})
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    import torch
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model, tok, info = prepare_model(args)
    result: dict[str, Any] = {"setting": {**{k: v for k, v in vars(args).items()}, **info}}
    result["greedy_identical"] = greedy_identical(model, tok, args)
    sizes = [args.prompts * args.group] + ([args.small_batch] if args.small_batch else [])
    result["generation"] = [generation(model, tok, rows, args) for rows in sizes]
    with tempfile.TemporaryDirectory() as folder:
        result["grpo"] = {engine: grpo(model, tok, engine, args, Path(folder)) for engine in ("loop", "specroll")}
    g = result["grpo"]
    result["grpo"]["step_speedup"] = round(g["loop"]["median_step_s"] / g["specroll"]["median_step_s"], 3)
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=2))
