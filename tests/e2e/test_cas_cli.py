"""``rlvr eval --strategy cas`` on a tiny saved model: CAS against majority voting at the same budget."""

from __future__ import annotations

import json

import pytest
import torch

from rlvr.cli import main
from rlvr.models import build_char_tokenizer, build_tiny_model
from tests.helpers import tiny  # noqa: F401  (registers the toy_digit_test task)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, hidden=32, layers=1, heads=2)
    out = tmp_path_factory.mktemp("tiny_model")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


ARGS = ["--task", "toy_digit_test", "--problems", "4", "--k", "3", "--max-new-tokens", "8", "--strategy", "cas"]


@pytest.mark.parametrize("confidence", ["stated", "sequence"])
def test_eval_strategy_cas(saved_model, capsys, confidence):
    assert main(["eval", saved_model, *ARGS, "--tau-stop", "0.9", "--tau-vote", "0.6", "--confidence", confidence]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["strategy"] == "cas" and result["num_problems"] == 4 and result["cas/max_samples"] == 3
    total = result["budget/total_samples"]
    assert 4 <= total <= 12 and result["cas/mean_samples"] == pytest.approx(total / 4)
    assert result["majority/mean_samples"] == result["cas/mean_samples"]  # equal budget
    for key in ("cas/accuracy", "majority/accuracy"):
        assert 0.0 <= result[key] <= 1.0
    stops = [result[f"cas/stop_{s}"] for s in ("confident", "vote", "budget")]
    assert sum(stops) == pytest.approx(1.0)
    if confidence == "stated":  # an untrained model states no confidence: weight 0, never stops early
        assert result["cas/stop_confident"] == 0.0 and total == 12


def test_tau_stop_zero_uses_one_sample_each(saved_model, capsys):
    assert main(["eval", saved_model, *ARGS, "--tau-stop", "0", "--tau-vote", "0.6"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["budget/total_samples"] == 4 and result["cas/stop_confident"] == 1.0


def test_cas_needs_its_thresholds(saved_model, capsys):
    assert main(["eval", saved_model, *ARGS]) == 2
    assert "required" in capsys.readouterr().err
