"""SpecRoll (docs/methods.md §2.11): the acceptance rule on hand-made distributions, exactness against
plain decoding on a tiny model (greedy identity, chi-square on sampled tokens with bad heads),
log-prob convention, Reflex's bound, the slow path's trigger and the heads' fit."""

import math

import pytest
import torch

from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import encode_prompts, generate, sequence_logprobs
from rlvr.rollout.draft_heads import DraftHeads, fit_heads
from rlvr.rollout.sampling import filter_logp as _filter
from rlvr.rollout.engines.specroll import SpecRoll, SpecRollConfig, engine_for, reflex_update, verify_drafts

PROMPTS = ["347+285=", "9*3=", "12+7=", "1", "8765*4=", "3+3="]


@pytest.fixture(scope="module")
def small():
    tok = build_char_tokenizer("0123456789+*=#;")  # 19 ids with the specials
    return build_tiny_model(tok, hidden=32, layers=2, heads=2, seed=1), tok


def chi2_pvalue(counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness of fit; cells expected below ``min_expected`` are pooled."""
    n = counts.sum()
    expected = probs.double() * n
    small_cells = expected < min_expected
    obs = torch.cat([counts.double()[~small_cells], counts.double()[small_cells].sum().reshape(1)])
    exp = torch.cat([expected[~small_cells], expected[small_cells].sum().reshape(1)])
    keep = exp > 0
    stat = ((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum()
    dof = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), stat / 2))


def bad_heads(model, num_heads: int, scale: float = 4.0, seed: int = 5) -> DraftHeads:
    """Random heads with peaked, wrong distributions: most drafts are rejected."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        heads = DraftHeads(model.config.hidden_size, model.config.vocab_size, num_heads)
        heads.out_weight.data.mul_(scale)
    return heads


REFLEX = {"reflex_eta": 0.5, "reflex_eps": 2.0}  # required with reflex (docs/methods.md §2.11); the preset's values


def spec_engine(model, heads: DraftHeads | None = None, **params) -> SpecRoll:
    engine = engine_for(model, {"bootstrap_fit": False, **REFLEX, **params})
    engine.heads = heads  # None: fresh heads that echo the policy's next-token guess
    return engine


# --- the acceptance rule -------------------------------------------------------------------------

def test_verify_drafts_golden():
    # One draft per row (K = 1), V = 3, p_1 = [.5, .3, .2], q_1 = [.2, .6, .2], draft = token 1:
    # accept with min(1, .3/.6) = .5. Row 0: u = .4 < .5 → kept, next = the bonus p_2 = [.1, .1, .8].
    # Row 1: u = .7 → rejected, next = norm(max(0, p_1 − q_1)) = norm([.3, 0, 0]) = [1, 0, 0].
    p1, q1, bonus = torch.tensor([.5, .3, .2]), torch.tensor([.2, .6, .2]), torch.tensor([.1, .1, .8])
    p = torch.stack([p1, bonus]).expand(2, 2, 3)
    q = q1.expand(2, 1, 3)
    n, nxt = verify_drafts(p, q, torch.tensor([[1], [1]]), torch.tensor([[0.4], [0.7]]))
    assert n.tolist() == [1, 0]
    assert torch.allclose(nxt, torch.tensor([[.1, .1, .8], [1., 0., 0.]]))
    # K = 2: d_1 = 0 with p = .5 ≥ q = .2 (ratio 1: kept for any u < 1); d_2 = 2 with p_2 = [.25, .25, .5],
    # q_2 = [.1, .1, .8]: ratio .5/.8 = .625 < u = .9 → rejected; next = norm([.15, .15, 0]) = [.5, .5, 0].
    p = torch.stack([p1, torch.tensor([.25, .25, .5]), bonus]).unsqueeze(0)
    q = torch.stack([q1, torch.tensor([.1, .1, .8])]).unsqueeze(0)
    n, nxt = verify_drafts(p, q, torch.tensor([[0, 2]]), torch.tensor([[0.999, 0.9]]))
    assert n.tolist() == [1]
    assert torch.allclose(nxt, torch.tensor([[.5, .5, 0.]]))


def test_acceptance_rule_reproduces_target_distribution():
    # docs/methods.md §2.11 test 1: |V| = 5, fixed p, an unrelated q; 1e6 accept / resample draws match p.
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([0.4, 0.25, 0.2, 0.1, 0.05])
    q = torch.tensor([0.05, 0.1, 0.15, 0.3, 0.4])
    n = 1_000_000
    drafts = torch.multinomial(q, n, replacement=True, generator=gen).unsqueeze(-1)  # (n, 1)
    u = torch.rand((n, 1), generator=gen)
    kept, nxt = verify_drafts(p.expand(n, 2, 5), q.expand(n, 1, 5), drafts, u)
    resampled = torch.multinomial(nxt, 1, generator=gen).squeeze(-1)
    out = torch.where(kept == 1, drafts.squeeze(-1), resampled)
    counts = torch.bincount(out, minlength=5)
    assert chi2_pvalue(counts, p) > 0.01
    # the same test has the power to reject the proposal itself (what a rule without correction gives)
    assert chi2_pvalue(torch.bincount(drafts.squeeze(-1), minlength=5), p) < 1e-6


def test_reflex_correction_never_exceeds_eps():
    # golden: δ = 0, toward − away = [3, 0], η = 1 → [3, 0]; with ε = 2 it is rescaled to [2, 0]
    zero, toward, away = torch.zeros(1, 2), torch.tensor([[3.0, 0.0]]), torch.zeros(1, 2)
    assert torch.allclose(reflex_update(zero, toward, away, 1.0, 2.0), torch.tensor([[2.0, 0.0]]))
    assert torch.allclose(reflex_update(zero, toward, away, 1.0, 5.0), torch.tensor([[3.0, 0.0]]))
    gen = torch.Generator().manual_seed(1)
    delta = torch.zeros(64, 8)
    for _ in range(50):  # docs/methods.md §2.11 test 3: ‖δ‖ ≤ ε after every update
        delta = reflex_update(delta, torch.randn(64, 8, generator=gen), torch.randn(64, 8, generator=gen), 0.7, 1.5)
        assert float(delta.norm(dim=-1).max()) <= 1.5 + 1e-5


# --- exactness on a tiny model -----------------------------------------------------------------

@pytest.mark.parametrize("heads", ["echo", "bad"])
def test_greedy_equals_plain_decoding(small, heads):
    model, tok = small
    prompts = PROMPTS * 4
    plain = generate(model, tok, prompts, max_new_tokens=24, do_sample=False)
    spec_engine(model, bad_heads(model, 3) if heads == "bad" else None, num_heads=3)
    spec = generate(model, tok, prompts, max_new_tokens=24, do_sample=False, engine="specroll",
                    engine_params={"bootstrap_fit": False, **REFLEX, "num_heads": 3})
    assert torch.equal(spec.completion_ids, plain.completion_ids)
    assert torch.equal(spec.completion_mask, plain.completion_mask)
    assert torch.allclose(spec.logprobs, plain.logprobs, atol=1e-5)
    rate = spec.stats["rollout/spec_accept_rate"]
    assert (rate > 0.5) if heads == "echo" else (rate < 0.5)  # both accept and reject paths ran
    assert spec.stats["rollout/spec_tokens_per_forward"] > 1.0


def exact_first_two(model, tok, prompt: str, temperature: float, top_k: int) -> torch.Tensor:
    """(V + 1, V + 1) exact probabilities of (x1, x2); index V = "ended" (x1 was eos: no x2)."""
    ids, mask = encode_prompts(tok, [prompt])
    v, eos = model.config.vocab_size, tok.eos_token_id

    def dist(ctx):  # the sampler's distribution after each context row
        with torch.no_grad():
            z = model(input_ids=ctx, attention_mask=torch.ones_like(ctx)).logits[:, -1].float()
        logp = torch.log_softmax(z / temperature, -1)
        return (logp if top_k == 0 else _filter(logp, top_k, 1.0)).softmax(-1).double()

    p1 = dist(ids)[0]  # (V,)
    ctx = torch.cat([ids.expand(v, -1), torch.arange(v).unsqueeze(-1)], dim=1)  # every x1
    p2 = dist(ctx)  # (V, V)
    joint = torch.zeros(v + 1, v + 1, dtype=torch.float64)
    joint[:v, :v] = p1.unsqueeze(-1) * p2
    joint[eos] = 0.0
    joint[eos, v] = p1[eos]
    return joint


def observed_first_two(gen, v: int) -> torch.Tensor:
    x1 = gen.completion_ids[:, 0]
    has2 = gen.completion_mask[:, 1] if gen.completion_ids.shape[1] > 1 else torch.zeros_like(x1, dtype=torch.bool)
    x2 = torch.where(has2, gen.completion_ids[:, 1], torch.full_like(x1, v))
    return torch.bincount(x1 * (v + 1) + x2, minlength=(v + 1) ** 2).reshape(v + 1, v + 1)


@pytest.mark.slow  # over ~2 s: not in make test-fast
@pytest.mark.parametrize("temperature,top_k", [(0.7, 0), (1.0, 5)])
def test_sampled_tokens_follow_the_target_distribution(small, temperature, top_k):
    # Bad heads (peaked, wrong) and a strong Reflex (q moves within a row): most drafts are rejected,
    # so x2 mostly comes from the residual norm(max(0, p − q)); its joint with x1 must still be p's.
    model, tok = small
    v, n, prompt = model.config.vocab_size, 6_000, "12+7="
    exact = exact_first_two(model, tok, prompt, temperature, top_k)
    spec_engine(model, bad_heads(model, 2), num_heads=2, reflex_eta=3.0, reflex_eps=4.0)
    spec = generate(model, tok, [prompt] * n, max_new_tokens=3, temperature=temperature, top_k=top_k, seed=11,
                    engine="specroll", engine_params={"bootstrap_fit": False, "num_heads": 2, "reflex_eta": 3.0,
                                                      "reflex_eps": 4.0})
    assert spec.stats["rollout/spec_accept_rate"] < 0.5  # the residual path dominates
    assert spec.stats["rollout/spec_delta_norm_max"] > 0  # Reflex moved q
    assert chi2_pvalue(observed_first_two(spec, v).flatten(), exact.flatten()) > 1e-3
    # control: plain sampling passes the same test, and the heads' own proposal would fail it
    plain = generate(model, tok, [prompt] * n, max_new_tokens=2, temperature=temperature, top_k=top_k, seed=12)
    assert chi2_pvalue(observed_first_two(plain, v).flatten(), exact.flatten()) > 1e-3


def test_logprobs_follow_the_plain_convention(small):
    # log softmax(z / T)[y] before top-k, from the target's own logits: what sequence_logprobs recomputes
    model, tok = small
    spec_engine(model, None, num_heads=3)
    gen = generate(model, tok, PROMPTS * 4, max_new_tokens=20, temperature=0.8, top_k=6, seed=3, engine="specroll",
                   engine_params={"bootstrap_fit": False, **REFLEX, "num_heads": 3})
    ref, _ = sequence_logprobs(model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids, gen.completion_mask,
                               temperature=0.8)
    m = gen.completion_mask
    assert m.any() and not m.all()
    assert torch.allclose(gen.logprobs[m], ref.detach()[m], atol=1e-4)
    assert bool((gen.logprobs[~m] == 0).all())


# --- state across calls: slow path and heads --------------------------------------------------------

def test_slow_path_refits_after_sustained_low_acceptance(monkeypatch):
    # slow_tau = .6, slow_windows = 2, EMA decay .5. Window rates: .8 (reference, ema .8),
    # .3 → ema .55 ≥ .48 (= .6 × .8): not low; .3 → ema .425 < .48: low 1; .3 → ema .3625: low 2 → refit.
    engine = SpecRoll(SpecRollConfig(bootstrap_fit=False, **REFLEX, slow_tau=0.6, slow_windows=2, slow_ema=0.5))
    calls = []
    monkeypatch.setattr(engine, "refit", lambda model: calls.append(1) or 0.0)
    refits = []
    for rate in (0.8, 0.3, 0.3, 0.3):
        stats = engine._window(None, {"proposed": 10, "accepted": round(10 * rate), "forwards": 5, "delta_max": 0.0},
                               n_tokens=10)
        refits.append(stats["rollout/spec_head_updates"])
    assert refits == [0.0, 0.0, 0.0, 1.0] and len(calls) == 1
    assert stats["rollout/spec_tokens_per_forward"] == 2.0  # 10 tokens over 5 row-forwards


def test_engine_persists_per_policy(small):
    model, _ = small
    a = engine_for(model, {**REFLEX, "num_heads": 2})
    assert engine_for(model, {**REFLEX, "num_heads": 2}) is a  # kept across calls (RL steps)
    assert engine_for(model, {**REFLEX, "num_heads": 3}) is not a  # new options: a new engine


def test_fit_heads_learns_future_tokens(small):
    # A periodic sequence: the token two steps ahead is a function of the hidden state, so the
    # fit's cross-entropy must fall far below its starting value (the untrained heads echo the
    # next token instead).
    model, tok = small
    ids = torch.tensor([tok("0123456789" * 4, add_special_tokens=False)["input_ids"]] * 4)  # (4, 40)
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[-1].float()
    heads = DraftHeads(32, model.config.vocab_size, 2, model.get_output_embeddings().weight)
    target = torch.ones_like(ids, dtype=torch.bool)
    first = fit_heads(heads, hidden, ids, target, steps=1, lr=0.0, batch_positions=4096, seed=0)
    last = fit_heads(heads, hidden, ids, target, steps=40, lr=3e-2, batch_positions=256, seed=0)
    assert last < 0.3 * first and math.isfinite(last)
