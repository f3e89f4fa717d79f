"""Tiny end-to-end runs of the Hyper-ES and Progressive RLVR presets, and `rlvr bound` on the adapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlvr.cli import main
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.logging import read_metrics
from rlvr.train.run import make_trainer, train_run
from tests.helpers.tiny import tiny_config

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "methods"


def test_hyper_es_preset_searches_merge_coefficients(tmp_path):
    pytest.importorskip("cma")
    pytest.importorskip("peft")
    # toy_mixed_test (rewards 1, 0, 1, 0 in every group): each direction run's gradient steps have a signal
    # by construction, so its LoRA direction is non-zero on any machine ("contains 7": ~1 step in 3 had none).
    overrides = ["task.name=toy_mixed_test", "run.steps=2", "optim.params.direction_steps=2",
                 "optim.params.cma_popsize=3",
                 "optim.params.dare_drop_p=0.5", "optim.params.ties_keep_rho=0.5"]
    cfg = tiny_config(tmp_path, overrides, path=str(PRESETS / "hyper_es.yaml"))
    assert cfg.optim.name == "hyper_es"
    summary = train_run(cfg)
    assert summary["steps"] == 2 and summary["stopped_by"] == "steps"
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("reward/mean", "reward/best", "es/sigma", "es/coef_mean", "directions/norm_0", "directions/norm_1"):
        assert key in rows[0], key
    assert rows[0]["directions/norm_0"] > 0 and rows[0]["es/popsize"] == 3
    # tiny model: 1 layer, K = 2 directions → 2 coefficients (layer × direction)
    assert rows[0]["es/num_coefficients"] == 2 and len(summary["coefficients"]) == 2
    assert 0.0 <= summary["accuracy_after"] <= 1.0
    # rollouts: 2 direction runs × 2 steps × 16 rows + 2 generations × 3 candidates × 16 rows
    assert summary["rollouts"] == 2 * 2 * 16 + 2 * 3 * 16
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and json.loads((ckpt / "state.json").read_text())["coefficients"] == summary["coefficients"]


def test_hyper_es_stops_before_a_generation_past_the_rollout_cap(tmp_path):
    pytest.importorskip("cma")
    pytest.importorskip("peft")
    # directions 2 x 2 x 16 = 64, then generations of 3 candidates x 16 = 48: a cap of 159 allows one
    # generation (112; a second would make 160); a cap of 100 none (the first is known before it runs).
    overrides = ["task.name=toy_mixed_test", "run.steps=10", "optim.params.direction_steps=2",
                 "optim.params.cma_popsize=3", "optim.params.dare_drop_p=0.5", "optim.params.ties_keep_rho=0.5"]
    for cap, steps, spent in ((159, 1, 112), (100, 0, 64)):
        cfg = tiny_config(tmp_path / str(cap), [*overrides, f"run.max_rollouts={cap}"],
                          path=str(PRESETS / "hyper_es.yaml"))
        summary = make_trainer(cfg).train()
        assert (summary["steps"], summary["rollouts"], summary["stopped_by"]) == (steps, spent, "rollouts"), cap


def test_progressive_preset_distils_quantises_and_bounds(tmp_path, capsys):
    overrides = ["run.steps=2", "optim.params.rl_steps=2", "run.eval_problems=4"]
    cfg = tiny_config(tmp_path, overrides, path=str(PRESETS / "progressive_rlvr.yaml"))
    summary = train_run(cfg)
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("loss/total", "distill/reverse_kl", "reward/mean", "teacher/reward_mean", "adapter/abs_mean"):
        assert key in rows[0], key
    assert all(torch.isfinite(torch.tensor(r["loss/total"])) for r in rows)
    info = summary["adapter"]
    # tie 'layers', u = 1: one number per module type (7 Llama linears)
    assert info["num_values"] == 7 and info["bits"] == 4
    assert info["code_bits"] == 5 + 5 + 64 + 7 * 4  # Elias-gamma(7) + Elias-gamma(4) + two floats + codes
    assert latest_checkpoint(tmp_path) is not None
    from transformers import AutoModelForCausalLM  # RUN/final: TinyLoRA folded, the base's own layout
    _, loading = AutoModelForCausalLM.from_pretrained(str(tmp_path / "final"), output_loading_info=True)
    assert not any(loading.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    capsys.readouterr()
    assert main(["bound", str(tmp_path), "--problems", "8", "--max-new-tokens", "6"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bits"] == info["code_bits"] and report["problems"] == 8
    assert 0.0 <= report["risk_bound"] <= 1.0 and report["risk_bound"] >= 1 - report["empirical_accuracy"]
    assert report["accuracy_lower_bound"] == 1 - report["risk_bound"]
    # the bound tightens with more held-out samples when the empirical error rate stays the same
    from rlvr.analysis.bounds import occam_bound
    errors = report["errors"]
    assert occam_bound(4 * errors, 32, report["bits"]) < occam_bound(errors, 8, report["bits"]) or errors == 8
    # Gumbel decoding is a function of weights and noise: the same command gives the same report
    assert main(["bound", str(tmp_path / "adapter"), "--problems", "8", "--max-new-tokens", "6"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["errors"] == report["errors"] and again["risk_bound"] == report["risk_bound"]


def test_progressive_full_kl_estimator_and_single_tied_number(tmp_path):
    overrides = ["run.steps=1", "optim.params.rl_steps=1", "optim.params.kl_estimator=full",
                 "optim.params.tie=all", "optim.params.bits=2", "run.eval_problems=4"]
    summary = train_run(tiny_config(tmp_path, overrides, path=str(PRESETS / "progressive_rlvr.yaml")))
    rows = read_metrics(tmp_path)
    assert len(rows) == 1 and torch.isfinite(torch.tensor(rows[0]["loss/total"]))
    assert rows[0]["loss/total"] >= 0  # the exact reverse KL is never negative
    info = summary["adapter"]
    assert info["num_values"] == 1 and info["quant_max_abs_error"] == 0.0  # one number sits on its own grid
