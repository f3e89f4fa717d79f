"""Tool calls inside rollouts (the ``python_tool`` environment with the ``multi_turn`` sampler): tool
replies are environment tokens that get no gradient, a failing tool answers with text, calls are capped."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

import rlvr.rollout.samplers.multi_turn as multi_turn
from rlvr.envs import EPISODE_KEY, EnvError, build_env
from rlvr.registry import build
from rlvr.rollout.engines.base import Generation
from rlvr.rollout.samplers import SampleContext
from rlvr.types import Origin, Problem
from tests.helpers.tiny_models import logit_grads


def shout(text: str) -> str:
    """A user tool (``tests.unit.envs.test_python_tool:shout``)."""
    return text.upper()


def broken(text: str) -> str:
    raise KeyError(text)


def env(**params):
    e = build_env("python_tool", verifier="exact", **params)
    e.reset(Problem("q", answer="42"), seed=0)
    return e


def test_python_tool_replies_errors_caps_and_final_answer():
    e = env(tools=["tests.unit.envs.test_python_tool:shout", "tests.unit.envs.test_python_tool:broken"], max_calls=4,
            max_output_chars=80)
    obs, score, done = e.step("let me run <py>print(6 * 7)</py>")
    assert obs == "\n<out>42\n</out>\n" and (score, done) == (0.0, False)
    obs, _, done = e.step("<py>1 / 0</py>")  # a raising program: its error comes back as text
    assert "ZeroDivisionError" in obs and not done
    assert "HELLO" in e.step("<shout>hello</shout>")[0]
    assert "error: KeyError" in e.step("<broken>x</broken>")[0]  # a raising user tool: text, not an exception
    assert "at most 4 tool calls" in e.step("<shout>again</shout>")[0]  # over the cap: not run
    assert e.info["calls"] == 5 and e.info["errors"] == 3
    assert e.step("#42") == ("", 0.0, True) and e.info["answered"]  # exact: '#42' is not '42'
    with pytest.raises(EnvError, match="after the episode ended"):
        e.step("42")
    e2 = env(max_output_chars=10)
    assert e2.step("<py>print('x' * 100)</py>")[0] == "\n<out>xxxxxxx...</out>\n"
    assert e2.step("42") == ("", 1.0, True)
    assert "error: forbidden" in env().step("<py>import socket\nsocket.socket(socket.AF_INET)</py>")[0]


def test_bad_tool_and_config_are_named():
    with pytest.raises(Exception, match="no attribute 'nope'"):
        build_env("python_tool", tools=["tests.unit.envs.test_python_tool:nope"])
    with pytest.raises(ValueError, match="result_format"):
        build_env("python_tool", result_format="no placeholder")


def scripted_generate(tok, turns):
    """A stand-in for generate_ids that writes ``turns[j]`` as every row's j-th action."""
    calls = {"n": 0}

    def generate(model, tokenizer, ids, mask, **kw):
        text = turns[min(calls["n"], len(turns) - 1)]
        calls["n"] += 1
        row = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        n = ids.shape[0]
        comp = torch.tensor([row] * n)
        return Generation(prompt_ids=ids, prompt_mask=mask, completion_ids=comp,
                          completion_mask=torch.ones_like(comp, dtype=torch.bool),
                          logprobs=torch.full(comp.shape, -1.0), texts=[text] * n)

    return generate


def test_tool_reply_tokens_are_environment_tokens_with_zero_gradient(tok, policy, monkeypatch):
    monkeypatch.setattr(multi_turn, "generate_ids", scripted_generate(tok, ["<py>print(6*7)</py>", "42"]))
    model = copy.deepcopy(policy)
    sampler = build("sampler", "multi_turn", env="python_tool", env_params={"verifier": "exact"}, cf_samples=0,
                    max_turns=3)
    rollout = SimpleNamespace(max_new_tokens=24, temperature=1.0, top_p=1.0, top_k=0)
    ctx = SampleContext(tokenizer=tok, rollout=rollout, seed=1, group_offset=0)
    batch = sampler.sample(model, [Problem("6*7=", answer="42", uid="p0")], 2, ctx)
    env_tok = batch.token_origin == int(Origin.ENV)
    for i in range(batch.num_rows):
        reply = tok.decode(batch.completion_ids[i][env_tok[i]].tolist(), skip_special_tokens=True)
        assert reply == "\n<out>42\n</out>\n"  # exactly the tool's reply, and nothing else, is environment text
        assert batch.problems[i].meta[EPISODE_KEY]["reward"] == 1.0
    assert not bool((batch.completion_mask & env_tok).any())
    grads, _ = logit_grads(model, batch, "ppo_clip", {})
    assert grads[env_tok].abs().max().item() == 0.0
    assert grads[batch.completion_mask].abs().max().item() > 0.0
    task = build("task", "dataset", path="unused.jsonl")  # the dataset task scores such a row by its episode
    assert task.verify(batch.problems[0], batch.texts[0]).value == 1.0
