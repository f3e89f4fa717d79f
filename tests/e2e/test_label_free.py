"""Label-free presets end to end: `rlvr train` on a JSONL dataset whose problems have no answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rlvr.cli import main
from rlvr.registry import build
from rlvr.train.config import merge
from rlvr.train.logging import read_metrics
from tests.helpers.tiny import TINY

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "methods"


def _jsonl(path: Path, start: int, n: int, answers: bool = False) -> Path:
    rows = [{"prompt": f"{10 + i}+{i % 7}="} | ({"answer": str(10 + i + i % 7)} if answers else {})
            for i in range(start, start + n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_dataset_problems_without_answers_still_parse(tmp_path):
    data = _jsonl(tmp_path / "train.jsonl", 0, 3)
    task = build("task", "dataset", path=str(data), answer_column="", verifier="numeric", test_fraction=0.01)
    problem = task.rows("train")[0]
    assert problem.answer is None
    score = task.verify(problem, "1+2=3;#632.0")
    assert (score.value, score.parsed, score.meta.get("no_gold")) == (0.0, "632", True)
    assert "error" not in score.meta  # a missing label is not a verifier failure
    # A file with an answer column may leave some answers null: those rows are label-free when declared.
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n"
                     + json.dumps({"prompt": "2+2=", "answer": None}) + "\n")
    rows = build("task", "dataset", path=str(mixed), verifier="exact", test_fraction=0.01,
                 unlabelled_rows="label_free").rows("train")
    assert sorted([p.answer for p in rows], key=str) == ["2", None]


@pytest.mark.parametrize("preset,extra", [
    ("ttrl", []),
    ("om_grpo", []),
    # a band no untrained group sits in, so the MCMC hints run every step
    ("hi_ttrl", ["rollout.sampler.c_lo=0.9", "rollout.sampler.c_hi=0.95"]),
])
def test_rlvr_train_on_an_answer_free_dataset(tmp_path, preset, extra):
    train = _jsonl(tmp_path / "train.jsonl", 0, 24)
    test = _jsonl(tmp_path / "test.jsonl", 100, 8)
    cfg = {**TINY, "task": {"name": "dataset", "params": {"path": str(train), "test_path": str(test),
                                                          "answer_column": "", "verifier": "numeric"}},
           "run": {**TINY["run"], "out_dir": str(tmp_path / "run"), "steps": 2}}
    preset_tree = yaml.safe_load((PRESETS / f"{preset}.yaml").read_text())
    preset_tree.pop("paper", None)
    merged = tmp_path / "config.yaml"  # the preset on top of the tiny dataset run
    merged.write_text(yaml.safe_dump(merge(cfg, preset_tree)))
    assert main(["train", str(merged), *extra]) == 0
    run_cfg = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert run_cfg["rollout"]["group_size"] == 4 and run_cfg["task"]["params"]["answer_column"] == ""
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 2
    rows = read_metrics(tmp_path / "run")
    last = rows[-1]
    for key in ("reward/consensus", "reward/answer_entropy", "reward/answered_frac", "loss/total"):
        assert key in last, key
    assert "reward/gold_accuracy" not in last  # nothing to compare with
    assert all(r["reward/verifier_errors"] == 0 for r in rows)  # no label is not an error
    if preset == "hi_ttrl":
        assert last["rollout/hi_ttrl_hinted_rows_frac"] > 0 and "rollout/hi_ttrl_accept_rate" in last
    if preset == "om_grpo":
        assert "adv/answer_token_frac" in last
