"""The chess pipeline (docs/methods.md §2.22): pretrain a tiny LM on game text → SFT on reasoning traces → RLVR.

``run_pipeline`` runs the three stages for one model size and pretraining budget and returns what
``rlvr.analysis.chess`` relates: pretraining loss and tokens, accuracy after SFT and after RL, the
RL reward curve, and each evaluation puzzle's correct-move probability before and after RL. Stages
1 and 2 are ``rlvr.envs.chess_pretrain``; stage 3 is the gradient ``Trainer`` on ``chess_puzzles``
with the run config (e.g. the chess_rl preset).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from rlvr.analysis.chess import correct_move_rate
from rlvr.envs.chess_games import game_corpus
from rlvr.envs.chess_pretrain import build_chess_model, chess_tokenizer, pretrain, sft
from rlvr.models import count_parameters
from rlvr.train.build import build_task
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer


def run_pipeline(cfg: Any, *, pretrain_steps: int, sft_steps: int, games: int = 200, sft_pool: int = 128,
                 eval_puzzles: int = 48, samples: int = 8, pretrain_batch: int = 16, window: int = 96) -> dict[str, Any]:
    """Pretrain (``pretrain_steps``) → SFT (``sft_steps``) → RL (``cfg.run.steps`` of the gradient
    trainer on ``cfg``'s task) for the model size of ``cfg.model``; everything seeded by ``cfg.run.seed``."""
    seed, start = cfg.run.seed, time.perf_counter()
    torch.manual_seed(seed)
    tokenizer = chess_tokenizer()
    model = build_chess_model(tokenizer, cfg.model.hidden, cfg.model.layers, cfg.model.heads, seed)
    out: dict[str, Any] = {"params": count_parameters(model), "hidden": cfg.model.hidden, "layers": cfg.model.layers}
    task = build_task(cfg)
    fmt = task.config.board_format  # games are written the way puzzles are asked
    corpus = game_corpus(games, seed, board_format=fmt)
    held = game_corpus(max(games // 10, 10), seed + 10**6, board_format=fmt)
    pre = pretrain(model, tokenizer, corpus, steps=pretrain_steps, batch_size=pretrain_batch, window=window,
                   seed=seed, eval_texts=held)
    out.update({"pretrain_steps": pretrain_steps, "pretrain_tokens": pre["tokens"], "pretrain_loss": pre["eval_loss"]})
    out["sft_loss"] = sft(model, tokenizer, task, task.problems(sft_pool, seed=seed + 1), steps=sft_steps,
                          seed=seed)["loss"]
    puzzles = task.problems(eval_puzzles, seed=seed, split="test")
    out["ratings"] = [p.meta["rating"] for p in puzzles]
    out["p_sft"] = correct_move_rate(model, tokenizer, task, puzzles, samples=samples, seed=seed,
                                     max_new_tokens=cfg.rollout.max_new_tokens)
    trainer = Trainer(cfg, model=model, tokenizer=tokenizer)
    trainer.train()
    out["rl_rewards"] = [row.get("reward/mean", 0.0) for row in read_metrics(cfg.run.out_dir)]
    out["p_rl"] = correct_move_rate(trainer.policy, tokenizer, task, puzzles, samples=samples, seed=seed,
                                    max_new_tokens=cfg.rollout.max_new_tokens)
    out["accuracy_sft"] = sum(out["p_sft"]) / len(puzzles)
    out["accuracy_rl"] = sum(out["p_rl"]) / len(puzzles)
    out["seconds"] = time.perf_counter() - start
    return out
