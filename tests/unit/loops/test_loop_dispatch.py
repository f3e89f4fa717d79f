"""One dispatch path for the training loop: ``optim.name`` names a registered loop plug-in, and
every place that used to compare it with "adamw", the gradient trainer's former name (the LoRA check of the config, the gradient-knob
check, validation, ``make_trainer``) asks the plug-in class. The loops below declare the opposite
traits of the built-ins, so each check is seen to follow the declaration, not the name."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import pytest

from rlvr.loops.gradient import GRADIENT_TRAINER, Gradient
from rlvr.train.loop_plugin import LoopPlugin, loop_class
from rlvr.registry import RegistryError, names
from rlvr.train.callbacks import run_callbacks
from rlvr.train.config import ConfigError
from rlvr.train.precision import check_supported
from rlvr.train.run import make_trainer
from rlvr.train.trainer import Trainer
from rlvr.train.validate import validate_run
from tests.helpers.tiny import tiny_config

HERE = "tests.unit.loops.test_loop_dispatch"
TRAITS = ("takes_lora", "gradient_knobs", "builds_pipeline")


class RecordingLoop:
    """What a plug-in's ``trainer`` returns here: the config it was built for and the run's callbacks,
    with the rest of the ``Runnable`` protocol (rlvr.train.loop) doing nothing."""

    acc, parts, tokenizer, policy, step = None, {}, None, None, 0

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.callbacks = run_callbacks(cfg)

    def train(self, resume: bool = False, eval_fn: Any = None) -> dict:
        return {}

    def heldout_metrics(self) -> dict:
        return {}

    def export_model(self) -> None:
        return None

    def evaluates_here(self) -> bool:
        return True

    def lockstep(self) -> Any:
        return nullcontext()


class LoraLoop(LoopPlugin):
    """A loop of its own that trains a LoRA policy and reads the gradient knobs (test fixture)."""

    takes_lora = True
    gradient_knobs = True

    def trainer(self, cfg: Any, *, model: Any = None, tokenizer: Any = None) -> RecordingLoop:
        return RecordingLoop(cfg)


class OwnLoop(LoopPlugin):
    """A loop of its own with every trait off, like es (test fixture)."""

    def trainer(self, cfg: Any, *, model: Any = None, tokenizer: Any = None) -> RecordingLoop:
        return RecordingLoop(cfg)


class NotALoop:
    """A class that is not a LoopPlugin (test fixture)."""


class StepEnd:
    def on_step_end(self, trainer: Any, step: int, metrics: dict) -> None:
        pass


def test_gradient_is_the_registered_gradient_trainer_and_the_own_loops_take_none_of_its_traits():
    assert GRADIENT_TRAINER == "gradient" and loop_class("gradient") is Gradient
    assert {"gradient", "es", "grpo_then_es", "hyper_es", "lure", "progressive_rlvr"} <= set(names("loop"))
    for name in names("loop"):
        cls = loop_class(name)
        assert issubclass(cls, LoopPlugin), name
        expected = name == GRADIENT_TRAINER  # the behaviour before: only the gradient trainer had the gradient trainer's traits
        assert [getattr(cls, t) for t in TRAITS] == [expected] * len(TRAITS), name


def test_unknown_or_foreign_loop_is_a_one_line_error_listing_the_valid_names(tmp_path):
    with pytest.raises(ConfigError, match=r"optim.name: unknown loop 'adam'; valid names: es, gradient, ") as err:
        check_supported(tiny_config(tmp_path, ["optim.name=adam"]))
    assert "\n" not in str(err.value)
    with pytest.raises(RegistryError, match="is not a LoopPlugin"):
        loop_class(f"{HERE}:NotALoop")


def test_a_lora_policy_is_accepted_by_the_loops_that_declare_takes_lora(tmp_path):
    lora = ["model.lora.r=2"]
    assert tiny_config(tmp_path, lora).model.lora.r == 2  # gradient
    assert tiny_config(tmp_path, [*lora, f"optim.name={HERE}:LoraLoop"]).optim.name.endswith("LoraLoop")
    for name in ("es", f"{HERE}:OwnLoop"):
        with pytest.raises(ConfigError, match=f"loop '{name}' .*does not take a LoRA policy"):
            tiny_config(tmp_path, [*lora, f"optim.name={name}"])


def test_the_gradient_knobs_are_refused_by_the_loops_that_do_not_declare_them(tmp_path):
    knobs = ["run.mixed_precision=bf16", "optim.mini_batches=2"]
    check_supported(tiny_config(tmp_path, knobs))  # gradient
    check_supported(tiny_config(tmp_path, [*knobs, f"optim.name={HERE}:LoraLoop"]))
    with pytest.raises(ConfigError, match="OwnLoop trains with its own loop, which does not use "
                                          "run.mixed_precision, optim.mini_batches"):
        check_supported(tiny_config(tmp_path, [*knobs, f"optim.name={HERE}:OwnLoop"]))


def test_validation_builds_the_whole_pipeline_only_for_a_loop_that_builds_it(tmp_path):
    bad_sampler = ["rollout.sampler.name=no_such_sampler"]
    with pytest.raises(ConfigError, match="sampler 'no_such_sampler'"):
        validate_run(tiny_config(tmp_path, bad_sampler), writes=False)  # gradient reads rollout.sampler
    validate_run(tiny_config(tmp_path, [*bad_sampler, f"optim.name={HERE}:OwnLoop"]), writes=False)
    with pytest.raises(ConfigError, match="loop 'gradient': .*unknown parameter"):
        validate_run(tiny_config(tmp_path, ["optim.params.sigma=0.1"]), writes=False)  # gradient has no params


def test_make_trainer_builds_the_loop_of_the_named_plugin_with_the_callbacks_after_the_configs(tmp_path):
    first, second = StepEnd(), StepEnd()
    loop = make_trainer(tiny_config(tmp_path, [f"optim.name={HERE}:OwnLoop"]), callbacks=[first, second])
    assert isinstance(loop, RecordingLoop) and loop.cfg.optim.name == f"{HERE}:OwnLoop"
    assert loop.callbacks.items == [first, second]
    trainer = make_trainer(tiny_config(tmp_path), callbacks=[first])
    assert type(trainer) is Trainer and trainer.callbacks.items == [first]


def test_the_pipeline_validation_built_is_the_trainers(tmp_path, monkeypatch):
    # Each plug-in is built once per run: validate_run returns the pipeline and make_trainer hands it on.
    from rlvr.train import build, trainer as trainer_module
    built: list = []

    def counted(cfg: Any) -> Any:
        built.append(real(cfg))
        return built[-1]
    real = build.build_pipeline
    monkeypatch.setattr(build, "build_pipeline", counted)
    monkeypatch.setattr(trainer_module, "build_pipeline", counted)
    cfg = tiny_config(tmp_path)
    parts = validate_run(cfg, writes=False)
    trainer = make_trainer(cfg, parts=parts)
    assert len(built) == 1 and trainer.parts is parts and trainer.collector.task is parts.task
    assert make_trainer(cfg).parts is built[-1] and len(built) == 2  # without them the trainer builds its own
    own = tiny_config(tmp_path, [f"optim.name={HERE}:OwnLoop"])
    assert validate_run(own, writes=False) is None and len(built) == 2  # a loop of its own builds its task itself
    assert isinstance(make_trainer(own, parts=parts), RecordingLoop)  # and is never handed the pipeline


def test_train_run_hands_the_validated_pipeline_to_the_trainer(tmp_path, monkeypatch):
    from rlvr.train import run as run_module
    seen: list = []

    class Stop(Exception):
        pass

    def recording(cfg: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("parts"))
        raise Stop
    monkeypatch.setattr(run_module, "make_trainer", recording)
    with pytest.raises(Stop):
        run_module.train_run(tiny_config(tmp_path, ["warm_start.steps=0"]))
    from rlvr.train.pipeline import Pipeline
    assert isinstance(seen[0], Pipeline) and None not in (seen[0].task, seen[0].sampler, seen[0].advantage,
                                                          seen[0].objective)


def test_the_former_name_adamw_reads_as_the_gradient_trainer(tmp_path):
    # saved run configs and user files wrote optim.name: adamw before the loops were a kind of their own
    assert tiny_config(tmp_path, ["optim.name=adamw"]).optim.name == GRADIENT_TRAINER
    assert tiny_config(tmp_path, []).optim.name == GRADIENT_TRAINER


def test_the_torch_optimizer_is_a_registered_choice_adamw_by_default(tmp_path):
    import torch
    from rlvr.optim import AdamW
    from rlvr.registry import get
    from rlvr.train.build import build_optimizer
    assert "adamw" in names("optimizer") and get("optimizer", "adamw") is AdamW
    cfg = tiny_config(tmp_path, ["optim.lr=0.01", "optim.weight_decay=0.1"])
    model = torch.nn.Linear(2, 2)
    optimizer, _ = build_optimizer(cfg, model)
    assert type(optimizer) is torch.optim.AdamW
    assert optimizer.defaults["lr"] == 0.01 and optimizer.defaults["weight_decay"] == 0.1
    with pytest.raises(ConfigError, match="unknown optimizer 'lion'; valid names: adamw"):
        validate_run(tiny_config(tmp_path, ["optim.optimizer=lion"]), writes=False)


def test_a_warm_started_run_builds_its_task_once_and_checks_support_once(tmp_path, monkeypatch):
    # the warm start supervises on the task validate_run built; train_run checks support before any
    # work and make_trainer does not check again
    from rlvr.train import build, precision, warm_start
    tasks, checks = [], []
    real_task, real_check = build.build_task, precision.check_supported
    counted_task = lambda cfg: (tasks.append(1), real_task(cfg))[1]  # noqa: E731
    monkeypatch.setattr(build, "build_task", counted_task)
    monkeypatch.setattr(warm_start, "build_task", counted_task)
    monkeypatch.setattr(precision, "check_supported", lambda cfg: (checks.append(1), real_check(cfg))[1])
    from rlvr.train.run import train_run
    train_run(tiny_config(tmp_path, ["run.steps=1", "warm_start.steps=2", "run.eval_problems=2"]))
    assert len(tasks) == 1 and len(checks) == 1
