"""Issue 30, items 5 and 6: a resumed run keeps its before-RL record; resume overrides are applied
(and written to config.yaml) or refused by name."""

from __future__ import annotations

import json

import yaml

from rlvr.cli import main
from tests.helpers.tiny import TINY

KEPT = ("accuracy_before", "eval_before", "warm_start_steps", "warm_start_loss")


def _config(tmp_path, out, **run):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, "warm_start": {"steps": 2, "batch_size": 4},
                                    "run": {**TINY["run"], "eval_problems": 2, "eval_k": 1, "out_dir": str(out),
                                            **run}}))
    return str(path)


def _summary(out):
    return json.loads((out / "summary.json").read_text())


def test_resumed_runs_keep_the_evaluation_before_rl_and_the_warm_start(tmp_path):
    out = tmp_path / "run"
    assert main(["train", _config(tmp_path, out, steps=1)]) == 0
    first = _summary(out)
    assert all(k in first for k in KEPT), sorted(first)
    assert main(["train", "--resume", str(out), "run.steps=2"]) == 0  # continued
    assert main(["train", "--resume", str(out)]) == 0  # a finished run resumed: nothing to train
    (out / "eval_before.json").unlink()  # a run from before that file: its summary.json still has them
    assert main(["train", "--resume", str(out)]) == 0
    last = _summary(out)
    assert last["steps"] == 2
    assert {k: last[k] for k in KEPT} == {k: first[k] for k in KEPT}
    assert last["accuracy_gain"] == last["accuracy_after"] - last["accuracy_before"]


def test_resume_overrides_that_change_training_are_refused_by_name(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", _config(tmp_path, out, steps=1)]) == 0
    saved = (out / "config.yaml").read_text()
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "optim.lr=0.5", "rollout.temperature=0.3", "run.steps=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "optim.lr, rollout.temperature would change how the run trains" in err and "run.steps" in err
    assert (out / "config.yaml").read_text() == saved and _summary(out)["steps"] == 1
    assert main(["train", "--resume", str(out), "run.steps=2", "run.eval_every=1"]) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["run"]["steps"] == 2 and config["run"]["eval_every"] == 1  # it says what ran
    assert config["optim"]["lr"] == TINY["optim"]["lr"] and _summary(out)["steps"] == 2
