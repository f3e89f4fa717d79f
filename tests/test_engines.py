"""Generation engines as plug-ins: outputs pinned across refactors, the registry, user engines."""

import pytest
import torch

from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import generate

PIN_PROMPTS = ["347+285=", "9*3=", "12+7=", "1"]
# Sampled with the code before engines became plug-ins (commit 1aa2b41): a refactor must keep them.
PINNED = {
    "loop": ([[16, 9, 17, 9, 13, 9], [16, 8, 8, 13, 13, 8], [9, 17, 8, 9, 17, 9], [3, 3, 2, 0, 0, 0]],
             [-16.5949, -15.5452, -17.1901, -8.213]),
    "hf": ([[16, 9, 17, 9, 13, 9], [16, 8, 8, 13, 17, 10], [9, 17, 8, 9, 9, 17], [3, 3, 2, 0, 0, 0]],
           [-16.5949, -16.1386, -16.4726, -8.213]),
    "specroll": ([[16, 9, 8, 9, 9, 13], [16, 16, 9, 9, 17, 4], [9, 17, 15, 15, 15, 11], [3, 5, 4, 17, 17, 15]],
                 [-15.855, -15.2728, -15.9947, -16.4505]),
}


@pytest.fixture(scope="module")
def small():
    tok = build_char_tokenizer("0123456789+*=#;")
    return build_tiny_model(tok, hidden=32, layers=2, heads=2, seed=1), tok


@pytest.mark.parametrize("engine", sorted(PINNED))
def test_sampled_tokens_are_pinned(small, engine):
    model, tok = small
    params = {"bootstrap_fit": False, "num_heads": 2} if engine == "specroll" else None
    gen = generate(model, tok, PIN_PROMPTS, max_new_tokens=6, temperature=0.8, top_k=8, seed=5, engine=engine,
                   engine_params=params)
    ids, sums = PINNED[engine]
    assert gen.completion_ids.tolist() == ids
    assert gen.logprobs.sum(-1).tolist() == pytest.approx(sums, abs=1e-4)


def test_loop_top_p_tokens_are_pinned(small):
    model, tok = small
    gen = generate(model, tok, PIN_PROMPTS, max_new_tokens=6, temperature=1.0, top_p=0.9, seed=2)
    assert gen.completion_ids.tolist() == [[10, 8, 10, 18, 7, 3], [8, 12, 10, 4, 7, 15], [3, 5, 0, 0, 4, 5],
                                           [7, 16, 17, 9, 16, 3]]
