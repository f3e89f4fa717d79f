"""The ES training loop: population fitness from verifier rewards, checkpoints, metrics, budgets.

A ``TrainingLoop`` (``rlvr.train.loop``) like the gradient ``Trainer``: ``run_loop`` drives it, so
``rlvr train`` / ``train_run`` run it unchanged, with the same budgets, callbacks and logging. Under
``torchrun`` each rank scores its share of the population and every rank applies the same update
(``rlvr.optim.es.es_step``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch

from rlvr.analysis.diversity import bernoulli, js_diversity
from rlvr.models import render_prompt
from rlvr.optim.es import ESConfig, ESStepResult, es_step, select_parameters
from rlvr.optim.noise import member_seeds
from rlvr.rollout import generate
from rlvr.tasks import verify_all
from rlvr.train.callbacks import run_callbacks
from rlvr.train.checkpoint import load_checkpoint, save_checkpoint
from rlvr.train.collect import step_seed
from rlvr.train.config import Config, write_config
from rlvr.train.logging import PhaseTimer
from rlvr.train.loop import StepOutput, counters, latest_or_raise, load_counters, run_loop
from rlvr.train.pipeline import Pipeline


class NoOptimizerState:
    """ES keeps no optimizer state; checkpoints store an empty one."""

    def state_dict(self) -> dict[str, Any]:
        return {"state": {}, "param_groups": []}


class ESTrainer:
    """Trains ``run.steps`` ES iterations (from ``start_step``, e.g. after a GRPO phase)."""

    def __init__(self, cfg: Config, es: ESConfig, *, model: torch.nn.Module | None = None, tokenizer: Any = None,
                 accelerator: Any = None, start_step: int = 0, start_rollouts: int = 0,
                 start_seconds: float = 0.0, callbacks: list | None = None) -> None:
        from rlvr.train.build import build_model, build_plugin, build_task
        self.cfg, self.es = cfg, es
        self.callbacks = run_callbacks(cfg, callbacks)
        if cfg.run.threads:
            torch.set_num_threads(cfg.run.threads)
        if accelerator is None:
            from accelerate import Accelerator
            accelerator = Accelerator(cpu=not torch.cuda.is_available())
        self.acc = accelerator
        self.run_dir = Path(cfg.run.out_dir)
        self.parts = Pipeline(task=build_task(cfg), selector=build_plugin("selector", cfg.algorithm.selector))
        torch.manual_seed(cfg.run.training_seed)
        if model is None:
            model, tokenizer = build_model(cfg)
        self.model, self.tokenizer = model.to(self.acc.device), tokenizer
        self.params = select_parameters(self.model, es.include, es.exclude)
        self._sync_from_main()
        self.timer = PhaseTimer()
        self.step, self.start_step = start_step, start_step
        self.rollouts_spent, self.seconds_spent = start_rollouts, start_seconds

    @property
    def policy(self) -> torch.nn.Module:
        return self.model

    # --- the loop ---------------------------------------------------------------------------

    def train(self, resume: bool = False, eval_fn: Any = None) -> dict[str, Any]:
        return run_loop(self, resume, eval_fn, desc="es")

    def begin(self, resume: bool) -> dict[str, float]:
        if resume:
            self._resume()
        elif self.acc.is_main_process:
            self._write_run_files()
        return {}

    def loop_step(self) -> StepOutput:
        metrics = self.train_step()
        return StepOutput(metrics, int(metrics["rollout/sampled_rows"]),
                          postfix={"reward": f"{metrics['reward/mean']:.3f}",
                                   "update": f"{metrics['es/update_norm']:.2e}"})

    def next_step_cost(self) -> int:
        """One iteration samples every member's completions (and the centre's, when scored)."""
        return (self.es.population + int(self.es.eval_center)) * self._num_prompts() * self.es.samples_per_prompt

    def finish(self) -> dict[str, Any]:
        return {}

    def heldout_metrics(self) -> dict[str, float]:
        return {}

    def export_model(self) -> torch.nn.Module:
        return self.policy

    def evaluates_here(self) -> bool:
        return self.acc.is_main_process  # replicated weights: the main process evaluates

    def lockstep(self) -> AbstractContextManager:
        return nullcontext()

    def train_step(self) -> dict[str, float]:
        """One ES iteration on this step's prompts; every rank returns the same metrics."""
        es = self.es
        problems = self.parts.selector.select(self.parts.task, self._num_prompts(), self.step,
                                                 step_seed(self.cfg.run.training_seed, self.step))
        n_seeds = es.population // 2 if es.antithetic else es.population
        seeds = member_seeds(self.cfg.run.training_seed, self.step, n_seeds)
        fitness_fn = self._fitness_fn(problems)
        with torch.no_grad():
            metrics = {"reward/center": float(fitness_fn(-1).mean())} if es.eval_center else {}
            with self.timer("es_step"):
                result = es_step(self.params, fitness_fn, seeds, sigma=es.sigma, alpha=es.step_size,
                                 antithetic=es.antithetic, eps=es.eps, ddof=es.ddof,
                                 divide_by_sigma=es.divide_by_sigma, per_tensor=es.per_tensor_noise,
                                 rank=self.acc.process_index, world_size=self.acc.num_processes)
        if not all(torch.isfinite(p).all() for _, p in self.params):
            raise FloatingPointError(f"es step {self.step + 1}: non-finite weights after the update")
        # Selectors learn from the population's mean reward per prompt (the policy's neighbourhood).
        self.parts.selector.observe({"problems": problems, "rewards": result.outcomes.mean(0).float().unsqueeze(1)})
        metrics.update(self._metrics(result, len(problems)))
        metrics.update(self.timer.pop())
        return metrics

    def _fitness_fn(self, problems: list) -> Any:
        """Member k's fitness row: mean verifier reward per prompt (X,), sampled with the member's
        weights. All members share the prompts and the sampling seed (common random numbers), so
        fitness differences come from the weights alone."""
        es, cfg = self.es, self.cfg
        rows = [p for p in problems for _ in range(es.samples_per_prompt)]
        prompts = [render_prompt(self.tokenizer, p) for p in rows]
        seed = step_seed(cfg.run.training_seed, self.step, 0, 1)
        budget = es.max_new_tokens or cfg.rollout.max_new_tokens

        def fitness(k: int) -> torch.Tensor:
            gen = generate(self.model, self.tokenizer, prompts, max_new_tokens=budget,
                           temperature=es.temperature or 1.0, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
                           do_sample=es.temperature > 0, seed=seed)
            scores = verify_all(self.parts.task, rows, gen.texts, cfg.rollout.verify_timeout_s)
            rewards = torch.tensor([s.value for s in scores], dtype=torch.float64)  # (X·samples,)
            return rewards.view(len(problems), es.samples_per_prompt).mean(dim=1)  # (X,)
        return fitness

    def _metrics(self, result: ESStepResult, num_prompts: int) -> dict[str, float]:
        f, es = result.fitness, self.es
        out = {"reward/mean": f.mean().item(), "reward/std": f.std(correction=0).item(),
               "reward/max": f.max().item(), "reward/min": f.min().item(),
               "es/z_abs_mean": result.z.abs().mean().item(), "es/update_norm": result.update_norm,
               "es/sigma": es.sigma, "es/alpha": es.step_size,
               # every completion sampled, the centre's included (the rollout budget)
               "rollout/sampled_rows": float((es.population + int(es.eval_center)) * num_prompts
                                             * es.samples_per_prompt)}
        # Verifier-projected JS diversity of this population (§2.5), binary outcome space.
        out["es/js_diversity"] = js_diversity(bernoulli(result.outcomes.clamp(0, 1))).mean().item()
        return out

    def _num_prompts(self) -> int:
        return self.es.prompts or self.cfg.rollout.prompts_per_step

    # --- state ------------------------------------------------------------------------------

    def _sync_from_main(self) -> None:
        """Every rank starts from rank 0's weights (the gradient trainer gets this from DDP)."""
        if self.acc.num_processes > 1:
            import torch.distributed as dist
            with torch.no_grad():
                for p in self.model.parameters():
                    dist.broadcast(p.data, src=0)

    def save(self) -> Path | None:
        self.acc.wait_for_everyone()
        path = None
        if self.acc.is_main_process:
            empty = NoOptimizerState()
            path = save_checkpoint(self.run_dir, self.step, self.policy, empty, self.state())  # type: ignore[arg-type]
        self.acc.wait_for_everyone()
        return path

    def state(self) -> dict[str, Any]:
        """The phase (a GRPO → ES resume reads it), budget counters and a stateful selector's state."""
        return {"phase": "es", **counters(self),
                "plugins": {"selector": self.parts.selector.state_dict()} if self._stateful_selector else {}}

    def load_state(self, state: dict[str, Any]) -> None:
        load_counters(self, state)
        if self._stateful_selector and "selector" in state.get("plugins", {}):
            self.parts.selector.load_state_dict(state["plugins"]["selector"])

    def _resume(self) -> None:
        self.load_state(load_checkpoint(latest_or_raise(self.run_dir), self.policy, None))

    @property
    def _stateful_selector(self) -> bool:
        sel = self.parts.selector
        return hasattr(sel, "state_dict") and hasattr(sel, "load_state_dict")

    def _write_run_files(self) -> None:
        write_config(self.run_dir, self.cfg)
