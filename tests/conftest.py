"""Shared fixtures (the char tokenizer and a one-layer tiny policy, fresh per test module) and the tier markers."""

from __future__ import annotations

from pathlib import Path

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


TIER_MARKS = {"e2e": "slow", "peers": "peers"}  # tests/<folder>/ -> the marker every test there carries


def pytest_collection_modifyitems(config, items):
    """Mark by folder: everything under tests/e2e is ``slow``, everything under tests/peers is ``peers``."""
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        try:
            folder = Path(item.fspath).resolve().relative_to(tests_dir).parts[0]
        except ValueError:
            continue
        if folder in TIER_MARKS:
            item.add_marker(TIER_MARKS[folder])
