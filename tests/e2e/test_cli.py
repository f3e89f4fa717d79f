"""The command line on tiny runs: train, resume, eval, sft, and clear errors."""

from __future__ import annotations

import json

import yaml

from rlvr.cli import main
from tests.helpers.tiny import TINY


def _tiny_yaml(tmp_path, **run):
    cfg = {**TINY, "run": {**TINY["run"], **run}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_train_then_resume_then_eval(tmp_path, capsys):
    out = tmp_path / "run"
    config = _tiny_yaml(tmp_path, out_dir=str(out), steps=2)
    assert main(["train", config]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and 0.0 <= summary["accuracy_after"] <= 1.0
    assert "accuracy_before" in summary and "pass@2" in summary["eval_after"]
    assert main(["train", "--resume", str(out), "run.steps=3"]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 3
    capsys.readouterr()
    assert main(["eval", str(out), "--task", "toy_digit_test", "--problems", "4", "--k", "2",
                 "--max-new-tokens", "8"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["num_problems"] == 4 and "maj@2" in result
    assert main(["plot", str(out), "--out", str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_sft_saves_a_loadable_model(tmp_path):
    config = _tiny_yaml(tmp_path)
    out = tmp_path / "warm"
    assert main(["sft", config, "warm_start.steps=3", "warm_start.batch_size=4", "--out", str(out)]) == 0
    from rlvr.models import load_model, load_tokenizer
    model, tok = load_model(out), load_tokenizer(out)
    assert model.config.vocab_size == len(tok)


def test_errors_are_one_clear_line(tmp_path, capsys):
    assert main(["train", "no_such_preset"]) == 2
    err = capsys.readouterr().err
    assert "'no_such_preset' is neither a file nor a preset; presets: " in err and "dr_grpo, " in err
    assert main(["train", _tiny_yaml(tmp_path), "optim.learning_rate=1"]) == 2
    assert "unknown key(s) ['optim.learning_rate']" in capsys.readouterr().err
