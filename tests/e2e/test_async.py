"""Asynchronous generation (rollout.async_rollout) end to end on the tiny model: k = 0 is today's loop
bit for bit; with k >= 1 every row's version tag follows the deterministic schedule and no row beyond
the bound is trained on; a dead or frozen generator stops the run within the timeout with its
checkpoints intact; resume regenerates the in-flight batches deterministically."""

from __future__ import annotations

import os
import shutil
import signal
import time

import pytest
import torch

from rlvr.rollout.generator import GeneratorError
from rlvr.train.checkpoint import latest_checkpoint, load_checkpoint
from rlvr.train.collect import Collector
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer

from tests.e2e.resume import weights
from tests.helpers.tiny import tiny_config

ASYNC = ["algorithm.loss.name=ppo_clip_is", "rollout.verify_workers=0"]


class Recording(Trainer):
    """A trainer that keeps (step, per-row policy version) of every batch it trained on."""

    seen: list

    def train_step(self):
        step = self.step
        metrics, batch = super().train_step()
        self.__dict__.setdefault("seen", []).append((step, batch.policy_version.clone()))
        return metrics, batch


def _run(out, overrides, steps=2, cls=Trainer, resume=False):
    trainer = cls(tiny_config(str(out), [f"run.steps={steps}", *overrides]))
    trainer.train(resume=resume)
    return trainer


def test_k0_is_todays_loop_bit_for_bit(tmp_path):
    today = _run(tmp_path / "a", [])
    k0 = _run(tmp_path / "b", ["rollout.async_rollout.max_staleness=0", "rollout.async_rollout.weight_sync_steps=3"])
    assert type(k0.collector) is Collector
    a, b = weights(today.policy), weights(k0.policy)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not any(k.startswith("async/") for k in read_metrics(tmp_path / "b")[-1])


@pytest.mark.parametrize("k, sync_every, steps, versions, dropped", [
    (1, 1, 4, [0, 0, 1, 2], [0, 0, 0, 0]),  # one step off: batch s from version s - 1
    (2, 1, 4, [0, 0, 0, 1], [0, 0, 0, 0]),  # two ahead: batch s from version s - 2
    (1, 2, 5, [0, 0, 2, 2, 4], [0, 0, 1, 0, 1]),  # sync every 2: batches 2 and 4 come back 2 old
    (0, 1, 3, [0, 1, 2], [0, 0, 0]),  # in_worker, k = 0: pushed before each batch is asked for
])
def test_version_tags_follow_the_schedule(tmp_path, k, sync_every, steps, versions, dropped):
    """Commands reach the worker in order, so the tags do not depend on timing; a batch older than k
    is dropped (all its rows counted) and regenerated from the trainer's weights."""
    trainer = _run(tmp_path, [f"rollout.async_rollout.max_staleness={k}",
                              f"rollout.async_rollout.weight_sync_steps={sync_every}",
                              f"rollout.async_rollout.in_worker={k == 0}", *ASYNC],
                   steps=steps, cls=Recording)
    rows = trainer.cfg.rollout.prompts_per_step * trainer.cfg.rollout.group_size
    for (step, tags), want in zip(trainer.seen, versions):
        assert tags.shape == (rows,) and bool((tags == want).all()), (step, tags)
        assert int((step - tags).max()) <= k  # nothing beyond the bound reached the update
    metrics = read_metrics(tmp_path)
    assert [m["async/dropped_rows"] for m in metrics] == [d * rows for d in dropped]
    assert [m["async/staleness_max"] for m in metrics] == [s - v for s, v in enumerate(versions)]
    assert all(0 <= m["async/trainer_idle_frac"] <= 1 and 0 <= m["async/generator_idle_frac"] <= 1
               for m in metrics)


class Kill:
    """Sends ``sig`` to the generator process at the end of step ``at``."""

    def __init__(self, sig: int, at: int) -> None:
        self.sig, self.at, self.pid = sig, at, None

    def on_step_end(self, trainer, step, metrics):
        if step == self.at:
            self.pid = trainer.collector.worker.pid
            os.kill(self.pid, self.sig)


@pytest.mark.parametrize("sig, words", [(signal.SIGKILL, "died"), (signal.SIGSTOP, "hangs")])
def test_a_dead_or_frozen_generator_stops_the_run_and_keeps_its_checkpoints(tmp_path, sig, words):
    timeout = 4.0
    cfg = tiny_config(str(tmp_path), ["run.steps=4", "run.save_every=1", "rollout.async_rollout.max_staleness=1",
                                      f"rollout.async_rollout.timeout_s={timeout}", *ASYNC])
    kill = Kill(sig, at=2)
    trainer = Trainer(cfg, callbacks=[kill])
    start = None

    def mark(*_):
        nonlocal start
        start = time.monotonic()

    trainer.callbacks.add(type("Mark", (), {"on_save": mark})())  # the step-2 checkpoint, after the kill
    with pytest.raises(GeneratorError, match=words):
        trainer.train()
    assert time.monotonic() - start < timeout + 3.0  # the timeout, one poll and a margin
    # Step 3's batch was generated one step ahead (max_staleness 1): when it reached the trainer before
    # the signal, step 3 trains and saves; either way the run stops at the next batch it waits for.
    last = latest_checkpoint(tmp_path)
    assert last is not None and last.name[-1] in "23", last
    fresh = Trainer(cfg)
    assert int(load_checkpoint(last, fresh.policy, fresh.optimizer)["step"]) == int(last.name[-1])
    assert trainer.collector.worker is None  # the session stopped the worker


def test_resume_regenerates_the_in_flight_batches_deterministically(tmp_path):
    """Resume does not replay the lost in-flight batches: it regenerates them from the checkpoint's
    weights (batch 2 from version 2, staleness 0), the same way on every resume."""
    over = ["rollout.async_rollout.max_staleness=1", "run.save_every=2", *ASYNC]
    _run(tmp_path / "a", over, steps=2)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    one = _run(tmp_path / "a", over, steps=4, cls=Recording, resume=True)
    two = _run(tmp_path / "b", over, steps=4, cls=Recording, resume=True)
    assert [(s, t.unique().tolist()) for s, t in one.seen] == [(2, [2]), (3, [2])]
    assert [(s, t.tolist()) for s, t in one.seen] == [(s, t.tolist()) for s, t in two.seen]
    a, b = weights(one.policy), weights(two.policy)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("setting", ["max_staleness=1", "in_worker=true"])
def test_async_generation_with_the_policy_on_an_accelerator_is_refused_by_name_before_loading(
        tmp_path, monkeypatch, setting):
    """The generator process holds a CPU copy of the policy: with the policy on a GPU the trainer refuses
    it when it is built, before any model is loaded (here the accelerator's device says cuda:0)."""
    from types import SimpleNamespace

    import rlvr.train.trainer as trainer_module
    from rlvr.train.async_check import check_async_device
    from rlvr.train.config import ConfigError
    cfg = tiny_config(str(tmp_path), [f"rollout.async_rollout.{setting}", *ASYNC])
    check_async_device(cfg, torch.device("cpu"))  # on the CPU it runs as it always did
    monkeypatch.setattr(trainer_module, "make_accelerator", lambda: SimpleNamespace(device=torch.device("cuda", 0)))
    monkeypatch.setattr(trainer_module, "build_model", lambda cfg: pytest.fail("a model was loaded before refusing"))
    with pytest.raises(ConfigError, match=rf"rollout\.async_rollout\.{setting} is not supported with the policy on "
                                          r"cuda:0") as err:
        Trainer(cfg)
    assert "rollout.async_rollout.max_staleness=0 and in_worker=false" in str(err.value)
    assert "\n" not in str(err.value)
