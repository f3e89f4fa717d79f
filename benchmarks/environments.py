"""Multi-turn environments before and after a short RL run: mean episode reward on held-out problems.

Per environment: the tiny model is warm-started on the task's demonstrations (``--warm-steps``
supervised steps, batch 32), its episodes on ``--eval-problems`` held-out problems (``--eval-episodes``
sampled episodes each, temperature 1, a fixed seed) give the reward *before*; then ``--steps`` RL
steps with the environment's method preset, and the same episodes give the reward *after*.

* ``refine`` — ``refine_arithmetic`` (partial credit = leading worked steps right, up to 3 attempts)
  trained with TCPO (configs/methods/tcpo.yaml);
* ``bidding`` — ``auto_bidding`` (planner budget split, one executor bid scale per period;
  reward = value won under budget and CPA, over a greedy reference) trained with D-GRPO
  (configs/methods/aigb_dgrpo.yaml).

Prints one JSON object per environment: reward before / after (the preset's episode reward: the
final turn's score), first-, final- and best-turn scores, turns per episode, seconds. Other environments plug in through :data:`RUNNERS` (``@runner(name)``,
a function ``args -> dict``); ``run_preset`` does the warm start, the evaluation and the RL run
for any environment preset.

    python benchmarks/environments.py                 # both, ~3-4 minutes on 1 shared thread
    python benchmarks/environments.py --envs bidding  # one of them
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

PRESETS = Path(__file__).resolve().parents[1] / "configs" / "methods"
RUNNERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {}


def runner(name: str) -> Callable:
    """Register an environment benchmark: ``fn(args) -> dict`` (one JSON object)."""

    def deco(fn: Callable[[argparse.Namespace], dict[str, Any]]) -> Callable:
        RUNNERS[name] = fn
        return fn

    return deco


def episode_rewards(model: torch.nn.Module, tokenizer: Any, cfg: Any, problems: list, episodes: int,
                    seed: int) -> dict[str, float]:
    """Mean episode reward (and turn scores) of ``episodes`` sampled episodes per problem."""
    from rlvr.registry import build
    from rlvr.rollout.samplers import SampleContext
    spec = cfg.rollout.sampler
    sampler = build("sampler", spec.name, **spec.params)
    if getattr(sampler.config, "cf_samples", 0):  # counterfactuals only shape credit, not the reward
        sampler = build("sampler", spec.name, **{**spec.params, "cf_samples": 0})
    group = max(episodes, getattr(sampler.config, "plans", 0) or 1)
    model.eval()
    with torch.no_grad():
        batch = sampler.sample(model, problems, group, SampleContext(tokenizer=tokenizer, rollout=cfg.rollout,
                                                                     seed=seed))
    rewards = [p.meta["episode"]["reward"] for p in batch.problems]
    m = batch.meta["sampler_metrics"]
    return {"reward": sum(rewards) / len(rewards), "first_turn_score": m["rollout/first_turn_score"],
            "final_turn_score": m["rollout/final_turn_score"], "best_turn_score": m["rollout/best_turn_score"],
            "turns": m["rollout/turns_mean"]}


def run_preset(preset: str, args: argparse.Namespace, overrides: list[str]) -> dict[str, Any]:
    """Warm start, evaluate, train ``args.steps`` RL steps with ``preset``, evaluate again."""
    from rlvr.train.build import build_task
    from rlvr.train.config import load_config
    from rlvr.train.logging import read_metrics
    from rlvr.train.run import heldout, warm_start_model
    from rlvr.train.trainer import Trainer
    start = time.perf_counter()
    out_dir = tempfile.mkdtemp(prefix=f"rlvr-env-{preset}-")
    cfg = load_config(str(PRESETS / f"{preset}.yaml"),
                      [f"run.seed={args.seed}", f"run.threads={args.threads}", f"run.steps={args.steps}",
                       f"run.out_dir={out_dir}", "run.eval_every=0", "run.save_every=0",
                       *overrides])
    model, tokenizer, _ = warm_start_model(cfg)
    problems = heldout(build_task(cfg), args.eval_problems, args.seed)
    before = episode_rewards(model, tokenizer, cfg, problems, args.eval_episodes, seed=10**6 + args.seed)
    warm_s = time.perf_counter() - start
    trainer = Trainer(cfg, model=model, tokenizer=tokenizer)
    trainer.train()
    after = episode_rewards(trainer.policy, tokenizer, cfg, problems, args.eval_episodes, seed=10**6 + args.seed)
    rows = read_metrics(out_dir)
    return {"preset": preset, "task": cfg.task.name, "rl_steps": args.steps, "warm_steps": cfg.warm_start.steps,
            "before": before, "after": after, "reward_gain": after["reward"] - before["reward"],
            "train_reward_first": rows[0]["reward/mean"], "train_reward_last": rows[-1]["reward/mean"],
            "seconds_warm_start": round(warm_s, 1), "seconds": round(time.perf_counter() - start, 1)}


@runner("refine")
def refine(args: argparse.Namespace) -> dict[str, Any]:
    return {"env": "refine_arithmetic", **run_preset("tcpo", args, [
        f"warm_start.steps={args.warm_steps or 200}", "warm_start.batch_size=32", "rollout.max_new_tokens=40",
        "rollout.prompts_per_step=8", "rollout.group_size=4", "task.params.max_digits=3"])}


@runner("bidding")
def bidding(args: argparse.Namespace) -> dict[str, Any]:
    return {"env": "auto_bidding", **run_preset("aigb_dgrpo", args, [
        f"warm_start.steps={args.warm_steps or 60}", "warm_start.batch_size=32", "rollout.max_new_tokens=12",
        "rollout.prompts_per_step=8", "rollout.group_size=4"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", nargs="+", default=list(RUNNERS), choices=sorted(RUNNERS))
    ap.add_argument("--steps", type=int, default=20, help="RL steps per environment")
    ap.add_argument("--warm-steps", type=int, default=0, help="supervised warm-start steps (0 = each "
                                                              "environment's default: refine 200, bidding 60)")
    ap.add_argument("--eval-problems", type=int, default=32)
    ap.add_argument("--eval-episodes", type=int, default=4, help="sampled episodes per held-out problem")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for name in args.envs:
        print(json.dumps({"benchmark": name, **RUNNERS[name](args)}), flush=True)


# --- LURE self-play and the chess pretraining-to-RL testbed -------------------------------------

def lure_rewards(trainer: Any, repeats: int, seed: int) -> dict[str, dict[str, float]]:
    """Per environment: evader reward, capture rate, valid-proposal fraction and mean level of
    ``repeats`` self-play rounds on fixed seeds (no update)."""
    sums: dict[str, float] = {}
    trainer.policy.eval()
    with torch.no_grad():
        for r in range(repeats):
            _, m = trainer.self_play(trainer.policy, 10**6 + seed * 1000 + r)
            for k, v in m.items():
                sums[k] = sums.get(k, 0.0) + v / repeats
    return {env: {"evader_reward": round(sums[f"lure/evader_reward/{env}"], 4),
                  "capture_rate": round(sums[f"lure/capture_rate/{env}"], 4),
                  "progress": round(sums[f"lure/progress/{env}"], 4),
                  "level": round(sums[f"lure/level/{env}"], 3)} for env in trainer.envs}


@runner("lure")
def lure(args: argparse.Namespace) -> dict[str, Any]:
    """LURE on lure_arithmetic and lure_countdown: environment-made warm start, then self-play."""
    import dataclasses
    from rlvr.envs.lure_demos import warm_start
    from rlvr.train.config import load_config
    from rlvr.train.run import make_trainer
    start = time.perf_counter()
    cfg = load_config(str(PRESETS / "lure.yaml"), [
        f"run.seed={args.seed}", f"run.threads={args.threads}", f"run.steps={args.steps}", "run.save_every=0",
        "run.eval_every=0", f"run.out_dir={tempfile.mkdtemp(prefix='rlvr-env-lure-')}", "model.hidden=64",
        "optim.params.evader_group=8", "optim.params.captures_per_task=4"])
    trainer = make_trainer(cfg)
    ws = warm_start(trainer.policy, trainer.tokenizer, list(trainer.envs.values()), steps=args.warm_steps or 400,
                    batch_size=32, lr=3e-3, seed=args.seed)
    trainer.lure = dataclasses.replace(trainer.lure, warm_start_steps=0)  # done above
    before = lure_rewards(trainer, 3, args.seed)
    trainer.train()
    after = lure_rewards(trainer, 3, args.seed)
    return {"preset": "lure", "rl_steps": args.steps, "warm_steps": args.warm_steps or 400,
            "warm_loss": round(ws["loss"], 3), "before": before, "after": after,
            "seconds": round(time.perf_counter() - start, 1)}


@runner("chess")
def chess_testbed(args: argparse.Namespace) -> dict[str, Any]:
    """Pretrain (two budgets) -> SFT on traces -> RL on puzzles; post-RL accuracy per budget."""
    from rlvr.analysis.chess import pretraining_report
    from rlvr.train.chess_pipeline import run_pipeline
    from rlvr.train.config import load_config
    start, runs = time.perf_counter(), []
    for budget in (0, 600):
        cfg = load_config(str(PRESETS / "chess_rl.yaml"), [
            f"run.seed={args.seed}", f"run.threads={args.threads}", f"run.steps={args.steps}",
            "run.save_every=0", "run.eval_every=0", f"run.out_dir={tempfile.mkdtemp(prefix='rlvr-env-chess-')}",
            "model.hidden=64", "rollout.prompts_per_step=8", "rollout.group_size=8"])
        runs.append(run_pipeline(cfg, pretrain_steps=budget, sft_steps=300, games=300, sft_pool=256,
                                 eval_puzzles=48, samples=8))
    report = pretraining_report(runs, slope_window=min(10, args.steps))
    for row, run in zip(report["runs"], runs):
        row.update({"rl_reward_first": run["rl_rewards"][0], "rl_reward_last": run["rl_rewards"][-1],
                    "seconds": round(run["seconds"], 1)})
    return {"env": "chess_puzzles", **report, "seconds": round(time.perf_counter() - start, 1)}


if __name__ == "__main__":
    main()
