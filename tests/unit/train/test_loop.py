"""The one loop skeleton (rlvr.train.loop): run_loop over a fake loop that records every call.

The fake loop's steps sample ``SAMPLED`` completions each and keep its checkpoints in a dict, so the
order of calls, the budgets, the evaluation and save cadences and a resume can be read off exactly.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
import torch

from rlvr.train.callbacks import Callbacks
from rlvr.train.logging import read_jsonl, read_metrics
from rlvr.train.loop import (Runnable, StepOutput, TrainingLoop, check_runnable, counters, load_counters,
                             missing_members, run_loop)
from tests.helpers.tiny import tiny_config

SAMPLED = 3  # completions per fake step


class OneProcess:
    is_main_process, num_processes, process_index = True, 1, 0


class Recorder:
    """A callback writing its calls into the shared log; asks to stop at step ``stop_at``."""

    def __init__(self, log: list, stop_at: int | None = None) -> None:
        self.log, self.stop_at = log, stop_at

    def on_step_end(self, trainer: Any, step: int, metrics: dict) -> bool:
        assert metrics["rollout/spent"] == trainer.rollouts_spent  # end_step added the budgets first
        self.log.append(("on_step_end", step))
        return step == self.stop_at

    def on_evaluate(self, trainer: Any, step: int, metrics: dict) -> None:
        self.log.append(("on_evaluate", step, metrics["eval/accuracy"]))

    def on_save(self, trainer: Any, step: int, path: Path) -> None:
        self.log.append(("on_save", step, path.name))


class FakeLoop:
    """A TrainingLoop whose checkpoints live in ``disk`` (step → state) and whose calls go to ``log``."""

    def __init__(self, cfg: Any, log: list, disk: dict, stop_at: int | None = None, here: bool = True) -> None:
        self.cfg, self.log, self.disk, self.here = cfg, log, disk, here
        self.acc, self.parts, self.tokenizer = OneProcess(), {"task": None}, None
        self.callbacks = Callbacks([Recorder(log, stop_at)])
        self.run_dir = Path(cfg.run.out_dir)
        self.step, self.rollouts_spent, self.seconds_spent = 0, 0, 0.0
        self.cost = SAMPLED  # what it tells run_loop the next step samples (0: not known)
        self.model = torch.nn.Linear(1, 1)

    @property
    def policy(self) -> torch.nn.Module:
        return self.model

    def train(self, resume: bool = False, eval_fn: Any = None) -> dict[str, Any]:
        return run_loop(self, resume, eval_fn, desc="fake")

    def begin(self, resume: bool) -> dict[str, float]:
        self.log.append(("begin", resume))
        if resume:
            self.load_state(self.disk[max(self.disk)])
        return {"setup/seconds": 1.5}

    def loop_step(self) -> StepOutput:
        self.log.append(("loop_step", self.step))
        return StepOutput({"reward/mean": 0.1 * self.step}, SAMPLED, samples=[{"row": self.step}],
                          postfix={"reward": "x"})

    def next_step_cost(self) -> int:
        return self.cost

    def save(self) -> Path:
        self.log.append(("save", self.step))
        self.disk[self.step] = {"step": self.step, **self.state()}
        return self.run_dir / f"step_{self.step}"

    def state(self) -> dict[str, Any]:
        return counters(self)

    def load_state(self, state: dict[str, Any]) -> None:
        load_counters(self, state)

    def finish(self) -> dict[str, Any]:
        self.log.append(("finish", self.step))
        return {"closing": "done"}

    def heldout_metrics(self) -> dict[str, float]:
        return {}

    def export_model(self) -> torch.nn.Module:
        return self.model

    def evaluates_here(self) -> bool:
        return self.here

    def lockstep(self) -> Any:
        return nullcontext()


def _eval_fn(log: list):
    def fn(model: torch.nn.Module, step: int) -> dict[str, float]:
        log.append(("eval_fn", step))
        return {"eval/accuracy": step / 10}
    return fn


def _loop(tmp_path: Path, overrides: list[str], **kw: Any) -> tuple[FakeLoop, list, dict]:
    log: list = []
    disk: dict = kw.pop("disk", {})
    return FakeLoop(tiny_config(tmp_path, overrides), log, disk, **kw), log, disk


def test_the_fake_loop_and_the_shipped_loops_satisfy_the_protocols(tmp_path):
    loop, _, _ = _loop(tmp_path, [])
    assert isinstance(loop, TrainingLoop) and isinstance(loop, Runnable) and missing_members(loop, TrainingLoop) == []
    own = {"loop_step", "save", "state", "load_state", "begin", "finish"}
    assert own <= set(missing_members(object(), TrainingLoop))
    assert "loop_step" not in missing_members(object(), Runnable)  # a loop of loops need not step
    with pytest.raises(TypeError, match=r"optimizer 'x': its training loop object lacks acc, callbacks, "):
        check_runnable(object(), "optimizer 'x'")


def test_calls_come_in_order_with_evaluation_and_save_cadences(tmp_path):
    loop, log, disk = _loop(tmp_path, ["run.steps=4", "run.eval_every=2", "run.save_every=2"])
    summary = loop.train(eval_fn=_eval_fn(log))
    assert summary == {"steps": 4, "rollouts": 4 * SAMPLED, "seconds": loop.seconds_spent, "stopped_by": "steps",
                       "closing": "done"}
    assert log == [("begin", False),
                   ("loop_step", 0), ("on_step_end", 1),
                   ("loop_step", 1), ("eval_fn", 2), ("on_evaluate", 2, 0.2), ("on_step_end", 2),
                   ("save", 2), ("on_save", 2, "step_2"),
                   ("loop_step", 2), ("on_step_end", 3),
                   ("loop_step", 3), ("eval_fn", 4), ("on_evaluate", 4, 0.4), ("on_step_end", 4),
                   ("finish", 4), ("save", 4), ("on_save", 4, "step_4")]  # the last step saved once, after finish
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert [r["rollout/spent"] for r in rows] == [SAMPLED * s for s in (1, 2, 3, 4)]  # end_step every step
    assert all(r["time/elapsed"] >= 0 for r in rows)
    assert [r.get("eval/accuracy") for r in rows] == [None, 0.2, None, 0.4]
    assert [("setup/seconds" in r) for r in rows] == [True, False, False, False]  # begin's metrics: first row only
    samples, _ = read_jsonl(tmp_path / "samples.jsonl")
    assert samples == [{"step": s + 1, "row": s} for s in range(4)]  # logged at the step just ended
    assert sorted(disk) == [2, 4] and disk[4] == {"step": 4, "rollouts_spent": 12, "seconds_spent": loop.seconds_spent}


def test_no_evaluation_where_the_loop_does_not_evaluate(tmp_path):
    loop, log, _ = _loop(tmp_path, ["run.steps=2", "run.eval_every=1"], here=False)
    loop.train(eval_fn=_eval_fn(log))
    assert not [c for c in log if c[0] in ("eval_fn", "on_evaluate")]


@pytest.mark.parametrize("overrides, cost, steps, reason", [
    (["run.steps=10", "run.max_rollouts=7"], SAMPLED, 2, "rollouts"),  # a hard cap: a 3rd step would make 9 > 7
    (["run.steps=10", "run.max_rollouts=7"], 0, 3, "rollouts"),  # cost not known: stops once 9 >= 7
    (["run.steps=2"], SAMPLED, 2, "steps"),
    (["run.steps=10", "run.max_rollouts=3"], SAMPLED, 1, "rollouts"),  # the budget is reached exactly
    (["run.steps=10", "run.max_rollouts=2"], SAMPLED, 0, "rollouts"),  # not even one step fits
])
def test_a_budget_stops_the_loop(tmp_path, overrides, cost, steps, reason):
    loop, log, disk = _loop(tmp_path, overrides)
    loop.cost = cost
    summary = loop.train()
    assert summary["steps"] == steps and summary["stopped_by"] == reason
    assert summary["rollouts"] == steps * SAMPLED
    assert [c for c in log if c[0] == "loop_step"] == [("loop_step", s) for s in range(steps)]
    assert sorted(disk) == [steps]  # only the final checkpoint (save_every=0)


class BarRecorder:
    """Stands in for tqdm: keeps the bar's total, unit and every position it reached."""
    made: list = []

    def __init__(self, total: float, initial: float, desc: str, unit: str, disable: bool) -> None:
        self.total, self.n, self.unit, self.seen = total, initial, unit, [initial]
        BarRecorder.made.append(self)

    def update(self, n: float) -> None:
        self.n += n
        self.seen.append(self.n)

    def set_postfix(self, **_: Any) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize("overrides, total, unit, seen", [
    (["run.steps=4"], 4, "steps", [0, 1, 2, 3, 4]),
    # a rollout budget (a comparison sets run.steps to a 10**9 sentinel): the bar counts completions
    (["run.steps=1000000000", "run.max_rollouts=7"], 7, "rollouts", [0, 3, 6]),
])
def test_the_progress_bar_counts_the_budget_that_ends_the_run(tmp_path, monkeypatch, overrides, total, unit, seen):
    monkeypatch.setattr("rlvr.train.loop.tqdm", BarRecorder)
    BarRecorder.made = []
    loop, _, _ = _loop(tmp_path, overrides)
    loop.train()
    (bar,) = BarRecorder.made
    assert (bar.total, bar.unit, bar.seen) == (total, unit, seen)


def test_a_resumed_progress_bar_starts_where_the_budget_stands(tmp_path, monkeypatch):
    first, _, disk = _loop(tmp_path, ["run.steps=100", "run.max_rollouts=12", "run.save_every=1"], stop_at=2)
    first.train()
    monkeypatch.setattr("rlvr.train.loop.tqdm", BarRecorder)
    BarRecorder.made = []
    again, _, _ = _loop(tmp_path, ["run.steps=100", "run.max_rollouts=12"], disk=disk)
    again.train(resume=True)
    (bar,) = BarRecorder.made
    assert (bar.total, bar.seen) == (12, [6, 9, 12])  # 2 steps of 3 already spent


def test_a_seconds_budget_spent_before_the_first_step_runs_none(tmp_path):
    loop, log, _ = _loop(tmp_path, ["run.steps=5", "run.max_seconds=50"])
    loop.seconds_spent = 60.0  # e.g. a set-up phase (directions, a teacher) that ate the budget
    summary = loop.train()
    assert summary["stopped_by"] == "seconds" and summary["steps"] == 0
    assert [c[0] for c in log] == ["begin", "finish", "save", "on_save"]


def test_a_callback_stops_the_loop_and_the_stopping_step_is_saved_once(tmp_path):
    loop, log, disk = _loop(tmp_path, ["run.steps=5", "run.save_every=1"], stop_at=2)
    summary = loop.train()
    assert summary["stopped_by"] == "callback" and summary["steps"] == 2
    assert [c for c in log if c[0] == "save"] == [("save", 1), ("save", 2)]
    assert log[-3:] == [("finish", 2), ("save", 2), ("on_save", 2, "step_2")]


def test_resume_continues_from_the_saved_state(tmp_path):
    first, _, disk = _loop(tmp_path, ["run.steps=4", "run.save_every=1"], stop_at=2)
    first.train()
    assert disk[2]["rollouts_spent"] == 2 * SAMPLED
    again, log, _ = _loop(tmp_path, ["run.steps=4"], disk=disk)
    summary = again.train(resume=True)
    assert summary["steps"] == 4 and summary["rollouts"] == 4 * SAMPLED
    assert [c for c in log if c[0] == "loop_step"] == [("loop_step", 2), ("loop_step", 3)]
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3, 4]  # one uninterrupted run
    assert [r["rollout/spent"] for r in read_metrics(tmp_path)] == [SAMPLED * s for s in (1, 2, 3, 4)]
    # A resume with nothing left to do runs no step and rewrites no checkpoint.
    done, log, _ = _loop(tmp_path, ["run.steps=4"], disk=disk)
    assert done.train(resume=True)["steps"] == 4
    assert [c[0] for c in log] == ["begin", "finish"]
