"""The data half of a step: select → rollout → verify → shape → refine (with DAPO-style refills).

What the ``Trainer`` asks of its collector (``Trainer(collector=...)``, a class or factory called with
the keyword arguments of ``Collector``) is ``StepCollector``: the ``Collector`` here; the
``AsyncCollector`` (``rlvr.train.async_collect``), which feeds a ``Collector``'s rounds from a generator
process; LURE's self-play (``rlvr.loops.lure_self_play``), which sets the advantages itself.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ClassVar, Protocol

import torch

from rlvr.batching import concat_rollouts
from rlvr.rewards.functions import score_functions
from rlvr.rollout.samplers import GenerationCount, SampleContext
from rlvr.tasks import verify_all
from rlvr.sandbox.pool import active as active_pool
from rlvr.train.global_batch import fully_masked, trains_no_rows
from rlvr.types import BatchError, Problem, Rollouts


def step_seed(seed: int, step: int, rank: int = 0, round_: int = 0) -> int:
    """A distinct, reproducible seed for every (run seed, step, rank, refill round)."""
    return (seed * 1_000_003 + step * 9_176 + rank * 131 + round_ * 17) % (2**31 - 1)


class StepCollector(Protocol):
    """The data half of the ``Trainer``'s step. ``sets_advantages``: the batch comes with its advantages
    (the advantage stage then only reports them); ``moves_reference``: the collector changes the frozen
    reference it was handed (every checkpoint then saves it)."""

    sets_advantages: ClassVar[bool]
    moves_reference: ClassVar[bool]

    def session(self) -> contextlib.AbstractContextManager:
        """What lives as long as the run."""

    def begin(self, policy: torch.nn.Module, resume: bool) -> None:
        """Called as training starts (after a resume restored the weights when ``resume``)."""

    def heldout_metrics(self, policy: torch.nn.Module) -> dict[str, float]:
        """The collector's own held-out measures (``heldout/...``) of ``policy``; most have none."""

    def collect(self, model: torch.nn.Module, step: int,
                budget: int | None = None) -> tuple[Rollouts, dict[str, float]]:
        """This rank's batch for ``step`` and its metrics."""


class RoundSource(Protocol):
    """Where a ``Collector``'s rounds come from: the problems of (step, round) and their completions."""

    def select(self, step: int, round_: int) -> list[Problem]: ...

    def generate(self, model: torch.nn.Module, problems: list[Problem], seed: int, round_: int) -> Rollouts: ...


class Collector:
    """Produces this rank's verified, shaped and filtered batch for one step. Its rounds are selected and
    sampled here, or by ``source`` (the asynchronous collector's generator process)."""

    sets_advantages: ClassVar[bool] = False
    moves_reference: ClassVar[bool] = False

    def __init__(self, *, task: Any, selector: Any, shapers: list, filters: list, rollout_cfg: Any,
                 tokenizer: Any, seed: int, rank: int, world_size: int, timer: Any, sampler: Any = None,
                 reference: torch.nn.Module | None = None, reward_functions: list | None = None,
                 rows_over_ranks: Callable[[int], int] | None = None, source: RoundSource | None = None) -> None:
        cfg = rollout_cfg
        if cfg.prompts_per_step % world_size:
            raise BatchError(f"rollout.prompts_per_step={cfg.prompts_per_step} is not divisible by "
                             f"the {world_size} data-parallel processes")
        self.task, self.selector, self.shapers, self.filters = task, selector, shapers, filters
        if sampler is None:
            from rlvr.registry import build
            sampler = build("sampler", "plain")
        self.sampler, self.reference = sampler, reference
        self.functions = reward_functions or []  # rlvr.rewards.functions.RewardFunction, scored beside the verdict
        self.cfg, self.tokenizer, self.seed, self.timer = cfg, tokenizer, seed, timer
        self.rank, self.world_size = rank, world_size
        # Σ over data-parallel ranks of a row count (a collective every rank calls); identity in one process.
        self.rows_over_ranks = rows_over_ranks or (lambda n: n)
        self.local_prompts = cfg.prompts_per_step // world_size
        self._looked: dict[tuple[int, str], Any] = {}  # (id(problem), text) -> Score a sampler asked for this round
        self.source: RoundSource = source or self

    def session(self) -> contextlib.AbstractContextManager:
        """What lives as long as the run (nothing here; the asynchronous collector's generator process)."""
        return contextlib.nullcontext()

    def begin(self, policy: torch.nn.Module, resume: bool) -> None:
        pass

    def heldout_metrics(self, policy: torch.nn.Module) -> dict[str, float]:
        return {}  # the task's evaluation is all

    def collect(self, model: torch.nn.Module, step: int,
                budget: int | None = None) -> tuple[Rollouts, dict[str, float]]:
        """This rank's batch for ``step``. ``budget``: the completions this rank may still sample (the
        run's hard rollout cap, this rank's share); a refill round that would pass it is not started."""
        parts, kept = [], 0
        stats = {"rollout/rounds": 0.0, "rollout/sampled_rows": 0.0, "rollout/generated_completions": 0.0,
                 "rollout/generated_tokens": 0.0, "rollout/refills_capped": 0.0}
        first_shaped = None
        for round_ in range(1 + self.cfg.refill_rounds):
            if round_ and budget is not None and \
                    stats["rollout/generated_completions"] + stats["rollout/first_round_completions"] > budget:
                stats["rollout/refills_capped"] = 1.0  # a round costs about what the first one did
                break
            batch, shaped, raw = self._one_round(model, step, round_)
            first_shaped = shaped if first_shaped is None else first_shaped
            stats["rollout/rounds"] += 1
            stats["rollout/sampled_rows"] += raw.num_rows
            stats["rollout/generated_completions"] += raw.meta["generated"]["completions"]
            stats["rollout/generated_tokens"] += raw.meta["generated"]["tokens"]
            if round_ == 0:
                stats["rollout/first_round_completions"] = float(raw.meta["generated"]["completions"])
                stats.update(_reward_stats(raw))
                stats.update(raw.meta.get("sampler_metrics", {}))
            if batch.num_rows:
                parts.append(batch)
                kept += int(torch.unique(batch.group_ids).numel())
            if kept >= self.local_prompts:
                break
        parts = self._fallback(parts, first_shaped, batch.meta, stats)
        out = concat_rollouts(parts, self.tokenizer.pad_token_id)
        out = _keep_first_groups(out, self.local_prompts)
        stats["rollout/kept_groups"] = 0.0 if trains_no_rows(out) else float(torch.unique(out.group_ids).numel())
        return out, stats

    def _fallback(self, parts: list[Rollouts], first_shaped: Rollouts, filtered_meta: dict[str, Any],
                  stats: dict[str, float]) -> list[Rollouts]:
        """Decided on the global batch, as in one process: when the filters left no row on any rank, every
        rank trains on its shaped, unfiltered first round (``rollout/all_filtered``); a rank left empty
        while others kept rows trains on no rows (its share of the one-process batch is empty): it holds a
        ``fully_masked`` batch (its unfiltered rows, no token trained), so it still joins every forward
        pass, mini-batch and collective of the step."""
        if self.rows_over_ranks(sum(p.num_rows for p in parts)) == 0:
            stats["rollout/all_filtered"] = 1.0
            return [first_shaped]
        stats["rollout/all_filtered"] = 0.0
        return parts or [fully_masked(first_shaped, filtered_meta)]

    def _one_round(self, model: torch.nn.Module, step: int, round_: int) -> tuple[Rollouts, Rollouts, Rollouts]:
        """(filtered, shaped, verified) batches of one sampling round."""
        with self.timer("select"):
            problems = self.source.select(step, round_)
        with self.timer("rollout"):
            batch = self.source.generate(model, problems, step_seed(self.seed, step, self.rank, round_), round_)
        with self.timer("verify"):
            self._verify(batch)
        raw = batch
        with self.timer("shape"):
            for shaper in self.shapers:  # a shaper that reads the policy (GAR) declares needs_policy
                batch = shaper(batch, policy=model, tokenizer=self.tokenizer) \
                    if getattr(shaper, "needs_policy", False) else shaper(batch)
        shaped = batch
        with self.timer("refine"):
            for flt in self.filters:
                batch = flt(batch)
        return batch, shaped, raw

    def select(self, step: int, round_: int) -> list[Problem]:
        """This rank's share of the problems the selector picks for (step, round)."""
        seed = step_seed(self.seed, step, 0, round_)
        problems = self.selector.select(self.task, self.cfg.prompts_per_step, step, seed)
        return problems[self.rank * self.local_prompts:(self.rank + 1) * self.local_prompts]

    def generate(self, model: torch.nn.Module, problems: list[Problem], seed: int, round_: int) -> Rollouts:
        """The sampler's completions of ``problems`` in this process."""
        ctx = SampleContext(tokenizer=self.tokenizer, rollout=self.cfg, seed=seed,
                            group_offset=round_ * 100_000 + self.rank * 10_000, reference=self.reference,
                            verify=self._correctness)
        self._looked = {}
        batch = self.sampler.sample(model, problems, self.cfg.group_size, ctx).to(next(model.parameters()).device)
        spent = ctx.spent
        if not spent.completions:  # a sampler that reports nothing: count what it returned
            spent = GenerationCount(batch.num_rows, int(batch.attention.sum()))
        batch.meta["generated"] = {"completions": spent.completions, "tokens": spent.tokens}
        return batch

    def _correctness(self, problems: list[Problem], texts: list[str]) -> list[float]:
        """The verifier's reward per (problem, completion), for samplers that look before they guide;
        the scores are kept so ``_verify`` does not verify the same rows again this round."""
        scores = verify_all(self.task, problems, texts, self.cfg.verify_timeout_s)
        self._looked.update({(id(p), t): s for p, t, s in zip(problems, texts, scores)})
        return [s.value for s in scores]

    def _verify(self, batch: Rollouts) -> None:
        looked, self._looked = self._looked, {}
        scores = [looked.get((id(p), t)) for p, t in zip(batch.problems, batch.texts)]
        unscored = [i for i, s in enumerate(scores) if s is None]
        fresh = verify_all(self.task, [batch.problems[i] for i in unscored], [batch.texts[i] for i in unscored],
                           self.cfg.verify_timeout_s)
        for i, s in zip(unscored, fresh):
            scores[i] = s
        # Objective 0 is the verdict; tasks may add named objectives (format, partial credit, ...);
        # configured reward functions (algorithm.rewards) come last, one objective each.
        names = list(dict.fromkeys(k for s in scores for k in s.meta.get("objectives", {})))
        rows = [[s.value] + [float(s.meta.get("objectives", {}).get(k, 0.0)) for k in names] for s in scores]
        errors = [str(s.meta.get("error") or "") for s in scores]  # (N,) "" = verified
        if self.functions:
            extra, fn_errors = score_functions(self.functions, batch.problems, batch.texts,
                                               self.cfg.verify_timeout_s, active_pool())
            rows = [r + e for r, e in zip(rows, extra)]
            errors = ["; ".join(filter(None, (e, fn_errors.get(i)))) for i, e in enumerate(errors)]
        batch.rewards = torch.tensor(rows, dtype=torch.float32, device=batch.completion_mask.device)  # (N, K)
        batch.reward_names = ["correct", *names, *(f.name for f in self.functions)]
        batch.verifier_errors = errors
        batch.parsed = [s.parsed for s in scores]


def _reward_stats(batch: Rollouts) -> dict[str, float]:
    r = batch.rewards[:, 0]
    lengths = batch.attention.sum(-1).float()
    extra = {f"reward/{name}": batch.rewards[:, k].mean().item() for k, name in enumerate(batch.reward_names) if k}
    return {**extra, "reward/mean": r.mean().item(), "reward/std": r.std().item() if r.numel() > 1 else 0.0,
            "reward/verifier_errors": float(sum(map(bool, batch.verifier_errors))),
            "rollout/response_length": lengths.mean().item(),
            "rollout/response_length_std": lengths.std().item() if lengths.numel() > 1 else 0.0,
            "rollout/truncated_frac": (lengths >= batch.completion_ids.shape[1]).float().mean().item()}


def _keep_first_groups(batch: Rollouts, n_groups: int) -> Rollouts:
    """Trim to the first ``n_groups`` groups in order of appearance (DAPO trims refills the same way)."""
    seen: list[int] = []
    for gid in batch.group_ids.tolist():
        if gid not in seen:
            seen.append(gid)
    if len(seen) <= n_groups:
        return batch
    keep = torch.isin(batch.group_ids, torch.tensor(seen[:n_groups], device=batch.group_ids.device))
    return batch.select(keep.nonzero().squeeze(-1))
