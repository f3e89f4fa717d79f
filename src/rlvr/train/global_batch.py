"""The global batch under data parallelism: what the trainer reduces or gathers across ranks so that
plug-ins which need the whole batch (DESIGN.md §4) see it, never one rank's slice.

* ``sum_over_ranks``: an advantage estimator's additive statistics (``batch_stats``) summed over ranks;
* ``gather_feedback``: the step's problems, rewards and selector notes of every rank, in rank order
  (= the order of the one-process batch, since rank r trains the r-th share of the selected prompts),
  so every rank's selector observes the same global batch and keeps identical state;
* ``apply_row_weights``: per-row loss weights a selector computes on the global batch (CVPO's
  curriculum ω), each rank applying its own rows' share.

In one process every function returns its input (or the batch's own values) unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from torch import Tensor

from rlvr.types import Rollouts


def sum_over_ranks(acc: Accelerator, stats: dict[str, Tensor]) -> dict[str, Tensor]:
    """Every tensor of ``stats`` summed over ranks (one all-reduce in float64), shapes and dtypes kept."""
    if acc.num_processes == 1 or not stats:
        return stats
    keys = sorted(stats)
    flat = torch.cat([stats[k].detach().double().reshape(-1).to(acc.device) for k in keys])
    total = acc.reduce(flat, reduction="sum")
    out, start = {}, 0
    for k in keys:
        n = stats[k].numel()
        out[k] = total[start:start + n].reshape(stats[k].shape).to(device=stats[k].device, dtype=stats[k].dtype)
        start += n
    return out


def gather_feedback(acc: Accelerator, batch: Rollouts, meta_keys: tuple[str, ...]) -> dict[str, Any]:
    """The selector's view of the step: ``problems`` (N_global,), ``rewards`` (N_global, K), ``meta`` (the
    ``meta_keys`` lists of every rank, concatenated) and ``offset`` (this rank's first global row)."""
    if acc.num_processes == 1:
        return {"problems": batch.problems, "rewards": batch.rewards, "meta": batch.meta, "offset": 0}
    local = {"problems": list(batch.problems), "rewards": batch.rewards.detach().cpu(),
             "meta": {k: list(batch.meta[k]) for k in meta_keys if k in batch.meta}}
    ranks = gather_object([local])  # one dict per rank, in rank order
    meta: dict[str, list] = {}
    for part in ranks:
        for k, v in part["meta"].items():
            meta.setdefault(k, []).extend(v)
    offset = sum(len(part["problems"]) for part in ranks[:acc.process_index])
    return {"problems": [p for part in ranks for p in part["problems"]],
            "rewards": torch.cat([part["rewards"] for part in ranks]), "meta": meta, "offset": offset}


def apply_row_weights(batch: Rollouts, weights: Tensor | None, offset: int) -> dict[str, float]:
    """Scale this rank's rows' advantages by their share of the global (N_global,) ``weights``; returns
    the weights' min / max / std over the global batch (``select/loss_weight_*``), empty without weights."""
    if weights is None:
        return {}
    w = weights[offset:offset + batch.num_rows].to(device=batch.advantages.device, dtype=batch.advantages.dtype)
    batch.advantages = batch.advantages * w.unsqueeze(-1)  # (N, T)
    return {"select/loss_weight_min": weights.min().item(), "select/loss_weight_max": weights.max().item(),
            "select/loss_weight_std": weights.std().item() if weights.numel() > 1 else 0.0}
