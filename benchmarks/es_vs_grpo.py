"""ES against GRPO on the arithmetic testbed: pass@k coverage, JS diversity, peak memory (docs/methods.md §2.5).

One warm start (the quickstart's: >= 400 supervised steps until 20 % validation accuracy), saved
once; then GRPO and ES each train from it in their own subprocess (so each one's peak resident
memory is its own), under the same rollout budget by default, and are evaluated on the same
held-out problems: greedy accuracy, pass@1..k (k samples at temperature 1, unbiased estimator),
the verifier-projected JS diversity of a σ-population around the final weights (greedy members,
binary and distinct-answer outcome spaces), and for ES the functional-sparsity probe. Prints JSON.

    python benchmarks/es_vs_grpo.py     # 5m50s on 1 thread on a loaded 2-core machine (warm start 158 s of it)
    python benchmarks/es_vs_grpo.py --es-steps 60 --grpo-steps 480 --threads 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/bench/es_vs_grpo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--es-steps", type=int, default=30, help="ES iterations")
    ap.add_argument("--population", type=int, default=16)
    ap.add_argument("--es-prompts", type=int, default=16, help="prompts per ES iteration (greedy, 1 sample)")
    ap.add_argument("--sigma", type=float, default=0.01)
    ap.add_argument("--alpha", type=float, default=0.0, help="0 = sigma/2")
    ap.add_argument("--grpo-steps", type=int, default=0, help="0 = the ES rollout budget / 64 (8 prompts x 8)")
    ap.add_argument("--lr", type=float, default=1e-4, help="GRPO AdamW learning rate")
    ap.add_argument("--eval-problems", type=int, default=100)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--js-members", type=int, default=8)
    ap.add_argument("--worker", choices=["grpo", "es"], default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def _rss_mb() -> float:
    """Resident memory now (Linux /proc; falls back to the peak so far)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class PeakRSS:
    """Samples resident memory every 5 ms in a thread: the peak while a block runs."""

    def __enter__(self) -> "PeakRSS":
        self.start, self.peak, self._stop = _rss_mb(), _rss_mb(), threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss_mb())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_mb())


def _config(args: argparse.Namespace, method: str):
    from rlvr.train.config import load_config
    out = Path(args.out)
    base = {"model": {"path": str(out / "warm")}, "task": {"name": "arithmetic"}, "warm_start": {"steps": 0},
            "optim": {"lr": args.lr},
            "run": {"seed": args.seed, "threads": args.threads, "out_dir": str(out / method), "eval_every": 0,
                    "save_every": 0, "eval_problems": args.eval_problems, "eval_k": args.k}}
    if method == "es":
        base["optim"] = {"name": "es", "params": {"sigma": args.sigma, "alpha": args.alpha,
                                                  "population": args.population, "prompts": args.es_prompts}}
        base["run"]["steps"] = args.es_steps
    else:
        base["run"]["steps"] = args.grpo_steps or max(1, args.es_steps * args.population * args.es_prompts // 64)
    return load_config(None, base=base)


def _evaluate(model: torch.nn.Module, tokenizer, task, problems: list, cfg, args) -> dict:
    from rlvr.analysis.diversity import population_diversity
    from rlvr.eval import evaluate
    from rlvr.optim import member_seeds, select_parameters
    ev = evaluate(model, tokenizer, task, problems, k=args.k, max_new_tokens=cfg.rollout.max_new_tokens,
                  temperature=1.0, seed=args.seed)
    ks = [k for k in (1, 2, 4, 8, 16, 32) if k <= args.k]
    js = population_diversity(model, tokenizer, task, problems, select_parameters(model),
                              member_seeds(args.seed, 10**6, args.js_members), args.sigma,
                              max_new_tokens=cfg.rollout.max_new_tokens, seed=args.seed)
    return {"greedy_accuracy": ev["greedy_accuracy"], **{f"pass@{k}": ev[f"pass@{k}"] for k in ks},
            f"maj@{args.k}": ev[f"maj@{args.k}"], "js_diversity": js}


def worker(args: argparse.Namespace) -> None:
    """Train one method from the saved warm start; print its JSON line."""
    from rlvr.train.run import heldout, make_trainer
    torch.set_num_threads(args.threads)
    cfg = _config(args, args.worker)
    trainer = make_trainer(cfg)
    model = trainer.policy
    theta0 = {k: v.detach().clone() for k, v in model.named_parameters()}
    start = time.perf_counter()
    with PeakRSS() as rss:
        result = trainer.train()
    seconds = time.perf_counter() - start
    task = trainer.parts["task"]
    problems = heldout(task, args.eval_problems, args.seed)
    out = {"train": {**result, "seconds": round(seconds, 1)},
           "memory": {"rss_before_training_mb": round(rss.start, 1), "rss_peak_training_mb": round(rss.peak, 1),
                      "rss_growth_mb": round(rss.peak - rss.start, 1), **_state_mb(model, args.worker)},
           "eval": _evaluate(model, trainer.tokenizer, task, problems, cfg, args)}
    if args.worker == "es":
        out["sparsity"] = _sparsity(model, theta0, trainer.tokenizer, task, problems, cfg)
    print("RESULT " + json.dumps(out))


def _state_mb(model: torch.nn.Module, method: str) -> dict:
    """Training state beyond the weights: ES keeps one snapshot of θ; AdamW keeps grads + 2 moments."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    extra = weights if method == "es" else 3 * weights
    return {"weights_mb": round(weights / 2**20, 2), "training_state_mb": round(extra / 2**20, 2)}


def _sparsity(model, theta0: dict, tokenizer, task, problems: list, cfg) -> list[dict]:
    from rlvr.analysis.sparsity import sparsity_probe
    from rlvr.eval import evaluate
    theta = {k: v.detach().clone() for k, v in model.named_parameters()}

    def reward(m: torch.nn.Module) -> float:
        return evaluate(m, tokenizer, task, problems, k=0, max_new_tokens=cfg.rollout.max_new_tokens)["greedy_accuracy"]
    rows = sparsity_probe(model, theta0, theta, [0.01, 0.1, 0.5, 1.0], reward)
    return [{k: (None if isinstance(v, float) and math.isnan(v) else round(v, 4) if isinstance(v, float) else v)
             for k, v in r.items()} for r in rows]


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    if args.worker:
        return worker(args)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    warm = _warm_start(args, out)
    report = {"setting": {k: v for k, v in vars(args).items() if k != "worker"}, "warm_start": warm, "methods": {}}
    for method in ("grpo", "es"):
        cmd = [sys.executable, str(Path(__file__).resolve()), *(argv if argv is not None else sys.argv[1:]),
               "--worker", method]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            report["methods"][method] = {"error": proc.stderr[-2000:]}
            continue
        report["methods"][method] = json.loads(line[len("RESULT "):])
    print(json.dumps(report, indent=1))


def _warm_start(args: argparse.Namespace, out: Path) -> dict:
    """The shared starting policy, saved once under OUT/warm (reused when present), and its scores."""
    from rlvr.train.build import build_task
    from rlvr.train.config import load_config
    from rlvr.train.run import heldout, warm_start_model
    folder = out / "warm"
    cfg = load_config(None, base={"task": {"name": "arithmetic"}, "run": {"seed": args.seed, "threads": args.threads},
                                  "warm_start": {"steps": 400, "target_accuracy": 0.2, "max_steps": 1000}})
    info: dict = {"reused": (folder / "config.json").exists()}
    if not info["reused"]:
        model, tokenizer, ws = warm_start_model(cfg)
        folder.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        info.update({k: v for k, v in ws.items() if k in ("warm_start_steps", "warm_start_seconds")})
    from rlvr.models import load_model, load_tokenizer
    model, tokenizer = load_model(folder), load_tokenizer(folder)
    task = build_task(cfg)
    info["eval"] = _evaluate(model, tokenizer, task, heldout(task, args.eval_problems, args.seed), cfg, args)
    return info


if __name__ == "__main__":
    main()
