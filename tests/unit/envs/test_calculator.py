"""The calc tool, the tool_arithmetic task and multi-turn demonstrations in the warm start (the
tool's reply is labelled IGNORE, as its tokens are masked in rollouts)."""

from __future__ import annotations

import pytest

from rlvr.envs import build_env
from rlvr.envs.calculator import calc
from rlvr.registry import build
from rlvr.sft import IGNORE, demonstration_batch
from rlvr.types import Problem


def test_calc_evaluates_integer_expressions_and_refuses_the_rest():
    assert calc(" 4821*307 ") == "1480047"
    assert calc("(12+3)*-2-1") == "-31"
    for bad in ("__import__('os')", "2**10", "7/2", "1.5+1", "x+1", "", "1+" * 40 + "1", "9" * 20 + "*" + "9" * 20):
        with pytest.raises(ValueError, match="calc"):
            calc(bad)


def test_disabled_tools_answer_with_an_error_and_do_not_run():
    on = build_env("python_tool", tools=["rlvr.envs.calculator:calc"], python=False, verifier="numeric")
    off = build_env("python_tool", tools=["rlvr.envs.calculator:calc"], python=False, verifier="numeric",
                    disabled=True)
    p = Problem("12*3=", answer="36")
    for e in (on, off):
        e.reset(p, seed=0)
    assert on.step("<calc>12*3</calc>")[0] == "\n<out>36</out>\n"
    assert off.step("<calc>12*3</calc>")[0] == "\n<out>error: tools are disabled</out>\n"
    assert off.info == {"calls": 1, "errors": 1, "answered": False}
    assert off.step("#36") == ("", 1.0, True) and on.step("#35") == ("", 0.0, True)


def test_tool_arithmetic_problems_and_single_completion_verdicts():
    task = build("task", "tool_arithmetic", min_digits=3, max_digits=4)
    ps = task.problems(50, seed=0)
    for p in ps:
        a, b = p.meta["operands"]
        assert 100 <= min(a, b) and max(a, b) <= 9999 and p.prompt == f"{a}{p.meta['op']}{b}="
        assert p.answer == calc(p.prompt[:-1])
    assert {p.meta["op"] for p in ps} == {"+", "*"}
    p = ps[0]
    assert task.verify(p, f"#{p.answer}").value == 1.0 and task.verify(p, "#1").value == 0.0
    with pytest.raises(ValueError, match="tool_frac"):
        build("task", "tool_arithmetic", tool_frac=1.5)


def test_warm_start_demonstrations_train_the_turns_and_mask_the_reply(tok):
    task = build("task", "tool_arithmetic", tool_frac=0.5)
    ps = task.problems(40, seed=1)
    called = [task.calls_tool(p) for p in ps]
    assert 0 < sum(called) < len(ps)  # both kinds of demonstration
    batch = demonstration_batch(tok, task, ps)
    eos = tok.eos_token_id
    for i, p in enumerate(ps):
        ids, labels = batch["input_ids"][i].tolist(), batch["labels"][i].tolist()
        real = sum(batch["attention_mask"][i].tolist())
        trained = tok.decode([t for t, y in zip(ids, labels) if y != IGNORE])
        masked = tok.decode([t for t, y in zip(ids[:real], labels[:real]) if y == IGNORE], skip_special_tokens=True)
        expr = p.prompt[:-1]
        if called[i]:
            # the policy's turns (each ending in eos) are trained; the tool's reply is not
            assert trained == f"<calc>{expr}</calc><eos>#{p.answer}<eos>"
            assert masked == f"{p.prompt}\n<out>{p.answer}</out>\n"
        else:
            assert trained == f"#{p.answer}<eos>" and masked == p.prompt
        assert [t for t, y in zip(ids, labels) if y != IGNORE].count(eos) == (2 if called[i] else 1)
