"""Callbacks (rlvr.train.callbacks): observe and stop tiny runs from Python and from the config."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.train.callbacks import Callback, Callbacks
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.config import ConfigError
from rlvr.train.logging import read_metrics
from rlvr.train.run import make_trainer, train_run
from rlvr.train.trainer import Trainer

from tests.helpers.tiny import tiny_config

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "methods"


class StopAt(Callback):
    """Records every hook call; asks to stop once ``step`` is reached."""

    def __init__(self, step: int = 2) -> None:
        self.step, self.calls = step, []

    def on_step_end(self, trainer, step, metrics):
        self.calls.append(("step", step, metrics["reward/mean"]))
        return step >= self.step

    def on_evaluate(self, trainer, step, metrics):
        self.calls.append(("evaluate", step, dict(metrics)))

    def on_save(self, trainer, step, path):
        self.calls.append(("save", step, Path(path)))


class FromConfig:
    """A duck-typed callback (no base class) named in run.callbacks: stops at step ``at``."""

    instances: list["FromConfig"] = []

    def __init__(self, at: int = 1) -> None:
        self.at, self.steps = at, []
        FromConfig.instances.append(self)

    def on_step_end(self, trainer, step, metrics):
        self.steps.append(step)
        return step >= self.at


def test_callback_stops_the_run_at_step_2_from_python(tmp_path):
    cb = StopAt(2)
    trainer = Trainer(tiny_config(tmp_path, ["run.steps=5", "run.eval_every=1"]), callbacks=[cb])
    eval_fn = lambda model, step: {"eval/accuracy": 0.25 * step}  # noqa: E731
    result = trainer.train(eval_fn=eval_fn)
    assert result["stopped_by"] == "callback" and result["steps"] == 2
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]
    final = latest_checkpoint(tmp_path)
    assert final is not None and final.name == "step_000002"
    kinds = [(c[0], c[1]) for c in cb.calls]
    assert kinds == [("evaluate", 1), ("step", 1), ("evaluate", 2), ("step", 2), ("save", 2)]
    assert cb.calls[0][2] == {"eval/accuracy": 0.25} and cb.calls[-1][2] == final


def test_callback_named_in_config_stops_the_run(tmp_path):
    FromConfig.instances.clear()
    cfg = tiny_config(tmp_path, ["run.steps=4", "run.callbacks=[tests.e2e.test_callbacks:FromConfig]"])
    summary = train_run(cfg)
    assert summary["stopped_by"] == "callback" and summary["steps"] == 1
    assert len(FromConfig.instances) == 1 and FromConfig.instances[0].steps == [1]
    assert (tmp_path / "summary.json").exists() and latest_checkpoint(tmp_path).name == "step_000001"
    # With params (keyword arguments of the class), from a YAML file.
    config = tmp_path / "run.yaml"
    config.write_text("run:\n  callbacks:\n    - name: tests.e2e.test_callbacks:FromConfig\n      params: {at: 2}\n")
    result = Trainer(tiny_config(tmp_path / "p", ["run.steps=4"], path=str(config))).train()
    assert result["stopped_by"] == "callback" and result["steps"] == 2 and FromConfig.instances[-1].at == 2


def test_train_run_passes_python_callbacks_and_final_evaluation(tmp_path):
    cb = StopAt(10)
    summary = train_run(tiny_config(tmp_path, ["run.steps=2"]), callbacks=[cb])
    assert summary["stopped_by"] == "steps"
    assert [c[:2] for c in cb.calls] == [("step", 1), ("step", 2), ("save", 2), ("evaluate", 2)]
    assert cb.calls[-1][2]["greedy_accuracy"] == summary["accuracy_after"]


def test_es_trainer_honours_a_stopping_callback(tmp_path):
    cfg = tiny_config(tmp_path, ["run.steps=4", "optim.params.population=2", "optim.params.prompts=2",
                                 "optim.params.temperature=1.0"], path=str(PRESETS / "es.yaml"))
    cb = StopAt(1)
    result = make_trainer(cfg, callbacks=[cb]).train()
    assert result["stopped_by"] == "callback" and result["steps"] == 1
    assert [c[:2] for c in cb.calls] == [("step", 1), ("save", 1)]


def test_bad_callback_specs_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="run.callbacks: expected 'pkg.module:Object'"):
        tiny_config(tmp_path, ["run.callbacks=[not_a_path]"])
    with pytest.raises(Exception, match="no attribute 'Missing'"):
        Trainer(tiny_config(tmp_path, ["run.callbacks=[tests.e2e.test_callbacks:Missing]"]))
    with pytest.raises(TypeError, match="has none of the hooks"):
        Callbacks([object()])


@pytest.mark.parametrize("preset, overrides, extra", [
    ("progressive_rlvr.yaml", ["optim.params.rl_steps=1"], "adapter"),
    ("hyper_es.yaml", ["task.name=toy_mixed_test", "optim.params.directions=1", "optim.params.direction_steps=1",
                       "optim.params.cma_popsize=2"], "coefficients"),
])
def test_search_loops_honour_callbacks_and_budgets(tmp_path, preset, overrides, extra):
    """Hyper-ES and Progressive RLVR run through the same loop skeleton: a callback stops them, its
    checkpoint is saved once after the loop's closing work, and the summary keeps the loop's own field."""
    if preset == "hyper_es.yaml":
        pytest.importorskip("cma")
        pytest.importorskip("peft")
    cb = StopAt(1)
    cfg = tiny_config(tmp_path, ["run.steps=3", "run.eval_every=1", *overrides], path=str(PRESETS / preset))
    result = make_trainer(cfg, callbacks=[cb]).train(eval_fn=lambda model, step: {"eval/accuracy": 0.5})
    assert result["stopped_by"] == "callback" and result["steps"] == 1 and extra in result
    assert [c[:2] for c in cb.calls] == [("evaluate", 1), ("step", 1), ("save", 1)]
    assert [r["step"] for r in read_metrics(tmp_path)] == [1] and latest_checkpoint(tmp_path).name == "step_000001"
