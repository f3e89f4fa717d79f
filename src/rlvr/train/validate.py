"""Checks made before any work: plug-ins and their parameters, the output folder's writability
(``validate_run``, before the warm start), and prompt lengths against the model's context
(``fit_prompts``). Numeric ranges are checked when a ``Config`` is built (``rlvr.train.ranges``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any


def validate_run(cfg: Any, writes: bool = True) -> Any:
    """Everything about a run that can fail without training: every plug-in built with its parameters
    (the task probed, so a bad dataset fails here) and, on the process that ``writes`` it (rank 0), the
    run folder writable (other ranks, e.g. on other nodes, create nothing there).

    Returns what it built for the gradient trainer to reuse (``build_pipeline``'s ``Pipeline``: each plug-in is
    built once per run), or None for a loop of its own, which builds its task itself."""
    from rlvr.train.build import build_pipeline, build_plugin, build_task
    from rlvr.train.config import PluginSpec
    loop = build_plugin("loop", PluginSpec(cfg.optim.name, cfg.optim.params))
    parts = None
    if loop.gradient_knobs:  # the gradient steps' torch optimizer (optim.optimizer)
        build_plugin("optimizer", PluginSpec(cfg.optim.optimizer, cfg.optim.optimizer_params))
    if loop.builds_pipeline:  # the gradient trainer: every RL plug-in of the config
        parts = build_pipeline(cfg)
    else:  # a loop of its own reads the task and the selector
        build_task(cfg)
        build_plugin("selector", cfg.algorithm.selector)
    if writes:
        check_writable(Path(cfg.run.out_dir))
    return parts


def check_writable(folder: Path) -> None:
    """Create ``folder`` if needed and write a probe file there; any OS error is one line."""
    from rlvr.train.config import ConfigError
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write_test_", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ConfigError(f"run.out_dir {folder} is not writable: {err.strerror or err}") from None


def fit_prompts(task: Any, tokenizer: Any, context: int | None, max_new_tokens: int) -> None:
    """Reject (or, with the task's ``on_bad_row: skip``, drop and count) dataset prompts whose tokens
    after the chat template plus ``max_new_tokens`` exceed the model's ``context``. Tasks that
    generate their problems (no ``drop_rows``) are left alone."""
    if context is None or not hasattr(task, "drop_rows"):
        return
    from rlvr.models.loading import render_prompt
    limit = context - max_new_tokens
    too_long = []
    for split in ("train", "test"):
        rows = task.rows(split)
        lengths = _token_counts(tokenizer, [render_prompt(tokenizer, p) for p in rows])
        too_long += [(split, p, n) for p, n in zip(rows, lengths) if n > limit]
    if too_long:
        split, first, n = too_long[0]
        task.drop_rows({p.uid for _, p, _ in too_long},
                       f"{len(too_long)} prompt(s) longer than the model's context allows ({context} tokens, "
                       f"{max_new_tokens} of them for the completion); the first, {split} row "
                       f"{first.meta.get('row', 0) + 1}, has {n} tokens")


def context_length(model: Any) -> int | None:
    """The longest sequence ``model`` takes (its config's position limit), or None when it names none."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _token_counts(tokenizer: Any, texts: list[str], batch: int = 256) -> list[int]:
    out: list[int] = []
    for i in range(0, len(texts), batch):
        out += [len(ids) for ids in tokenizer(texts[i: i + batch])["input_ids"]]
    return out
