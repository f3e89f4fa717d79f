"""The chess pipeline's first two stages (docs/methods.md §2.22): pretrain a tiny LM on game text, then SFT on
reasoning traces. ``rlvr.train.chess_pipeline.run_pipeline`` runs them and then RLVR.

Stages:
  1. pretraining: next-character cross-entropy on random windows of the game-text stream
     (``rlvr.envs.chess_games.game_corpus``); budget = optimizer steps × batch × window tokens;
  2. SFT: ``rlvr.sft`` demonstration batches (``prompt → trace>move``) from a fixed puzzle pool;
  3. RL (``rlvr.train.chess_pipeline``): the gradient ``Trainer`` on ``chess_puzzles`` with the run
     config (e.g. the chess_rl preset).
"""

from __future__ import annotations

import random
from typing import Any

import torch
import torch.nn.functional as F

from rlvr.models import build_char_tokenizer, build_tiny_model

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


def _ids(tokenizer: Any, texts: list[str]) -> torch.Tensor:
    return torch.tensor(tokenizer("".join(texts), add_special_tokens=False)["input_ids"], dtype=torch.long)


def _lm_loss(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    device = next(model.parameters()).device
    x = x.to(device)
    logits = model(input_ids=x[:, :-1]).logits  # (B, W, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten())
