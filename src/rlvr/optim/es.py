"""Evolution strategies at scale (docs/methods.md §1.9): seeded perturbations, z-scored fitness, no backprop.

The math lives here as plain functions on parameter lists (``es_step`` is the OPT hook
``step(theta, fitness_fn)`` of docs/methods.md §0.3); ``rlvr.loops.es_trainer`` wraps it in a training loop
with a verifier-reward fitness, and the ``es`` plug-in (``rlvr.loops.es_plugin``) builds that loop
from a run config.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from rlvr.collectives import collective_device
from rlvr.optim.noise import seeded_noise, tensor_seed
from rlvr.registry import param

Params = list[tuple[str, torch.nn.Parameter]]
FitnessFn = Callable[[int], "Tensor | float"]  # member index -> (X,) per-prompt rewards, or a scalar


# --- parameters -------------------------------------------------------------------------------

def select_parameters(model: torch.nn.Module, include: list[str] | tuple[str, ...] = (),
                      exclude: list[str] | tuple[str, ...] = ()) -> Params:
    """The (name, parameter) pairs ES perturbs: every trainable parameter when ``include`` is empty,
    else those whose name matches one of the ``include`` regular expressions (``re.search``, e.g.
    ``"layers\\.1\\."`` or ``"lora_"``); names matching an ``exclude`` pattern are dropped. Tied
    parameters appear once (``named_parameters`` de-duplicates them)."""
    named = list(model.named_parameters())
    if include:
        chosen = [(n, p) for n, p in named if any(re.search(pat, n) for pat in include)]
    else:
        chosen = [(n, p) for n, p in named if p.requires_grad]
    chosen = [(n, p) for n, p in chosen if not any(re.search(pat, n) for pat in exclude)]
    if not chosen:
        sample = ", ".join(n for n, _ in named[:6])
        raise ValueError(f"es: no parameter matches include={list(include)} exclude={list(exclude)}; "
                         f"names look like: {sample}, ...")
    return chosen


def _key(name: str) -> int:
    """A stable per-name noise stream index (Python's ``hash`` is salted per process; crc32 is not)."""
    return zlib.crc32(name.encode())


def param_noise(name: str, p: Tensor, seed: int, per_tensor: bool = True) -> Tensor:
    """ε(seed) for parameter ``name``: float32, shaped like ``p``, on ``p``'s device."""
    return seeded_noise(p.shape, tensor_seed(seed, _key(name), per_tensor), p.device)


@torch.no_grad()
def perturb(params: Params, seed: int, scale: float, per_tensor: bool = True) -> None:
    """In place: ``θ ← θ + scale · ε(seed)`` (computed in float32, cast to each parameter's dtype)."""
    for name, p in params:
        p.add_((scale * param_noise(name, p, seed, per_tensor)).to(p.dtype))


@torch.no_grad()
def snapshot(params: Params) -> list[Tensor]:
    return [p.detach().clone() for _, p in params]


@torch.no_grad()
def restore(params: Params, saved: list[Tensor]) -> None:
    """Bit-exact restore (subtracting the noise again would drift by rounding)."""
    for (_, p), s in zip(params, saved, strict=True):
        p.copy_(s)


# --- fitness shaping and the update -----------------------------------------------------------

def z_score(fitness: Tensor, eps: float = 1e-8, ddof: int = 0) -> Tensor:
    """``z_k = (F_k − mean F) / (std F + eps)``; ddof 0 is numpy's default (the reference)."""
    f = fitness.double()  # (N,)
    std = f.std(correction=ddof) if f.numel() > ddof else torch.zeros((), dtype=torch.float64)
    return (f - f.mean()) / (std + eps)


def seed_coefficients(z: Tensor, antithetic: bool) -> Tensor:
    """(S,) the weight of each distinct seed's noise: ``z_k`` (plain) or ``z_{k+} − z_{k−}`` (antithetic
    pairs ``θ ± σε`` are consecutive members sharing one seed)."""
    return z.view(-1, 2) @ torch.tensor([1.0, -1.0], dtype=z.dtype) if antithetic else z


def es_delta(noise: Tensor, coefficients: Tensor, scale: float) -> Tensor:
    """``scale · Σ_k c_k ε_k`` for explicit noise (S, D) and coefficients (S,), accumulated in float32."""
    acc = torch.zeros(noise.shape[1:], dtype=torch.float32)
    for eps_k, c in zip(noise.float(), coefficients.tolist()):
        acc.add_(eps_k, alpha=c)
    return acc.mul_(scale)


@torch.no_grad()
def apply_update(params: Params, seeds: list[int], coefficients: Tensor, scale: float,
                 per_tensor: bool = True) -> float:
    """``θ ← θ + scale · Σ_s c_s ε(seed_s)``: noise regenerated per tensor, summed in float32, then
    cast once to the parameter's dtype (a bf16 sum would round the tiny update away). Returns the
    update's L2 norm."""
    sq = 0.0
    for name, p in params:
        acc = torch.zeros(p.shape, dtype=torch.float32, device=p.device)
        for seed, c in zip(seeds, coefficients.tolist(), strict=True):
            acc.add_(param_noise(name, p, seed, per_tensor), alpha=c)
        acc.mul_(scale)
        p.add_(acc.to(p.dtype))
        sq += float(acc.double().pow(2).sum())
    return sq ** 0.5


# --- one ES iteration -------------------------------------------------------------------------

@dataclass
class ESStepResult:
    seeds: list[int]  # (S,) distinct noise seeds
    fitness: Tensor  # (N,) F_k, float64
    z: Tensor  # (N,) shaped fitness
    coefficients: Tensor  # (S,) per-seed weights of the update
    outcomes: Tensor  # (N, X) per-member fitness rows (X = 1 for a scalar fitness)
    update_norm: float


def es_step(params: Params, fitness_fn: FitnessFn, seeds: list[int], *, sigma: float, alpha: float,
            antithetic: bool = False, eps: float = 1e-8, ddof: int = 0, divide_by_sigma: bool = False,
            per_tensor: bool = True, rank: int = 0, world_size: int = 1) -> ESStepResult:
    """One iteration: evaluate members ``θ + σ·sign_k·ε(seed_k)`` (this rank: members k ≡ rank mod
    world_size), all-gather the fitness, z-score it and apply ``θ ← θ + (α/N) Σ_k z_k sign_k ε_k``
    (``/σ`` too when ``divide_by_sigma``). Every rank applies the same update from the same numbers."""
    members = [(s, sign) for s in seeds for sign in ((1.0, -1.0) if antithetic else (1.0,))]
    n = len(members)
    saved = snapshot(params)
    local: dict[int, Tensor] = {}
    for k in range(rank, n, world_size):
        seed, sign = members[k]
        perturb(params, seed, sign * sigma, per_tensor)
        try:
            local[k] = torch.as_tensor(fitness_fn(k), dtype=torch.float64).reshape(-1)
        finally:
            restore(params, saved)
    table = gather_rows(local, n, world_size)  # (N, X)
    fitness = table.mean(dim=1)  # (N,)
    z = z_score(fitness, eps=eps, ddof=ddof)
    coefficients = seed_coefficients(z, antithetic)
    scale = alpha / n / (sigma if divide_by_sigma else 1.0)
    norm = apply_update(params, list(seeds), coefficients, scale, per_tensor)
    return ESStepResult(list(seeds), fitness, z, coefficients, table, norm)


def gather_rows(local: dict[int, Tensor], n: int, world_size: int) -> Tensor:
    """(N, X) float64 table of every member's row; rows this rank did not evaluate come from the
    others (an all-reduce SUM over zero-filled tables: adding zeros is exact)."""
    import torch.distributed as dist
    device = collective_device() if world_size > 1 else torch.device("cpu")  # the default group's
    width = max((len(v) for v in local.values()), default=0)
    if world_size > 1:
        w = torch.tensor([width], dtype=torch.int64, device=device)  # (1,)
        dist.all_reduce(w, op=dist.ReduceOp.MAX)
        width = int(w.item())
    table = torch.zeros(n, width, dtype=torch.float64, device=device)  # (N, X)
    for k, row in local.items():
        if len(row) != width:
            raise ValueError(f"es: member {k} returned {len(row)} rewards, others {width}")
        table[k] = row
    if world_size > 1:
        dist.all_reduce(table, op=dist.ReduceOp.SUM)
    return table.cpu()


# --- the plug-in's configuration ----------------------------------------------------------------

@dataclass(frozen=True)
class ESConfig:
    sigma: float = param(0.001, "perturbation scale σ: members are θ + σ·ε(seed)")
    alpha: float = param(0.0, "step size α of θ ← θ + (α/N) Σ z_k ε_k; 0 = σ/2 (the reference default)")
    population: int = param(30, "population size N (members per iteration); even when antithetic")
    antithetic: bool = param(False, "evaluate ±σε pairs sharing one seed (N/2 seeds)")
    prompts: int = param(0, "prompts per iteration, shared by all members (reference: 200); "
                            "0 = rollout.prompts_per_step")
    samples_per_prompt: int = param(1, "completions per prompt and member; the fitness averages them")
    temperature: float = param(0.0, "fitness sampling temperature; 0 = greedy (the reference trainer)")
    max_new_tokens: int = param(0, "completion cap of the fitness rollouts; 0 = rollout.max_new_tokens")
    eps: float = param(1e-8, "added to the fitness std in the z-score")
    ddof: int = param(0, "fitness std estimator: 0 = population (numpy, the reference), 1 = unbiased")
    divide_by_sigma: bool = param(False, "use the textbook α/(Nσ) step instead of the reference's α/N")
    include: list = param([], "regular expressions of parameter names to perturb (e.g. 'layers\\.1\\.', "
                              "'lora_'); empty = every trainable parameter")
    exclude: list = param([], "regular expressions of parameter names never perturbed")
    per_tensor_noise: bool = param(True, "an independent noise stream per tensor (False: one seed for "
                                         "all tensors, as the reference does)")
    grpo_steps: int = param(0, "sequential GRPO→ES: this many gradient steps (optim.lr, algorithm.*) first, "
                               "then ES up to run.steps; 0 = ES only")
    eval_center: bool = param(False, "also score the unperturbed θ each iteration (logged as reward/center)")

    def __post_init__(self) -> None:
        if self.sigma <= 0 or self.alpha < 0:
            raise ValueError(f"es: need sigma > 0 and alpha >= 0, got sigma={self.sigma}, alpha={self.alpha}")
        if self.population < 2 or (self.antithetic and self.population % 2):
            raise ValueError(f"es: population must be >= 2 (and even when antithetic), got {self.population}")
        if self.ddof not in (0, 1) or self.temperature < 0 or self.samples_per_prompt < 1:
            raise ValueError("es: need ddof in {0, 1}, temperature >= 0 and samples_per_prompt >= 1")
        if self.grpo_steps < 0 or self.prompts < 0 or self.max_new_tokens < 0:
            raise ValueError("es: grpo_steps, prompts and max_new_tokens must be >= 0")

    @property
    def step_size(self) -> float:
        return self.alpha if self.alpha > 0 else self.sigma / 2
