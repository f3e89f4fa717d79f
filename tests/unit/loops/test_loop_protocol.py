"""Every shipped training loop is a ``TrainingLoop`` that ``run_loop`` drives (rlvr.train.loop), and the
loop of loops (GRPO → ES) a ``Runnable``: their members exist as built, so ``train_run`` reads them
without probing; a plug-in whose loop lacks one is refused by ``make_trainer`` with its name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlvr.train.loop_plugin import LoopPlugin
from rlvr.loops.es_trainer import ESTrainer
from rlvr.loops.hyper_es import HyperESTrainer
from rlvr.loops.lure_self_play import SelfPlayCollector
from rlvr.loops.progressive import ProgressiveTrainer
from rlvr.loops.sequential import SequentialTrainer
from rlvr.train.loop import Runnable, TrainingLoop, missing_members
from rlvr.train.run import make_trainer
from rlvr.train.trainer import Trainer
from tests.helpers.tiny import tiny_config

PRESETS = Path(__file__).resolve().parents[3] / "configs" / "methods"
HERE = "tests.unit.loops.test_loop_protocol"

LOOPS = [  # (preset or None for the gradient trainer, the loop class make_trainer builds)
    (None, Trainer),  # LURE too: the gradient trainer with its self-play collector (test below)
    ("es.yaml", ESTrainer),
    ("hyper_es.yaml", HyperESTrainer),
    ("progressive_rlvr.yaml", ProgressiveTrainer),
]


@pytest.mark.parametrize("preset, cls", LOOPS, ids=[c.__name__ for _, c in LOOPS])
def test_each_loop_is_a_training_loop(tmp_path, preset, cls):
    cfg = tiny_config(tmp_path, ["run.steps=2"], path=str(PRESETS / preset) if preset else None)
    loop = make_trainer(cfg)
    assert type(loop) is cls
    assert missing_members(loop, TrainingLoop) == [] and isinstance(loop, TrainingLoop)
    assert loop.evaluates_here()  # one process: the main one
    assert loop.heldout_metrics() == {}
    if cls is not ProgressiveTrainer:  # its checkpoints carry only the adapter's record, as before
        assert {"rollouts_spent", "seconds_spent"} <= set(loop.state())


def test_lure_is_the_gradient_trainer_with_a_self_play_collector(tmp_path):
    # one RL step: LURE's self-play is the trainer's data half, handed in, not a subclass of the trainer
    cfg = tiny_config(tmp_path, ["run.steps=2"], path=str(PRESETS / "lure.yaml"))
    loop = make_trainer(cfg)
    assert type(loop) is Trainer and type(loop.collector) is SelfPlayCollector
    assert missing_members(loop, TrainingLoop) == [] and loop.collector.sets_advantages
    assert loop.cfg.algorithm.kl_coef == cfg.optim.params["kl_beta"] and loop.ref_model is loop.collector.reference


def test_grpo_then_es_is_a_runnable_of_two_loops(tmp_path):
    cfg = tiny_config(tmp_path, ["run.steps=3", "optim.params.grpo_steps=1"], path=str(PRESETS / "grpo_then_es.yaml"))
    loop = make_trainer(cfg)
    assert type(loop) is SequentialTrainer and missing_members(loop, Runnable) == []
    assert missing_members(loop.gradient, TrainingLoop) == []


class Bare:
    """A training loop with only a ``train`` method (test fixture)."""

    def train(self, resume: bool = False, eval_fn: Any = None) -> dict:
        return {}


class BareLoop(LoopPlugin):
    """A loop plug-in whose loop lacks most of the Runnable protocol (test fixture)."""

    def trainer(self, cfg: Any, *, model: Any = None, tokenizer: Any = None) -> Bare:
        return Bare()


def test_a_loop_lacking_protocol_members_is_refused_with_their_names(tmp_path):
    with pytest.raises(TypeError, match=r"loop '.*BareLoop': its training loop Bare lacks acc, callbacks, "
                                        r"evaluates_here, export_model, heldout_metrics, lockstep, parts, policy"):
        make_trainer(tiny_config(tmp_path, [f"optim.name={HERE}:BareLoop"]))
