"""Weight sync over the gloo group beside the training world, and the generator worker's handle:
buckets, exact equality after a sync, and a dead or frozen worker caught within the timeout."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from rlvr.registry import build
from rlvr.rollout.generator import GeneratorError, GeneratorProcess
from rlvr.rollout.weight_sync import layout, unique_tensors
from rlvr.train.config import load_config
from rlvr.types import Problem


def test_buckets_split_by_size_and_dtype():
    ts = [torch.zeros(10), torch.zeros(10), torch.zeros(4, dtype=torch.bfloat16), torch.zeros(300)]
    buckets = layout(ts, bucket_bytes=80)  # 40 + 40 bytes fit; a dtype change or an oversize tensor starts anew
    assert [b.indices for b in buckets] == [(0, 1), (2,), (3,)]
    assert [b.numel for b in buckets] == [20, 4, 300]
    assert [b.dtype for b in buckets] == [torch.float32, torch.bfloat16, torch.float32]


def test_tied_weights_are_sent_once():
    model = torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False))
    model[1].weight = model[0].weight  # tied, as an LM head tied to its embedding
    assert len(model.state_dict()) == 2 and len(unique_tensors(model)) == 1


def _worker(policy, tok, timeout_s: float = 60.0) -> GeneratorProcess:
    rollout = load_config(None, ["rollout.group_size=2", "rollout.max_new_tokens=4"]).rollout
    return GeneratorProcess(policy, tok, build("sampler", "plain"), rollout, version=0, timeout_s=timeout_s,
                            bucket_mb=0.01)  # ~10 KB buckets: the tiny model takes several broadcasts


@pytest.mark.slow
def test_after_a_sync_the_generator_holds_the_trainers_weights_exactly(policy, tok):
    trainer = type(policy)(policy.config)
    trainer.load_state_dict(policy.state_dict())
    worker = _worker(trainer, tok)
    try:
        with torch.no_grad():
            for p in trainer.parameters():  # the trainer's update: every tensor moves
                p.add_(torch.randn_like(p))
        stale = worker.state()
        assert any(not torch.equal(stale[k], v) for k, v in trainer.state_dict().items())
        worker.sync(trainer, version=1)
        fresh = worker.state()
        assert fresh.keys() == trainer.state_dict().keys()
        assert all(torch.equal(fresh[k], v) for k, v in trainer.state_dict().items())
        worker.submit("a", [Problem(prompt="12:", answer="7"), Problem(prompt="34:", answer="7")], seed=3,
                      group_offset=0)
        got = worker.result("a")
        assert got.version == 1 and got.batch.num_rows == 4 and got.completions == 4
        assert got.problem_index == [0, 0, 1, 1]  # rows map back to the trainer's problems
    finally:
        worker.close()


@pytest.mark.slow
@pytest.mark.parametrize("sig, words", [(signal.SIGKILL, "died"), (signal.SIGSTOP, "hangs")])
def test_a_dead_or_frozen_generator_is_an_error_within_the_timeout(policy, tok, sig, words):
    worker = _worker(policy, tok, timeout_s=3.0)
    try:
        os.kill(worker.pid, sig)
        worker.submit("a", [Problem(prompt="12:", answer="7")], seed=3, group_offset=0)
        start = time.monotonic()
        with pytest.raises(GeneratorError, match=words):
            worker.result("a")
        assert time.monotonic() - start < 3.0 + 2.0  # the timeout plus a poll and a margin
    finally:
        if sig == signal.SIGSTOP:
            os.kill(worker.pid, signal.SIGKILL)
        worker.close()
