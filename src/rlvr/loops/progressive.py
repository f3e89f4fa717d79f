"""Progressive RLVR (docs/methods.md §2.23): RLVR teacher → on-policy distillation into a TinyLoRA student →
post-training quantisation of the adapter, whose compressed size feeds ``rlvr bound``.

Stages of one run:
  1. teacher: ``rl_steps`` of the configured gradient RLVR from the base (or a saved ``teacher``);
  2. student: the *base* model plus a TinyLoRA adapter (``rlvr.optim.tinylora``), trained for
     ``run.steps`` steps on its own samples against the teacher's per-token reverse KL;
  3. the adapter's numbers are quantised to ``bits`` bits and written to ``RUN/adapter`` (codes,
     grid, TinyLoRA settings, the base weights and the run config), with the code length in bits.
"""

from __future__ import annotations

import copy
import json
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rlvr.files import write_atomic, write_text_atomic
from rlvr.loops.local_run import LocalRun
from rlvr.ops import masked_mean
from rlvr.optim.quantize import Quantized, dequantize, quantize
from rlvr.optim.tinylora import (
    TIES, TinyLoRAConfig, adapter_vector, apply_tinylora, load_adapter_vector, merged_copy,
)
from rlvr.registry import param, register
from rlvr.train.config import write_config
from rlvr.train.loop import StepOutput, run_loop
from rlvr.train.loop_plugin import LoopPlugin

ESTIMATORS = ("sampled", "full")


@dataclass(frozen=True)
class ProgressiveConfig:
    teacher: str = param("", "teacher policy: a model folder (save_pretrained) or a run folder; '' = make one "
                             "with rl_steps of the run's gradient RLVR from the base")
    rl_steps: int = param(50, "stage 1: gradient RLVR steps that make the teacher (when teacher is '')")
    rank: int = param(0, "TinyLoRA rank r of the frozen SVD (required, >= 1)")
    u: int = param(0, "TinyLoRA trainable numbers per tie group (required, >= 1)")
    tie: str = param("", "TinyLoRA sharing (required): none | layers | modules | all")
    targets: list = param(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                          "linear modules that get a TinyLoRA adapter")
    adapter_seed: int = param(0, "seed of TinyLoRA's fixed random projections (part of the bound's prior)")
    lr: float = param(1e-2, "AdamW learning rate of the TinyLoRA numbers during distillation")
    kl_estimator: str = param("sampled", "per-token reverse KL: 'sampled' (cost log πS − log πT of the sampled "
                                         "token as a policy-gradient loss) | 'full' (exact sum over the "
                                         "vocabulary; RECONSTRUCTION option)")
    bits: int = param(4, "post-training uniform quantisation of the adapter to this many bits (1..16)")

    def __post_init__(self) -> None:
        if self.kl_estimator not in ESTIMATORS:
            raise ValueError(f"progressive_rlvr: kl_estimator must be one of {ESTIMATORS}, got '{self.kl_estimator}'")
        if not 1 <= self.bits <= 16:
            raise ValueError(f"progressive_rlvr: bits must be in [1, 16], got {self.bits}")
        if self.rl_steps < 0:
            raise ValueError(f"progressive_rlvr: rl_steps must be >= 0, got {self.rl_steps}")

    def tinylora(self) -> TinyLoRAConfig:
        missing = [k for k in ("rank", "u", "tie") if not getattr(self, k)]
        if missing:
            raise ValueError(f"progressive_rlvr: {missing} required (docs/methods.md §2.23 lists no default); set "
                             f"optim.params.<key>; tie is one of {TIES}")
        return TinyLoRAConfig(rank=self.rank, u=self.u, tie=self.tie, targets=list(self.targets),
                              seed=self.adapter_seed)


@register("loop", "progressive_rlvr")
class ProgressiveRLVR(LoopPlugin):
    """RLVR teacher, on-policy distillation into a TinyLoRA student, k-bit adapter quantisation.

    Paper: "PAC-Bayes bounds for parameter-efficient RLVR / Progressive RLVR" (seed abstract; arXiv
    id unknown). TinyLoRA: Morris et al. 2026 (arXiv:2602.04118). RECONSTRUCTION: the TinyLoRA form
    (``rlvr.optim.tinylora``), the stage schedule, the 'full' estimator option, the quantiser.

    Equation (distillation, per trained token t of a student sample y ∼ π_S):
    ``c_t = log π_S(y_t|·) − log π_T(y_t|·)``, loss ``= mean_t sg(c_t) · log π_S(y_t|·)`` whose gradient
    is the per-position ``∇ KL(π_S ‖ π_T)`` in expectation ('sampled'); or the exact
    ``mean_t Σ_v π_S(v) (log π_S(v) − log π_T(v))`` ('full').

    Differs from the gradient trainer (GRPO):
      * the learning signal is the teacher's per-token log-probs, not an advantage of the reward;
      * only u numbers per tie group train (TinyLoRA), then get quantised to ``bits`` bits;
      * the run writes an adapter whose code length gives a generalisation bound (``rlvr bound``).

    Shapes: logprobs (N, T), logits (N, T, V), mask (N, T) → scalar loss.
    """

    Config = ProgressiveConfig
    paper = "Progressive RLVR with TinyLoRA and PAC-Bayes bounds (arXiv id unknown; seed abstract)"

    def trainer(self, cfg: Any, *, model: torch.nn.Module | None = None, tokenizer: Any = None) -> Any:
        self.config.tinylora()  # required keys fail before any work
        return ProgressiveTrainer(cfg, self.config, model=model, tokenizer=tokenizer)


# --- distillation losses (pure tensor math) -----------------------------------------------------

def reverse_kl_sampled(student_logp: Tensor, teacher_logp: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Policy-gradient loss ``mean_t sg(log π_S − log π_T)·log π_S`` over trained tokens, and the
    detached per-token reverse-KL estimate's mean. Inputs (N, T), mask (N, T) bool."""
    cost = (student_logp - teacher_logp).detach()  # (N, T) sampled-token reverse-KL cost
    return masked_mean(cost * student_logp, mask), masked_mean(cost, mask)


def reverse_kl_full(student_logits: Tensor, teacher_logits: Tensor, mask: Tensor) -> Tensor:
    """Exact per-position ``KL(π_S ‖ π_T)`` over the vocabulary, averaged over trained tokens.
    Logits (N, T, V) (already divided by the temperature), mask (N, T) bool."""
    ls = torch.log_softmax(student_logits.float(), -1)
    lt = torch.log_softmax(teacher_logits.float(), -1)
    kl = (ls.exp() * (ls - lt)).sum(-1)  # (N, T)
    return masked_mean(kl, mask)


def completion_logits(model: torch.nn.Module, batch: Any, temperature: float) -> Tensor:
    """(N, T, V) logits/τ that predict each completion token (positions as ``sequence_logprobs``)."""
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], 1)  # (N, P + T)
    mask = torch.cat([batch.prompt_mask, batch.attention], 1).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    t = batch.completion_ids.shape[1]
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=t + 1).logits
    return logits[:, :-1].float() / temperature


# --- the training loop ------------------------------------------------------------------------

class ProgressiveTrainer:
    """Teacher (stage 1), TinyLoRA distillation for ``run.steps`` steps (2), quantisation (3) (one
    process: its ``run``, a ``LocalRun``, holds the set-up)."""

    def __init__(self, cfg: Any, config: ProgressiveConfig, *, model: torch.nn.Module | None = None,
                 tokenizer: Any = None) -> None:
        self.run = LocalRun(cfg, "progressive_rlvr", model=model, tokenizer=tokenizer)
        self.cfg, self.acc, self.run_dir, self.parts = cfg, self.run.acc, self.run.run_dir, self.run.parts
        self.callbacks, self.model, self.tokenizer = self.run.callbacks, self.run.model, self.run.tokenizer
        self.timer, self.collector = self.run.timer, self.run.collector
        self.step, self.rollouts_spent, self.seconds_spent = 0, 0, 0.0
        self.last_cost = 0  # completions the last step sampled: what the next one will (the same batch)
        self.config = config
        self.teacher: torch.nn.Module | None = None
        self.adapter: torch.nn.ParameterDict | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.adapter_info: dict[str, Any] | None = None  # set by the quantisation at the end

    @property
    def policy(self) -> torch.nn.Module:
        return self.model

    def export_model(self) -> torch.nn.Module:
        """The policy in its base architecture (TinyLoRA folded into the weights), for RUN/final."""
        return self.model if self.adapter is None else merged_copy(self.model)

    def next_step_cost(self) -> int:
        """What the last step sampled (every step samples the same prompts and counts); 0 before the first."""
        return self.last_cost

    def train(self, resume: bool = False, eval_fn: Any = None) -> dict[str, Any]:
        return run_loop(self, resume, eval_fn, desc="progressive")

    def begin(self, resume: bool) -> dict[str, float]:
        """Keep the tiny base, make the teacher (stage 1), put the TinyLoRA adapter on the student; the
        teacher's time and rollouts count towards the budgets, its metrics go with the first step's."""
        from rlvr.train.checkpoint import save_weights
        self.run.start(resume)
        if self.cfg.model.path is None:  # the tiny base is part of the bound's prior: keep it
            save_weights(self.run_dir / "adapter" / "base", self.model)
        start = time.perf_counter()
        first = self._make_teacher()
        self.adapter = apply_tinylora(self.model, self.config.tinylora())
        self.optimizer = torch.optim.AdamW(list(self.adapter.values()), lr=self.config.lr, weight_decay=0.0)
        self.seconds_spent = time.perf_counter() - start
        return first

    def loop_step(self) -> StepOutput:
        metrics = self.distill_step(self.optimizer)
        self.last_cost = int(metrics["rollout/generated_completions"])
        return StepOutput(metrics, self.last_cost,
                          postfix={"loss": f"{metrics['loss/total']:.4f}",
                                   "kl": f"{metrics['distill/reverse_kl']:.4f}"})

    def finish(self) -> dict[str, Any]:
        """Stage 3, before the final checkpoint: quantise the adapter and write RUN/adapter."""
        self.adapter_info = self.quantize_adapter()
        return {"adapter": self.adapter_info}

    def save(self) -> Path:
        """The student with TinyLoRA folded in (``rlvr eval RUN`` loads it); the adapter's record once quantised."""
        return self.run.save(self.step, merged_copy(self.model), self.state())

    def state(self) -> dict[str, Any]:
        return {} if self.adapter_info is None else {"adapter": self.adapter_info}

    def load_state(self, state: dict[str, Any]) -> None:
        self.run.refuse_resume()

    def heldout_metrics(self) -> dict[str, float]:
        return {}

    def evaluates_here(self) -> bool:
        return True  # one process

    def lockstep(self) -> AbstractContextManager:
        return nullcontext()

    def _make_teacher(self) -> dict[str, float]:
        """Stage 1: load the teacher, or train one from a copy of the base; frozen."""
        c = self.config
        if c.teacher:
            self.teacher = load_policy(c.teacher)
            metrics: dict[str, float] = {}
        elif c.rl_steps == 0:
            raise ValueError("progressive_rlvr: needs a teacher: set optim.params.teacher or rl_steps > 0")
        else:
            from rlvr.loops.gradient import GRADIENT_TRAINER
            from rlvr.train.config import replace
            from rlvr.train.trainer import Trainer
            cfg_t = replace(self.cfg, optim={"name": GRADIENT_TRAINER, "params": {}},
                            run={"out_dir": str(self.run_dir / "teacher")})
            trainer = Trainer(cfg_t, model=copy.deepcopy(self.model), tokenizer=self.tokenizer)
            rewards = []
            for _ in range(c.rl_steps):
                m, _ = trainer.train_step()
                rewards.append(m["reward/mean"])
                self.rollouts_spent += int(m["rollout/generated_completions"])
            self.teacher = trainer.policy
            metrics = {"teacher/reward_mean": float(np.mean(rewards)), "teacher/reward_last": rewards[-1]}
        self.teacher.to(next(self.model.parameters()).device).eval()  # the gradient Trainer may have moved it
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        return metrics

    def distill_step(self, optimizer: torch.optim.Optimizer) -> dict[str, float]:
        """One step: student samples, teacher scores them, the reverse KL moves the TinyLoRA numbers."""
        from rlvr.rollout import sequence_logprobs
        with torch.no_grad():
            batch, metrics = self.collector.collect(self.model, self.step)
        temp, mask = self.cfg.rollout.temperature, batch.completion_mask
        self.model.train()
        with self.timer("forward"):
            args = (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.attention)
            s_logp, _ = sequence_logprobs(self.model, *args, temperature=temp)
            with torch.no_grad():
                t_logp, _ = sequence_logprobs(self.teacher, *args, temperature=temp)
            loss, kl = reverse_kl_sampled(s_logp, t_logp, mask)
            if self.config.kl_estimator == "full":
                with torch.no_grad():
                    t_logits = completion_logits(self.teacher, batch, temp)
                loss = reverse_kl_full(completion_logits(self.model, batch, temp), t_logits, mask)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"progressive_rlvr: step {self.step + 1}: loss is {loss.item()}")
        with self.timer("backward"):
            loss.backward()
        params = list(self.adapter.values())
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.optim.grad_clip or float("inf"))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        vec = adapter_vector(self.adapter)
        metrics.update({"loss/total": loss.item(), "distill/reverse_kl": kl.item(),
                        "optim/grad_norm": grad_norm.item(), "adapter/abs_mean": vec.abs().mean().item()})
        metrics.update(self.timer.pop())
        return metrics

    def quantize_adapter(self) -> dict[str, Any]:
        """Stage 3: quantise the adapter in place and write ``RUN/adapter``."""
        from rlvr.analysis.bounds import code_length_bits
        vec = adapter_vector(self.adapter)
        q = quantize(vec, self.config.bits)
        load_adapter_vector(self.adapter, dequantize(q, vec.dtype))
        info = {"tinylora": {**self.config.tinylora().__dict__, "targets": list(self.config.targets)},
                "bits": q.bits, "lo": q.lo, "step": q.step, "num_values": q.num_values,
                "groups": {k: int(v.numel()) for k, v in sorted(self.adapter.items())},
                "code_bits": code_length_bits(q.num_values, q.bits),
                "quant_max_abs_error": float((dequantize(q, torch.float64) - vec.double()).abs().max()),
                "has_base": self.cfg.model.path is None}
        save_adapter(self.run_dir / "adapter", q, info, self.cfg)
        return info


# --- adapter files ----------------------------------------------------------------------------

def save_adapter(folder: Path, q: Quantized, info: dict[str, Any], cfg: Any) -> None:
    """``codes.safetensors`` (int32 codes), ``adapter.json`` (grid, TinyLoRA settings, bits) and the
    run config; written through temporary names so a crash leaves no half adapter."""
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    codes = {"codes": q.codes.to(torch.int32).contiguous()}
    write_atomic(folder / "codes.safetensors", lambda tmp: save_file(codes, str(tmp)))
    write_config(folder, cfg)
    write_text_atomic(folder / "adapter.json", json.dumps(info, indent=1))


def adapter_folder(path: str | Path) -> Path:
    """``RUN/adapter`` for a run folder, or the folder itself when it holds ``adapter.json``."""
    path = Path(path)
    for folder in (path, path / "adapter"):
        if (folder / "adapter.json").is_file():
            return folder
    raise FileNotFoundError(f"{path} is neither a TinyLoRA adapter folder nor a run folder with adapter/")


def load_adapter_policy(path: str | Path) -> tuple[torch.nn.Module, Any, Any, dict[str, Any]]:
    """(model with the dequantised adapter, tokenizer, run config, adapter.json) from a run or adapter folder."""
    from safetensors.torch import load_file
    from rlvr.train.build import build_model
    from rlvr.train.checkpoint import load_weights
    from rlvr.train.config import load_config
    folder = adapter_folder(path)
    info = json.loads((folder / "adapter.json").read_text())
    cfg = load_config(folder / "config.yaml")
    model, tokenizer = build_model(cfg)
    if info.get("has_base"):
        load_weights(folder / "base", model)
    adapter = apply_tinylora(model, TinyLoRAConfig(**info["tinylora"]))
    codes = load_file(str(folder / "codes.safetensors"))["codes"].long()
    load_adapter_vector(adapter, dequantize(Quantized(codes, info["lo"], info["step"], info["bits"])))
    return model.eval(), tokenizer, cfg, info


def load_policy(path: str | Path) -> torch.nn.Module:
    """A saved model folder (``save_pretrained``) or the latest checkpoint of a run folder."""
    folder = Path(path)
    if (folder / "config.yaml").exists():
        from rlvr.train.build import build_model
        from rlvr.train.checkpoint import latest_checkpoint, load_weights
        from rlvr.train.config import load_config
        model, _ = build_model(load_config(folder / "config.yaml"))
        ckpt = latest_checkpoint(folder)
        if ckpt is None:
            raise FileNotFoundError(f"run folder {folder} has no checkpoint")
        load_weights(ckpt, model)
        return model
    from rlvr.models import load_model
    return load_model(folder)
