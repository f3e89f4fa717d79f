"""The RL trainer: one step of RL read top to bottom in ``train_step``, one timer per stage
(docs/design.md §2). It composes a collector (the data half: select → rollout → verify → shape
→ refine; a ``Collector``, the asynchronous one, or one handed in, as LURE's self-play), a ``Scorer``
(every no-grad scoring pass) and an ``Updater`` (reweight → loss → update), each built once here from
explicit parts.

select → rollout → verify → shape → refine → advantage → reweight → loss → update → observe

Runs in one process or data-parallel under ``torchrun`` / ``accelerate launch`` (each rank
generates for its share of prompts; losses use global normalisers so the gradient equals the
single-process gradient of the same global batch), replicated (DDP) or sharded (FSDP2): the
backend's hooks (clipping, lock-step forwards, full state dicts) are ``rlvr.train.sharding``.
"""

from __future__ import annotations

import copy
import json
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable

import torch
from accelerate import Accelerator

from rlvr.collectives import collective_device
from rlvr.critic import Critic, mc_returns
from rlvr.files import write_text_atomic
from rlvr.losses.objective import NonFiniteLossError
from rlvr.models import render_prompt
from rlvr.models.lora import add_lora, base_state_dict, is_lora, reference_of
from rlvr.rewards.functions import objective_weights
from rlvr.rollout.engines.base import generation_phase
from rlvr.rollout.warm_start import warm_start_by
from rlvr.sandbox.pool import uses_pool, verifier_pool
from rlvr.train import deepspeed_backend as ds
from rlvr.train.build import build_model, build_optimizer, build_pipeline
from rlvr.train.callbacks import run_callbacks
from rlvr.train.checkpoint import latest_checkpoint, load_checkpoint, load_weights, save_checkpoint, save_weights
from rlvr.train.async_check import check_async_device
from rlvr.train.async_collect import AsyncCollector
from rlvr.train.collect import Collector, StepCollector
from rlvr.train.config import Config, ConfigError, write_config
from rlvr.train.global_batch import (apply_row_weights, gather_feedback, local_inputs, rows_over_ranks,
                                    sum_over_ranks)
from rlvr.train.logging import PhaseTimer
from rlvr.train.memory import bound_kernel_caches, pages_released_between_layers, release_free_pages
from rlvr.train.loop import StepOutput, counters, latest_or_raise, load_counters, run_loop
from rlvr.train.movement import Movement
from rlvr.train.pipeline import Pipeline
from rlvr.train.precision import autocast, configure_policy, grad_scaler, hold_frozen
from rlvr.train.sharding import Sharding, make_accelerator
from rlvr.train.truncation import eos_token_ids, mask_truncated
from rlvr.train.scorer import Scorer
from rlvr.train.updater import Updater
from rlvr.train.validate import context_length, fit_prompts
from rlvr.train.warm_start import weak_warm_start
from rlvr.types import METRICS_KEY, AdvantageInputs, Rollouts


class Trainer:
    """Builds a run from a ``Config`` and trains it; ``train()`` returns the summary."""

    def __init__(self, cfg: Config, *, model: torch.nn.Module | None = None, tokenizer: Any = None,
                 accelerator: Accelerator | None = None, callbacks: list | None = None,
                 parts: Pipeline | None = None, collector: Callable[..., StepCollector] | None = None) -> None:
        """``parts``: the run's plug-ins as ``build_pipeline(cfg)`` gives them (``validate_run`` built them);
        built here when not given. ``collector``: the data half's class (or factory), called with the
        ``Collector``'s keyword arguments; the ``Collector``, or the ``AsyncCollector`` under
        ``rollout.async_rollout``, by default."""
        self.cfg = cfg
        self.callbacks = run_callbacks(cfg, callbacks)  # rlvr.train.callbacks
        bound_kernel_caches()  # oneDNN's per-shape caches (rlvr.train.memory); from Python, before any product
        if cfg.run.threads:
            torch.set_num_threads(cfg.run.threads)
        # On a machine without GPUs accelerate only goes multi-process (gloo) when told cpu=True.
        self.acc = accelerator or make_accelerator()
        try:  # before any loading: the generator process holds a CPU copy, refused on an accelerator
            check_async_device(cfg, self.acc.device)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        self.sharding = Sharding(self.acc)  # one process, DDP, FSDP2 or DeepSpeed: what differs lives there
        self.held_bytes = 0  # frozen weights stored in the compute dtype instead of float32 (_hold)
        ds.check_supported(self.acc, cfg)
        self.run_dir = Path(cfg.run.out_dir)
        self.parts = build_pipeline(cfg) if parts is None else parts  # fails fast on unknown plug-ins or keys
        torch.manual_seed(cfg.run.training_seed)
        built = model is None
        if built:
            # the main process reads model.path and the others receive it, unless loading is a collective
            model, tokenizer = build_model(cfg, None if self.sharding.loads_collectively else self.acc)
        configure_policy(model, cfg)  # dtype, attention, checkpointing (also for a model passed in)
        fit_prompts(self.parts.task, tokenizer, context_length(model), cfg.rollout.max_new_tokens)
        self.tokenizer = tokenizer
        # The critic copies the plain backbone (init: policy) before any adapter goes on the policy.
        self.critic = Critic(cfg.critic, model, tokenizer, self.acc, cfg.run.steps,
                             self.sharding) if cfg.critic.enabled else None
        model.zero_grad(set_to_none=True)  # gradients a warm start left would join the first step's
        if cfg.model.lora is not None and not is_lora(model):
            model = add_lora(model, cfg.model.lora, seed=cfg.run.training_seed)
        if is_lora(model):  # the frozen base (and so the reference, its adapter-off view) in the compute dtype
            self.held_bytes = self._hold(model)
        self.ref_model, self._ref_on_disk = self._reference(model, base_from_path=built and bool(cfg.model.path))
        optimizer, self.scheduler = build_optimizer(cfg, model)
        if ds.active(self.acc):
            ds.configure(self.acc, cfg)
        self.model, self.optimizer = self.acc.prepare(model, optimizer)
        self.scaler = grad_scaler(cfg, self.acc.device)  # fp16 mixed precision only
        if self.ref_model is not None and not is_lora(model):  # the frozen copy follows the policy
            self.ref_model = self.sharding.prepare_frozen(self.ref_model)  # (sharded like it)
        self.timer = PhaseTimer()
        self.scorer = Scorer(cfg, self.policy, self.acc.device)
        self.updater = Updater(cfg=cfg, model=self.model, policy=self.policy, optimizer=self.optimizer,
                               scheduler=self.scheduler, scaler=self.scaler, acc=self.acc, sharding=self.sharding,
                               objective=self.parts.objective, weightings=self.parts.weightings,
                               tokenizer=tokenizer, scorer=self.scorer, timer=self.timer, critic=self.critic)
        make = collector or (AsyncCollector if cfg.rollout.async_rollout.enabled else Collector)
        self.collector: StepCollector = make(
            task=self.parts.task, selector=self.parts.selector, shapers=self.parts.shapers,
            filters=self.parts.filters, rollout_cfg=cfg.rollout, tokenizer=tokenizer, seed=cfg.run.training_seed,
            rank=self.acc.process_index, world_size=self.acc.num_processes, timer=self.timer,
            sampler=self.parts.sampler, reference=self.ref_model, reward_functions=self.parts.reward_functions,
            rows_over_ranks=lambda rows: rows_over_ranks(self.acc, rows))
        with warm_start_by(weak_warm_start):  # a weak model from the run's own warm start (prefix)
            self.parts.sampler.prepare(cfg, tokenizer, self.run_dir, self.acc.is_main_process)
        self.step = 0
        self.rollouts_spent = 0  # completions sampled so far, all ranks (the rollout budget)
        self.first_round_cost = 0  # the last step's first sampling round, all ranks (next_step_cost)
        self.seconds_spent = 0.0  # RL wall-clock so far, across resumes (the time budget)

    # --- the loop ---------------------------------------------------------------------------

    def train(self, resume: bool = False, eval_fn: Any = None) -> dict[str, Any]:
        """Run ``run.steps`` steps (continuing from the latest checkpoint when ``resume``), verifying
        in a pool of ``rollout.verify_workers`` processes that ends with the run, errors included."""
        needed = uses_pool(self.parts.task, self.parts.reward_functions)
        with verifier_pool(self.cfg.rollout.verify_workers, prestart=needed,
                           memory_mb=self.cfg.rollout.verify_memory_mb), self.sharding.lockstep(), \
                self.collector.session():  # the generator process of rollout.async_rollout, if any
            return run_loop(self, resume, eval_fn, desc="rl")

    def begin(self, resume: bool) -> dict[str, float]:
        """Restore the latest checkpoint, or write config.yaml (and the reference a resume needs)."""
        if resume:
            self._resume()
        else:
            self._write_run_files()
        self.collector.begin(self.policy, resume)
        return {}

    def loop_step(self) -> StepOutput:
        """``train_step`` as ``run_loop`` takes it; a non-finite loss leaves the weights as they were."""
        try:
            metrics, batch = self.train_step()
        except NonFiniteLossError as err:
            self.optimizer.zero_grad(set_to_none=True)
            last = latest_checkpoint(self.run_dir)
            raise NonFiniteLossError(f"step {self.step + 1}: {err}; the weights were not updated; last "
                                     f"checkpoint: {last or 'none'}") from err
        # the next step's first round costs what this one's did (the same prompts and group size); a
        # loop that collects without the Collector's rounds (LURE's self-play) costs what this step did
        first = metrics.get("rollout/first_round_completions", metrics["rollout/generated_completions"])
        self.first_round_cost = round(first * self.acc.num_processes)
        return StepOutput(metrics, round(metrics["rollout/generated_completions"] * self.acc.num_processes),
                          samples=_samples(batch, self.cfg.run.log_samples, self.tokenizer),
                          postfix={"reward": f"{metrics.get('reward/mean', 0):.3f}",
                                   "loss": f"{metrics['loss/total']:.4f}"})

    def next_step_cost(self) -> int:
        """The last step's first sampling round on all ranks (before the first step: a batch's rows,
        prompts × group size): a step needs at least that; its refill rounds are capped inside the
        step (``_rollouts_left``)."""
        return self.first_round_cost or self.cfg.rollout.prompts_per_step * self.cfg.rollout.group_size

    def _rollouts_left(self) -> int | None:
        """This rank's share of what ``run.max_rollouts`` still allows (None: no rollout budget)."""
        cap = self.cfg.run.max_rollouts
        return None if not cap else max(0, cap - self.rollouts_spent) // self.acc.num_processes

    def finish(self) -> dict[str, Any]:
        return {}

    def train_step(self) -> tuple[dict[str, float], Rollouts]:
        """One RL step on a freshly collected batch, its stages in order, each under its own timer."""
        model = self.policy
        model.eval()
        # select → rollout → verify → shape → refine: this rank's batch (the Collector times each stage)
        # one generation phase: an engine with sleep mode wakes once for the step and sleeps once after
        with torch.no_grad(), autocast(self.cfg, self.acc.device), generation_phase():
            batch, metrics = self.collector.collect(model, self.step, self._rollouts_left())
        warm = self.critic is not None and self.critic.warming_up(self.step)  # only the critic trains
        with self.timer("advantage"):  # values, the estimator (or the collector's), the selector's row weights
            feedback = self._advantage(batch, metrics, model)
        if self.cfg.algorithm.kl_coef > 0 and not warm:
            with self.timer("loss"), torch.no_grad():  # the KL term's reference log-probs (N, T)
                batch.ref_logprobs = self.scorer(batch, self.ref_model)[0]
        model.train()
        movement = Movement(None if warm else self.parts.selector.update_measure, self._trainable(),
                            lambda: self.scorer(batch)[0], batch.completion_mask,
                            lambda stats: sum_over_ranks(self.acc, stats))
        with self.timer("update"):
            release_free_pages()  # the rollout's freed pages, before the update's peak (rlvr.train.memory)
            movement.start()
        # reweight → loss → update: ppo_epochs × mini-batches × micro-batches (the Updater times each)
        with pages_released_between_layers(self.model):  # the passes' freed pages too (rlvr.train.memory)
            metrics.update({"loss/total": 0.0} if warm else self.update(batch))
        with self.timer("update"):  # how far the step moved the policy, then the critic's own update
            metrics.update(movement.finish())
            if self.critic is not None:
                norm = self.updater.normalisers(batch.completion_mask)  # global, as the policy's losses
                metrics.update(self.critic.update(batch, batch.returns, norm))
                metrics["critic/warmup"] = float(warm)
        metrics.update(batch.meta.get(METRICS_KEY, {}))  # what shapers and filters report
        with self.timer("observe"):
            self.parts.selector.observe({**feedback, "metrics": metrics})
        metrics.update(self.timer.pop())
        metrics["optim/lr"] = self.scheduler.get_last_lr()[0]
        return self._mean_over_ranks(metrics), batch

    def update(self, batch: Rollouts) -> dict[str, float]:
        """The reweight, loss and update stages on ``batch`` (``Updater.update``)."""
        return self.updater.update(batch)

    # --- the advantage stage ----------------------------------------------------------------

    def _advantage(self, batch: Rollouts, metrics: dict[str, float], model: torch.nn.Module) -> dict[str, Any]:
        """Values (critic), advantages, the selector's row weights and truncation masking on ``batch``;
        returns the selector's feedback (the global batch, so every rank's selector sees the same rows)."""
        selector = self.parts.selector
        feedback = gather_feedback(self.acc, batch, selector.feedback_meta)
        if self.critic is not None:
            metrics.update(self.critic.predict(batch))
        if self.collector.sets_advantages:  # the collector's own credit (LURE's self-play)
            metrics.update(_advantage_metrics(batch.advantages, batch.completion_mask))
        else:
            self._advantages(batch, metrics)
        metrics.update(apply_row_weights(batch, selector.row_weights(feedback), feedback["offset"]))
        if self.cfg.algorithm.mask_truncated_completions:  # loss only: rewards counted in the baselines
            metrics["rollout/masked_truncated_frac"] = mask_truncated(batch, eos_token_ids(model, self.tokenizer))
        return feedback

    def _advantages(self, batch: Rollouts, metrics: dict[str, float]) -> None:
        weights = self.cfg.algorithm.reward_weights
        if self.parts.reward_functions:  # [correct, *task objectives] weights + each function's own
            try:
                weights = objective_weights(batch.reward_names, weights, self.parts.reward_functions)
            except ValueError as err:
                raise ConfigError(str(err)) from None
        elif weights and len(weights) != batch.rewards.shape[1]:
            raise ConfigError(f"algorithm.reward_weights has {len(weights)} entries but the task gives "
                              f"{batch.rewards.shape[1]} objectives {batch.reward_names}")
        estimator = self.parts.advantage
        if estimator.needs_entropy:  # the sampling policy's token entropies (N, T)
            batch.entropy = self.scorer(batch, entropy=True)[1]
        inputs = AdvantageInputs(rewards=batch.rewards, mask=batch.completion_mask, group_ids=batch.group_ids,
                                 token_rewards=batch.token_rewards, values=batch.values,
                                 logprobs=batch.rollout_logprobs, first_mistake=self._first_mistakes(batch),
                                 reward_weights=torch.tensor(weights, dtype=torch.float32) if weights else None,
                                 entropy=batch.entropy, plan_ids=batch.plan_ids, role_mask=batch.role_mask,
                                 turn_baselines=batch.turn_baselines)
        inputs = local_inputs(batch, inputs)  # no rows when this rank holds only fully masked rows
        if self.acc.num_processes > 1:  # batch statistics of the global batch, not this rank's rows
            inputs.global_stats = sum_over_ranks(self.acc, estimator.batch_stats(inputs))
        result = estimator(inputs)
        returns = result.returns if result.returns is not None or self.critic is None else mc_returns(inputs)
        if inputs.mask.shape[0] != batch.num_rows:  # fully masked rows: nothing to train, nothing to fit
            result.advantages = torch.zeros(batch.completion_mask.shape, device=batch.completion_mask.device)
            returns = torch.zeros_like(result.advantages)
        batch.advantages = result.advantages
        if self.critic is not None:  # value targets: the estimator's returns, else Monte-Carlo
            batch.returns = returns
        metrics.update(_advantage_metrics(result.advantages, batch.completion_mask))
        metrics.update({f"adv/{k}": float(v) for k, v in result.metrics.items()})

    def _first_mistakes(self, batch: Rollouts) -> torch.Tensor | None:
        """(N,) token index of each row's first wrong step, from the teacher (only when one is needed)."""
        teacher = self.parts.teacher
        if teacher is None:
            return None
        from rlvr.rewards.teacher import first_mistake_tokens
        return first_mistake_tokens(teacher, batch.problems, batch.texts, self.tokenizer,
                                    batch.completion_ids, batch.attention)

    def _trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.policy.parameters() if p.requires_grad]

    def _mean_over_ranks(self, metrics: dict[str, float]) -> dict[str, float]:
        """Average every metric over data-parallel ranks (loss shares average to the global loss)."""
        if self.acc.num_processes == 1:
            return metrics
        keys = sorted(metrics)
        local = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64,
                             device=collective_device(self.acc))  # (M,) on the collective's device
        return dict(zip(keys, self.acc.reduce(local, "mean").tolist()))

    # --- state ------------------------------------------------------------------------------

    @property
    def policy(self) -> torch.nn.Module:
        """The unwrapped policy (no DDP wrapper), for generation and evaluation."""
        return self.acc.unwrap_model(self.model)

    def export_model(self) -> torch.nn.Module:
        """The policy to write as ``RUN/final`` (main process): itself, or when sharded, the one-process
        policy rebuilt from the last checkpoint (``train`` ends with one), as ``rlvr export`` does."""
        if not self.sharding.sharded:
            return self.policy
        from rlvr.train.run_policy import load_run_policy
        return load_run_policy(self.run_dir)[0]

    def heldout_metrics(self) -> dict[str, float]:
        return self.collector.heldout_metrics(self.policy)  # most have none (LURE's pursuit capture)

    def evaluates_here(self) -> bool:
        return self.acc.is_main_process or self.sharding.sharded

    def lockstep(self) -> AbstractContextManager:
        return self.sharding.lockstep()

    def save(self) -> Path | None:
        self.acc.wait_for_everyone()
        # Every rank joins the gathers of a sharded model; the main process writes (full tensors).
        weights, optim = self._full_state(self.policy, self.optimizer)
        extras = {name: self._full_state(module, opt)
                  for name, (module, opt) in (self.critic.checkpoint_parts() if self.critic else {}).items()}
        path = None
        if self.acc.is_main_process:
            path = save_checkpoint(self.run_dir, self.step, weights, optim, self.state(), extras=extras or None)
            if self.collector.moves_reference:  # resume continues from the anchor it moved to (LURE's round)
                save_weights(self.run_dir / "reference", self.ref_model)
        self.acc.wait_for_everyone()
        return path

    def state(self) -> dict[str, Any]:
        """The LR schedule (plain numbers; lr_lambdas: [None]), budget counters, stateful plug-ins."""
        return {"scheduler": self.scheduler.state_dict(), **counters(self),
                "plugins": {k: p.state_dict() for k, p in self._stateful_plugins().items()}}

    def load_state(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state["scheduler"])
        load_counters(self, state)
        for key, plugin in self._stateful_plugins().items():  # e.g. FADE's entropy target
            if key in state.get("plugins", {}):
                plugin.load_state_dict(state["plugins"][key])

    def _full_state(self, module: torch.nn.Module, optimizer: Any) -> tuple[dict, dict]:
        """Full (unsharded) weights — a LoRA policy's adapter only — and optimizer state, as one process saves them."""
        names = {n for n, p in module.named_parameters() if p.requires_grad} if is_lora(module) else None
        return self.sharding.model_state(module, names), self.sharding.optimizer_state(module, optimizer)

    def _resume(self) -> None:
        if ds.active(self.acc):
            raise ConfigError("resume under DeepSpeed is not supported: its checkpoints hold the weights but not "
                              "ZeRO's sharded optimizer state; start a new run from RUN/final (model.path)")
        path = latest_or_raise(self.run_dir)
        state = load_checkpoint(path, self.policy, self.optimizer, verify=False,  # latest_checkpoint verified it
                                extras=None if self.critic is None else self.critic.checkpoint_parts(),
                                sharding=self.sharding)
        self.load_state(state)
        if self._ref_on_disk:
            load_weights(self.run_dir / "reference", self.ref_model, sharding=self.sharding)

    def _stateful_plugins(self) -> dict[str, Any]:
        """Plug-ins that keep state across steps (they define state_dict / load_state_dict)."""
        named = {"advantage": self.parts.advantage, "selector": self.parts.selector, "critic": self.critic}
        for kind in Pipeline.STATEFUL_LISTS:
            named.update({f"{kind}.{i}": p for i, p in enumerate(getattr(self.parts, kind))})
        return {k: p for k, p in named.items() if hasattr(p, "state_dict") and hasattr(p, "load_state_dict")}

    def _write_run_files(self) -> None:
        """config.yaml, and the frozen reference when resume cannot rebuild it (every rank calls: a
        sharded reference is gathered; the main process writes)."""
        reference = None
        if self._ref_on_disk:  # a LoRA reference: the policy's frozen base, under the policy's names
            lora = is_lora(self.policy)
            reference = self.sharding.model_state(self.policy, set(base_state_dict(self.policy))) if lora \
                else self.sharding.model_state(self.ref_model)
        if not self.acc.is_main_process:
            return
        write_config(self.run_dir, self.cfg)
        if reference is not None:  # resume needs the exact reference, not a rebuilt one
            save_weights(self.run_dir / "reference", reference)

    def _reference(self, model: torch.nn.Module, base_from_path: bool) -> tuple[torch.nn.Module | None, bool]:
        """The frozen reference (KL term, reference samplers) and whether the run folder keeps its weights.
        A LoRA policy's reference is its base with the adapter off (no copy); it is kept on disk (once,
        in RUN/reference) because checkpoints hold only the adapter, unless ``model.path`` rebuilds it."""
        if is_lora(model):
            return reference_of(model), not base_from_path
        needs_ref = self.cfg.algorithm.kl_coef > 0 or self.parts.sampler.needs_reference
        return (self._frozen_copy(model), True) if needs_ref else (None, False)

    def _frozen_copy(self, model: torch.nn.Module) -> torch.nn.Module:
        ref = copy.deepcopy(model).eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        self.held_bytes = self._hold(ref)
        return ref

    def _hold(self, model: torch.nn.Module) -> int:
        """Frozen ``Linear`` weights in the compute dtype under mixed precision (``hold_frozen``), except
        under DeepSpeed, whose engine owns the dtypes of what it wraps. Returns the bytes freed."""
        return 0 if ds.active(self.acc) else hold_frozen(model, self.cfg)


def _advantage_metrics(advantages: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Mean and mean absolute advantage (N, T) over the trained tokens of ``mask`` (N, T)."""
    adv = advantages[mask]
    return {"adv/mean": adv.mean().item() if adv.numel() else 0.0,
            "adv/abs_mean": adv.abs().mean().item() if adv.numel() else 0.0}


def _samples(batch: Rollouts, n: int, tokenizer: Any) -> list[dict[str, Any]]:
    """The first ``n`` rows, plus every row whose verifier failed (with the reason). ``prompt`` is the
    prompt string the model saw (chat template applied); ``problem`` the problem's text when it differs."""
    errors = batch.verifier_errors  # (N,) "" = verified, [] = not verified
    failed = {i for i, e in enumerate(errors) if e}
    rows = []
    for i in sorted(set(range(min(n, batch.num_rows))) | failed):
        problem = batch.problems[i]
        row = {"prompt": render_prompt(tokenizer, problem), "completion": batch.texts[i] if batch.texts else "",
               "reward": batch.rewards[i].tolist() if batch.rewards is not None else None,
               "advantage": _mean_advantage(batch, i)}
        if row["prompt"] != problem.prompt:
            row["problem"] = problem.prompt
        if i in failed:
            row["verifier_error"] = errors[i]
        rows.append(row)
    return rows


def _mean_advantage(batch: Rollouts, i: int) -> float | None:
    """Row i's advantage: the mean over its trained tokens (its sequence advantage for GRPO)."""
    if batch.advantages is None:
        return None
    mask = batch.completion_mask[i]  # (T,)
    return float(batch.advantages[i][mask].mean()) if bool(mask.any()) else 0.0


def write_summary(run_dir: str | Path, summary: dict[str, Any]) -> None:
    path = Path(run_dir) / "summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(summary, indent=2))
