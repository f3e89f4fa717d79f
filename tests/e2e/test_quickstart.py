"""``rlvr quickstart`` kept honest without running it in full: its settings are the README's, its
held-out problems never appear in training, and a shortened run writes its summary and plot."""

import json
from pathlib import Path

import pytest

from rlvr.quickstart import QUICKSTART, quickstart
from rlvr.tasks.arithmetic import Arithmetic
from rlvr.train.build import build_task
from rlvr.train.collect import step_seed
from rlvr.train.config import load_config
from rlvr.train.run import heldout

README = Path(__file__).resolve().parents[2] / "README.md"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _config(seed: int = 0):
    return load_config(None, [f"run.seed={seed}"], base=QUICKSTART)


def _readme_paragraph() -> str:
    text = README.read_text()
    start = text.index("`make quickstart` builds")
    return " ".join(text[start:text.index("\n\n", start)].split())


def test_readme_states_the_quickstart_settings():
    cfg, para = _config(), _readme_paragraph()
    ws = cfg.warm_start
    assert f"at least {ws.steps} supervised steps, up to {ws.max_steps}" in para
    assert f"until {round(ws.target_accuracy * 100)} % greedy accuracy" in para
    assert f"{cfg.run.steps} GRPO steps of {cfg.rollout.prompts_per_step} prompts × {cfg.rollout.group_size}" in para
    assert f"{cfg.run.eval_problems} held-out problems" in para
    assert cfg.algorithm.advantage.name == "grpo" and cfg.run.threads == 2


def test_heldout_problems_never_appear_in_training_streams():
    """Held-out prompts are test-split for seeds 0–9; for seed 0 they are disjoint from every warm-start
    batch the longest warm start draws, its validation problems and every GRPO step's prompts."""
    cfg = _config()
    task = build_task(cfg)
    for seed in range(10):
        assert {task.split_of(p.prompt) for p in heldout(task, cfg.run.eval_problems, seed)} == {"test"}
    held = {p.prompt for p in heldout(task, cfg.run.eval_problems, 0)}
    train = {p.prompt for step in range(cfg.warm_start.max_steps)
             for p in task.demonstration_problems(cfg.warm_start.batch_size, step)}
    train |= {p.prompt for p in task.problems(100, seed=10**6)}
    train |= {p.prompt for step in range(cfg.run.steps)
              for p in task.problems(cfg.rollout.prompts_per_step, step_seed(0, step))}
    assert len(train) > 50_000 and not held & train


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """A shortened quickstart (2 warm-start and 2 GRPO steps); records every problem it draws."""
    out = tmp_path_factory.mktemp("qs") / "run"
    drawn: list[tuple[str, list[str]]] = []
    original = Arithmetic.problems

    def spy(self, n, seed, split="train"):
        problems = original(self, n, seed, split)
        drawn.append((split, [p.prompt for p in problems]))
        return problems

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Arithmetic, "problems", spy)
        summary = quickstart(seed=3, out_dir=str(out), overrides=[
            "warm_start.steps=2", "warm_start.target_accuracy=0", "run.steps=2", "run.eval_every=1",
            "run.eval_problems=6", "run.eval_k=2", "run.threads=1", "rollout.prompts_per_step=2",
            "rollout.group_size=2", "rollout.max_new_tokens=8", "rollout.verify_workers=0"])
    return out, summary, drawn


def test_short_quickstart_writes_summary_and_plot(short_run):
    out, summary, _ = short_run
    saved = json.loads((out / "summary.json").read_text())
    assert saved["seed"] == 3 and saved["steps"] == 2 and saved["warm_start_steps"] == 2
    assert 0 <= saved["accuracy_before"] <= 1 and 0 <= saved["accuracy_after"] <= 1
    assert saved["accuracy_gain"] == pytest.approx(saved["accuracy_after"] - saved["accuracy_before"])
    assert {"pass@1", "pass@2"} <= set(saved["pass_at_k"]) and saved["seconds"] > 0
    plot = Path(saved["plot"])
    assert plot == out / "learning_curve.png" and plot.read_bytes()[:8] == PNG_MAGIC
    assert summary["accuracy_after"] == saved["accuracy_after"]


def test_short_quickstart_trains_only_on_train_split_problems(short_run):
    _, _, drawn = short_run
    held = {p for split, prompts in drawn if split == "test" for p in prompts}
    trained = {p for split, prompts in drawn if split == "train" for p in prompts}
    assert len(held) == 6 and trained and not held & trained
    task = Arithmetic(Arithmetic.Config())
    assert {task.split_of(p) for p in trained} == {"train"}
