"""The chess pipeline (docs/methods.md §2.22): pretrain a tiny LM on game text → SFT on reasoning traces → RLVR.

``run_pipeline`` runs the three stages for one model size and pretraining budget and returns what
``rlvr.analysis.chess`` relates: pretraining loss and tokens, accuracy after SFT and after RL, the
RL reward curve, and each evaluation puzzle's correct-move probability before and after RL.

Stages:
  1. pretraining: next-character cross-entropy on random windows of the game-text stream
     (``rlvr.envs.chess_games.game_corpus``); budget = optimizer steps × batch × window tokens;
  2. SFT: ``rlvr.sft`` demonstration batches (``prompt → trace>move``) from a fixed puzzle pool;
  3. RL: the gradient ``Trainer`` on ``chess_puzzles`` with the run config (e.g. the chess_rl preset).
"""

from __future__ import annotations

import random
import time
from typing import Any

import torch
import torch.nn.functional as F

from rlvr.models import build_char_tokenizer, build_tiny_model, count_parameters

# FEN pieces and placement, files/ranks, side to move, SAN symbols, the trace words and separators.
CHESS_CHARSET = "pnbrqkPNBRQKO12345678/abcdefghtx w:>,;+#=-\n"


def chess_tokenizer() -> Any:
    """A character tokenizer over the chess notation (FEN, UCI, SAN, traces)."""
    return build_char_tokenizer(CHESS_CHARSET)


def build_chess_model(tokenizer: Any, hidden: int, layers: int, heads: int, seed: int = 0) -> torch.nn.Module:
    return build_tiny_model(tokenizer, hidden=hidden, layers=layers, heads=heads, max_positions=256, seed=seed)


def pretrain(model: torch.nn.Module, tokenizer: Any, texts: list[str], *, steps: int, batch_size: int = 16,
             window: int = 96, lr: float = 3e-3, seed: int = 0, eval_texts: list[str] | None = None) -> dict[str, float]:
    """Language-model ``model`` on random windows of the concatenated ``texts``; returns ``loss`` (mean
    of the last 10 steps; NaN when ``steps == 0``), ``eval_loss`` (held-out windows) and ``tokens``."""
    stream = _ids(tokenizer, texts)  # (L,)
    if stream.numel() <= window + 1:
        raise ValueError(f"pretrain: the corpus has {stream.numel()} tokens, fewer than a window of {window + 1}")
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses: list[float] = []
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, stream.numel() - window - 1, (batch_size,), generator=gen)  # (B,)
        x = stream[starts[:, None] + torch.arange(window + 1)]  # (B, W+1)
        loss = _lm_loss(model, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    tail = losses[-10:]
    out = {"loss": sum(tail) / len(tail) if tail else float("nan"), "tokens": float(steps * batch_size * window),
           "steps": float(steps)}
    if eval_texts:
        out["eval_loss"] = lm_eval_loss(model, tokenizer, eval_texts, window)
    return out


@torch.no_grad()
def lm_eval_loss(model: torch.nn.Module, tokenizer: Any, texts: list[str], window: int = 96) -> float:
    """Mean next-character cross-entropy over consecutive windows of the held-out ``texts``."""
    stream = _ids(tokenizer, texts)
    n = (stream.numel() - 1) // window
    if n < 1:
        raise ValueError("lm_eval_loss: the held-out corpus is shorter than one window")
    x = torch.stack([stream[i * window:i * window + window + 1] for i in range(n)])  # (n, W+1)
    model.eval()
    return float(_lm_loss(model, x))


def sft(model: torch.nn.Module, tokenizer: Any, task: Any, pool: list, *, steps: int, batch_size: int = 16,
        lr: float = 3e-3, seed: int = 0) -> dict[str, float]:
    """Supervised fine-tuning on the pool's reasoning traces (``task.demonstration``), batches drawn
    with replacement; returns ``loss`` (mean of the last 10 steps, NaN when ``steps == 0``)."""
    from rlvr.sft import completion_loss, demonstration_batch
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses: list[float] = []
    model.train()
    for _ in range(steps):
        batch = demonstration_batch(tokenizer, task, rng.choices(pool, k=batch_size))
        loss = completion_loss(model, **batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    tail = losses[-10:]
    return {"loss": sum(tail) / len(tail) if tail else float("nan")}


def run_pipeline(cfg: Any, *, pretrain_steps: int, sft_steps: int, games: int = 200, sft_pool: int = 128,
                 eval_puzzles: int = 48, samples: int = 8, pretrain_batch: int = 16, window: int = 96) -> dict[str, Any]:
    """Pretrain (``pretrain_steps``) → SFT (``sft_steps``) → RL (``cfg.run.steps`` of the gradient
    trainer on ``cfg``'s task) for the model size of ``cfg.model``; everything seeded by ``cfg.run.seed``."""
    from rlvr.analysis.chess import correct_move_rate
    from rlvr.train.build import build_task
    from rlvr.train.logging import read_metrics
    from rlvr.train.trainer import Trainer
    from rlvr.envs.chess_games import game_corpus
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


def _ids(tokenizer: Any, texts: list[str]) -> torch.Tensor:
    return torch.tensor(tokenizer("".join(texts), add_special_tokens=False)["input_ids"], dtype=torch.long)


def _lm_loss(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    device = next(model.parameters()).device
    x = x.to(device)
    logits = model(input_ids=x[:, :-1]).logits  # (B, W, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten())
