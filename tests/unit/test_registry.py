"""Registry, plug-in conventions and `rlvr list`."""

import dataclasses
import importlib.util
import json

import pytest

import rlvr
from rlvr import registry
from rlvr.cli import main
from rlvr.registry import RegistryError, build, get, make_config, register

CORE = {
    "advantage": {"grpo", "dr_grpo", "rloo", "reinforce_pp", "gae", "gdpo"},
    "loss": {"ppo_clip", "gspo", "dppo_tv", "dppo_kl", "cispo"},
    "filter": {"zero_std"},
}


def test_core_plugins_registered():
    for kind, expected in CORE.items():
        assert expected <= set(rlvr.names(kind)), (kind, rlvr.names(kind))


def test_unknown_name_lists_valid_names():
    with pytest.raises(RegistryError, match=r"unknown advantage 'grpoo'; valid names: .*grpo"):
        build("advantage", "grpoo")


def test_unknown_kind():
    with pytest.raises(RegistryError, match="unknown plug-in kind 'advantages'"):
        build("advantages", "grpo")


def test_unknown_parameter_names_it_and_valid_ones():
    with pytest.raises(RegistryError, match=r"unknown parameter\(s\) \['epsilon'\]; valid: \['scale'"):
        build("advantage", "grpo", epsilon=1e-4)


def test_a_boolean_parameter_takes_only_true_or_false():
    with pytest.raises(RegistryError, match=r"\(loop\): parameter 'lean' is true or false, got 'no'"):
        make_config(get("engine", "loop").Config, {"lean": "no"}, where="rollout.engine (loop)")
    assert make_config(get("engine", "loop").Config, {"lean": False}, where="x").lean is False


def test_build_passes_params():
    est = build("advantage", "grpo", eps=1e-4, scale="batch")
    assert est.config.eps == 1e-4 and est.config.scale == "batch"


def test_duplicate_registration_raises():
    with pytest.raises(RegistryError, match="already registered"):
        @register("advantage", "grpo")
        class Again:  # noqa: D401 — a throwaway plug-in
            Config = registry.Entry  # any dataclass


def test_user_plugin_by_import_path():
    est = build("advantage", "rlvr.advantages.grpo:GRPO", scale="none")
    assert type(est).__name__ == "GRPO" and est.config.scale == "none"
    with pytest.raises(RegistryError, match="cannot import plug-in module 'no_such_pkg.mod'"):
        build("advantage", "no_such_pkg.mod:Thing")
    with pytest.raises(RegistryError, match="has no attribute 'Nope'"):
        build("advantage", "rlvr.advantages.grpo:Nope")


def test_every_plugin_follows_the_conventions():
    builtin = [e for e in registry.entries() if e.cls.__module__.startswith("rlvr.")]  # not test fixtures
    assert len(builtin) >= 15
    for entry in builtin:
        cfg = entry.cls.Config
        assert dataclasses.is_dataclass(cfg), entry.name
        assert cfg.__dataclass_params__.frozen, f"{entry.kind} {entry.name}: Config must be frozen"
        for f in dataclasses.fields(cfg):
            assert f.metadata.get("help"), f"{entry.kind} {entry.name}: field '{f.name}' has no help line"
        doc = entry.cls.__doc__ or ""
        assert entry.summary, f"{entry.kind} {entry.name}: no docstring"
        if entry.kind in ("advantage", "loss", "filter"):
            assert "Differs from" in doc and "Shapes" in doc, f"{entry.kind} {entry.name}: docstring sections"
            assert "arXiv" in entry.paper, f"{entry.kind} {entry.name}: paper citation missing"


def test_list_json_names_every_plugin(capsys):
    assert main(["list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    listed = {(p["kind"], p["name"]) for p in data["plugins"]}
    for kind, expected in CORE.items():
        assert {(kind, n) for n in expected} <= listed
    assert set(data["aggregation_modes"]) == set(rlvr.AGGREGATION_MODES)
    grpo = next(p for p in data["plugins"] if p["name"] == "grpo")
    assert "arXiv:2402.03300" in grpo["paper"] and any(f["name"] == "ddof" for f in grpo["params"])


def test_list_text(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "advantage" in out and "grpo" in out and "ppo_clip" in out


def test_teachers_and_environments_are_registry_kinds(capsys):
    from rlvr.envs import Environment, build_env
    from rlvr.rewards.teacher import OracleTeacher, build_teacher
    from rlvr.tasks import Arithmetic
    assert registry.names("teacher") == ["llm", "oracle"]
    envs = {"auto_bidding", "lure_arithmetic", "python_tool", "refine_arithmetic"}
    assert envs <= set(registry.names("environment"))
    with pytest.raises(RegistryError, match=r"unknown environment 'refine'; valid names: auto_bidding, .*refine_arith"):
        build_env("refine")
    # a dotted path works for both, as for every kind; a class of another protocol is refused by name
    assert isinstance(build_env("rlvr.envs.refine:RefineArithmetic"), Environment)
    assert isinstance(build_teacher("rlvr.rewards.teacher:OracleTeacher", task=Arithmetic()), OracleTeacher)
    with pytest.raises(RegistryError, match="is not an Environment subclass"):
        build_env("rlvr.rewards.teacher:OracleTeacher")
    with pytest.raises(RegistryError, match="is not a Teacher"):
        build_teacher("rlvr.envs.refine:RefineArithmetic")
    for kind, shown, absent in (("teacher", "oracle", "refine_arithmetic"), ("environment", "auto_bidding", "oracle")):
        assert main(["list", "--kind", kind]) == 0
        out = capsys.readouterr().out.split("\naggregation modes")[0]  # the plug-ins, before the shared tail
        assert f"\n{kind}\n" in out and f"  {shown} " in out and absent not in out and "grpo" not in out


def _identifier(node):
    """The last name of ``x.y.name`` / ``name`` (None for anything else)."""
    import ast
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None


def _literals(node) -> set:
    import ast
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {s for e in node.elts for s in _literals(e)}
    return set()


def _names_a_plugin(identifier) -> bool:
    """``name``, ``*_name``, a kind (``verifier``) or a kind's last word (``strategy`` of ``eval_strategy``)."""
    return bool(identifier) and (identifier == "name" or identifier.endswith("_name") or any(
        k == identifier or k.endswith("_" + identifier) for k in registry.KINDS))


def switches_on_plugin_names(src) -> list[str]:
    """``file:line`` of every comparison of a plug-in name (an expression called ``name``, ``*_name`` or
    after a kind) with a literal naming a built-in plug-in of any kind: ``loss.name == "ppo_clip_is"``,
    ``sampler.name != "plain"``, ``engine.name in ("loop", "hf")``, ``cfg.verifier == "code"``."""
    import ast
    from pathlib import Path
    plugins = {e.name for e in registry.entries() if e.cls.__module__.startswith("rlvr.")}
    hits = []
    for path in sorted(Path(src).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if any(_names_a_plugin(_identifier(s)) for s in sides) and set().union(*map(_literals, sides)) & plugins:
                hits.append(f"{path.relative_to(src)}:{node.lineno}")
    return hits


def test_no_source_file_switches_on_a_plugin_name():
    # One dispatch path: code asks a plug-in's class traits through the registry (optim.plugin_class(),
    # PluginSpec.plugin_class(kind)), never compares a configured name with a built-in plug-in's name.
    from pathlib import Path
    src = Path(__file__).resolve().parents[2] / "src" / "rlvr"
    hits = switches_on_plugin_names(src)
    assert not hits, f"string switches on plug-in names (ask a class trait instead): {hits}"


def test_trackers_are_a_registry_kind():
    from rlvr.train.trackers import TensorBoardTracker, check_report_to
    assert registry.names("tracker") == ["mlflow", "tensorboard", "trackio", "wandb"]
    assert get("tracker", "tensorboard") is TensorBoardTracker and TensorBoardTracker.package == "tensorboard"
    assert check_report_to(["none"]) == ()  # none: metrics.jsonl only
    path = "rlvr.train.trackers:TensorBoardTracker"  # a tracker of one's own by its import path
    if importlib.util.find_spec("tensorboard") is not None:
        assert check_report_to([path, path]) == (path,)
    with pytest.raises(ValueError, match=r"unknown tracker\(s\) \['tensorbord'\]; valid: \['none', 'mlflow'"):
        check_report_to(["tensorbord"])
