"""Selection and supervision end to end: DE-Venus identity = GRPO, a 10 %-labelled dataset, exact resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from rlvr.cli import main
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer
from tests.e2e.resume import crash_then_resume, weights
from tests.helpers.tiny import TINY, tiny_config

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "methods"

IDENTITY = ["algorithm.selector={name: active, pool: stream, label_budget: 1.0, data_budget: 1.0, tau_fix: 1.1, "
            "m_consecutive: 1}",
            "algorithm.shapers=[{name: de_venus}]",
            "algorithm.filters=[{name: de_venus, tau_c: 0.0}]"]


def test_identity_transforms_reproduce_grpo_exactly(tmp_path):
    # All problems gold-labelled, stream pool (= uniform's problems), τ_c = 0, no correction: the
    # DE-Venus plug-ins must change nothing — same metrics and bit-identical weights after 2 steps.
    plain = Trainer(tiny_config(tmp_path / "grpo", ["run.steps=2"]))
    plain.train()
    venus = Trainer(tiny_config(tmp_path / "venus", ["run.steps=2", *IDENTITY]))
    venus.train()
    a, b = weights(plain.policy), weights(venus.policy)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], weights(Trainer(tiny_config(tmp_path / "fresh", [])).policy)[k]) for k in a)
    for ra, rb in zip(read_metrics(tmp_path / "grpo"), read_metrics(tmp_path / "venus")):
        common = [k for k in ra if k in rb and not k.startswith(("timing/", "memory/")) and k != "time/elapsed"]
        assert len(common) > 10
        assert {k: ra[k] for k in common} == {k: rb[k] for k in common}
        assert rb["reward/pseudo_frac"] == 0.0 and rb["select/labelled"] > 0


def _jsonl(path: Path, start: int, n: int, answered: set[int]) -> Path:
    rows = [{"prompt": f"{10 + i}+{i % 7}="} | ({"answer": str(10 + i + i % 7)} if i in answered else {})
            for i in range(start, start + n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_de_venus_on_a_dataset_with_ten_percent_answers(tmp_path):
    # 40 training problems, 4 with answers (10 %). The preset's label budget 0.1·40 = 4 labels every
    # answered problem (in one instalment); the rest are pseudo-labelled by majority vote. Data budget 1
    # so the labelled problems are in D′; τ_c = 0 keeps the untrained model's no-consensus groups.
    train = _jsonl(tmp_path / "train.jsonl", 0, 40, answered={0, 10, 20, 30})
    test = _jsonl(tmp_path / "test.jsonl", 100, 8, answered=set(range(100, 108)))
    preset = yaml.safe_load((PRESETS / "de_venus.yaml").read_text())
    preset.pop("paper")
    preset["algorithm"]["selector"].update(pool_size=0, data_budget=1.0, label_rounds=1)
    preset["algorithm"]["filters"] = [{"name": "de_venus", "tau_c": 0.0}]
    cfg = {**TINY, **preset,
           "task": {"name": "dataset", "params": {"path": str(train), "test_path": str(test), "verifier": "numeric",
                                                  "unlabelled_rows": "label_free"}},  # partly labelled, declared
           "rollout": {**TINY["rollout"], "prompts_per_step": 8},
           "run": {**TINY["run"], "out_dir": str(tmp_path / "run"), "steps": 3}}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    assert main(["train", str(config)]) == 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 3
    rows = read_metrics(tmp_path / "run")
    for r in rows:
        assert r["select/label_budget"] == 4 and r["select/labelled"] == 4 and r["select/pool_size"] == 40
        assert r["reward/verifier_errors"] == 0  # a missing label is not a verifier error
    assert any(0.0 < r.get("reward/pseudo_frac", 0.0) for r in rows)
    state = json.loads(next((tmp_path / "run" / "checkpoints").glob("*/state.json")).read_text())
    records = state["plugins"]["selector"]["supervision"]["records"]
    sources = {r["source"] for r in records.values()}
    assert "gold" in sources and "pseudo" in sources  # a mixed run
    assert sum(r["source"] == "gold" for r in records.values()) == 4


@pytest.mark.parametrize("preset", ["kgps", "de_venus"])
def test_supervision_state_resumes_exactly(tmp_path, monkeypatch, preset):
    # Kill during step 3 of 4 (checkpoint at step 2), resume: same weights and the same selector state
    # (Kalman posteriors / supervision records) as the uninterrupted run.
    overrides = ["run.steps=4", "run.save_every=2"]
    path = str(PRESETS / f"{preset}.yaml")
    full = Trainer(tiny_config(tmp_path / "full", overrides, path=path))
    full.train()
    resumed = crash_then_resume(monkeypatch, lambda: Trainer(tiny_config(tmp_path / "crash", overrides, path=path)))
    want, got = weights(full.policy), weights(resumed.policy)
    assert all(torch.equal(want[k], got[k]) for k in want)
    assert resumed.parts.selector.state_dict() == full.parts.selector.state_dict()
    assert full.parts.selector.state_dict() != Trainer(tiny_config(tmp_path / "new", [], path=path)) \
        .parts.selector.state_dict()
