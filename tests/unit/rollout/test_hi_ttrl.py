"""Hi-TTRL: the power-distribution MH sampler checked exactly on a toy categorical language, and the
sampler on a tiny model (in-band groups are the plain sampler token for token; hints are masked)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
import torch

from rlvr.registry import build
from rlvr.rollout import encode_prompts, sequence_logprobs
from rlvr.rollout.mcmc import PolicyPrefixes, mh_log_accept, power_mh, power_target, total_variation
from rlvr.rollout.samplers import SampleContext
from rlvr.types import Origin, Problem

# --- a toy language: tokens a=0, b=1, eos=2; prefixes of at most ℓ = 2 tokens ---------------------
EOS, ELL = 2, 2
TABLE = {(): [0.6, 0.3, 0.1], (0,): [0.2, 0.5, 0.3], (1,): [0.7, 0.1, 0.2]}  # p(next | prefix)


def toy_step(prefix: tuple[int, ...], temperature: float) -> torch.Tensor:
    """(3,) next-token probabilities at ``temperature``: softmax(log p / T)."""
    return torch.softmax(torch.tensor(TABLE[prefix], dtype=torch.float64).log() / temperature, dim=0)


class ToyModel:
    """The toy as a :class:`rlvr.rollout.mcmc.PrefixModel` (every chain has the same context)."""

    def extend(self, chains, prefixes, max_tokens, temperature, seed):
        gen = torch.Generator().manual_seed(seed)
        out = [list(p) for p in prefixes]
        live = list(range(len(out)))
        for _ in range(max(max_tokens)):
            live = [i for i in live
                    if len(out[i]) - len(prefixes[i]) < max_tokens[i] and (not out[i] or out[i][-1] != EOS)]
            by_prefix: dict[tuple, list[int]] = {}
            for i in live:
                by_prefix.setdefault(tuple(out[i]), []).append(i)
            for prefix, rows in by_prefix.items():  # one multinomial call per distinct prefix
                draws = torch.multinomial(toy_step(prefix, temperature), len(rows), replacement=True, generator=gen)
                for i, t in zip(rows, draws.tolist()):
                    out[i].append(t)
        return [o[len(p):] for o, p in zip(out, prefixes)]

    def token_logprobs(self, chains, seqs, temperatures):
        return [[toy_logprobs(tuple(s), temp) for s in seqs] for temp in temperatures]


_CACHE: dict = {}


def toy_logprobs(seq: tuple[int, ...], temperature: float) -> torch.Tensor:
    key = (seq, temperature)
    if key not in _CACHE:
        _CACHE[key] = torch.stack([toy_step(seq[:t], temperature)[seq[t]].log() for t in range(len(seq))])
    return _CACHE[key]


STATES = [(EOS,), (0, EOS), (1, EOS), (0, 0), (0, 1), (1, 0), (1, 1)]  # every prefix of ≤ ℓ tokens


def target(alpha: float) -> dict:
    return power_target({s: float(toy_logprobs(s, 1.0).sum()) for s in STATES}, alpha)


def kernel(alpha: float, accept=mh_log_accept) -> torch.Tensor:
    """(7, 7) the MH transition matrix: j ~ U{0, …, ℓ−1}; j ≥ |y| stays; else y′ = y_<j ⊕ z,
    z ~ q(·|y_<j) (temperature 1/α) accepted with min(1, exp(log A))."""
    index = {s: k for k, s in enumerate(STATES)}
    k_mat = torch.zeros(len(STATES), len(STATES), dtype=torch.float64)
    for y in STATES:
        for j in range(ELL):
            row = torch.zeros(len(STATES), dtype=torch.float64)
            if j < len(y):
                for y2 in STATES:
                    if y2[:j] != y[:j] or y2 == y or len(y2) <= j:
                        continue
                    lq_new = toy_logprobs(y2, 1 / alpha)[j:].sum()
                    log_a = accept(alpha, toy_logprobs(y2, 1.0)[j:].sum(), lq_new,
                                   toy_logprobs(y, 1.0)[j:].sum(), toy_logprobs(y, 1 / alpha)[j:].sum())
                    row[index[y2]] = lq_new.exp() * torch.clamp(log_a, max=0.0).exp()
            row[index[y]] = 1.0 - row.sum()
            k_mat[index[y]] += row / ELL
    return k_mat


@pytest.mark.parametrize("alpha", [4.0, 0.5])
def test_mh_kernel_leaves_the_power_distribution_invariant_exactly(alpha):
    pi = torch.tensor([target(alpha)[s] for s in STATES], dtype=torch.float64)
    k_mat = kernel(alpha)
    assert torch.allclose(k_mat.sum(1), torch.ones(len(STATES), dtype=torch.float64), atol=1e-12)
    assert torch.allclose(pi @ k_mat, pi, atol=1e-12)  # π_α K = π_α
    # The check has teeth: dropping the proposal terms of the ratio breaks invariance.
    wrong = kernel(alpha, accept=lambda a, lp_new, lq_new, lp_old, lq_old: a * (lp_new - lp_old))
    assert (pi @ wrong - pi).abs().max() > 1e-3


def test_alpha_one_accepts_every_proposal():
    # docs/methods.md §2.12 test 2: α = 1 → q = p → log A = 0 for any pair of suffixes.
    lp_new, lp_old = torch.tensor(-1.3), torch.tensor(-0.2)
    assert mh_log_accept(1.0, lp_new, lp_new, lp_old, lp_old) == 0.0
    result = power_mh(ToyModel(), [ELL] * 200, alpha=1.0, steps=5, seed=0)
    assert result.proposed > 0 and result.accepted == result.proposed


@pytest.mark.slow  # over ~2 s: not in make test-fast
def test_long_chains_match_the_power_distribution():
    # docs/methods.md §2.12 test 3: chains run long enough match p^α within total variation 0.02; the
    # starting draws from q (temperature 1/α) do not (so the steps matter).
    # 8000 chains: the sampling noise of the empirical TV is about 0.006.
    alpha, n = 2.0, 8_000
    start = power_mh(ToyModel(), [ELL] * n, alpha=alpha, steps=0, seed=1).states
    final = power_mh(ToyModel(), [ELL] * n, alpha=alpha, steps=8, seed=1)
    empirical = lambda states: {s: c / n for s, c in Counter(_code(s) for s in states).items()}  # noqa: E731
    pi = {_code(s): v for s, v in target(alpha).items()}
    assert total_variation(empirical(final.states), pi) < 0.02
    assert total_variation(empirical(start), pi) > 0.05
    assert 0 < final.accept_rate < 1


def _code(state) -> int:
    return int(sum(t * 3**k for k, t in enumerate(state)) + 100 * len(state))


# --- the sampler on a tiny model ---------------------------------------------------------------

ROLLOUT = SimpleNamespace(max_new_tokens=10, temperature=1.0, top_p=1.0, top_k=0)
BAND = dict(alpha_sharp=4.0, alpha_flat=0.5, mh_steps=3, hint_fraction=0.5)


def _problems() -> list[Problem]:
    return [Problem(prompt=f"{13 * i + 4}+{i}=", answer=None) for i in range(2)]


def _ctx(tok) -> SampleContext:
    return SampleContext(tokenizer=tok, rollout=ROLLOUT, seed=11, group_offset=50)


def test_policy_prefixes_score_like_the_trainer(tok, policy):
    # One forward scores every temperature; it must equal the trainer's sequence_logprobs at each.
    ids, mask = encode_prompts(tok, ["12+3=", "7+70="])
    chains = PolicyPrefixes(policy, tok, ids, mask)
    seqs = chains.extend([0, 1], [[], []], [5, 3], temperature=0.5, seed=3)
    assert [len(s) <= m for s, m in zip(seqs, (5, 3))] == [True, True]
    scored = chains.token_logprobs([0, 1], seqs, (1.0, 0.25))
    width = max(map(len, seqs))
    comp = torch.tensor([s + [tok.pad_token_id] * (width - len(s)) for s in seqs])
    real = torch.tensor([[k < len(s) for k in range(width)] for s in seqs])
    for temp, got in zip((1.0, 0.25), scored):
        want, _ = sequence_logprobs(policy, ids, mask, comp, real, temperature=temp)
        for r, s in enumerate(seqs):
            assert torch.allclose(got[r], want[r, :len(s)], atol=1e-5)


def test_in_band_groups_are_the_plain_sampler(tok, policy):
    plain = build("sampler", "plain").sample(policy, _problems(), 4, _ctx(tok))
    hi = build("sampler", "hi_ttrl", partial_m=2, c_lo=0.0, c_hi=1.0, **BAND).sample(policy, _problems(), 4, _ctx(tok))
    assert torch.equal(plain.completion_ids, hi.completion_ids) and plain.texts == hi.texts
    assert torch.equal(plain.completion_mask, hi.completion_mask) and torch.equal(plain.group_ids, hi.group_ids)
    assert hi.meta["sampler_metrics"]["rollout/hi_ttrl_hinted_rows_frac"] == 0.0


def test_out_of_band_rows_continue_masked_hints(tok, policy):
    # m = 3 of G = 4: c_hat ∈ {0, 1/3, 2/3, 1} is never in the band [0.5, 0.5], so every group's
    # last row is replaced by a hinted one.
    sampler = build("sampler", "hi_ttrl", partial_m=3, c_lo=0.5, c_hi=0.5, **BAND)
    plain = build("sampler", "plain").sample(policy, _problems(), 4, _ctx(tok))
    hi = sampler.sample(policy, _problems(), 4, _ctx(tok))
    again = sampler.sample(policy, _problems(), 4, _ctx(tok))
    assert torch.equal(hi.completion_ids, again.completion_ids)  # same seed, same hints and tokens
    assert hi.group_ids.tolist() == [50] * 4 + [51] * 4
    kept = [0, 1, 2, 4, 5, 6]  # the first m rows of each group are the plain rows
    assert [hi.texts[i] for i in kept] == [plain.texts[i] for i in kept]
    metrics = hi.meta["sampler_metrics"]
    assert metrics["rollout/hi_ttrl_hinted_rows_frac"] == 0.25
    assert metrics["rollout/hi_ttrl_sharpened_frac"] + metrics["rollout/hi_ttrl_flattened_frac"] == 1.0
    hint_tokens = 0
    for i in (3, 7):
        origin = hi.token_origin[i]
        n_hint = int((origin == int(Origin.HINT)).sum())
        hint_tokens += n_hint
        assert torch.all(origin[:n_hint] == int(Origin.HINT))  # the hint leads the completion
        assert not hi.completion_mask[i, :n_hint].any()  # hint tokens are never trained
        assert torch.equal(hi.completion_mask[i, n_hint:], hi.attention[i, n_hint:])  # the continuation is
        hint_text = tok.decode(hi.completion_ids[i, :n_hint].tolist(), skip_special_tokens=True)
        assert hi.texts[i].startswith(hint_text)
    assert hint_tokens > 0
    assert hint_tokens / 2 == metrics["rollout/hi_ttrl_hint_tokens_mean"]


def test_in_band_group_beside_a_hinted_one_keeps_its_plain_tokens(tok, policy, monkeypatch):
    # Group 0 estimates c_hat = 0 (below the band: sharpened), group 1 c_hat = 0.5 (inside): group 1's
    # rows must be the plain sampler's, token for token, though group 0 is rewritten.
    sampler = build("sampler", "hi_ttrl", partial_m=2, c_lo=0.4, c_hi=0.8, **BAND)
    estimates = iter([0.0, 0.5])
    monkeypatch.setattr(sampler, "partial_consensus", lambda texts: next(estimates))
    plain = build("sampler", "plain").sample(policy, _problems(), 4, _ctx(tok))
    hi = sampler.sample(policy, _problems(), 4, _ctx(tok))
    assert hi.meta["sampler_metrics"]["rollout/hi_ttrl_sharpened_frac"] == 0.5
    for i in range(4, 8):
        n = int(plain.attention[i].sum())
        assert torch.equal(hi.completion_ids[i, :n], plain.completion_ids[i, :n]) and not hi.attention[i, n:].any()
        assert (hi.token_origin[i] == int(Origin.POLICY)).all()
    assert (hi.token_origin[[2, 3]] == int(Origin.HINT)).any()  # group 0's last G − m rows carry hints


def test_oc_grpo_correction_trains_guided_tokens(tok, policy):
    sampler = build("sampler", "hi_ttrl", partial_m=3, c_lo=0.5, c_hi=0.5, hint_is_correction="oc_grpo", **BAND)
    assert sampler.produces_off_policy
    hi = sampler.sample(policy, _problems(), 4, _ctx(tok))
    assert not (hi.token_origin == int(Origin.HINT)).any()  # the hint is dropped from the target
    guided = hi.token_origin == int(Origin.GUIDED)
    assert guided[[3, 7]].any() and not guided[[0, 1, 2, 4, 5, 6]].any()
    assert (hi.behaviour_logprobs[guided] < 0).all() and (hi.behaviour_logprobs[~guided] == 0).all()


def test_partial_size_and_band():
    s = build("sampler", "hi_ttrl", partial_m=0.5, c_lo=0.4, c_hi=0.8, **BAND)
    assert [s.partial_size(g) for g in (1, 4, 8)] == [1, 2, 4]
    assert (s.band_alpha(0.25), s.band_alpha(0.5), s.band_alpha(0.8), s.band_alpha(1.0)) == (4.0, None, None, 0.5)
    # c_hat = max_a count(a)/m, unparsed answers never count: "#7", "#7", "#3", "no answer" with
    # extract=marker → 2/4.
    m = build("sampler", "hi_ttrl", partial_m=4, c_lo=0.4, c_hi=0.8, extract="marker", **BAND)
    assert m.partial_consensus(["1+1;#7", "#7", "#3", "none"]) == 0.5


def test_required_options():
    with pytest.raises(ValueError, match="required"):
        build("sampler", "hi_ttrl")
    with pytest.raises(ValueError, match="alpha_sharp"):
        build("sampler", "hi_ttrl", partial_m=2, c_lo=0.2, c_hi=0.8, alpha_sharp=0.9, alpha_flat=0.5, mh_steps=2)
    with pytest.raises(ValueError, match="c_lo"):
        build("sampler", "hi_ttrl", partial_m=2, c_lo=0.9, c_hi=0.8, alpha_sharp=2, alpha_flat=0.5, mh_steps=2)
