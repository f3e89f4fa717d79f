"""GAR (docs/methods.md §2.1): the closed-form output-layer gradient, the group-relative reward, anchor
cosines, the anchor cache, and hidden states captured while decoding."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlvr.analysis import decompose, weight_gradient, weight_gradient_cosine, weight_gradient_inner
from rlvr.models import format_prompt
from rlvr.registry import build
from rlvr.rewards.gar import aggregate_cosines, anchor_texts, gar_rewards
from rlvr.rewards.gar_signature import hidden_gradient, output_layer_inputs, pack_spans, saliency_signatures
from rlvr.rollout import encode_prompts
from rlvr.rollout.hf import generate
from rlvr.rollout.samplers import SampleContext
from rlvr.types import BatchError, Problem, Rollouts

ROLLOUT = SimpleNamespace(max_new_tokens=10, temperature=1.0, top_p=1.0, top_k=0)


def _mean_ce(w: torch.Tensor, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(h @ w.T, y, reduction="sum") / y.shape[0]


# --- the analytic gradient ------------------------------------------------------------------------

def test_hidden_gradient_equals_autograd():
    # L = Σ_t CE(W h_t, y_t)/T  ⇒  ∂L/∂h_t = Wᵀ(softmax(W h_t) − e_{y_t})/T (docs/methods.md §2.1 test 1).
    g = torch.Generator().manual_seed(0)
    w, h = torch.randn(5, 3, generator=g), torch.randn(4, 3, generator=g, requires_grad=True)
    y = torch.tensor([0, 4, 2, 2])
    (auto,) = torch.autograd.grad(_mean_ce(w, h, y), h)
    closed = hidden_gradient(h.detach(), y, w)
    assert torch.allclose(closed, auto, atol=1e-6)
    manual = (torch.softmax(h.detach() @ w.T, -1) - torch.nn.functional.one_hot(y, 5).float()) @ w / 4
    assert torch.allclose(closed, manual, atol=1e-6)


def test_weight_gradient_and_saliency_equal_autograd_on_the_tiny_model(policy, tok):
    # On the real output layer: ∂L/∂W = Σ_t (p_t − e_t) h_tᵀ/T, and S = Σ_t (∂L/∂h_t ⊙ h_t)/T.
    ids, mask = encode_prompts(tok, ["12+3="])
    comp = torch.tensor([tok.encode("15;x", add_special_tokens=False)])
    h = output_layer_inputs(policy, ids, mask, comp, torch.ones_like(comp, dtype=torch.bool))[0]  # (T, H)
    y = comp[0]
    w = policy.get_output_embeddings().weight.detach().clone().requires_grad_(True)
    hl = h.clone().requires_grad_(True)
    dw, dh = torch.autograd.grad(_mean_ce(w, hl, y), (w, hl))
    assert torch.allclose(weight_gradient(h, y, w.detach()), dw, atol=1e-6)
    sal = saliency_signatures(h, y, torch.zeros(len(y), dtype=torch.long), torch.tensor([len(y)]), w.detach(),
                              normalise=False)[0]
    assert torch.allclose(sal, (dh * h).sum(0) / len(y), atol=1e-7)
    assert torch.allclose(decompose(h, y, w.detach()).saliency, sal, atol=1e-7)
    # Gram form of ⟨∂L_a/∂W, ∂L_b/∂W⟩ equals the explicit Frobenius product (b = the first 2 tokens).
    ga, gb = weight_gradient(h, y, w.detach()), weight_gradient(h[:2], y[:2], w.detach())
    inner = weight_gradient_inner(h, y, h[:2], y[:2], w.detach(), chunk_tokens=1)
    assert torch.allclose(inner, (ga * gb).sum(), rtol=1e-5)
    assert weight_gradient_cosine(h, y, h, y, w.detach()) == pytest.approx(1.0, abs=1e-5)


def test_decomposition_contributions_sum_to_the_saliency():
    g = torch.Generator().manual_seed(1)
    w, h, y = torch.randn(6, 4, generator=g), torch.randn(3, 4, generator=g), torch.tensor([1, 5, 0])
    d = decompose(h, y, w)
    assert torch.allclose(d.contribution.sum(0), d.saliency, atol=1e-7)
    assert torch.allclose(d.token_alignment.sum(), d.saliency.norm(), atol=1e-6)  # Σ_t c_t·S/‖S‖ = ‖S‖
    assert d.error_norm.shape == (3,) and bool((d.error_norm > 0).all())


def test_chunking_and_truncation():
    g = torch.Generator().manual_seed(2)
    w, h, y = torch.randn(7, 4, generator=g), torch.randn(5, 4, generator=g), torch.tensor([1, 2, 3, 4, 5])
    one = saliency_signatures(*pack_spans([h, h[:2]], [y, y[:2]], 0), w, chunk_tokens=1)
    big = saliency_signatures(*pack_spans([h, h[:2]], [y, y[:2]], 0), w, chunk_tokens=1024)
    assert torch.allclose(one, big, atol=1e-6)
    # max_tokens keeps the LAST tokens: span (h, y) cut to 3 equals the span of its last 3 tokens.
    cut = saliency_signatures(*pack_spans([h], [y], 3), w)
    assert torch.allclose(cut, saliency_signatures(*pack_spans([h[-3:]], [y[-3:]], 0), w), atol=1e-6)
    assert not torch.allclose(cut, big[:1], atol=1e-3)


# --- the reward -----------------------------------------------------------------------------------

def test_group_relative_toy():
    # docs/methods.md §2.1 test 2: passing cosines [0.8, 0.6, 0.7] → group mean 0.7 → rel [0.1, −0.1, 0]
    # → reward 1 + 0.5·max(0, rel) = [1.05, 1.00, 1.00]; the failing row (cos 0.9) gets 0.
    cos = torch.tensor([0.8, 0.6, 0.7, 0.9])
    passing = torch.tensor([True, True, True, False])
    reward, rel = gar_rewards(cos, passing, torch.zeros(4, dtype=torch.long), base=1.0, beta=0.5)
    assert torch.allclose(reward, torch.tensor([1.05, 1.00, 1.00, 0.0]), atol=1e-6)
    assert torch.allclose(rel, torch.tensor([0.1, -0.1, 0.0, 0.0]), atol=1e-6)


def test_single_passing_rollout_uses_the_absolute_cosine():
    # docs/methods.md §2.1 test 3: one passing row in its group → m_g = 0, rel = c: 1 + 0.5·0.4 = 1.2; a negative
    # cosine (−0.3, other group) gives 1 + 0.5·max(0, −0.3) = 1.0. Groups are separate.
    cos = torch.tensor([0.4, 0.9, -0.3])
    reward, _ = gar_rewards(cos, torch.tensor([True, False, True]), torch.tensor([3, 3, 8]), 1.0, 0.5)
    assert torch.allclose(reward, torch.tensor([1.2, 0.0, 1.0]), atol=1e-6)


def test_anchor_aggregation_modes():
    # aux_residual: 0.5 + 0.5·max(0, 0.9 − 0.5) = 0.7; aux_max: max(0.5, 0.5·0.9) = 0.5; real_only: 0.5.
    assert aggregate_cosines(0.5, 0.9, "aux_residual", 0.5) == pytest.approx(0.7)
    assert aggregate_cosines(0.5, 0.9, "aux_max", 0.5) == pytest.approx(0.5)
    assert aggregate_cosines(0.5, 0.9, "real_only", 0.5) == pytest.approx(0.5)
    assert aggregate_cosines(0.5, 0.2, "aux_residual", 0.5) == pytest.approx(0.5)  # aux below real: no change
    assert aggregate_cosines(None, 0.3, "aux_residual", 0.5) == pytest.approx(0.3)
    assert aggregate_cosines(None, None, "aux_residual", 0.5) is None


def test_anchor_texts_dedup_and_limit():
    p = Problem(prompt="q", solution="a  b", meta={"gt_cot": ["a b", "c", ""], "teacher_anchors": "t"})
    assert anchor_texts(p, ("gt_response", "gt_cot", "gt_solution", "solution"), 4, True) == ["a  b", "c"]
    assert anchor_texts(p, ("gt_cot",), 1, True) == ["a  b"]
    assert anchor_texts(p, ("teacher_anchors",), 4, False) == ["t"]


def _batch(tok, prompts: list[str], completions: list[str], problems: list[Problem], verdicts: list[float],
           groups: list[int]) -> Rollouts:
    ids, mask = encode_prompts(tok, prompts)
    comp = [tok.encode(c, add_special_tokens=False) for c in completions]
    width = max(len(c) for c in comp)
    cids = torch.full((len(comp), width), tok.pad_token_id, dtype=torch.long)
    cmask = torch.zeros((len(comp), width), dtype=torch.bool)
    for i, c in enumerate(comp):
        cids[i, :len(c)], cmask[i, :len(c)] = torch.tensor(c), True
    return Rollouts(problems=problems, prompt_ids=ids, prompt_mask=mask, completion_ids=cids, completion_mask=cmask,
                    group_ids=torch.tensor(groups), rewards=torch.tensor(verdicts)[:, None], reward_names=["correct"],
                    texts=list(completions))


def test_identical_tokens_give_cosine_one(policy, tok):
    # docs/methods.md §2.1 test 4: a rollout whose tokens equal the anchor's (same prompt) has cos = 1; alone in its
    # group → rel = 1 → reward 1 + 0.5·1 = 1.5. A different completion (row 1, own group) has cos < 1.
    prob = Problem(prompt="12+3=", answer="15", solution="12+3;15")
    batch = _batch(tok, ["12+3=", "12+3="], ["12+3;15", "7;15"], [prob, prob], [1.0, 1.0], [0, 1])
    out = build("shaper", "gar")(batch, policy=policy, tokenizer=tok)
    assert out.reward_names == ["gar", "correct"]
    assert out.rewards[0, 0].item() == pytest.approx(1.5, abs=1e-5)
    assert out.meta["shaper_metrics"]["reward/gar_anchor_forwards"] == 1.0
    assert out.rewards[1, 0].item() < 1.5 - 1e-4
    assert torch.equal(out.rewards[:, 1], torch.tensor([1.0, 1.0]))  # the verdict is kept


def test_anchor_cache_one_forward_per_prompt_and_anchor(policy, tok, monkeypatch):
    # docs/methods.md §2.1 test 5: three rollouts of one prompt share one anchor forward; a second prompt adds one.
    import rlvr.rewards.gar as gar_module
    calls = {"n": 0}
    original = gar_module.output_layer_inputs

    def counting(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(gar_module, "output_layer_inputs", counting)
    a, b = Problem(prompt="1+1=", solution="2"), Problem(prompt="2+2=", solution="4")
    batch = _batch(tok, ["1+1="] * 3 + ["2+2="], ["2", "3", "22", "4"], [a, a, a, b], [1.0, 1.0, 1.0, 1.0],
                   [0, 0, 0, 1])
    shaper = build("shaper", "gar")
    out = shaper(batch, policy=policy, tokenizer=tok)
    assert shaper.anchor_forwards == 2  # (prompt a, "2") and (prompt b, "4"), once each
    assert out.meta["shaper_metrics"]["reward/gar_anchor_forwards"] == 2.0
    assert calls["n"] == 2  # one forward for the rollouts (no hidden given) + one batched anchor forward
    batch.hidden = torch.zeros(4, batch.completion_ids.shape[1], 32)
    shaper(batch, policy=policy, tokenizer=tok)  # a new call (next step): the cache is rebuilt
    assert shaper.anchor_forwards == 4 and calls["n"] == 3  # hidden given: only the anchor forward


def test_failing_rows_and_rows_without_anchor(policy, tok):
    # Row 0 fails → 0. Row 1 passes but its problem has no anchor → base 1.0 and stays out of m_g.
    with_anchor, without = Problem(prompt="5=", solution="5"), Problem(prompt="5=")
    batch = _batch(tok, ["5="] * 3, ["5", "5", "6"], [with_anchor, without, with_anchor], [0.0, 1.0, 1.0], [0, 0, 0])
    out = build("shaper", "gar", beta=0.5)(batch, policy=policy, tokenizer=tok)
    assert out.rewards[0, 0].item() == 0.0
    assert out.rewards[1, 0].item() == 1.0
    assert out.rewards[2, 0].item() >= 1.0  # the only anchored passing row: rel = c
    with pytest.raises(BatchError, match="policy"):
        build("shaper", "gar")(batch)


# --- hidden states captured while decoding --------------------------------------------------------

@pytest.mark.parametrize("engine", ["loop", "hf"])
def test_decoding_hidden_states_equal_teacher_forced(policy, tok, engine):
    prompts = [format_prompt(tok, p) for p in ("12+3=", "4*5=", "1=")]
    plain = generate(policy, tok, prompts, max_new_tokens=8, seed=3, engine=engine)
    kept = generate(policy, tok, prompts, max_new_tokens=8, seed=3, engine=engine, keep_hidden=True)
    assert plain.hidden is None  # the default path keeps nothing
    assert torch.equal(plain.completion_ids, kept.completion_ids)  # and samples the same tokens
    assert torch.equal(plain.logprobs, kept.logprobs)
    forced = output_layer_inputs(policy, kept.prompt_ids, kept.prompt_mask, kept.completion_ids, kept.completion_mask)
    m = kept.completion_mask
    assert kept.hidden.shape == forced.shape == (*m.shape, 32)
    assert torch.allclose(kept.hidden[m], forced[m], atol=1e-5)
    assert bool((kept.hidden[~m] == 0).all())


def test_plain_sampler_keep_hidden_feeds_gar_like_a_forward(policy, tok):
    # Signatures from decoding-time hidden states equal those from a teacher-forced forward.
    probs = [Problem(prompt="3+4=", answer="7", solution="3+4;7")]
    ctx = SampleContext(tokenizer=tok, rollout=ROLLOUT, seed=4)
    batch = build("sampler", "plain", keep_hidden=True).sample(policy, probs, 3, ctx)
    assert batch.hidden.shape == (3, batch.completion_ids.shape[1], 32)
    batch.rewards, batch.reward_names = torch.ones(3, 1), ["correct"]
    with_hidden = build("shaper", "gar")(batch, policy=policy, tokenizer=tok)
    assert with_hidden.hidden is None and batch.hidden is None  # consumed, memory freed
    forward = build("shaper", "gar")(batch, policy=policy, tokenizer=tok)  # no hidden now: fallback forward
    assert torch.allclose(with_hidden.rewards, forward.rewards, atol=1e-5)
