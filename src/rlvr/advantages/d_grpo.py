"""D-GRPO (AIGB-R1): decoupled group advantages for hierarchical planner → executor rollouts."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput, sequence_scores
from rlvr.ops import GroupStats, group_stats
from rlvr.registry import param, register
from rlvr.types import AdvantageInputs, BatchError

NORMS = ("grpo", "none")
PLAN_VALUES = ("mean",)
UNTAGGED = ("planner", "executor", "sum")


@dataclass(frozen=True)
class DGRPOConfig:
    norm: str = param("grpo", "normaliser at both levels (RECONSTRUCTION): 'grpo' = (x − mean)/(std + eps), "
                              "'none' = x − mean (Dr. GRPO style)")
    plan_value: str = param("mean", "a plan's return for the planner (RECONSTRUCTION): 'mean' = mean_j R_ij "
                                    "over its executions")
    ddof: int = param(1, "std estimator at both levels: 1 = unbiased (verl, TRL), 0 = population")
    eps: float = param(1e-6, "added to the std before dividing (verl 1e-6, TRL 1e-4)")
    singleton: str = param("raw", "a state with a single plan: 'raw' gives A^P = the plan's value (mean 0, "
                                  "std 1, as grpo), 'zero' gives A^P = 0")
    untagged: str = param("planner", "advantage of every token when role_mask is absent: 'planner' (A^P; a flat "
                                     "batch is then exactly grpo), 'executor' (A^E) or 'sum' (A^P + A^E)")
    plans: int = param(0, "G, plans per state: 0 = read from plan_ids; > 0 = check every state has G plans")
    executions_per_plan: int = param(0, "M, executions per plan: 0 = read from plan_ids; > 0 = check every plan "
                                        "has M rows (without plan_ids M is 1)")

    def __post_init__(self) -> None:
        for name, value, valid in (("norm", self.norm, NORMS), ("plan_value", self.plan_value, PLAN_VALUES),
                                   ("singleton", self.singleton, ("raw", "zero")),
                                   ("untagged", self.untagged, UNTAGGED)):
            if value not in valid:
                raise ValueError(f"d_grpo: {name} must be one of {valid}, got '{value}'")
        for name in ("ddof", "plans", "executions_per_plan"):
            if getattr(self, name) < 0:
                raise ValueError(f"d_grpo: {name} must be >= 0, got {getattr(self, name)}")
        if self.eps < 0:
            raise ValueError(f"d_grpo: eps must be >= 0, got {self.eps}")


@register("advantage", "d_grpo")
class DGRPO(AdvantageEstimator):
    """Decoupled GRPO: a planner advantage across the plans of a state and an executor advantage
    within each plan, each put on its own role's tokens.

    Paper: AIGB-R1, LLM auto-bidding with a Planner and an Executor trained by Decoupled GRPO
    (seed abstract, docs/methods.md §2.21; arXiv id unknown). A RECONSTRUCTION from the abstract: the
    plan's value (mean of its returns), the normaliser at both levels (grpo / none), and the
    token assignment by role are the team's reading, exposed as Config options.

    Equation: per state x (``group_ids``), plans i (``plan_ids``, nested in the state) with
    executions j and returns R_ij (the row's outcome score):
    ``V_i = mean_j R_ij``, ``A^P_i = (V_i − mean_i V)/(std_i V + eps)`` across the plans of x and
    ``A^E_ij = (R_ij − V_i)/(std_j R_i· + eps)`` within plan i (``norm='none'`` drops the divisions).
    Planner tokens (``role_mask`` True) get A^P_i, executor tokens A^E_ij; one PPO/GRPO clip loss
    over both roles is the sum of the two roles' losses.

    Differs from grpo:
      * two nested levels: plans are compared by their mean return, executions only within a plan;
      * each plan counts once in the planner statistics whatever its number of executions M;
      * a plan with one execution (or tied executions) gives A^E = 0;
      * without ``plan_ids`` every row is its own plan (M = 1), and without ``role_mask`` tokens get
        the ``untagged`` choice ('planner' by default): a flat batch is then exactly grpo on returns.
    Metrics: ``planner_adv_mean``/``planner_adv_abs_mean`` (one value per plan),
    ``executor_adv_mean``/``executor_adv_abs_mean`` (one per row), ``num_plans``,
    ``tied_plan_frac`` (plans of ≥ 2 executions whose returns all tie) and, with ``role_mask``,
    ``planner_token_frac`` (share of trained tokens that are planner tokens).

    Shapes: rewards (N, K) or token_rewards (N, T), group_ids (N,), optional plan_ids (N,) and
    role_mask (N, T) → advantages (N, T).
    """

    Config = DGRPOConfig
    mechanism_inputs = (("plan_ids",), ("role_mask",))  # plans and planner/executor tokens
    paper = "AIGB-R1: hierarchical LLM auto-bidding with Decoupled GRPO (arXiv id unknown; seed abstract)"

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        cfg = self.config
        scores = sequence_scores(inputs)  # (N,) R_ij
        plan = plan_index(inputs.plan_ids, inputs.group_ids)  # (N,) dense plan index
        self._check_sizes(plan, inputs.group_ids)
        within = group_stats(scores, plan, ddof=cfg.ddof)  # per row: its plan's mean V_i, std, M_i
        adv_exec = scores - within.mean  # (N,) exactly 0 in a plan of one execution or of tied returns
        if cfg.norm == "grpo":  # a zero std only occurs with a zero centred value: keep 0 even when eps = 0
            adv_exec = adv_exec / torch.where(within.std > 0, within.std + cfg.eps, torch.ones_like(within.std))
        plan_value, plan_group = _per_plan(within.mean, inputs.group_ids, plan)  # (P,), (P,)
        adv_plan = self._planner(plan_value, plan_group)  # (P,)
        adv = self._to_tokens(adv_plan[plan], adv_exec, inputs)  # (N, T)
        metrics = _metrics(adv_plan, adv_exec, within, plan, inputs)
        return AdvantageOutput(adv, metrics=metrics)

    def _planner(self, plan_value: Tensor, plan_group: Tensor) -> Tensor:
        """(P,) A^P: grpo across the plans of each state (a state with one plan: ``singleton``)."""
        cfg = self.config
        across = group_stats(plan_value, plan_group, ddof=cfg.ddof)
        single = across.count == 1
        centred = plan_value - torch.where(single, torch.zeros_like(across.mean), across.mean)
        if cfg.norm == "grpo":
            centred = centred / (torch.where(single, torch.ones_like(across.std), across.std) + cfg.eps)
        if cfg.singleton == "zero":
            centred = torch.where(single, torch.zeros_like(centred), centred)
        return centred

    def _to_tokens(self, adv_plan: Tensor, adv_exec: Tensor, inputs: AdvantageInputs) -> Tensor:
        """(N, T): A^P on planner tokens, A^E on executor tokens, 0 on untrained tokens."""
        mask = inputs.mask
        plan_tok = adv_plan.unsqueeze(-1).expand(mask.shape)  # (N, T)
        exec_tok = adv_exec.unsqueeze(-1).expand(mask.shape)  # (N, T)
        if inputs.role_mask is not None:
            tok = torch.where(inputs.role_mask, plan_tok, exec_tok)
        elif self.config.untagged == "planner":
            tok = plan_tok
        elif self.config.untagged == "executor":
            tok = exec_tok
        else:
            tok = plan_tok + exec_tok
        return torch.where(mask, tok, torch.zeros((), dtype=tok.dtype))

    def _check_sizes(self, plan: Tensor, group_ids: Tensor) -> None:
        """Optional checks of G (plans per state) and M (executions per plan) against the ids."""
        cfg = self.config
        if cfg.executions_per_plan:
            m = torch.bincount(plan)
            if bool((m != cfg.executions_per_plan).any()):
                raise BatchError(f"d_grpo: executions_per_plan={cfg.executions_per_plan} but plans have "
                                 f"{sorted(set(m.tolist()))} rows (without plan_ids every row is its own plan)")
        if cfg.plans:
            _, plan_group = _per_plan(torch.zeros(plan.shape), group_ids, plan)
            g = torch.unique(plan_group, return_counts=True)[1]
            if bool((g != cfg.plans).any()):
                raise BatchError(f"d_grpo: plans={cfg.plans} but states have {sorted(set(g.tolist()))} plans")


def plan_index(plan_ids: Tensor | None, group_ids: Tensor) -> Tensor:
    """(N,) dense plan index in [0, P). Without ``plan_ids`` every row is its own plan. Plan ids are
    global: a plan id found in two states (group ids) is an error, as it would merge their plans."""
    n = group_ids.shape[0]
    if plan_ids is None:
        return torch.arange(n, device=group_ids.device)
    uniq, index = torch.unique(plan_ids, return_inverse=True)
    g = group_ids.to(torch.long)
    lo = torch.zeros(len(uniq), dtype=torch.long, device=g.device).scatter_reduce(0, index, g, "amin",
                                                                                 include_self=False)
    hi = torch.zeros(len(uniq), dtype=torch.long, device=g.device).scatter_reduce(0, index, g, "amax",
                                                                                 include_self=False)
    bad = (lo != hi).nonzero(as_tuple=True)[0]
    if bad.numel():
        k = int(bad[0])
        raise BatchError(f"d_grpo: plan_ids must nest in group_ids, but plan {int(uniq[k])} has rows in groups "
                         f"{int(lo[k])} and {int(hi[k])}")
    return index


def _per_plan(row_values: Tensor, group_ids: Tensor, plan: Tensor) -> tuple[Tensor, Tensor]:
    """(P,) one value per plan from per-row values constant within a plan, and (P,) its group id."""
    p = int(plan.max()) + 1 if plan.numel() else 0
    values = torch.zeros(p, dtype=row_values.dtype, device=row_values.device).scatter(0, plan, row_values)
    groups = torch.zeros(p, dtype=group_ids.dtype, device=group_ids.device).scatter(0, plan, group_ids)
    return values, groups


def _metrics(adv_plan: Tensor, adv_exec: Tensor, within: GroupStats, plan: Tensor,
             inputs: AdvantageInputs) -> dict[str, Tensor]:
    def mean(x: Tensor) -> Tensor:
        return x.float().mean() if x.numel() else torch.tensor(0.0)

    multi = within.count > 1  # rows of plans with ≥ 2 executions
    plan_multi, _ = _per_plan(multi, inputs.group_ids, plan)
    plan_tied, _ = _per_plan(multi & (within.std == 0), inputs.group_ids, plan)
    out = {"planner_adv_mean": mean(adv_plan), "planner_adv_abs_mean": mean(adv_plan.abs()),
           "executor_adv_mean": mean(adv_exec), "executor_adv_abs_mean": mean(adv_exec.abs()),
           "num_plans": torch.tensor(float(adv_plan.numel())),
           "tied_plan_frac": plan_tied.float().sum() / plan_multi.float().sum().clamp(min=1)}
    if inputs.role_mask is not None:
        trained = inputs.mask.sum().clamp(min=1)
        out["planner_token_frac"] = (inputs.role_mask & inputs.mask).sum().float() / trained
    return out
