"""Testbed regimes as arithmetic task options: hard subset, fixed mixed pool, long chains."""

from __future__ import annotations

import pytest

from rlvr.registry import build
from rlvr.train.config import load_config


def test_defaults_keep_the_original_problem_stream():
    task = build("task", "arithmetic")
    assert [p.prompt for p in task.problems(4, seed=0)] == ['8574*5=', '70*9=', '9079*3=', '6277+3775=']
    assert [p.prompt for p in task.problems(3, seed=5, split="test")] == ['172*5=', '4756+5007=', '34*4=']
    chained = build("task", "arithmetic", num_operations=2)
    assert [p.prompt for p in chained.problems(3, seed=1)] == ['(34*2)+90=', '(536+82)*8=', '(199*4)*9=']
    assert "subset" not in task.problems(1, seed=0)[0].meta


def test_hard_subset_is_labelled_and_never_demonstrated():
    task = build("task", "arithmetic", hard_frac=0.5, hard_digits=6)
    problems = task.problems(400, seed=0)
    hard = [p for p in problems if p.meta["subset"] == "hard"]
    assert 0.4 < len(hard) / len(problems) < 0.6
    assert all(len(str(p.meta["operands"][0])) == 6 for p in hard)
    demos = task.demonstration_problems(200, seed=0)
    assert all(max(len(str(o)) for o in p.meta["operands"]) <= 4 for p in demos)
    assert all(task.verify(p, task.demonstration(p)).value == 1.0 for p in hard[:20])


def test_hard_demo_frac_demonstrates_that_share_of_the_hard_subset():
    task = build("task", "arithmetic", hard_frac=0.3, hard_digits=6, hard_demo_frac=0.1)
    demos = task.demonstration_problems(2000, seed=0)
    share = sum(p.meta["subset"] == "hard" for p in demos) / len(demos)
    assert 0.08 < share < 0.12  # binomial(2000, 0.1): SD 0.0067, so 3 SDs either side
    assert all(len(str(p.meta["operands"][0])) == 6 for p in demos if p.meta["subset"] == "hard")
    # the held-out and training streams are those of the same task without the option
    plain = build("task", "arithmetic", hard_frac=0.3, hard_digits=6)
    assert [p.prompt for p in task.problems(50, seed=3)] == [p.prompt for p in plain.problems(50, seed=3)]
    with pytest.raises(ValueError, match="hard_demo_frac"):
        build("task", "arithmetic", hard_demo_frac=0.1)  # no hard subset to demonstrate
    with pytest.raises(ValueError, match="hard_demo_frac"):
        build("task", "arithmetic", hard_frac=0.3, hard_demo_frac=1.5)


def test_pool_cycles_one_fixed_set_and_leaves_test_alone():
    task = build("task", "arithmetic", pool_size=30, min_digits=1, max_digits=6)
    a, b = task.problems(100, seed=0), task.problems(100, seed=1)
    assert len({p.prompt for p in a}) == 30 and {p.prompt for p in a} == {p.prompt for p in b}
    assert [p.prompt for p in a[:30]] != [p.prompt for p in b[:30]]  # seeded order differs
    test = task.problems(50, seed=0, split="test")
    assert len({p.prompt for p in test}) == 50
    with pytest.raises(ValueError, match="pool_size"):
        build("task", "arithmetic", pool_size=-1)


def test_the_warm_start_of_a_pool_learns_and_is_validated_off_the_pool():
    """A warm start on the pool memorised its answers (validation 0.76 on the pool, 0.7-3 % held out)
    and left RL nothing to learn there; demonstrations and validation now come from the open stream."""
    task = build("task", "arithmetic", pool_size=30, min_digits=1, max_digits=6)
    pool = {p.prompt for p in task.problems(60, seed=0)}
    demos, checks = task.demonstration_problems(200, seed=5), task.validation_problems(100, seed=10**6)
    assert len({p.prompt for p in demos}) == 200 and len({p.prompt for p in checks}) == 100
    outside = [p for p in demos + checks if p.prompt not in pool]
    assert len(outside) >= 0.95 * 300  # only chance repeats of short problems (all 300 were pool prompts before)
    assert all(p.meta["split"] == "train" for p in demos + checks)
    plain = build("task", "arithmetic")  # unpooled tasks are unchanged
    assert [p.prompt for p in plain.validation_problems(20, seed=3)] == [p.prompt for p in plain.problems(20, seed=3)]
    assert [p.prompt for p in plain.demonstration_problems(20, seed=3)] == [p.prompt for p in plain.problems(20, seed=3)]


def test_long_regime_varies_the_number_of_operations():
    task = build("task", "arithmetic", min_operations=1, num_operations=4)
    problems = task.problems(200, seed=0)
    counts = {len(p.meta["ops"]) for p in problems}
    assert counts == {1, 2, 3, 4}
    lengths = [len(task.demonstration(p)) for p in problems]
    assert max(lengths) >= 3 * min(lengths)
    with pytest.raises(ValueError, match="min_operations"):
        build("task", "arithmetic", min_operations=3, num_operations=2)


@pytest.mark.parametrize("regime", ["hard", "confident", "mixed_pool", "long"])
def test_regime_configs_load(regime):
    from pathlib import Path
    path = Path(__file__).resolve().parents[3] / "configs" / "regimes" / f"{regime}.yaml"
    cfg = load_config(path)
    build("task", cfg.task.name, **cfg.task.params)
