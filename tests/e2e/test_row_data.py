"""Row data moves with its rows: DAPO's dynamic sampling (zero_std with refill rounds) drops a group
whose verifier failed, and samples.jsonl still shows every trained row's own verifier error, on its
own row (docs/design.md §3: per-row data lives in ``Rollouts`` fields, never in ``meta``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlvr.registry import param, register
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer
from rlvr.types import Problem, Score
from tests.helpers.tiny import DigitConfig, ToyDigit, tiny_config

DAPO = Path(__file__).resolve().parents[2] / "configs" / "methods" / "dapo.yaml"


@dataclass(frozen=True)
class ScriptConfig(DigitConfig):
    script: str = param("ok", "comma-separated behaviour of each new prompt, in the order first verified: "
                              "ok (verdicts 1, 0, 1, ...), flaky (1, then the verifier raises on every "
                              "other completion), broken (the verifier always raises); 'ok' past the end")


@register("task", "scripted_errors_test")
class ScriptedErrors(ToyDigit):
    """ToyDigit whose verifier follows a script per prompt, whatever the model samples: the n-th new
    prompt verified gets the n-th behaviour. Verified in-process and in row order
    (``needs_timeout = False``), so which rows fail is known by construction.

    Differs from toy_digit_test: the verdict ignores the text and may raise. Shapes: n/a.
    """

    Config = ScriptConfig

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self.behaviour: dict[str, str] = {}  # prompt -> its scripted behaviour
        self.calls: dict[str, int] = {}  # prompt -> completions verified so far

    def verify(self, problem: Problem, completion: str) -> Score:
        script = str(self.config.script).split(",")
        kind = self.behaviour.setdefault(problem.prompt, (script + ["ok"] * len(self.behaviour))[len(self.behaviour)])
        k = self.calls[problem.prompt] = self.calls.get(problem.prompt, -1) + 1
        if kind == "broken" or (kind == "flaky" and k % 2):
            raise RuntimeError(f"no verdict for {problem.prompt}")
        return Score(float(k % 2 == 0), parsed=completion[:4])


@pytest.mark.parametrize("script, refills, rounds", [
    # round 0 keeps 'ok' and drops 'broken'; the refill keeps 'flaky' and drops another 'broken'
    ("ok,broken,flaky,broken", 3, 2),
    # round 0 keeps 'flaky' and drops 'broken'; the one refill drops both its groups: one group trains
    ("flaky,broken,broken,broken", 1, 2),
])
def test_dynamic_sampling_keeps_each_verifier_error_on_its_own_row(tmp_path, script, refills, rounds):
    cfg = tiny_config(tmp_path, ["task.name=scripted_errors_test", f"task.params.script={script}", "run.steps=1",
                                 "rollout.prompts_per_step=2", "rollout.group_size=2",
                                 f"rollout.refill_rounds={refills}", "run.log_samples=8"], path=str(DAPO))
    trainer = Trainer(cfg)
    trainer.train()
    behaviour = trainer.collector.task.behaviour
    assert list(behaviour.values()) == script.split(",")  # every scripted prompt was sampled, in order
    metrics = read_metrics(tmp_path)
    assert metrics[0]["rollout/rounds"] == rounds and metrics[0]["rollout/all_filtered"] == 0.0
    rows = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    kept = [p for p, kind in behaviour.items() if kind != "broken"]
    expected = []  # the trained batch row by row: groups in order, the flaky group's 2nd completion failed
    for prompt in kept:
        flaky = behaviour[prompt] == "flaky"
        expected += [(prompt, None), (prompt, f"RuntimeError: no verdict for {prompt}" if flaky else None)]
    assert [(r.get("problem", r["prompt"]), r.get("verifier_error")) for r in rows] == expected
