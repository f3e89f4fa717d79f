"""Shared fixtures: the char tokenizer and a one-layer tiny policy (fresh per test module)."""

from __future__ import annotations

import pytest
import torch

from rlvr.models import build_char_tokenizer, build_tiny_model


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def policy(tok):
    torch.manual_seed(0)  # build_tiny_model forks the RNG; this fixes the global stream for what follows
    return build_tiny_model(tok, hidden=32, layers=1, heads=2, seed=0).eval()
