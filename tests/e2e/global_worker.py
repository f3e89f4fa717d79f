"""Worker for the global-batch data-parallel test: ``torchrun --nproc_per_node 2 -m tests.e2e.global_worker OUT
PRESET...`` or one plain process. For each preset: two real train steps whose completions depend only on
the problem (not on the rank or batch), cut to problem-dependent lengths so the two ranks' batches have
different padded widths. Writes ``OUT/rank<r>.json``: per preset the rows' problems, advantages and widths
of each step, the selector's state and the updated weights."""

from __future__ import annotations

import dataclasses
import json
import sys
import zlib
from pathlib import Path
from typing import Any

import torch

from rlvr.batching import concat_rollouts
from rlvr.rollout.samplers import SampleContext
from rlvr.train.collect import step_seed
from rlvr.train.global_batch import trains_no_rows
from rlvr.train.trainer import Trainer
from rlvr.registry import register
from rlvr.types import Problem, Rollouts, Score
from tests.helpers.tiny import ToyDigit, tiny_config

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "methods"
STEPS = 2
# Two objectives with ~half the groups mixed: SA-MRPO's saturations and TETHER's w are non-trivial.
OVERRIDES = {"sa_mrpo": ["task.name=toy_two_objectives_test", "algorithm.advantage.batch_whiten=true"],
             "tether": ["task.name=toy_two_objectives_test"]}
# Cases on the default (grpo) configuration rather than a preset: batch whitening (gae with a critic,
# reinforce_pp) and the filters leaving no row on rank 1 (``filtered_rank1``) or on any rank (``filtered_all``).
CASES = {"gae": ["algorithm.advantage.name=gae", "algorithm.advantage.lam=0.9", "critic.enabled=true"],
         "reinforce_pp": ["algorithm.advantage.name=reinforce_pp", "algorithm.advantage.gamma=0.9"],
         "filtered_rank1": [], "filtered_all": []}


class DropProblems:
    """A filter that drops the groups of the problems in ``uids`` (set before each step). Tests only."""

    def __init__(self) -> None:
        self.uids: set[str] = set()

    def __call__(self, batch: Rollouts) -> Rollouts:
        keep = torch.tensor([p.uid not in self.uids for p in batch.problems], dtype=torch.bool)
        return batch.select(keep.nonzero().squeeze(-1))


@register("task", "toy_two_objectives_test")
class TwoObjectives(ToyDigit):
    """Objective 0: the completion holds one of 0–4; objective ``high``: one of 5–9. Tests only.

    Differs from toy_digit_test: easier (about half the rows succeed) and a second objective. Shapes: n/a.
    """

    def verify(self, problem: Problem, completion: str) -> Score:
        high = float(any(c in completion for c in "56789"))
        return Score(float(any(c in completion for c in "01234")), parsed=completion[:4],
                     meta={"objectives": {"high": high}})


class PerProblemSampler:
    """Samples each problem's group on its own, seeded by (problem, step), and keeps the first
    ``L(problem, row)`` tokens (2..11): the same rows in one process and on any rank."""

    def __init__(self, inner: Any, tokenizer: Any) -> None:
        self.inner, self.tokenizer, self.step = inner, tokenizer, 0
        self.needs_reference = getattr(inner, "needs_reference", False)

    def sample(self, policy: torch.nn.Module, problems: list[Problem], group_size: int,
               ctx: SampleContext) -> Rollouts:
        parts = []
        for i, p in enumerate(problems):
            seed = zlib.crc32(f"{p.uid}:{self.step}".encode())
            sub = dataclasses.replace(ctx, seed=seed, group_offset=ctx.group_offset + i * group_size)
            parts.append(self._cut(self.inner.sample(policy, [p], group_size, sub), p))
        batch = concat_rollouts(parts, self.tokenizer.pad_token_id)
        width = int(batch.attention.sum(-1).max())  # this rank's longest completion
        return _trim(batch, width)

    def _cut(self, batch: Rollouts, problem: Problem) -> Rollouts:
        top = 2 + zlib.crc32(problem.uid.encode()) % 10
        keep = torch.tensor([max(1, top - r % 3) for r in range(batch.num_rows)])  # (N,)
        cols = torch.arange(batch.completion_ids.shape[1]).unsqueeze(0)  # (1, T)
        live = (cols < keep.unsqueeze(1)) & batch.attention  # (N, T)
        batch.completion_ids = torch.where(live, batch.completion_ids, self.tokenizer.pad_token_id)
        batch.completion_mask = batch.completion_mask & live
        batch.completion_attention = live
        if batch.rollout_logprobs is not None:
            batch.rollout_logprobs = batch.rollout_logprobs * live
        batch.texts = [self.tokenizer.decode(ids[m].tolist()) for ids, m in zip(batch.completion_ids, live)]
        return batch


def _trim(batch: Rollouts, width: int) -> Rollouts:
    for name in ("completion_ids", "completion_mask", "completion_attention", "rollout_logprobs"):
        value = getattr(batch, name)
        if value is not None:
            setattr(batch, name, value[:, :width].contiguous())
    return batch


def run_preset(name: str, out: Path) -> dict[str, Any]:
    path = None if name in CASES else str(PRESETS / f"{name}.yaml")
    cfg = tiny_config(out / name, ["run.steps=2", "rollout.max_new_tokens=12", *OVERRIDES.get(name, []),
                                   *CASES.get(name, [])], path=path)
    trainer = Trainer(cfg)
    sampler = PerProblemSampler(trainer.collector.sampler, trainer.tokenizer)
    trainer.collector.sampler = sampler
    drop = DropProblems()
    if name.startswith("filtered_"):
        trainer.collector.filters = [drop]
    record: dict[str, Any] = {"uids": [], "adv": [], "width": [], "metrics": []}
    for step in range(STEPS):
        sampler.step = trainer.step = step
        drop.uids = _dropped(name, trainer, step)
        metrics, batch = trainer.train_step()
        record["metrics"].append(metrics)
        mask = batch.completion_mask
        rows = 0 if trains_no_rows(batch) else batch.num_rows  # a fully masked batch trains no row
        record["uids"].append([p.uid for p in batch.problems[:rows]])
        record["adv"].append([batch.advantages[i][mask[i]].tolist() for i in range(rows)])
        record["width"].append(int(mask.shape[1]))
    selector = trainer.parts.selector
    record["state"] = selector.state_dict() if hasattr(selector, "state_dict") else None
    record["flat"] = torch.cat([p.detach().flatten() for p in trainer.policy.parameters()]).tolist()
    record["world"] = trainer.acc.num_processes
    return record


def _dropped(name: str, trainer: Trainer, step: int) -> set[str]:
    """The problems ``filtered_*`` drops at ``step``: rank 1's share of the selection, or all of it."""
    if not name.startswith("filtered_"):
        return set()
    n = trainer.cfg.rollout.prompts_per_step
    chosen = trainer.collector.selector.select(trainer.collector.task, n, step, step_seed(trainer.cfg.run.seed, step))
    return {p.uid for p in (chosen if name == "filtered_all" else chosen[n // 2:])}


def main(out: str, presets: list[str]) -> None:
    result = {name: run_preset(name, Path(out)) for name in presets}
    rank = int(__import__("os").environ.get("RANK", "0"))
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
