"""The data that flows through the pipeline (docs/design.md §3).

Vocabulary: ``N`` sequences = ``B`` prompts × ``G`` completions, ``T`` padded completion
length, ``P`` padded prompt length, ``K`` reward objectives. One mask polarity everywhere:
``completion_mask[i, t]`` is True when token ``t`` of sequence ``i`` is trained on.
Group ids need not be contiguous: rows of one prompt may be anywhere in the batch.
A reward field never holds an advantage and an advantage field never holds a reward.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import torch
from torch import Tensor


class BatchError(ValueError):
    """A batch (or a plug-in input record) is malformed: wrong shape, dtype or values."""


class Origin(IntEnum):
    """Where a completion token came from (``Rollouts.token_origin``); guided samplers record it and
    the loss mask follows it."""

    POLICY = 0  # sampled by the policy in the trained context (on-policy)
    PREFIX = 1  # written by another model (weak-model prefix); never trained
    HINT = 2  # privileged guidance copied into the completion; never trained
    REFERENCE = 3  # sampled by the frozen reference policy (ARMOR anchors); off-policy
    GUIDED = 4  # sampled by the policy under a guided context the trainer does not see (OC-GRPO)
    ENV = 5  # written by an environment between policy turns (multi-turn observations); never trained


OFF_POLICY = (Origin.REFERENCE, Origin.GUIDED)  # trained, but their behaviour policy is not pi_old


@dataclass
class Problem:
    """One verifiable problem."""

    prompt: str
    answer: str | None = None  # gold answer; None for label-free problems
    solution: str | None = None  # optional worked solution (anchors, hints, privileged critics)
    uid: str = ""  # stable id, used for per-problem state (selection, caching)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Score:
    """A verifier's verdict on one completion."""

    value: float  # the reward, usually in [0, 1]
    parsed: str | None = None  # the answer the verifier extracted, if any
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. {"error": "timeout"}


@dataclass
class Rollouts:
    """One batch of sampled completions with everything later stages add to it."""

    problems: list[Problem]  # (N,) the problem of each row
    prompt_ids: Tensor  # (N, P) left-padded prompt tokens
    prompt_mask: Tensor  # (N, P) bool, True = real prompt token
    completion_ids: Tensor  # (N, T) right-padded completion tokens
    completion_mask: Tensor  # (N, T) bool, True = trained on
    group_ids: Tensor  # (N,) int64, rows with the same id answer the same prompt
    completion_attention: Tensor | None = None  # (N, T) bool real tokens (default: completion_mask)
    rollout_logprobs: Tensor | None = None  # (N, T) log-probs from the sampling engine
    old_logprobs: Tensor | None = None  # (N, T) behaviour policy log-probs (trainer forward)
    ref_logprobs: Tensor | None = None  # (N, T) reference policy log-probs
    logprobs: Tensor | None = None  # (N, T) current policy log-probs
    entropy: Tensor | None = None  # (N, T)
    token_origin: Tensor | None = None  # (N, T) uint8 ``Origin`` codes; None = every token is POLICY
    behaviour_logprobs: Tensor | None = None  # (N, T) log-probs under the policy/context that produced
    # each off-policy token (guided context, reference); filled by guided samplers, 0 elsewhere
    rewards: Tensor | None = None  # (N, K) float
    reward_names: list[str] = field(default_factory=list)  # (K,)
    token_rewards: Tensor | None = None  # (N, T) optional dense rewards
    values: Tensor | None = None  # (N, T) optional critic values
    advantages: Tensor | None = None  # (N, T)
    texts: list[str] = field(default_factory=list)  # (N,) decoded completions
    parsed: list[str | None] = field(default_factory=list)  # (N,) the answer the verifier extracted from
    # each row (None = none), [] before verification; read by the label-free shapers
    verifier_errors: list[str] = field(default_factory=list)  # (N,) why the verifier (or a reward
    # function) failed on a row, "" = it did not; [] before verification
    # Per-row structure and intermediate results of later stages (None when absent); ``select`` slices
    # them with the rest, so a filter or refill round never leaves them misaligned.
    plan_ids: Tensor | None = None  # (N,) long: the plan a row executes, nested in group_ids (multi_turn)
    role_mask: Tensor | None = None  # (N, T) bool: True on planner tokens (multi_turn planner_roles)
    turn_baselines: Tensor | None = None  # (N, T) float: counterfactual baseline at a turn's first
    # token, NaN = none (multi_turn counterfactuals, TCPO)
    path_rollout: Tensor | None = None  # (N,) long: the multi-path rollout a row (one path) belongs to
    path_index: Tensor | None = None  # (N,) long: which path of its rollout the row is (multi_path)
    hidden: Tensor | None = None  # (N, T, H) float32 output-layer inputs of generated tokens (GAR)
    policy_version: Tensor | None = None  # (N,) long: the policy step that generated each row (async)
    value_prompt_ids: Tensor | None = None  # (N, P') the critic's prompt view, left-padded
    value_prompt_mask: Tensor | None = None  # (N, P') bool, True = real critic prompt token
    old_values: Tensor | None = None  # (N, T) the value model's raw outputs before its update (clip anchor)
    returns: Tensor | None = None  # (N, T) value targets: the estimator's returns or Monte-Carlo
    answer_mask: Tensor | None = None  # (N, T) bool answer-span tokens (the answer_mask weighting)
    row_stats: dict[str, Tensor] = field(default_factory=dict)  # name -> (N,) per-row numbers shapers
    # and filters compute and pass on (consensus strength, target confidence, contrast, stated confidence)
    meta: dict[str, Any] = field(default_factory=dict)  # per-batch extras that are not per row:
    # metrics dicts (``METRICS_KEY``), notes, counts (``check_meta``: never a tensor or a per-row list)

    def __post_init__(self) -> None:
        n, t = check_mask(self.completion_mask, "completion_mask")
        if len(self.problems) != n:
            raise BatchError(f"Rollouts: {len(self.problems)} problems for {n} rows")
        check_shape(self.completion_ids, (n, t), "completion_ids")
        check_shape(self.group_ids, (n,), "group_ids")
        for name in TOKEN_FIELDS:
            value = getattr(self, name)
            if value is not None:
                check_shape(value, (n, t), name)
        for name in ROW_FIELDS:
            value = getattr(self, name)
            if value is not None:
                check_shape(value, (n,), name)
        for name in LIST_FIELDS:
            value = getattr(self, name)
            if value and len(value) != n:
                raise BatchError(f"{name} has {len(value)} entries for {n} rows (one per row, or none)")
        for name, value in self.row_stats.items():
            check_shape(value, (n,), f"row_stats['{name}']")
        if self.hidden is not None and (self.hidden.dim() != 3 or tuple(self.hidden.shape[:2]) != (n, t)):
            raise BatchError(f"hidden has shape {tuple(self.hidden.shape)}, expected ({n}, {t}, H)")
        if self.value_prompt_ids is not None or self.value_prompt_mask is not None:
            check_value_prompt(self.value_prompt_ids, self.value_prompt_mask, n)
        if self.rewards is not None:
            check_rewards(self.rewards, n)
        check_meta(self.meta)

    @property
    def num_rows(self) -> int:
        return int(self.completion_mask.shape[0])

    @property
    def attention(self) -> Tensor:
        """(N, T) bool: completion positions that hold real tokens (attended to)."""
        return self.completion_mask if self.completion_attention is None else self.completion_attention

    def to(self, device: torch.device | str) -> "Rollouts":
        """The batch with every tensor field on ``device`` (samplers may build parts on the CPU);
        ``self`` when every field is already there (the plain sampler's case: no copy, no re-check)."""
        device = torch.device(device)
        kwargs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        moved = {name: value.to(device) for name, value in kwargs.items()
                 if isinstance(value, Tensor) and value.device != device}
        if any(v.device != device for v in self.row_stats.values()):
            moved["row_stats"] = {k: v.to(device) for k, v in self.row_stats.items()}
        return Rollouts(**{**kwargs, **moved}) if moved else self

    def select(self, rows: Tensor) -> "Rollouts":
        """The sub-batch of the given row indices (a 1-D long tensor), every per-row field sliced."""
        rows = rows.to(torch.long)
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                kwargs[f.name] = value[rows]
            elif f.name in ("problems", *LIST_FIELDS) and value:
                kwargs[f.name] = [value[i] for i in rows.tolist()]
            elif f.name == "row_stats":
                kwargs[f.name] = {k: v[rows.to(v.device)] for k, v in value.items()}
            else:
                kwargs[f.name] = value
        return Rollouts(**kwargs)


# Optional per-token fields of ``Rollouts``: (N, T), cut with the completions when padding is trimmed.
TOKEN_FIELDS = ("completion_attention", "rollout_logprobs", "old_logprobs", "ref_logprobs", "logprobs",
                "entropy", "token_origin", "behaviour_logprobs", "token_rewards", "values", "advantages",
                "role_mask", "turn_baselines", "old_values", "returns", "answer_mask")
# Optional per-row fields of ``Rollouts``: (N,).
ROW_FIELDS = ("plan_ids", "path_rollout", "path_index", "policy_version")
# Optional per-row lists of ``Rollouts`` (N,), [] when absent: sliced and joined like ``problems``.
LIST_FIELDS = ("texts", "parsed", "verifier_errors")
# Per-row lists that once lived in ``Rollouts.meta``, and where each lives now (``check_meta`` names it).
ROW_DATA_HOMES = {"parsed": "Rollouts.parsed", "verifier_errors": "Rollouts.verifier_errors",
                  "turn_spans": "the row's episode record, Problem.meta['episode']['spans']",
                  "turn_scores": "the row's episode record, Problem.meta['episode']['scores']",
                  "turn_roles": "the row's episode record, Problem.meta['episode']['roles']"}
METRICS_KEY = "shaper_metrics"  # Rollouts.meta key of the shapers' and filters' metrics (one channel)


@dataclass
class AdvantageInputs:
    """What an advantage estimator may read. New estimators add optional fields, never positionals."""

    rewards: Tensor  # (N, K) sequence-level rewards
    mask: Tensor  # (N, T) bool, True = trained token
    group_ids: Tensor  # (N,) int64
    token_rewards: Tensor | None = None  # (N, T) dense rewards; when given, estimators that use them do
    values: Tensor | None = None  # (N, T) critic values V(s_t)
    reward_weights: Tensor | None = None  # (K,) weights of the objectives (default: first objective only)
    logprobs: Tensor | None = None  # (N, T) current/behaviour log-probs, for estimators that need them
    entropy: Tensor | None = None  # (N, T)
    plan_ids: Tensor | None = None  # (N,) long: executor sub-group (the plan a row executes) nested in group_ids
    role_mask: Tensor | None = None  # (N, T) bool: True on planner tokens, False on executor tokens
    first_mistake: Tensor | None = None  # (N,) long: token index m_i of the first wrong step; -1 = no mistake found
    turn_baselines: Tensor | None = None  # (N, T) float: at a turn's first token, the mean score of re-sampled
    # alternatives of that turn from the same history (counterfactual baseline, TCPO); NaN = none
    global_stats: dict[str, Tensor] | None = None  # the estimator's batch_stats summed over every data-parallel
    # rank (the trainer fills it); None = this batch is the whole batch

    def __post_init__(self) -> None:
        n, t = check_mask(self.mask, "mask")
        check_rewards(self.rewards, n)
        if self.turn_baselines is not None:  # NaN marks "no counterfactual": only the shape is checked
            check_shape(self.turn_baselines, (n, t), "turn_baselines")
        check_shape(self.group_ids, (n,), "group_ids")
        for name in ("token_rewards", "values", "logprobs", "entropy"):
            value = getattr(self, name)
            if value is not None:
                check_shape(value, (n, t), name)
                check_finite(value, name)
        if self.reward_weights is not None:
            check_shape(self.reward_weights, (self.rewards.shape[1],), "reward_weights")
        if self.first_mistake is not None:
            check_first_mistake(self.first_mistake, n, t)
        if self.plan_ids is not None:
            check_shape(self.plan_ids, (n,), "plan_ids")
            if self.plan_ids.is_floating_point() or self.plan_ids.dtype == torch.bool:
                raise BatchError(f"plan_ids must be an integer tensor, got dtype {self.plan_ids.dtype}")
        if self.role_mask is not None:
            check_shape(self.role_mask, (n, t), "role_mask")
            if self.role_mask.dtype != torch.bool:
                raise BatchError(f"role_mask must be a bool tensor (True = planner token), got dtype "
                                 f"{self.role_mask.dtype}")

    def scalar_rewards(self) -> Tensor:
        """(N,) the weighted sum of objectives; objective 0 alone when no weights are given."""
        if self.reward_weights is None:
            return self.rewards[:, 0].float()
        return self.rewards.float() @ self.reward_weights.to(self.rewards.device).float()


@dataclass
class LossInputs:
    """What a policy loss may read."""

    logprobs: Tensor  # (N, T) current policy, carries the gradient
    old_logprobs: Tensor  # (N, T) behaviour policy, no gradient
    advantages: Tensor  # (N, T)
    mask: Tensor  # (N, T) bool, True = trained token
    ref_logprobs: Tensor | None = None  # (N, T)
    rollout_logprobs: Tensor | None = None  # (N, T) sampling engine's log-probs
    entropy: Tensor | None = None  # (N, T)
    token_origin: Tensor | None = None  # (N, T) ``Origin`` codes; None = all on-policy
    behaviour_logprobs: Tensor | None = None  # (N, T) behaviour log-probs of off-policy tokens

    def __post_init__(self) -> None:
        n, t = check_mask(self.mask, "mask")
        for name in ("logprobs", "old_logprobs", "advantages", "ref_logprobs",
                     "rollout_logprobs", "entropy", "token_origin", "behaviour_logprobs"):
            value = getattr(self, name)
            if value is not None:
                check_shape(value, (n, t), name)


@dataclass
class LossOutput:
    """A policy loss's per-token values (before aggregation) and its diagnostics."""

    per_token: Tensor  # (N, T) loss at every position; aggregation applies the mask
    metrics: dict[str, Tensor] = field(default_factory=dict)  # detached scalars


# --- validation helpers: every message names the field and what was wrong ---------------------

def check_mask(mask: Tensor, name: str) -> tuple[int, int]:
    if not isinstance(mask, Tensor):
        raise BatchError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise BatchError(f"{name} must be a bool tensor (True = trained token), got dtype {mask.dtype}")
    if mask.dim() != 2:
        raise BatchError(f"{name} must have shape (N, T), got {tuple(mask.shape)}")
    return int(mask.shape[0]), int(mask.shape[1])


def check_shape(x: Tensor, shape: tuple[int, ...], name: str) -> None:
    if not isinstance(x, Tensor):
        raise BatchError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if tuple(x.shape) != tuple(shape):
        raise BatchError(f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)}")


def check_finite(x: Tensor, name: str) -> None:
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        bad = (~torch.isfinite(x)).nonzero()[:3].tolist()
        raise BatchError(f"{name} holds NaN or infinite values (first at indices {bad})")


def check_first_mistake(first_mistake: Tensor, n: int, t: int) -> None:
    """(N,) integer token indices in [-1, T): -1 = no mistake found."""
    check_shape(first_mistake, (n,), "first_mistake")
    if first_mistake.dtype.is_floating_point or first_mistake.dtype == torch.bool:
        raise BatchError(f"first_mistake must be an integer (long) tensor, got dtype {first_mistake.dtype}")
    bad = ((first_mistake < -1) | (first_mistake >= t)).nonzero().flatten()[:3].tolist()
    if bad:
        raise BatchError(f"first_mistake must hold token indices in [-1, T={t}) (-1 = no mistake); "
                         f"rows {bad} are out of range")


def check_value_prompt(ids: Tensor | None, mask: Tensor | None, n: int) -> None:
    """The critic's prompt view: ids and mask (N, P') together, the mask bool."""
    if ids is None or mask is None:
        raise BatchError("value_prompt_ids and value_prompt_mask are set together (the critic's prompt view)")
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.shape[0] != n:
        shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise BatchError(f"value_prompt_ids must have shape (N={n}, P'), got {shape}")
    check_shape(mask, tuple(ids.shape), "value_prompt_mask")
    if mask.dtype != torch.bool:
        raise BatchError(f"value_prompt_mask must be a bool tensor (True = real token), got dtype {mask.dtype}")


def check_meta(meta: dict[str, Any]) -> None:
    """``Rollouts.meta`` holds what is not per row (metrics, notes, counts): ``select`` and
    ``concat_rollouts`` do not slice it when a filter or refill round changes the rows, so a tensor, a
    dict keyed by row index or one of the per-row lists that have a home of their own
    (``ROW_DATA_HOMES``) is an error naming the key and where the data belongs."""
    for key, value in meta.items():
        inner = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
        if isinstance(value, Tensor) or any(isinstance(v, Tensor) for v in inner):
            raise BatchError(f"Rollouts.meta['{key}'] holds a tensor; per-row data belongs in a Rollouts field "
                             f"(sliced by select) or in row_stats, never in meta")
        by_row = isinstance(value, dict) and bool(value) and all(isinstance(k, int) for k in value)
        if key in ROW_DATA_HOMES or by_row:
            home = ROW_DATA_HOMES.get(key, "a Rollouts field (sliced by select), row_stats or the row's Problem.meta")
            raise BatchError(f"Rollouts.meta['{key}'] holds per-row data, which a filter or refill round would "
                             f"leave misaligned; it belongs in {home}, never in meta")


def add_metrics(meta: dict[str, Any], metrics: dict[str, float]) -> dict[str, Any]:
    """A copy of ``meta`` with ``metrics`` added to its metrics channel (``METRICS_KEY``), which the trainer
    logs: how shapers and filters report."""
    return {**meta, METRICS_KEY: {**meta.get(METRICS_KEY, {}), **metrics}}


def check_rewards(rewards: Tensor, n: int) -> None:
    if not isinstance(rewards, Tensor) or rewards.dim() != 2 or rewards.shape[0] != n:
        shape = tuple(rewards.shape) if isinstance(rewards, Tensor) else type(rewards).__name__
        raise BatchError(f"rewards must have shape (N={n}, K), got {shape}")
    check_finite(rewards, "rewards")
