"""`rlvr findings` on the repository, the claim / role schema of comparison files, and the RL seed.

The repository check is pure Python over the committed JSON: docs/findings.md must be exactly what
the committed results give (regenerate with `rlvr findings`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.compare.claims import check_roles, parse_claim
from rlvr.compare.config import CompareConfig, Method, load_compare
from rlvr.compare.findings import run_findings
from rlvr.compare.runner import _record, config_changes
from rlvr.train.config import ConfigError, RunConfig

ROOT = Path(__file__).resolve().parents[3]
GOOD = {"section": "§2.3", "title": "Cliff", "paper": "learns more per failure", "metric": "accuracy_after"}


def test_committed_findings_are_what_the_committed_results_give(capsys):
    assert run_findings(ROOT, check=True) == 0, capsys.readouterr().out


def test_check_fails_when_the_findings_differ(tmp_path):
    for sub in ("configs", "docs/results"):
        (tmp_path / sub).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / sub).symlink_to(ROOT / sub)
    (tmp_path / "docs" / "findings.md").write_text((ROOT / "docs" / "findings.md").read_text() + "edited\n")
    assert run_findings(tmp_path, check=True) == 1


@pytest.mark.parametrize("change, message", [
    ({"direction": "sideways"}, "direction must be one of"),
    ({"margin": 0.05}, "a margin applies to not_worse / matches"),
    ({"metric": ""}, "'metric' must be a non-empty string"),
    ({"colour": "red"}, "unknown key(s) ['colour']"),
    ({"versus": "nobody"}, "versus must be one of"),
    ({"mechanism": {"metric": "steps"}}, "exactly one of above / below / vs_baseline"),
    ({"mechanism": {"metric": "steps", "vs_baseline": "sideways"}}, "vs_baseline must be 'lower' or 'higher'"),
    ({"paper_effect": -0.02}, "paper_effect must be a positive number"),
    ({"min_updates": 2.5}, "min_updates must be a positive integer"),
    ({"paper_baseline": 3}, "'paper_baseline' must be a string or null"),
])
def test_bad_claims_name_the_method_and_what_is_wrong(change, message):
    with pytest.raises(ConfigError, match=r"f\.yaml: method 'cliff': claim") as err:
        parse_claim("cliff", {**GOOD, **change}, "f.yaml")
    assert message in str(err.value)


def test_roles_are_checked():
    claim = parse_claim("cliff", GOOD, "f.yaml")
    with pytest.raises(ConfigError, match="is a positive_control: it carries no claim"):
        check_roles([("grpo", "method", None), ("cliff", "positive_control", claim)], "grpo", "f.yaml")
    with pytest.raises(ConfigError, match="can only claim its own gain"):
        check_roles([("cliff", "method", claim)], "cliff", "f.yaml")


def test_comparison_file_with_a_bad_role_fails_with_the_method_named(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("methods:\n  grpo: {preset: grpo}\n  again: {preset: grpo, role: control}\n"
                    "budget: {rollouts: 64}\n")
    with pytest.raises(ConfigError, match="method 'again': role must be one of"):
        load_compare(path, build=False)


def test_rl_seed_offset_changes_only_the_rl_seed_and_is_recorded(tmp_path):
    plain, control = Method("grpo", "grpo"), Method("grpo_rl", "grpo", role="negative_control", rl_seed_offset=1000)
    cfg = CompareConfig(out_dir=tmp_path, base={}, methods=(plain, control), seeds=(3,), budget={"rollouts": 64},
                        baseline="grpo")
    assert "rl_seed" not in cfg.run_tree(plain, 3)["run"]  # unchanged: one seed for everything, as before
    run = cfg.run_tree(control, 3)["run"]
    assert run["seed"] == 3 and run["rl_seed"] == 1003
    assert RunConfig(seed=3).training_seed == 3 and RunConfig(seed=3, rl_seed=1003).training_seed == 1003
    records = [_record(cfg, m, 3) for m in (plain, control)]
    assert [(r["seed"], r["rl_seed"], r["role"]) for r in records] == [(3, 3, "baseline"),
                                                                        (3, 1003, "negative_control")]


def test_an_unset_rl_seed_does_not_change_a_saved_run(tmp_path):
    from rlvr.train.config import load_config, to_dict
    cfg = CompareConfig(out_dir=tmp_path, base={}, methods=(Method("grpo"),), seeds=(0,), budget={"rollouts": 64})
    tree = to_dict(load_config(None, [f"run.out_dir={tmp_path}", "run.seed=0", "run.steps=5"]))
    assert tree["run"]["rl_seed"] is None
    saved = {**tree, "run": {k: v for k, v in tree["run"].items() if k != "rl_seed"}}  # written before rl_seed
    assert config_changes(saved, tree, cfg, 0) == []
    seeded = {**tree, "run": {**tree["run"], "rl_seed": 7}}
    assert config_changes(saved, seeded, cfg, 0) == ["run.rl_seed"]


def test_findings_pair_problems_where_both_runs_saved_outcomes():
    from rlvr.compare.claims import Claim
    from rlvr.compare.findings import _problem_section
    from rlvr.compare.verdicts import Family, judge
    bits = {("base", 0): "0100", ("new", 0): "1100", ("base", 1): "0011", ("new", 1): "1111"}
    records = [{"method": m, "seed": s, "status": "done", "accuracy_before": 0.1, "accuracy_after": b.count("1") / 4,
                "outcomes": {"n": 4, "ids": f"seed{s}", "k": 0, "greedy": b, "maj": None, "correct": None}}
               for (m, s), b in bits.items()]
    claim = Claim(method="new", section="§9.9", title="New", paper="synthetic", metric="accuracy_after")
    family = Family(name="fam", baseline="base", claims=(claim,), roles={"base": "baseline", "new": "method"},
                    records=records, seeds=(0, 1))
    text = "\n".join(_problem_section(judge([family])))
    assert "| §9.9 New | fam · accuracy_after | 3 / 0 | 0.25 | +0.375 ± 0.191 |" in text
    bare = Family(name="fam", baseline="base", claims=(claim,), roles=family.roles,
                  records=[{k: v for k, v in r.items() if k != "outcomes"} for r in records], seeds=(0, 1))
    assert "No committed results.json records per-problem outcomes yet" in "\n".join(_problem_section(judge([bare])))


def test_the_readme_quotes_the_findings_summary_word_for_word():
    """The README's findings paragraph carries the verdict counts and the decided methods as docs/findings.md
    computes them (regenerate, then paste the 'All claims' sentence into README.md)."""
    from rlvr.compare.findings import SUMMARY_START

    summary = [line for line in (ROOT / "docs" / "findings.md").read_text().splitlines()
               if line.startswith(SUMMARY_START)]
    assert len(summary) == 1, f"docs/findings.md has {len(summary)} '{SUMMARY_START}' lines"
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert " ".join(summary[0].split()) in readme, f"README.md does not quote docs/findings.md's: {summary[0]}"
    assert readme.count(f"{SUMMARY_START} (") == 1, "README.md states the verdict counts more than once"
