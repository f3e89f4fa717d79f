"""Generation engines as plug-ins: outputs pinned across refactors, the registry, user engines."""

import ast
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import rlvr.rollout
from rlvr import registry
from rlvr.cli import main
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.registry import param
from rlvr.rollout import generate
from rlvr.rollout.engines.base import Engine
from rlvr.rollout.engines.loop import decode_loop
from rlvr.train.config import ConfigError
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer
from tests.helpers.tiny import tiny_config

PIN_PROMPTS = ["347+285=", "9*3=", "12+7=", "1"]
# Sampled with the code before engines became plug-ins (commit 1aa2b41): a refactor must keep them.
PINNED = {
    "loop": ([[16, 9, 17, 9, 13, 9], [16, 8, 8, 13, 13, 8], [9, 17, 8, 9, 17, 9], [3, 3, 2, 0, 0, 0]],
             [-16.5949, -15.5452, -17.1901, -8.213]),
    "hf": ([[16, 9, 17, 9, 13, 9], [16, 8, 8, 13, 17, 10], [9, 17, 8, 9, 9, 17], [3, 3, 2, 0, 0, 0]],
           [-16.5949, -16.1386, -16.4726, -8.213]),
    "specroll": ([[16, 9, 8, 9, 9, 13], [16, 16, 9, 9, 17, 4], [9, 17, 15, 15, 15, 11], [3, 5, 4, 17, 17, 15]],
                 [-15.855, -15.2728, -15.9947, -16.4505]),
}


@pytest.fixture(scope="module")
def small():
    tok = build_char_tokenizer("0123456789+*=#;")
    return build_tiny_model(tok, hidden=32, layers=2, heads=2, seed=1), tok


@pytest.mark.parametrize("engine", sorted(PINNED))
def test_sampled_tokens_are_pinned(small, engine):
    model, tok = small
    params = ({"bootstrap_fit": False, "num_heads": 2, "reflex_eta": 0.5, "reflex_eps": 2.0}  # the old defaults
              if engine == "specroll" else None)
    gen = generate(model, tok, PIN_PROMPTS, max_new_tokens=6, temperature=0.8, top_k=8, seed=5, engine=engine,
                   engine_params=params)
    ids, sums = PINNED[engine]
    assert gen.completion_ids.tolist() == ids
    assert gen.logprobs.sum(-1).tolist() == pytest.approx(sums, abs=1e-4)


def test_loop_top_p_tokens_are_pinned(small):
    model, tok = small
    gen = generate(model, tok, PIN_PROMPTS, max_new_tokens=6, temperature=1.0, top_p=0.9, seed=2)
    assert gen.completion_ids.tolist() == [[10, 8, 10, 18, 7, 3], [8, 12, 10, 4, 7, 15], [3, 5, 0, 0, 4, 5],
                                           [7, 16, 17, 9, 16, 3]]


# --- the registry, user engines, config-time checks -------------------------------------------------

@dataclass(frozen=True)
class CountingConfig:
    greedy: bool = param(False, "decode greedily whatever the run asks")


class CountingEngine(Engine):
    """A user engine for the tests: the loop engine, counting its calls into ``last_stats``.

    Differs from loop: counts calls; optionally greedy. Shapes: as loop.
    """

    Config = CountingConfig
    calls = 0

    def decode(self, model, request):
        type(self).calls += 1
        request.sampler.do_sample = request.sampler.do_sample and not self.config.greedy
        self.last_stats = {"rollout/user_engine_calls": float(type(self).calls)}
        return decode_loop(model, request)


def test_engines_are_listed_with_their_options(capsys):
    assert set(registry.names("engine")) >= {"loop", "hf", "specroll", "vllm", "vllm_server"}
    assert main(["list", "--json"]) == 0
    engines = {p["name"]: p for p in json.loads(capsys.readouterr().out)["plugins"] if p["kind"] == "engine"}
    assert set(engines) >= {"loop", "hf", "specroll", "vllm"}
    assert {"num_heads", "reflex"} <= {f["name"] for f in engines["specroll"]["params"]}
    assert {"gpu_memory_utilization", "sync"} <= {f["name"] for f in engines["vllm"]["params"]}
    assert main(["list", "--kind", "engine"]) == 0
    plugins = capsys.readouterr().out.split("aggregation modes")[0]
    assert "specroll" in plugins and "num_heads=3" in plugins and "sync=auto" in plugins
    assert "ppo_clip" not in plugins  # only the engines


def test_engine_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown engine 'fast'; valid names: hf, loop, specroll, vllm, vllm_server"):
        tiny_config(str(tmp_path), ["rollout.engine=fast"])
    with pytest.raises(ConfigError, match=r"rollout.engine \(loop\): unknown parameter\(s\) \['num_heads'\]"):
        tiny_config(str(tmp_path), ["rollout.engine_params.num_heads=2"])
    with pytest.raises(ConfigError, match="repetition_penalty: engine 'specroll' does not support it"):
        tiny_config(str(tmp_path), ["rollout.engine=specroll", "rollout.engine_params.reflex=false",
                                    "rollout.repetition_penalty=1.2"])
    with pytest.raises(ConfigError, match="cannot import plug-in module 'no_such_pkg'"):
        tiny_config(str(tmp_path), ["rollout.engine=no_such_pkg:Engine"])
    with pytest.raises(ConfigError, match="unknown parameter"):
        tiny_config(str(tmp_path), [f"rollout.engine={__name__}:CountingEngine", "rollout.engine_params.greed=1"])


def test_keep_hidden_needs_an_engine_that_fills_it(small):
    model, tok = small
    with pytest.raises(ValueError, match="keep_hidden is not supported by the specroll engine"):
        generate(model, tok, ["1"], max_new_tokens=2, engine="specroll", engine_params={"reflex": False},
                 keep_hidden=True)


def test_user_engine_from_an_import_path_trains_two_steps(tmp_path):
    CountingEngine.calls = 0
    cfg = tiny_config(str(tmp_path), [f"rollout.engine={__name__}:CountingEngine", "run.steps=2",
                                      "rollout.engine_params.greedy=false"])
    trainer = Trainer(cfg)
    trainer.train()
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    assert CountingEngine.calls >= 2  # the trainer's rollouts went through the user engine
    assert [r["rollout/user_engine_calls"] for r in rows] == [1.0, 2.0]  # its stats reach metrics.jsonl
    assert all(math.isfinite(r["loss/policy"]) for r in rows)


# --- the rollout package has no import cycle ----------------------------------------------------------

def _rollout_import_graph() -> dict[str, set[str]]:
    """module → the rlvr.rollout modules it imports (anywhere in the file, lazy imports included)."""
    root = Path(rlvr.rollout.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                targets.add(base)
                targets.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import submodule`
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
        graph[name] = targets
    return {m: {t for t in ts if t in graph and t != m} for m, ts in graph.items()}


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state and (cycle := visit(t)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)):
            return cycle
    return None


def test_rollout_package_has_no_import_cycle():
    graph = _rollout_import_graph()
    assert {"rlvr.rollout.hf", "rlvr.rollout.engines.specroll", "rlvr.rollout.engines.base"} <= set(graph)
    assert _find_cycle(graph) is None, _find_cycle(graph)
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the checker finds one


def test_engine_modules_import_first_in_a_fresh_interpreter():
    code = ("import rlvr.rollout.engines.specroll, rlvr.rollout.hf, rlvr.rollout; from rlvr.registry import names; "
            "print(names('engine'))")  # an engine module before the package that uses it
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "'loop'" in out.stdout and "'specroll'" in out.stdout


def test_rollout_micro_batch_size_splits_the_engine_calls(tmp_path):
    CountingEngine.calls = 0
    cfg = tiny_config(str(tmp_path), [f"rollout.engine={__name__}:CountingEngine", "run.steps=1",
                                      "rollout.micro_batch_size=5"])
    Trainer(cfg).train()
    assert CountingEngine.calls == 4  # 4 prompts x 4 completions = 16 rows in chunks of 5, 5, 5, 1
