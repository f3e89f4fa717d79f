"""Does calling a calculator raise accuracy? The tiny model with the ``calc`` tool, before and after GRPO.

Per seed (configs/examples/tool_calls_grpo.yaml): the tiny model is warm-started on
``tool_arithmetic`` episodes (``tool_frac`` of the demonstrations call ``<calc>a*b</calc>``, read the
masked reply and answer ``#value``; the rest answer directly), then trained ``--steps`` GRPO steps
with the ``multi_turn`` sampler in the ``python_tool`` environment. Before and after GRPO the same
``--eval-problems`` held-out problems are answered greedily (top-k 1) in two arms:

* ``tool`` — the environment as trained: calls run ``calc``;
* ``no_tool`` — the same policy, every call answered ``error: tools are disabled``
  (``env_params.disabled``), so it must answer alone.

Per arm: accuracy (the episode's final answer right) with its binomial standard error, the
tool-call rate (episodes with at least one call), accuracy of the episodes that did not call, and
two diagnostics of the calling episodes: the call's argument is exactly the problem
(``call_is_the_problem``), and the final answer copies a numeric reply (``answer_copies_reply``).
Prints one JSON object per seed, then a summary (mean over seeds, and the SE across seeds).

    python benchmarks/tool_calls.py --seeds 0 1 2 --out docs/results/code/tool_calls.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

CALL = re.compile(r"<calc>(.*?)</calc>", re.DOTALL)
REPLY = re.compile(r"<out>(.*?)</out>", re.DOTALL)
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "examples" / "tool_calls_grpo.yaml"


def evaluate_arm(model: torch.nn.Module, tokenizer: Any, cfg: Any, problems: list, disabled: bool,
                 seed: int) -> dict[str, float]:
    """Greedy episodes (one per problem): accuracy, its SE, the call rate, accuracy without a call."""
    from rlvr.registry import build
    from rlvr.rollout.samplers import SampleContext
    spec = cfg.rollout.sampler
    params = {**spec.params, "env_params": {**spec.params.get("env_params", {}), "disabled": disabled}}
    sampler = build("sampler", spec.name, **params)
    rollout = dataclasses.replace(cfg.rollout, top_k=1)  # greedy: sampling from the argmax alone
    was = model.training
    model.eval()
    with torch.no_grad():
        batch = sampler.sample(model, problems, 1, SampleContext(tokenizer=tokenizer, rollout=rollout, seed=seed))
    model.train(was)
    eps = [p.meta["episode"] for p in batch.problems]
    right = [float(e["reward"]) for e in eps]
    called = [bool(e["info"]["calls"]) for e in eps]
    n = len(right)
    acc = sum(right) / n
    alone = [r for r, c in zip(right, called) if not c]
    calls = [(p, CALL.search(t), REPLY.search(t), t) for p, t, c in zip(problems, batch.texts, called) if c]
    exact = [bool(m and m.group(1) == p.prompt.rstrip("=")) for p, m, _, _ in calls]
    numeric = [(r.group(1), t) for _, _, r, t in calls if r and r.group(1).lstrip("-").isdigit()]
    copied = [t.rstrip().endswith(f"#{out}") for out, t in numeric]
    return {"accuracy": round(acc, 4), "se": round(math.sqrt(acc * (1 - acc) / n), 4),
            "call_rate": round(sum(called) / n, 4),
            "accuracy_without_call": round(sum(alone) / len(alone), 4) if alone else None,
            "call_is_the_problem": round(sum(exact) / len(exact), 4) if exact else None,
            "answer_copies_reply": round(sum(copied) / len(copied), 4) if copied else None,
            "example": batch.texts[0]}


def both_arms(model: torch.nn.Module, tokenizer: Any, cfg: Any, problems: list, seed: int) -> dict[str, Any]:
    return {arm: evaluate_arm(model, tokenizer, cfg, problems, arm == "no_tool", seed)
            for arm in ("tool", "no_tool")}


def run_seed(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    from rlvr.train.build import build_task
    from rlvr.train.config import load_config
    from rlvr.train.logging import read_metrics
    from rlvr.train.run import heldout, warm_start_model
    from rlvr.train.trainer import Trainer
    start = time.perf_counter()
    out_dir = tempfile.mkdtemp(prefix="rlvr-tool-calls-")
    cfg = load_config(str(args.config), [f"run.seed={seed}", f"run.threads={args.threads}", f"run.steps={args.steps}",
                                         f"run.out_dir={out_dir}", "run.eval_every=0", "run.save_every=0",
                                         *args.overrides])
    model, tokenizer, info = warm_start_model(cfg)
    problems = heldout(build_task(cfg), args.eval_problems, 12_345)  # the same problems for every seed
    before = both_arms(model, tokenizer, cfg, problems, seed=10**6 + seed)
    trainer = Trainer(cfg, model=model, tokenizer=tokenizer)
    trainer.train()
    after = both_arms(trainer.policy, tokenizer, cfg, problems, seed=10**6 + seed)
    rows = read_metrics(out_dir)
    rewards = [r["reward/mean"] for r in rows if "reward/mean" in r]
    return {"seed": seed, "eval_problems": len(problems), "warm_steps": cfg.warm_start.steps,
            "warm_loss": round(info.get("warm_start_loss", float("nan")), 4), "rl_steps": cfg.run.steps,
            "before": before, "after": after,
            "train_reward_first5": round(sum(rewards[:5]) / max(len(rewards[:5]), 1), 4),
            "train_reward_last5": round(sum(rewards[-5:]) / max(len(rewards[-5:]), 1), 4),
            "seconds": round(time.perf_counter() - start, 1)}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean over seeds of each (phase, arm, metric), with the standard error across seeds."""
    out: dict[str, Any] = {"seeds": [r["seed"] for r in runs], "eval_problems": runs[0]["eval_problems"]}
    for phase in ("before", "after"):
        for arm in ("tool", "no_tool"):
            for key in ("accuracy", "call_rate"):
                xs = [r[phase][arm][key] for r in runs]
                mean = sum(xs) / len(xs)
                sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else float("nan")
                out[f"{phase}/{arm}/{key}"] = round(mean, 4)
                out[f"{phase}/{arm}/{key}_se_seeds"] = round(sd / math.sqrt(len(xs)), 4) if len(xs) > 1 else None
        gains = [r[phase]["tool"]["accuracy"] - r[phase]["no_tool"]["accuracy"] for r in runs]
        out[f"{phase}/tool_gain"] = round(sum(gains) / len(gains), 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=40, help="GRPO steps per seed")
    ap.add_argument("--eval-problems", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--out", type=Path, default=None, help="also write {runs, summary} here")
    ap.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    runs = []
    for seed in args.seeds:
        runs.append(run_seed(seed, args))
        print(json.dumps(runs[-1]), flush=True)
        if args.out:  # after every seed, so a partial sweep is kept
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"benchmark": "tool_calls", "config": str(args.config.name),
                                            "steps": args.steps, "overrides": args.overrides, "runs": runs,
                                            "summary": summarise(runs)}, indent=1) + "\n")
    print(json.dumps({"summary": summarise(runs)}), flush=True)


if __name__ == "__main__":
    main()
