"""The multi_path sampler: P parallel paths per rollout as rows, their bookkeeping, and P = 1 = plain."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlvr.registry import build
from rlvr.rollout.samplers import SampleContext
from rlvr.types import Problem

ROLLOUT = SimpleNamespace(max_new_tokens=8, temperature=1.0, top_p=1.0, top_k=0)


def _problems() -> list[Problem]:
    return [Problem(prompt="1+2=", answer="3"), Problem(prompt="2+5=", answer="7")]


def test_rows_paths_and_groups(policy, tok):
    # B = 2 problems, G = 2 rollouts, P = 3 paths → 12 rows; row k is path k % 3 of rollout k // 3;
    # all 6 rows of a problem share its group id (offset 100 + b).
    ctx = SampleContext(tokenizer=tok, rollout=ROLLOUT, seed=9, group_offset=100)
    batch = build("sampler", "multi_path", paths=3).sample(policy, _problems(), 2, ctx)
    assert batch.num_rows == 12
    assert batch.group_ids.tolist() == [100] * 6 + [101] * 6
    assert batch.meta["sampler_metrics"]["rollout/paths_per_rollout"] == 3.0
    assert batch.path_rollout.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert batch.path_index.tolist() == [0, 1, 2] * 4
    assert [p.prompt for p in batch.problems] == ["1+2="] * 6 + ["2+5="] * 6
    assert batch.meta["sampler_metrics"]["rollout/multi_path_rollouts"] == 4.0
    assert len(set(batch.texts)) > 1  # the paths are distinct samples


def test_one_path_is_the_plain_sampler(policy, tok):
    ctx = SampleContext(tokenizer=tok, rollout=ROLLOUT, seed=9, group_offset=7)
    a = build("sampler", "multi_path", paths=1).sample(policy, _problems(), 3, ctx)
    b = build("sampler", "plain").sample(policy, _problems(), 3, ctx)
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.group_ids, b.group_ids)
    assert a.texts == b.texts


def test_bad_path_count():
    with pytest.raises(ValueError, match="paths"):
        build("sampler", "multi_path", paths=0)
