"""TRL-signature reward functions for the tests (importable as ``tests.helpers.reward_fns:<name>``)."""

from __future__ import annotations

import asyncio
import os
import time


def mentions_unit(prompts, completions, unit, **kwargs):
    """1.0 when the completion mentions the row's ``unit`` column (an extra dataset column)."""
    return [1.0 if u in c else 0.0 for c, u in zip(completions, unit)]


async def brevity(prompts, completions, **kwargs):
    """An async function: 1 / (1 + characters / 10)."""
    await asyncio.sleep(0)
    return [1.0 / (1.0 + len(c) / 10.0) for c in completions]


def constant(prompts, completions, **kwargs):
    return [0.5 for _ in completions]


def no_reward(prompts, completions, **kwargs):
    return [None for _ in completions]


def explodes(prompts, completions, **kwargs):
    raise RuntimeError("reward function exploded")


def hangs(prompts, completions, **kwargs):
    time.sleep(60)
    return [1.0 for _ in completions]


def wrong_length(prompts, completions, **kwargs):
    return [1.0, 2.0]


def dies(prompts, completions, **kwargs):
    os._exit(7)


def echo_columns(prompts, completions, **kwargs):
    """The number of keyword columns it received (to check what is passed)."""
    assert prompts and completions
    return [float(len(kwargs)) for _ in completions]


def hangs_sometimes(prompts, completions, **kwargs):
    """Hangs on about a fifth of the completions (by a hash of the text), else 1.0."""
    import random
    if random.Random(completions[0]).random() < 0.2:
        time.sleep(60)
    return [1.0 for _ in completions]
