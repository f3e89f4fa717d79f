"""Validation up front (issue 22, case 7): numeric ranges, YAML errors and include loops as one line
naming the file and line, plug-in parameters and the run folder checked before the warm start."""

from __future__ import annotations

import pytest
import yaml

from rlvr.cli import main
from rlvr.train.config import ConfigError, load_config
from tests.helpers.tiny import TINY

BAD = {
    "run.steps=0": "run.steps must be >= 1, got 0",
    "rollout.max_new_tokens=0": "rollout.max_new_tokens must be >= 1, got 0",
    "warm_start.steps=-5": "warm_start.steps must be >= 0, got -5",
    "run.save_every=-1": "run.save_every must be >= 0, got -1",
    "optim.lr=.inf": "optim.lr must be a finite number, got inf",
    "optim.lr=inf": "optim.lr must be a finite number, got inf",
    "optim.lr=-1": "optim.lr must be >= 0, got -1.0",
    "rollout.top_p=0": "rollout.top_p must be in (0, 1], got 0.0",
    "rollout.top_p=1.5": "rollout.top_p must be in (0, 1], got 1.5",
    "rollout.temperature=-1": "rollout.temperature must be > 0, got -1.0",
    "algorithm.kl_coef=.nan": "algorithm.kl_coef must be a finite number, got nan",
    "warm_start.target_accuracy=2": "warm_start.target_accuracy must be in [0, 1], got 2.0",
}


@pytest.mark.parametrize("override", sorted(BAD))
def test_out_of_range_values_are_one_line_errors(override):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert BAD[override] in str(err.value) and "\n" not in str(err.value)


def test_defaults_and_boundaries_are_accepted():
    cfg = load_config(None, ["rollout.top_p=1", "run.save_every=0", "warm_start.steps=0", "optim.lr=1e-9"])
    assert cfg.rollout.top_p == 1.0 and cfg.run.save_every == 0


def test_yaml_errors_name_the_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run:\n  steps: 3\n  out_dir: 'unterminated\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml, line \d+: invalid YAML"):
        load_config(bad)
    tagged = tmp_path / "tagged.yaml"
    tagged.write_text("run:\n  steps: !!python/object:os.system ls\n")
    assert main(["train", str(tagged)]) == 2
    err = capsys.readouterr().err
    assert "tagged.yaml, line 2: invalid YAML" in err and len(err.splitlines()) == 1
    with pytest.raises(ConfigError, match=r"override 'run\.steps=\[1': invalid YAML"):
        load_config(None, ["run.steps=[1"])


def test_an_include_loop_names_the_file_and_line(tmp_path):
    (tmp_path / "a.yaml").write_text("run:\n  steps: 2\ninclude: b.yaml\n")
    (tmp_path / "b.yaml").write_text("include: a.yaml\n")
    with pytest.raises(ConfigError, match=r"b\.yaml, line 1: include loop \(.*a\.yaml -> .*b\.yaml -> .*a\.yaml\)"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "self.yaml").write_text("# comment\ninclude: self.yaml\n")
    with pytest.raises(ConfigError, match=r"self\.yaml, line 2: include loop"):
        load_config(tmp_path / "self.yaml")


def _no_warm_start(monkeypatch):
    import rlvr.train.run as run

    def fail(cfg):
        raise AssertionError("the warm start ran before validation")
    monkeypatch.setattr(run, "warm_start_model", fail)


def test_bad_plugin_parameters_and_unwritable_out_dir_fail_before_the_warm_start(tmp_path, monkeypatch, capsys):
    _no_warm_start(monkeypatch)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({**TINY, "warm_start": {"steps": 400}}))
    assert main(["train", str(config), f"run.out_dir={tmp_path / 'r'}", "algorithm.loss.bogus=1"]) == 2
    assert "loss 'ppo_clip'" in capsys.readouterr().err
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["train", str(config), f"run.out_dir={blocker / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert f"run.out_dir {blocker / 'run'} is not writable: Not a directory" in err and len(err.splitlines()) == 1


def test_os_errors_are_one_line(tmp_path, capsys):
    assert main(["train", str(tmp_path)]) == 2  # a folder where a YAML file was expected
    err = capsys.readouterr().err
    assert err.startswith("rlvr train: error: ") and str(tmp_path) in err and len(err.splitlines()) == 1
