"""Optional bootstrap for LURE on tiny models: supervised episodes in the exact multi-turn token layout.

A tiny untrained model writes neither a valid difficulty nor a worked step, so self-play has no
signal. ``warm_start`` fine-tunes on environment-made demonstrations (no external data): evader
prompts answered by a uniformly random level, and perfect pursuit episodes laid out as the
``multi_turn`` sampler lays them out — ``<bos> prompt | action <eos> | observation | action <eos> …``
with the loss on action tokens (and their eos) only.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from rlvr.envs.lure import LureEnvironment
from rlvr.models import format_prompt
from rlvr.sft import IGNORE, completion_loss

Segment = tuple[str, bool]  # (text, trained); trained segments end with eos


def evader_prompt(env: LureEnvironment) -> str:
    """The evader's prompt for an environment: it answers with a level on the difficulty axis."""
    return f"evade {env.short}:"


def parse_level(text: str, levels: int) -> int | None:
    """The level an evader proposal names (its leading integer), or None when absent or off the axis."""
    digits = ""
    for ch in text.strip():
        if not ch.isdigit():
            break
        digits += ch
    if not digits:
        return None
    level = int(digits)
    return level if 1 <= level <= levels else None


def evader_demo(env: LureEnvironment, rng: random.Random) -> tuple[str, list[Segment]]:
    return evader_prompt(env), [(str(rng.randint(1, env.config.levels)), True)]


def pursuit_demo(env: LureEnvironment, rng: random.Random) -> tuple[str, list[Segment]]:
    """A perfect episode on a task at a random level, observations taken from the environment itself."""
    problem = env.task_at(rng.randint(1, env.config.levels), rng)
    prompt = env.reset(problem, 0)
    turns = env.demonstration_turns(problem)
    segments: list[Segment] = []
    for k, action in enumerate(turns):
        obs, _, done = env.step(action)
        segments.append((action, True))
        if done or k == len(turns) - 1:
            break
        segments.append((obs, False))
    return prompt, segments


def episode_batch(tokenizer: Any, episodes: list[tuple[str, list[Segment]]]) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (B, L); labels are IGNORE on the
    prompt, observations and padding."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    seqs, labels = [], []
    for prompt, segments in episodes:
        text = format_prompt(tokenizer, prompt)
        bos = tokenizer.bos_token
        ids = tokenizer(text, add_special_tokens=not (bos and text.startswith(bos)))["input_ids"]
        lab = [IGNORE] * len(ids)
        for seg, trained in segments:
            tokens = tokenizer(seg, add_special_tokens=False)["input_ids"] + ([eos] if trained else [])
            ids, lab = ids + tokens, lab + (tokens if trained else [IGNORE] * len(tokens))
        seqs.append(ids)
        labels.append(lab)
    width = max(len(s) for s in seqs)
    return {"input_ids": torch.tensor([s + [pad] * (width - len(s)) for s in seqs]),
            "attention_mask": torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs]),
            "labels": torch.tensor([y + [IGNORE] * (width - len(y)) for y in labels])}


def warm_start(model: torch.nn.Module, tokenizer: Any, envs: list[LureEnvironment], *, steps: int,
               batch_size: int, lr: float, seed: int) -> dict[str, float]:
    """``steps`` AdamW steps on half evader, half pursuit demonstrations; returns the last loss."""
    rng = random.Random(f"lure-warm:{seed}")
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        episodes = []
        for i in range(batch_size):
            env = envs[(i // 2) % len(envs)]  # every environment gets both kinds of demonstration
            episodes.append(evader_demo(env, rng) if i % 2 else pursuit_demo(env, rng))
        loss = completion_loss(model, **episode_batch(tokenizer, episodes))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    model.zero_grad(set_to_none=True)  # no stale gradient may leak into the first RL step
    model.eval()
    return {"loss": float(loss.detach())}
