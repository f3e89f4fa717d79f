"""TinyLoRA: adapters with a handful of trainable numbers, tied across layers and modules.

RECONSTRUCTION (docs/methods.md §2.23) of Morris et al. 2026 (arXiv:2602.04118; abstract only: "scaling
low-rank adapters to sizes as small as one parameter"). Each adapted linear layer W (out × in):

    W′ = W + U_r Σ_r (Σ_{i=1}^{u} v_i P_i) V_rᵀ

with ``U_r Σ_r V_rᵀ`` the frozen rank-r truncated SVD of W, ``P_i ∈ R^{r×r}`` fixed random
(seeded, entries N(0, 1/r)), and ``v ∈ R^u`` the only trainable numbers. ``tie`` shares one v
across modules: ``none`` (a v per module), ``layers`` (one v per module type, e.g. every q_proj),
``modules`` (one v per decoder layer) or ``all`` (one v for the model; trainable count = u).
v starts at 0, so the adapted model starts as the base model exactly.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from rlvr.registry import param

TIES = ("none", "layers", "modules", "all")


@dataclass(frozen=True)
class TinyLoRAConfig:
    rank: int = param(1, "r: rank of the frozen truncated SVD of each adapted weight (docs/methods.md §2.23: required)")
    u: int = param(1, "trainable coefficients v per tie group (docs/methods.md §2.23: required)")
    tie: str = param("all", "share v: none | layers (per module type) | modules (per decoder layer) | all "
                            "(RECONSTRUCTION; docs/methods.md §2.23 lists none|layers|modules, 'all' is our addition)")
    targets: list = param(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                          "names of the linear modules that get an adapter")
    seed: int = param(0, "seed of the fixed random projections P_i")

    def __post_init__(self) -> None:
        if self.rank < 1 or self.u < 1:
            raise ValueError(f"tinylora: rank and u must be >= 1, got {self.rank}, {self.u}")
        if self.tie not in TIES:
            raise ValueError(f"tinylora: tie must be one of {TIES}, got '{self.tie}'")


class TinyLoRALinear(nn.Module):
    """``y = x Wᵀ + b + x V_r Mᵀ (U_r Σ_r)ᵀ`` with ``M = Σ_i v_i P_i`` (r × r); only v trains."""

    def __init__(self, base: nn.Linear, rank: int, projections: Tensor, v: nn.Parameter) -> None:
        super().__init__()
        w = base.weight.detach().float()  # (out, in)
        u_, s, vh = torch.linalg.svd(w, full_matrices=False)
        r = min(rank, s.numel())
        self.base = base
        self.v = v  # (u,) shared Parameter object across the tie group
        self.register_buffer("us", (u_[:, :r] * s[:r]).to(w.dtype), persistent=False)  # (out, r)
        self.register_buffer("vr", vh[:r].T.contiguous(), persistent=False)  # (in, r)
        self.register_buffer("proj", projections[:, :r, :r].contiguous(), persistent=False)  # (u, r, r)

    def mixing(self) -> Tensor:
        return torch.einsum("u,urs->rs", self.v, self.proj)  # (r, r)

    def delta_weight(self) -> Tensor:
        """ΔW = U_r Σ_r M V_rᵀ, (out, in)."""
        return self.us @ self.mixing() @ self.vr.T

    def forward(self, x: Tensor) -> Tensor:
        low = (x.to(self.vr.dtype) @ self.vr) @ self.mixing().T  # (..., r)
        return self.base(x) + (low @ self.us.T).to(x.dtype)


def tie_group(name: str, tie: str) -> str:
    """The tie group of module ``name`` (a valid ``ParameterDict`` key: no dots)."""
    layer = re.search(r"(?:^|\.)layers\.(\d+)\.", name)
    kind = name.rsplit(".", 1)[-1]
    key = {"none": name, "layers": kind, "modules": f"layer{layer.group(1)}" if layer else name, "all": "all"}[tie]
    return key.replace(".", "_")


def apply_tinylora(model: nn.Module, config: TinyLoRAConfig) -> nn.ParameterDict:
    """Freeze ``model`` and replace its target linears by ``TinyLoRALinear`` in place (module order
    fixes the random projections). Returns the trainable v's by tie group (sorted keys)."""
    for p in model.parameters():
        p.requires_grad_(False)
    targets = [(n, m) for n, m in model.named_modules()
               if isinstance(m, nn.Linear) and n.rsplit(".", 1)[-1] in config.targets]
    if not targets:
        raise ValueError(f"tinylora: no linear module named one of {list(config.targets)}")
    gen = torch.Generator().manual_seed(config.seed)
    groups: dict[str, nn.Parameter] = {}
    for name, module in targets:
        key = tie_group(name, config.tie)
        if key not in groups:
            groups[key] = nn.Parameter(torch.zeros(config.u, dtype=module.weight.dtype, device=module.weight.device))
        proj = torch.randn(config.u, config.rank, config.rank, generator=gen) / config.rank ** 0.5  # (u, r, r)
        wrapped = TinyLoRALinear(module, config.rank, proj.to(module.weight), groups[key])
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, wrapped)
    return nn.ParameterDict({k: groups[k] for k in sorted(groups)})


def adapter_vector(adapter: nn.ParameterDict) -> Tensor:
    """All trainable numbers as one flat vector, groups in sorted key order."""
    return torch.cat([adapter[k].detach().flatten() for k in sorted(adapter.keys())])


@torch.no_grad()
def load_adapter_vector(adapter: nn.ParameterDict, flat: Tensor) -> None:
    """Inverse of ``adapter_vector``: write a flat vector back into the groups."""
    total = sum(p.numel() for p in adapter.values())
    if flat.numel() != total:  # checked first: never write half a vector
        raise ValueError(f"tinylora: vector of {flat.numel()} numbers for an adapter of {total}")
    offset = 0
    for key in sorted(adapter.keys()):
        p = adapter[key]
        p.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()


@torch.no_grad()
def merged_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every TinyLoRALinear folded into a plain Linear (W + ΔW): the base
    model's layout, loadable wherever the base model is."""
    out = copy.deepcopy(model)
    wrapped = [(n, m) for n, m in out.named_modules() if isinstance(m, TinyLoRALinear)]
    for name, module in wrapped:
        linear = module.base
        linear.weight.add_(module.delta_weight().to(linear.weight.dtype))
        parent, _, child = name.rpartition(".")
        setattr(out.get_submodule(parent) if parent else out, child, linear)
    for p in out.parameters():
        p.requires_grad_(True)
    return out
