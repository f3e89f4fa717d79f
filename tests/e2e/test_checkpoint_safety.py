"""Checkpoints that survive a kill at any point of the save sequence, verify on load and fall back
to the newest intact one (issue 22, cases 3 and 4)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from rlvr.train import checkpoint as ckpt
from rlvr.train import trainer as trainer_mod
from rlvr.train.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, save_checkpoint
from rlvr.train.trainer import Trainer

from tests.e2e.resume import weights
from tests.helpers.tiny import tiny_config

RUN = ["run.steps=2", "run.save_every=1"]


class Killed(BaseException):
    """Stands for SIGKILL: once raised, no further file operation of the save happens."""


def _kill_file_ops(monkeypatch: pytest.MonkeyPatch, at: int, active: dict) -> dict:
    """From the ``at``-th file-changing call of the save sequence on (writes, renames, deletes), while
    ``active["on"]``, raise Killed instead of touching the disk (clean-up handlers included, as after
    a real kill). Returns the call counter."""
    calls = {"n": 0}

    def wrap(fn):
        def op(*args, **kwargs):
            if active["on"]:
                calls["n"] += 1
                if calls["n"] >= at:
                    raise Killed(f"killed at file operation {calls['n']}")
            return fn(*args, **kwargs)
        return op

    monkeypatch.setattr(ckpt, "save_file", wrap(ckpt.save_file))
    monkeypatch.setattr(ckpt, "_write_file", wrap(ckpt._write_file))
    monkeypatch.setattr(os, "replace", wrap(os.replace))
    monkeypatch.setattr(shutil, "rmtree", wrap(shutil.rmtree))
    return calls


def _kill_during_save_of(monkeypatch: pytest.MonkeyPatch, step: int, at: int) -> dict:
    active = {"on": False}
    calls = _kill_file_ops(monkeypatch, at, active)
    original = trainer_mod.save_checkpoint

    def save(run_dir, s, *args, **kwargs):
        active["on"] = s == step
        try:
            return original(run_dir, s, *args, **kwargs)
        finally:
            active["on"] = False

    monkeypatch.setattr(trainer_mod, "save_checkpoint", save)
    return calls


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Weights after an uninterrupted 2-step run, and its run folder (checkpoints at steps 1 and 2)."""
    out = tmp_path_factory.mktemp("full")
    trainer = Trainer(tiny_config(out, RUN))
    trainer.train()
    return weights(trainer.policy), out


def _assert_same(expected: dict, model: torch.nn.Module) -> None:
    got = weights(model)
    for key in expected:
        assert torch.equal(expected[key], got[key]), key


def test_kill_at_each_step_of_the_last_save_resumes_to_the_uninterrupted_weights(tmp_path, monkeypatch,
                                                                                  uninterrupted):
    expected, _ = uninterrupted
    probe = _kill_during_save_of(monkeypatch, step=2, at=10**9)  # count the save's file operations
    Trainer(tiny_config(tmp_path / "probe", RUN)).train()
    total = probe["n"]
    assert total >= 6  # model, optimizer, state, manifest, rename, latest (+ its rename)
    for at in range(1, total + 1):
        monkeypatch.undo()
        run = tmp_path / f"kill{at}"
        _kill_during_save_of(monkeypatch, step=2, at=at)
        with pytest.raises(Killed):
            Trainer(tiny_config(run, RUN)).train()
        monkeypatch.undo()
        assert latest_checkpoint(run) is not None, f"kill at file operation {at} left no intact checkpoint"
        resumed = Trainer(tiny_config(run, RUN))
        resumed.train(resume=True)
        _assert_same(expected, resumed.policy)
        assert latest_checkpoint(run).name == "step_000002"


def _linear(value: float) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(2, 2)
    torch.nn.init.constant_(model.weight, value)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_saving_a_step_again_never_leaves_it_without_an_intact_copy(tmp_path, monkeypatch):
    """The same step saved twice (e.g. a resumed run's end): a kill at any point keeps a loadable one."""
    for at in range(1, 12):
        run = tmp_path / f"k{at}"
        save_checkpoint(run, 1, *_linear(1.0), {})
        save_checkpoint(run, 2, *_linear(2.0), {})
        active = {"on": True}
        calls = _kill_file_ops(monkeypatch, at, active)
        try:
            save_checkpoint(run, 2, *_linear(2.0), {})
        except Killed:
            pass
        monkeypatch.undo()
        found = latest_checkpoint(run)
        model, _ = _linear(0.0)
        step = load_checkpoint(found, model, None)["step"]
        assert model.weight.flatten().tolist() == [float(step)] * 4
        assert step == 2 or calls["n"] >= at  # a step-1 fallback only when the kill cut the save short
        if calls["n"] < at:  # the save completed: no kill left to inject
            assert not list((run / "checkpoints").glob("*.old"))
            break


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle: middle + 8] = bytes(b ^ 0xFF for b in data[middle: middle + 8])
    path.write_bytes(bytes(data))


DAMAGE = {"truncate": _truncate, "flip bytes": _flip, "delete": Path.unlink}


def test_each_damaged_file_falls_back_to_the_previous_checkpoint(tmp_path, capsys, uninterrupted):
    expected, full = uninterrupted
    names = sorted(p.name for p in (full / "checkpoints" / "step_000002").iterdir())
    assert {"model.safetensors", "optimizer.safetensors", "state.json", "manifest.json"} <= set(names)
    for name in names:
        for how, damage in DAMAGE.items():
            run = tmp_path / f"{name}-{how.replace(' ', '_')}"
            shutil.copytree(full, run)
            damage(run / "checkpoints" / "step_000002" / name)
            capsys.readouterr()
            resumed = Trainer(tiny_config(run, RUN))
            resumed.train(resume=True)  # from step 1: step 2 is trained again
            err = capsys.readouterr().err
            assert "skipping checkpoint" in err and "step_000002" in err and name in err, (name, how, err)
            _assert_same(expected, resumed.policy)


def test_a_deleted_latest_pointer_still_finds_the_newest_checkpoint(tmp_path, uninterrupted):
    _, full = uninterrupted
    shutil.copytree(full, tmp_path / "run")
    (tmp_path / "run" / "checkpoints" / "latest").unlink()
    assert latest_checkpoint(tmp_path / "run").name == "step_000002"


def test_no_intact_checkpoint_is_one_error_listing_each(tmp_path, uninterrupted):
    _, full = uninterrupted
    run = tmp_path / "run"
    shutil.copytree(full, run)
    _flip(run / "checkpoints" / "step_000002" / "model.safetensors")
    (run / "checkpoints" / "step_000001" / "state.json").write_text("{garbage")
    with pytest.raises(CheckpointError, match=r"step_000002: model.safetensors does not match.*"
                                              r"step_000001: state.json is unreadable"):
        Trainer(tiny_config(run, RUN)).train(resume=True)


def test_load_refuses_a_corrupt_checkpoint_naming_the_file(tmp_path, uninterrupted):
    _, full = uninterrupted
    shutil.copytree(full, tmp_path / "run")
    path = tmp_path / "run" / "checkpoints" / "step_000002"
    _truncate(path / "model.safetensors")
    with pytest.raises(CheckpointError, match="model.safetensors has .* bytes, the manifest says"):
        load_checkpoint(path, torch.nn.Linear(1, 1), None)


def test_a_checkpoint_without_optimizer_state_loads_weights_but_refuses_a_resume(tmp_path):
    """DeepSpeed ZeRO shards the optimizer, so its checkpoints are written with ``optimizer=None``: the
    weights load (export, evaluation), but restoring an optimizer from it is one clear error."""
    model = torch.nn.Linear(3, 2)
    path = save_checkpoint(tmp_path, 1, model, None, {"scheduler": {}})
    other = torch.nn.Linear(3, 2)
    load_checkpoint(path, other, None)
    assert torch.equal(other.weight, model.weight)
    with pytest.raises(CheckpointError, match="no optimizer state"):
        load_checkpoint(path, other, torch.optim.AdamW(other.parameters()))
