"""The reasoning_gym task over every dataset reasoning-gym registers: the gold answer in the answer
form scores 1, a wrong answer 0, a completion without the form 0 with a reason; the five datasets
without a gold answer accept a reply built to pass their checker (from the entry's metadata, or
solved here: boxnet by walking each box to its target, rush_hour by breadth-first search)."""

from __future__ import annotations

import json
import time
from collections import deque

import pytest

from rlvr.registry import build
from rlvr.tasks import verify_all
from rlvr.tasks.rgym import extract_reply, wrap_reply
from rlvr.types import Problem

factory = pytest.importorskip("reasoning_gym.factory", reason="needs the reasoning-gym extra")

NO_GOLD = {"boxnet", "graph_color", "propositional_logic", "rubiks_cube", "rush_hour"}
ALL = sorted(set(factory.DATASETS) - {"composite"})
ENTRIES = 2  # per dataset: the whole sweep must stay fast (it runs in CI)


def task_for(name: str, **params):
    return build("task", "reasoning_gym", dataset=name, size=ENTRIES, seed=3, **params)


def valid_reply(name: str, problem: Problem) -> str:
    """A reply the checker of a dataset without gold answers passes, built from the entry."""
    meta = problem.meta["rg_entry"]["metadata"]
    if name == "graph_color":
        return json.dumps(meta["possible_answer"])
    if name == "propositional_logic":
        return meta["example_answer"]
    if name == "rubiks_cube":
        return meta["example_correct_answer"]
    if name == "boxnet":
        return json.dumps(boxnet_plan(meta["initial_state"]))
    if name == "rush_hour":
        return rush_hour_moves(meta["board_config"])
    raise AssertionError(f"no reply builder for {name}")


def boxnet_plan(state: dict[str, list[str]]) -> list[dict[str, str]]:
    """One action per step: each box walked square by square (row, then column) to a target of its
    colour, then matched there."""
    cells = {key: tuple(float(x) for x in key.split("_")) for key in state}
    targets = [(item[len("target_"):], cells[key]) for key, items in state.items() for item in items
               if item.startswith("target_")]
    plan = []
    for key, items in state.items():
        for item in items:
            if not item.startswith("box_"):
                continue
            colour = item[len("box_"):]
            goal = next(t for t in targets if t[0] == colour)
            targets.remove(goal)
            (r, c), (gr, gc) = cells[key], goal[1]
            while (r, c) != (gr, gc):
                nr, nc = (r + (gr > r) - (gr < r), c) if r != gr else (r, c + (gc > c) - (gc < c))
                plan.append({f"Agent[{r}, {c}]": f"move({item}, square[{nr}, {nc}])"})
                r, c = nr, nc
            plan.append({f"Agent[{r}, {c}]": f"move({item}, target_{colour})"})
    return plan


def rush_hour_moves(board: str, size: int = 6) -> str:
    """The shortest sequence of one-cell moves ('B+1 C-1 ...') that brings piece A to the exit."""
    from reasoning_gym.games.rush_hour import TARGET

    cells: dict[str, list[int]] = {}
    for i, label in enumerate(board):
        if label not in "ox":
            cells.setdefault(label, []).append(i)
    labels = sorted(cells)
    walls = frozenset(i for i, label in enumerate(board) if label == "x")
    strides = [cells[l][1] - cells[l][0] for l in labels]
    lengths = [len(cells[l]) for l in labels]
    start = tuple(cells[l][0] for l in labels)
    paths: dict[tuple, tuple] = {start: ()}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if state[0] == TARGET:
            return " ".join(f"{chr(ord('A') + i)}{'+' if d > 0 else '-'}1" for i, d in paths[state])
        taken = set(walls)
        for pos, stride, n in zip(state, strides, lengths):
            taken.update(pos + k * stride for k in range(n))
        for i, (pos, stride, n) in enumerate(zip(state, strides, lengths)):
            for d in (-1, 1):
                cell = pos - stride if d < 0 else pos + n * stride
                same_row = stride != 1 or cell // size == pos // size
                if 0 <= cell < size * size and same_row and cell not in taken:
                    nxt = state[:i] + (pos + d * stride,) + state[i + 1:]
                    if nxt not in paths:
                        paths[nxt] = paths[state] + ((i, d),)
                        queue.append(nxt)
    raise AssertionError(f"rush hour board {board} has no solution")


def test_every_dataset_gold_wrong_and_malformed():
    assert len(ALL) >= 105  # reasoning-gym 0.1.25's datasets, composite aside
    started = time.perf_counter()
    for name in ALL:
        task = task_for(name)
        for index in range(ENTRIES):
            p = task.problem(index)
            good = task.demonstration(p) if name not in NO_GOLD else wrap_reply(valid_reply(name, p), "answer_tag")
            assert (name in NO_GOLD) == (p.answer is None), name
            score = task.verify(p, f"Let me think.\n{good}")
            assert score.value == 1.0, (name, index, good[:200], score)
            wrong = task.verify(p, "<answer>\u00a7 not an answer \u00a7</answer>")
            assert wrong.value == 0.0 and wrong.parsed == "\u00a7 not an answer \u00a7", (name, wrong)
            malformed = task.verify(p, f"The answer is {good[len('<answer>'):-len('</answer>')]}")
            assert malformed.value == 0.0 and malformed.parsed is None and "no answer" in malformed.meta["reason"]
    assert time.perf_counter() - started < 60


def test_partial_credit_is_binary_unless_opted_in():
    task = task_for("leg_counting")
    p = task.problem(0)
    near = f"<answer>{p.answer} legs</answer>"  # reasoning-gym pays a near miss in part
    binary = task.verify(p, near)
    assert binary.value == 0.0 and 0.0 < binary.meta["rg_score"] < 1.0 and "scored" in binary.meta["reason"]
    with pytest.warns(UserWarning, match="gamed"):
        raw = task_for("leg_counting", partial_credit=True)
    assert raw.verify(p, near).value == binary.meta["rg_score"]


@pytest.mark.parametrize("answer_format,reply", [("boxed", "so \\boxed{{{a}}}."), ("last_number", "I get 3, then {a}.")])
def test_other_answer_forms(answer_format, reply):
    task = task_for("basic_arithmetic", answer_format=answer_format)
    p = task.problem(0)
    assert ("\\boxed{}" in p.prompt) == (answer_format == "boxed") and "<answer>" not in p.prompt
    assert task.verify(p, reply.format(a=p.answer)).value == 1.0
    assert task.verify(p, task.demonstration(p)).value == 1.0
    assert task.verify(p, f"<answer>{p.answer}</answer>" if answer_format == "boxed" else "none").value == 0.0
    assert extract_reply("<answer> x </answer> <answer>y</answer>", "answer_tag") == "y"


def test_an_extra_instruction_line_and_a_stated_confidence():
    plain = task_for("basic_arithmetic", answer_format="last_number")
    ask = "Then state your confidence as conf: a number from 0 to 1."
    task = task_for("basic_arithmetic", answer_format="last_number", instruction=ask)
    p, q = plain.problem(0), task.problem(0)
    assert q.prompt == f"{p.prompt}\n{ask}" and q.answer == p.answer and q.uid != p.uid  # a new prompt, same gold
    stated = f"I get {p.answer}. conf: 0.75"  # the last number written is the confidence
    assert task.verify(q, stated).value == 1.0 and task.verify(q, stated).parsed == str(p.answer)
    raw = task_for("basic_arithmetic", answer_format="last_number", strip_confidence=False)
    assert raw.verify(p, stated).value == 0.0 and raw.verify(p, stated).parsed == "0.75"


def test_splits_by_prompt_hash_and_cycle():
    task = build("task", "reasoning_gym", dataset="leg_counting", size=60, test_fraction=0.2)
    train = task.problems(200, seed=0)
    test = task.problems(30, seed=1, split="test")
    assert {p.meta["split"] for p in train} == {"train"} and {p.meta["split"] for p in test} == {"test"}
    assert not {p.prompt for p in train} & {p.prompt for p in test}
    assert len({p.prompt for p in train}) + len({p.prompt for p in test}) == 60  # every entry, each in one split
    assert [p.uid for p in task.problems(10, seed=0)] == [p.uid for p in train[:10]]  # same seed, same list


def test_composite_mix_and_clear_errors():
    mix = {"datasets": [{"name": "leg_counting", "weight": 1}, {"name": "chain_sum", "weight": 3,
                                                                 "config": {"max_terms": 3}}]}
    task = build("task", "reasoning_gym", dataset="composite", config=mix, size=40)
    problems = task.problems(20, seed=0)
    assert {p.meta["rg_dataset"] for p in problems} == {"leg_counting", "chain_sum"}
    assert all(task.verify(p, task.demonstration(p)).value == 1.0 for p in problems)
    with pytest.raises(ValueError, match="unknown dataset 'leg_countng'.*leg_counting"):
        task_for("leg_countng")
    with pytest.raises(ValueError, match="unknown dataset 'chain_summ'.*chain_sum"):
        build("task", "reasoning_gym", dataset="composite", config={"datasets": [{"name": "chain_summ"}]})
    with pytest.raises(ValueError, match="refused config"):
        task_for("leg_counting", config={"no_such_option": 1})


def test_missing_package_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import reasoning_gym now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'rlvr\[reasoning-gym\]'"):
        task_for("leg_counting")


def test_scored_under_the_verifier_time_limit_and_in_a_worker():
    import pickle

    task = task_for("chain_sum")
    p = task.problem(0)
    copy = pickle.loads(pickle.dumps(task))  # what a verifier pool worker receives: the dataset is rebuilt
    assert copy._data is None and copy.verify(p, task.demonstration(p)).value == 1.0
    task.data().score_answer = lambda answer, entry: time.sleep(5) or 1.0
    score = verify_all(task, [p], [task.demonstration(p)], timeout_s=0.2)[0]
    assert score.value == 0.0 and "timeout" in score.meta["error"]


@pytest.mark.parametrize("name,reply_of", [
    ("game_of_life_halting", lambda gold: "False" if gold == "True" else "True"),  # any non-empty text passes there
    ("coin_flip", lambda gold: "0"),  # a common prefix of the digits passes there
])
def test_lenient_checkers_do_not_pay_wrong_replies(name, reply_of):
    task = build("task", "reasoning_gym", dataset=name, size=20, seed=0)
    checked = 0
    for index in range(20):
        p = task.problem(index)
        if name == "coin_flip" and not 1e-3 < float(p.answer) < 1:
            continue
        score = task.verify(p, f"<answer>{reply_of(p.answer)}</answer>")
        assert score.meta["rg_score"] == 1.0 and score.value == 0.0 and "not the answer" in score.meta["reason"]
        assert task.verify(p, task.demonstration(p)).value == 1.0
        checked += 1
    assert checked >= 5


def test_a_verifier_pool_scores_as_in_process():
    from rlvr.sandbox.pool import verifier_pool

    task = task_for("chain_sum")
    problems = [task.problem(i) for i in range(ENTRIES)] * 3
    texts = [task.demonstration(p) if i % 3 else "<answer>-1.5</answer>" for i, p in enumerate(problems)]
    texts[1] = "no tags"
    serial = [task.verify(p, t) for p, t in zip(problems, texts)]
    with verifier_pool(1) as pool:
        pooled = verify_all(task, problems, texts, timeout_s=30, pool=pool)
    assert pooled == serial and [s.value for s in pooled] == [0.0, 0.0, 1.0, 0.0, 1.0, 1.0]
