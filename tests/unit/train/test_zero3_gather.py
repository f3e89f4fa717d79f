"""ZeRO-3 checkpoints gather one module's parameters at a time (``rlvr.train.deepspeed_backend.gathered_state``).

DeepSpeed is not installed here, so ZeRO-3's partitioning is imitated on CPU: outside a gather every
parameter holds an empty tensor (as a ZeRO-3 partition seen from the module does), and a counting
``GatheredParameters`` puts the whole tensors back for the duration of its context. The state must equal
what the previous code gave (every parameter gathered at once, then cloned), key for key and bit for bit,
and so must the checkpoint written from it, while at most one module's parameters are whole at a time."""

from __future__ import annotations

import sys
import types
from contextlib import contextmanager
from types import SimpleNamespace

import torch
from safetensors.torch import load_file

from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.train.checkpoint import save_checkpoint
from rlvr.train.deepspeed_backend import DeepSpeedSharding, gathered_state


class Partitions:
    """Parameters emptied outside gathers; ``gather(params)`` makes them whole and counts what is whole."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.full = {id(p): p.data for p in model.parameters()}
        self.whole: dict[int, int] = {}  # id -> numel, currently gathered
        self.peak = 0  # the most elements whole at once
        self.calls = 0
        for p in model.parameters():
            p.data = torch.empty(0, dtype=p.dtype)

    @contextmanager
    def gather(self, params: list[torch.nn.Parameter]):
        self.calls += 1
        mine = [p for p in params if id(p) not in self.whole]
        for p in mine:
            p.data = self.full[id(p)]
            self.whole[id(p)] = p.numel()
        self.peak = max(self.peak, sum(self.whole.values()))
        try:
            yield
        finally:
            for p in mine:
                p.data = torch.empty(0, dtype=p.dtype)
                del self.whole[id(p)]


def previous(module: torch.nn.Module, names: set[str] | None, gather) -> dict[str, torch.Tensor]:
    """The code before: every parameter gathered at once, then each entry cloned."""
    with gather(list(module.parameters())):
        return {k: v.detach().clone() for k, v in module.state_dict().items() if names is None or k in names}


def _model() -> torch.nn.Module:
    return build_tiny_model(build_char_tokenizer(), hidden=32, layers=3, heads=2, seed=0)


def _largest_module(model: torch.nn.Module) -> int:
    return max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())


def test_one_module_at_a_time_gives_the_previous_state(tmp_path):
    model = _model()
    distinct = sum(p.numel() for p in model.parameters())
    before = Partitions(model)
    old = previous(model, None, before.gather)
    new_model = _model()
    largest = _largest_module(new_model)
    after = Partitions(new_model)
    new = gathered_state(new_model, None, after.gather, keep=True)
    assert list(new) == list(old)  # the same keys in the same order (tied weights under both names)
    assert all(new[k].dtype == old[k].dtype and torch.equal(new[k], old[k]) for k in old)
    assert all(t.device.type == "cpu" for t in new.values())
    assert before.peak == distinct  # the previous code held the whole model gathered
    assert after.peak == largest < distinct / 3
    assert not after.whole and all(p.numel() == 0 for p in new_model.parameters())  # all released
    a = save_checkpoint(tmp_path / "a", 1, old, None, {"x": 1})
    b = save_checkpoint(tmp_path / "b", 1, new, None, {"x": 1})
    left, right = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert left.keys() == right.keys() and all(torch.equal(left[k], right[k]) for k in left)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


def test_names_and_ranks_that_keep_nothing_still_join_every_gather():
    names = {"lm_head.weight", "model.norm.weight", "model.layers.0.mlp.up_proj.weight"}
    model = _model()
    kept = Partitions(model)
    subset = gathered_state(model, names, kept.gather, keep=True)
    assert subset.keys() == names
    assert torch.equal(subset["model.norm.weight"], kept.full[id(model.model.norm.weight)])
    idle = Partitions(other := _model())
    assert gathered_state(other, names, idle.gather, keep=False) == {}
    assert idle.calls == kept.calls == len(names)  # the same collectives on every rank


def test_the_deepspeed_backend_saves_through_zero3s_gather(monkeypatch):
    """``DeepSpeedSharding.model_state`` under ZeRO-3 goes through ``GatheredParameters`` one module at a
    time, and only the main process keeps the tensors."""
    model = _model()
    whole = {k: v.clone() for k, v in model.state_dict().items()}
    largest = _largest_module(model)
    parts = Partitions(model)
    module = types.ModuleType("deepspeed.runtime.zero.partition_parameters")
    module.GatheredParameters = parts.gather
    for name in ("deepspeed", "deepspeed.runtime", "deepspeed.runtime.zero"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    sharding = object.__new__(DeepSpeedSharding)
    sharding.stage, sharding.sharded = 3, True
    sharding.acc = SimpleNamespace(is_main_process=True)
    state = sharding.model_state(model)
    assert state.keys() == whole.keys() and all(torch.equal(state[k], whole[k]) for k in whole)
    assert parts.peak == largest
    sharding.acc = SimpleNamespace(is_main_process=False)
    assert sharding.model_state(model) == {}
