"""Hyper-ES (docs/methods.md §2.10): CMA-ES over layer-wise DARE-TIES merge coefficients of a few
gradient-found directions, with the task's verifier reward as fitness.

Loop: K short gradient runs with LoRA adapters (``peft``) from the same base give directions
``Δ_k`` (the LoRA update merged to dense weights); ``LayerwiseMerge`` (``rlvr.optim.merging``)
turns a coefficient array c into weights θ(c); CMA-ES (the ``cma`` package) searches c. Every
candidate of one generation is scored on the same prompts with the same sampling seed (common
random numbers), so fitness differences come from the weights alone.
"""

from __future__ import annotations

import copy
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from rlvr.loops.local_run import LocalRun
from rlvr.optim.merging import GRANULARITIES, LayerwiseMerge
from rlvr.registry import param, register
from rlvr.train.loop import StepOutput, counters, run_loop
from rlvr.train.loop_plugin import LoopPlugin


@dataclass(frozen=True)
class HyperESConfig:
    directions: int = param(2, "K: short gradient fine-tunes (LoRA) that give the search directions")
    direction_steps: int = param(5, "gradient RL steps of each direction run (the configured algorithm)")
    direction_lr: float = param(0.0, "AdamW learning rate of the direction runs (0 = optim.lr)")
    lora_rank: int = param(4, "LoRA rank of the direction runs")
    lora_alpha: float = param(8.0, "LoRA alpha (the update is scaled by alpha / rank)")
    lora_targets: list = param(["q_proj", "v_proj"], "module names that get LoRA adapters")
    dare_drop_p: float = param(0.9, "DARE drop rate p (entries kept with 1 − p, rescaled by 1/(1 − p))")
    ties_keep_rho: float = param(0.2, "TIES: fraction of largest-magnitude entries kept per delta")
    coef_granularity: str = param("layer_direction", "RECONSTRUCTION: c per layer×direction, per direction "
                                                      "(shared by layers) or per layer (disjoint mean of K)")
    c_init: float = param(0.0, "initial value of every coefficient (0 = 1/K; with granularity 'layer' 1)")
    cma_sigma0: float = param(0.3, "CMA-ES initial step size")
    cma_popsize: int = param(0, "CMA-ES population (0 = pycma's 4 + floor(3 ln n), n = number of coefficients)")

    def __post_init__(self) -> None:
        if self.directions < 1 or self.direction_steps < 1:
            raise ValueError(f"hyper_es: directions and direction_steps must be >= 1, got "
                             f"{self.directions}, {self.direction_steps}")
        if self.coef_granularity not in GRANULARITIES:
            raise ValueError(f"hyper_es: coef_granularity must be one of {GRANULARITIES}, "
                             f"got '{self.coef_granularity}'")
        if self.cma_sigma0 <= 0:
            raise ValueError(f"hyper_es: cma_sigma0 must be > 0, got {self.cma_sigma0}")


@register("loop", "hyper_es")
class HyperES(LoopPlugin):
    """CMA-ES over layer-wise DARE-TIES merge coefficients of LoRA directions found by gradient RL.

    Paper: "Hyper-ES" (seed abstract; arXiv id unknown; code named ``kuangrepi/Hyper-ES``, not
    available). RECONSTRUCTION throughout (docs/methods.md §2.10): the composition below, the coefficient
    granularity, c_init, and the fitness (mean verifier reward on one prompt batch per generation).
    DARE (arXiv:2311.03099) and TIES (arXiv:2306.01708) are the standard merges.

    Equation: ``θ(c) = θ_0 + Σ_l Σ_k c_{l,k} · TIESkeep_l(DARE_p(Δ_{k,l}))``, ``Δ_k = θ_k − θ_0``;
    CMA-ES maximises ``F(c) = mean_i r(x_i, y_i)``, ``y_i ∼ π_{θ(c)}(·|x_i)``.

    Differs from ES (``es``):
      * the search space is K·L merge coefficients, not the full weights, so perturbations stay in
        the span of gradient-found directions;
      * the directions come from K short gradient (LoRA) runs before the search;
      * CMA-ES adapts a full covariance over c instead of an isotropic Gaussian with a fixed σ.

    Shapes: c (L, K) | (K,) | (L,); each Δ_k like the adapted weight matrices.
    """

    Config = HyperESConfig
    paper = "Hyper-ES: CMA-ES over DARE-TIES merge coefficients (arXiv id unknown; seed abstract)"

    def trainer(self, cfg: Any, *, model: torch.nn.Module | None = None, tokenizer: Any = None) -> Any:
        return HyperESTrainer(cfg, self.config, model=model, tokenizer=tokenizer)


class CMASearch:
    """A thin maximising wrapper of pycma's ``CMAEvolutionStrategy`` (ask / tell / mean).

    pycma draws from numpy's *global* RNG (and reseeds it); each search keeps its own RNG state and
    swaps it in around pycma calls, so two searches, or other numpy users, never disturb each other."""

    def __init__(self, x0: np.ndarray, sigma0: float, popsize: int = 0, seed: int = 0) -> None:
        import cma  # optional dependency: only Hyper-ES needs it
        opts = {"verbose": -9, "seed": seed + 1}  # pycma reads seed 0 as "random"
        if popsize:
            opts["popsize"] = popsize
        outside = np.random.get_state()
        try:
            self.es = cma.CMAEvolutionStrategy(np.asarray(x0, dtype=float), sigma0, opts)
            self._rng = np.random.get_state()
        finally:
            np.random.set_state(outside)

    def _own_rng(self, fn: Callable[[], Any]) -> Any:
        outside = np.random.get_state()
        np.random.set_state(self._rng)
        try:
            return fn()
        finally:
            self._rng = np.random.get_state()
            np.random.set_state(outside)

    def ask(self) -> list[np.ndarray]:
        return self._own_rng(self.es.ask)

    def tell(self, candidates: list[np.ndarray], fitness: list[float]) -> None:
        self._own_rng(lambda: self.es.tell(candidates, [-float(f) for f in fitness]))  # pycma minimises

    @property
    def mean(self) -> np.ndarray:
        return np.asarray(self.es.mean, dtype=float)

    @property
    def sigma(self) -> float:
        return float(self.es.sigma)

    @property
    def popsize(self) -> int:
        return int(self.es.popsize)


def maximise(fitness: Callable[[np.ndarray], float], x0: np.ndarray, sigma0: float, generations: int,
             popsize: int = 0, seed: int = 0) -> CMASearch:
    """Run ``generations`` of CMA-ES on ``fitness`` (a function of one coefficient vector)."""
    search = CMASearch(x0, sigma0, popsize, seed)
    for _ in range(generations):
        xs = search.ask()
        search.tell(xs, [fitness(x) for x in xs])
    return search


class HyperESTrainer:
    """Directions by LoRA gradient runs, then one CMA-ES generation per ``run.steps`` step (one process:
    its ``run``, a ``LocalRun``, holds the set-up)."""

    def __init__(self, cfg: Any, config: HyperESConfig, *, model: torch.nn.Module | None = None,
                 tokenizer: Any = None) -> None:
        self.run = LocalRun(cfg, "hyper_es", model=model, tokenizer=tokenizer,
                            no_resume=" (the CMA-ES state is not checkpointed)")
        self.cfg, self.acc, self.run_dir, self.parts = cfg, self.run.acc, self.run.run_dir, self.run.parts
        self.callbacks, self.model, self.tokenizer = self.run.callbacks, self.run.model, self.run.tokenizer
        self.timer, self.collector = self.run.timer, self.run.collector
        self.step, self.rollouts_spent, self.seconds_spent = 0, 0, 0.0
        self.last_cost = 0  # completions the last generation sampled: what the next one will
        self.config = config
        self.merge: LayerwiseMerge | None = None
        self.search: CMASearch | None = None

    @property
    def policy(self) -> torch.nn.Module:
        return self.model

    def train(self, resume: bool = False, eval_fn: Any = None) -> dict[str, Any]:
        return run_loop(self, resume, eval_fn, desc="hyper_es")

    def begin(self, resume: bool) -> dict[str, float]:
        """Refuse a resume, write config.yaml, run the K direction runs (their time and rollouts count
        towards the budgets); their metrics go with the first generation's."""
        self.run.start(resume)
        start = time.perf_counter()
        direction_metrics = self._directions()
        self.seconds_spent = time.perf_counter() - start
        return direction_metrics

    def next_step_cost(self) -> int:
        """A generation scores ``popsize`` candidates on one batch each: before the first, that many
        first rounds; then what the last generation sampled."""
        if self.last_cost or self.search is None:
            return self.last_cost
        return self.search.popsize * self.cfg.rollout.prompts_per_step * self.cfg.rollout.group_size

    def loop_step(self) -> StepOutput:
        metrics, sampled = self.generation()
        self.last_cost = sampled
        return StepOutput(metrics, sampled, postfix={"reward": f"{metrics['reward/mean']:.3f}",
                                                     "sigma": f"{metrics['es/sigma']:.3f}"})

    def finish(self) -> dict[str, Any]:
        return {"coefficients": self.search.mean.tolist()}

    def _directions(self) -> dict[str, float]:
        """K LoRA gradient runs from the base; build the merge and the CMA-ES search."""
        with self.timer("directions"):
            deltas, metrics = find_directions(self.cfg, self.config, self.model, self.tokenizer)
        self.rollouts_spent += int(metrics.pop("directions/sampled_rows"))
        base = {n: p for n, p in self.model.named_parameters() if n in deltas[0]}
        k = self.config.directions
        self.merge = LayerwiseMerge(base, deltas, drop_p=self.config.dare_drop_p, keep_rho=self.config.ties_keep_rho,
                                    granularity=self.config.coef_granularity, seed=self.cfg.run.training_seed)
        default = 1.0 if self.config.coef_granularity == "layer" else 1.0 / k
        x0 = np.full(self.merge.num_coefficients, self.config.c_init or default)
        self.search = CMASearch(x0, self.config.cma_sigma0, self.config.cma_popsize, self.cfg.run.training_seed)
        metrics["es/num_coefficients"] = float(self.merge.num_coefficients)
        return {**metrics, **self.timer.pop()}

    def generation(self) -> tuple[dict[str, float], int]:
        """Score every candidate θ(c) on this step's prompts, update CMA-ES, set θ(mean). Returns the
        metrics and the completions sampled."""
        candidates = self.search.ask()
        fitness, stats, sampled = [], [], 0
        for c in candidates:
            with self.timer("merge"):
                self.merge.apply(self.model, c)
            with torch.no_grad():
                _, s = self.collector.collect(self.model, self.step)  # same step: same prompts, same seeds
            fitness.append(s["reward/mean"])
            stats.append(s)
            sampled += int(s["rollout/generated_completions"])
        with self.timer("cma"):
            self.search.tell(candidates, fitness)
        self.merge.apply(self.model, self.search.mean)
        f = np.asarray(fitness)
        mean = self.search.mean
        metrics = {k: float(np.mean([s[k] for s in stats])) for k in stats[0]}
        metrics.update({"reward/mean": float(f.mean()), "reward/best": float(f.max()), "reward/std": float(f.std()),
                        "es/sigma": self.search.sigma, "es/popsize": float(len(candidates)),
                        "es/coef_mean": float(mean.mean()), "es/coef_abs_mean": float(np.abs(mean).mean())})
        metrics.update(self.timer.pop())
        return metrics, sampled

    def save(self) -> Path:
        return self.run.save(self.step, self.model, self.state())

    def state(self) -> dict[str, Any]:
        """Budget counters and the search's mean and step size (for reading; resume is refused)."""
        return {**counters(self), "coefficients": self.search.mean.tolist() if self.search else [],
                "cma_sigma": self.search.sigma if self.search else None}

    def load_state(self, state: dict[str, Any]) -> None:
        self.run.refuse_resume()

    # --- the one-process answers of the TrainingLoop protocol -----------------------------------

    def heldout_metrics(self) -> dict[str, float]:
        return {}

    def export_model(self) -> torch.nn.Module:
        return self.policy

    def evaluates_here(self) -> bool:
        return True  # one process

    def lockstep(self) -> AbstractContextManager:
        return nullcontext()


def find_directions(cfg: Any, config: HyperESConfig, base: torch.nn.Module,
                    tokenizer: Any) -> tuple[list[dict[str, torch.Tensor]], dict[str, float]]:
    """K short LoRA runs of the gradient trainer from ``base`` (seeds ``run.seed + 1 + k``); returns
    the dense deltas ``θ_k − θ_0`` (float64, exact) of every weight some run changed, and metrics."""
    from peft import LoraConfig, get_peft_model
    from rlvr.loops.gradient import GRADIENT_TRAINER
    from rlvr.train.config import replace
    from rlvr.train.trainer import Trainer
    theta0 = {n: p.detach().clone() for n, p in base.named_parameters()}
    lr = config.direction_lr or cfg.optim.lr
    dense, metrics, rows = [], {}, 0.0
    for k in range(config.directions):
        lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=0.0,
                          target_modules=list(config.lora_targets))
        peft_model = get_peft_model(copy.deepcopy(base), lora)
        cfg_k = replace(cfg, optim={"name": GRADIENT_TRAINER, "params": {}, "lr": lr},
                        run={"seed": cfg.run.training_seed + 1 + k, "rl_seed": None,
                             "out_dir": str(Path(cfg.run.out_dir) / "directions")})
        trainer = Trainer(cfg_k, model=peft_model, tokenizer=tokenizer)
        rewards = []
        for _ in range(config.direction_steps):
            step_metrics, _ = trainer.train_step()
            rewards.append(step_metrics["reward/mean"])
            rows += step_metrics["rollout/generated_completions"]
        merged = trainer.policy.merge_and_unload()
        dense.append({n: p.detach().to(theta0[n].device) for n, p in merged.named_parameters()})
        metrics[f"directions/reward_mean_{k}"] = float(np.mean(rewards))
    changed = sorted({n for d in dense for n, p in d.items() if not torch.equal(p, theta0[n])})
    if not changed:
        raise RuntimeError("hyper_es: the direction runs changed no weight (no reward signal in "
                           f"{config.direction_steps} steps?); raise direction_steps or direction_lr")
    deltas = [{n: d[n].double() - theta0[n].double() for n in changed} for d in dense]
    for k, d in enumerate(deltas):
        metrics[f"directions/norm_{k}"] = float(sum(v.pow(2).sum() for v in d.values()) ** 0.5)
    metrics["directions/sampled_rows"] = rows
    return deltas, metrics
