"""The global batch under data parallelism: what the trainer reduces or gathers across ranks so that
plug-ins which need the whole batch (docs/design.md §4) see it, never one rank's slice.

* ``sum_over_ranks``: an advantage estimator's additive statistics (``batch_stats``) summed over ranks;
* ``rows_over_ranks``: a row count summed over ranks (whether the filters left any row anywhere);
* ``gather_feedback``: the step's problems, rewards and selector notes of every rank, in rank order
  (= the order of the one-process batch, since rank r trains the r-th share of the selected prompts),
  so every rank's selector observes the same global batch and keeps identical state;
* ``fully_masked`` / ``trains_no_rows``: a rank whose rows the filters all dropped (while other ranks kept
  some) holds its unfiltered rows fully masked, so its forward passes, mini-batches and collectives run
  in step with the others,
  while advantage statistics and selectors see no row from it (``local_inputs``, ``gather_feedback``);
* ``apply_row_weights``: per-row loss weights a selector computes on the global batch (CVPO's
  curriculum ω), each rank applying its own rows' share.

In one process every function returns its input (or the batch's own values) unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from torch import Tensor

from rlvr.collectives import collective_device
from rlvr.types import AdvantageInputs, Rollouts

NO_ROWS = "no_rows"  # batch.meta flag: this rank trains no row; its rows are all masked
_PER_ROW = ("rewards", "mask", "group_ids", "token_rewards", "values", "logprobs", "entropy", "plan_ids",
            "role_mask", "first_mistake", "turn_baselines")  # AdvantageInputs fields with a leading N


def sum_over_ranks(acc: Accelerator, stats: dict[str, Tensor]) -> dict[str, Tensor]:
    """Every tensor of ``stats`` summed over ranks (one all-reduce in float64), shapes and dtypes kept."""
    if acc.num_processes == 1 or not stats:
        return stats
    keys = sorted(stats)
    device = collective_device(acc)
    flat = torch.cat([stats[k].detach().double().reshape(-1).to(device) for k in keys])  # (Σ numel,)
    total = acc.reduce(flat, reduction="sum")
    out, start = {}, 0
    for k in keys:
        n = stats[k].numel()
        out[k] = total[start:start + n].reshape(stats[k].shape).to(device=stats[k].device, dtype=stats[k].dtype)
        start += n
    return out


def fully_masked(batch: Rollouts, meta: dict[str, Any]) -> Rollouts:
    """``batch``'s rows with no trained token, flagged ``NO_ROWS``, with the filtered batch's ``meta`` (its
    filter and shaper notes: every rank logs the same metric keys). Contributes nothing to the loss or to
    the global normalisers (which count trained tokens and rows with one); keeps the unfiltered row count,
    so ``optim.mini_batches`` still finds enough rows."""
    rows = batch.select(torch.arange(batch.num_rows))  # a copy: the caller's batch keeps its mask
    rows.completion_mask = torch.zeros_like(rows.completion_mask)
    rows.meta = {**meta, NO_ROWS: True}
    return rows


def trains_no_rows(batch: Rollouts) -> bool:
    return bool(batch.meta.get(NO_ROWS, False))


def local_inputs(batch: Rollouts, inputs: AdvantageInputs) -> AdvantageInputs:
    """The advantage inputs of the rows this rank trains: none for a fully masked batch, else ``inputs``."""
    if not trains_no_rows(batch):
        return inputs
    empty = torch.zeros(0, dtype=torch.long, device=inputs.mask.device)
    sliced = {f: getattr(inputs, f)[empty] for f in _PER_ROW if getattr(inputs, f) is not None}
    return dataclasses.replace(inputs, **sliced)


def rows_over_ranks(acc: Accelerator, rows: int) -> int:
    """A row count summed over ranks (the collector's all-filtered decision is the global batch's)."""
    if acc.num_processes == 1:
        return rows
    return int(sum_over_ranks(acc, {"rows": torch.tensor(float(rows), dtype=torch.float64)})["rows"].item())


def gather_feedback(acc: Accelerator, batch: Rollouts, meta_keys: tuple[str, ...]) -> dict[str, Any]:
    """The selector's view of the step: ``problems`` (N_global,), ``rewards`` (N_global, K), ``meta`` (the
    ``meta_keys`` lists of every rank, concatenated) and ``offset`` (this rank's first global row)."""
    if acc.num_processes == 1:
        return {"problems": batch.problems, "rewards": batch.rewards, "meta": batch.meta, "offset": 0}
    n = 0 if trains_no_rows(batch) else batch.num_rows
    local = {"problems": list(batch.problems)[:n], "rewards": batch.rewards.detach().cpu()[:n],
             "meta": {k: list(batch.meta[k]) for k in meta_keys if k in batch.meta}}  # notes of every group
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
    if trains_no_rows(batch):  # no row of the global batch here
        return _weight_stats(weights)
    w = weights[offset:offset + batch.num_rows].to(device=batch.advantages.device, dtype=batch.advantages.dtype)
    batch.advantages = batch.advantages * w.unsqueeze(-1)  # (N, T)
    return _weight_stats(weights)


def _weight_stats(weights: Tensor) -> dict[str, float]:
    return {"select/loss_weight_min": weights.min().item(), "select/loss_weight_max": weights.max().item(),
            "select/loss_weight_std": weights.std().item() if weights.numel() > 1 else 0.0}


def global_normalisers(acc: Accelerator, mask: Tensor, horizon: float) -> dict[str, Any]:
    """The losses' normalisers: trained tokens and rows of ``mask`` (N, T) over all ranks, and the length
    constant C of the fixed-norm aggregations (``horizon``: the completion cap, the same on every rank
    and step, not the padded width)."""
    local = torch.stack([mask.sum(), (mask.sum(-1) > 0).sum()]).float()  # (2,) tokens, rows
    total = local if acc.num_processes == 1 else \
        acc.reduce(local.to(collective_device(acc)), reduction="sum").to(mask.device)  # back beside the mask
    return {"num_tokens": total[0], "num_seqs": total[1], "horizon": float(horizon)}
