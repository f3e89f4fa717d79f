"""rlvr.train.sharding in one process: the backend hooks reduce to the plain calls (FSDP2 itself runs
in tests/e2e/test_fsdp2.py), and a checkpoint written from gathered state dicts is the same file."""

from __future__ import annotations

import json

import torch
from accelerate import Accelerator
from safetensors.torch import load_file

from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import lockstep
from rlvr.train.checkpoint import save_checkpoint
from rlvr.train.sharding import Sharding


def _trained():
    torch.manual_seed(0)
    model = build_tiny_model(build_char_tokenizer(), hidden=16, layers=1, heads=2, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(input_ids=torch.tensor([[5, 6, 7]])).logits.square().mean().backward()
    return model, optimizer


def test_one_process_hooks_are_the_plain_calls():
    sharding = Sharding(Accelerator(cpu=True))
    assert sharding.name == "single" and not sharding.sharded
    with sharding.lockstep():
        assert not lockstep.active()  # nothing to line up in one process
    model, optimizer = _trained()
    twin, _ = _trained()
    norm = sharding.clip_grad_norm(model, 0.01)
    want = torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.01)
    assert torch.equal(norm, want) and norm > 0.01  # clipped: the gradients shrank to norm 0.01
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), twin.parameters()))
    state, names = sharding.model_state(model), {"model.norm.weight", "lm_head.weight"}
    assert state.keys() == model.state_dict().keys() and sharding.model_state(model, names).keys() == names
    assert sharding.engine_step(model) is None  # rlvr clips and steps itself (an engine that steps returns its norm)
    loss_model, loss_twin = (m(input_ids=torch.tensor([[1, 2]])).logits.sum() for m in (model, twin))
    sharding.backward(model, loss_model, last=True)
    loss_twin.backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), twin.parameters()))


def test_a_checkpoint_from_gathered_state_is_the_same(tmp_path):
    model, optimizer = _trained()
    optimizer.step()
    sharding = Sharding(Accelerator(cpu=True))
    a = save_checkpoint(tmp_path / "a", 1, model, optimizer, {"x": 1})
    b = save_checkpoint(tmp_path / "b", 1, sharding.model_state(model), sharding.optimizer_state(model, optimizer),
                        {"x": 1})
    for name in ("model.safetensors", "optimizer.safetensors"):
        left, right = load_file(str(a / name)), load_file(str(b / name))
        assert left.keys() == right.keys() and all(torch.equal(left[k], right[k]) for k in left)
    assert json.loads((a / "state.json").read_text()) == json.loads((b / "state.json").read_text())


def test_a_registered_backend_is_chosen_by_distributed_type():
    from accelerate.utils import DistributedType

    from rlvr.train import sharding as module

    class Custom(Sharding):
        sharded = True

    module.register_backend(DistributedType.NO, Custom)
    try:
        assert type(Sharding(Accelerator(cpu=True))) is Custom
    finally:
        del module._BACKENDS[DistributedType.NO]
    assert type(Sharding(Accelerator(cpu=True))) is Sharding
