"""Tiny-model runs of the chess testbed: the chess_rl preset and pretrain → SFT → RL → report."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer

from tests.helpers.tiny import tiny_config

pytest.importorskip("chess")

PRESET = str(Path(__file__).resolve().parents[2] / "configs" / "methods" / "chess_rl.yaml")


def test_chess_rl_preset_trains(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, ["run.steps=2"], path=PRESET))
    assert trainer.parts.task.name == "chess_puzzles"
    trainer.train()
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    assert "reward/legal" in rows[-1] and 0.0 <= rows[-1]["reward/legal"] <= 1.0
    assert all(math.isfinite(r["loss/total"]) for r in rows)


def test_pretraining_lowers_held_out_loss():
    import torch
    from rlvr.envs.chess_games import game_corpus
    from rlvr.envs.chess_pretrain import build_chess_model, chess_tokenizer, lm_eval_loss, pretrain
    torch.manual_seed(0)
    tok = chess_tokenizer()
    model = build_chess_model(tok, hidden=32, layers=1, heads=2)
    corpus, held = game_corpus(20, seed=0), game_corpus(5, seed=1)
    before = lm_eval_loss(model, tok, held, window=48)
    out = pretrain(model, tok, corpus, steps=30, batch_size=8, window=48, lr=1e-2, eval_texts=held)
    assert out["tokens"] == 30 * 8 * 48 and out["eval_loss"] < before - 0.5


def test_pipeline_and_report_over_two_budgets(tmp_path):
    from rlvr.analysis.chess import pretraining_report
    from rlvr.train.chess_pipeline import run_pipeline
    runs = []
    for budget in (0, 10):
        cfg = tiny_config(tmp_path / str(budget), ["run.steps=2", "rollout.max_new_tokens=24"], path=PRESET)
        runs.append(run_pipeline(cfg, pretrain_steps=budget, sft_steps=3, games=12, sft_pool=8, eval_puzzles=4,
                                 samples=2, pretrain_batch=4, window=48))
    for run in runs:
        assert len(run["rl_rewards"]) == 2 and len(run["p_sft"]) == len(run["p_rl"]) == len(run["ratings"]) == 4
        assert 0.0 <= run["accuracy_rl"] <= 1.0 and math.isfinite(run["pretrain_loss"])
    assert runs[0]["pretrain_tokens"] == 0 and runs[1]["pretrain_tokens"] == 10 * 4 * 48
    assert runs[1]["pretrain_loss"] < runs[0]["pretrain_loss"]  # pretraining helped on held-out games
    report = pretraining_report(runs, slope_window=2)
    assert len(report["runs"]) == 2 and "accuracy_rl_vs_pretrain_loss" in report
    assert set(report["runs"][0]["amplify_vs_surface"]) == {"easy", "hard"}
