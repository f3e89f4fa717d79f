"""Supervised warm start: fine-tune on fresh task demonstrations so RL starts above zero reward.

Each step draws ``batch_size`` new training problems (split "train", seed stream
``seed * 1_000_003 + step``), builds ``<bos> prompt | demonstration <eos>`` and minimises the
token-mean cross-entropy over the completion tokens only (prompt and padding are ignored). A task
with ``demonstration_turns`` demonstrates a multi-turn episode instead (policy turns each ending in
eos, trained; environment turns such as a tool's reply, ignored): :func:`demonstration_tokens`.
Optimiser: AdamW (weight decay 0 by default), learning rate warmed up linearly over ``warmup``
steps then held constant; gradients clipped to ``max_grad_norm``.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.lr_schedule import SCHEDULES, lr_factor, lr_schedule  # noqa: F401  (SCHEDULES, lr_factor: re-exported)
from rlvr.models.loading import render_prompt
from rlvr.tasks.base import Task
from rlvr.types import Problem

IGNORE = -100


def warm_start(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, task: Task, *, steps: int = 400,
               batch_size: int = 64, lr: float = 3e-3, warmup: int = 30, seed: int = 0,
               weight_decay: float = 0.0, max_grad_norm: float = 1.0, schedule: str = "constant",
               progress: bool = True, stop_when: Callable[[int], bool] | None = None, min_steps: int = 0,
               check_every: int = 50, demo_suffix: str = "") -> dict[str, Any]:
    """Train ``model`` in place; returns ``loss`` (mean of the last 10 steps), ``loss_first``,
    ``loss_last``, ``steps`` (taken) and ``seconds``.

    With ``stop_when``, ``steps`` is a maximum: after ``min_steps``, every ``check_every`` steps
    ``stop_when(steps_done)`` is asked (e.g. "has validation accuracy reached a target?") and
    training stops when it says True. ``demo_suffix`` is appended to every demonstration (see
    :func:`demonstration_batch`).
    """
    if steps < 1 or batch_size < 1:
        raise ValueError(f"warm_start: steps and batch_size must be >= 1, got {steps}, {batch_size}")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = lr_schedule(opt, schedule, warmup, steps)
    was_training = model.training
    model.train()
    losses: list[float] = []
    start = time.perf_counter()
    bar = tqdm(range(steps), desc="warm start", disable=not progress)
    try:
        for step in bar:
            stream = seed * 1_000_003 + step
            batch = demonstration_batch(tokenizer, task, task.demonstration_problems(batch_size, stream), demo_suffix,
                                        random.Random(stream))
            loss = completion_loss(model, **batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if step % 10 == 0:
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
            done = step + 1
            if stop_when is not None and done >= min_steps and done % check_every == 0 and done < steps:
                model.eval()
                stop = stop_when(done)
                model.train()
                if stop:
                    break
    finally:
        model.train(was_training)
    tail = losses[-10:]
    return {"loss": sum(tail) / len(tail), "loss_first": losses[0], "loss_last": losses[-1],
            "steps": len(losses), "seconds": time.perf_counter() - start}


def demonstration_batch(tokenizer: PreTrainedTokenizerBase, task: Task, problems: list[Problem], suffix: str = "",
                        rng: random.Random | None = None) -> dict[str, Tensor]:
    """Right-padded ``input_ids`` (B, L), ``attention_mask`` (B, L) and ``labels`` (B, L) with
    IGNORE on prompt and padding: the prompt is tokenized as at generation time, the completion
    (demonstration ⊕ ``suffix`` + eos) without special tokens. In ``suffix``, ``{confidence}`` becomes
    a value drawn from ``rng`` uniformly in {0.1, …, 0.9} per demonstration (C3RL's format)."""
    rng = rng or random.Random(0)
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("demonstration_batch: the tokenizer has no eos token")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    seqs, labels = [], []
    for p in problems:
        text = render_prompt(tokenizer, p)
        bos = tokenizer.bos_token
        prompt = tokenizer(text, add_special_tokens=not (bos and text.startswith(bos)))["input_ids"]
        tail = suffix.replace("{confidence}", f"{rng.randint(1, 9) / 10:.1f}")
        completion, targets = demonstration_tokens(tokenizer, task, p, tail, eos)
        seqs.append(prompt + completion)
        labels.append([IGNORE] * len(prompt) + targets)
    width = max(len(s) for s in seqs)
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])  # (B, L)
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])  # (B, L)
    lab = torch.tensor([y + [IGNORE] * (width - len(y)) for y in labels])  # (B, L)
    return {"input_ids": ids, "attention_mask": mask, "labels": lab}


def demonstration_tokens(tokenizer: PreTrainedTokenizerBase, task: Task, problem: Problem, suffix: str,
                         eos: int) -> tuple[list[int], list[int]]:
    """(completion ids, labels) of one demonstration. A task with ``demonstration_turns(problem)``
    (``[(text, is_policy), ...]``: a multi-turn episode, e.g. a tool call, the tool's reply, the
    answer) gets each turn tokenized on its own, as the ``multi_turn`` sampler builds a row: a policy
    turn is followed by eos and trained; an environment turn is labelled IGNORE (never trained, as
    its tokens are masked in rollouts). A turn may carry a third item, ``trained``: a policy turn with
    False (e.g. a wrong first attempt the environment then corrects) still ends in eos but is labelled
    IGNORE. ``suffix`` goes on the last policy turn. Otherwise: ``demonstration(problem) + suffix``
    then eos, all trained."""
    turns = getattr(task, "demonstration_turns", None)
    if turns is None:
        ids = tokenizer(task.demonstration(problem) + suffix, add_special_tokens=False)["input_ids"] + [eos]
        return ids, list(ids)
    episode = list(turns(problem))
    episode = [(turn[0], turn[1], turn[2] if len(turn) > 2 else turn[1]) for turn in episode]
    last = max((i for i, (_, policy, _) in enumerate(episode) if policy), default=-1)
    if last < 0:
        raise ValueError(f"demonstration_turns of task '{task.name}' has no policy turn")
    ids: list[int] = []
    labels: list[int] = []
    for i, (text, policy, trained) in enumerate(episode):
        piece = tokenizer(text + (suffix if i == last else ""), add_special_tokens=False)["input_ids"]
        if policy:
            piece = piece + [eos]
        ids += piece
        labels += piece if trained else [IGNORE] * len(piece)
    return ids, labels


def completion_loss(model: PreTrainedModel, input_ids: Tensor, attention_mask: Tensor, labels: Tensor) -> Tensor:
    """Token-mean next-token cross-entropy over positions whose label is not IGNORE."""
    device = next(model.parameters()).device
    logits = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).logits  # (B, L, V)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten().to(device),
                           ignore_index=IGNORE)
