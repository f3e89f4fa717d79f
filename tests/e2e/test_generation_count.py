"""The rollout budget counts every generated completion (issue 18, item 3): rows a sampler replaces
or discards, hinted and prefixed rows, a weak model's drafts, TCPO's counterfactuals, Hi-TTRL's MCMC
draws and proposals, and refill rounds — not only the rows returned."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlvr.registry import build
from rlvr.rollout.samplers import SampleContext
from rlvr.rollout.samplers import hi_ttrl as hi_ttrl_module
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer
from rlvr.types import Origin, Problem
from tests.helpers.tiny import tiny_config
from tests.unit.rollout.test_multi_turn import Scripted  # noqa: F401  (registers the scripted_test environment)

ROLLOUT = SimpleNamespace(max_new_tokens=10, temperature=1.0, top_p=1.0, top_k=0)


def _problems(n: int = 3) -> list[Problem]:
    return [Problem(prompt=f"{11 * i + 3}+{i}=", answer=str(12 * i + 3),
                    solution=f"{11 * i}+3;{11 * i + 3}+{i};{12 * i + 3}") for i in range(n)]


def _ctx(tok) -> SampleContext:
    return SampleContext(tokenizer=tok, rollout=ROLLOUT, seed=7, group_offset=0)


def _tokens(batch, rows=None, origins=(Origin.POLICY,)) -> int:
    """Real tokens of the given rows whose origin is one of ``origins`` (all origins without token_origin)."""
    att = batch.attention if rows is None else batch.attention[rows]
    if batch.token_origin is None:
        return int(att.sum())
    origin = batch.token_origin if rows is None else batch.token_origin[rows]
    return int((att & torch.isin(origin, torch.tensor([int(o) for o in origins], dtype=origin.dtype))).sum())


def test_plain_counts_its_rows_and_tokens(tok, policy):
    ctx = _ctx(tok)
    batch = build("sampler", "plain").sample(policy, _problems(), 4, ctx)
    assert (ctx.spent.completions, ctx.spent.tokens) == (12, int(batch.completion_mask.sum()))


def test_oc_grpo_counts_the_replaced_plain_rows(tok, policy):
    # 3 groups of G = 4, every group guided with ratio 1/2: the sampler draws 12 plain rows, keeps
    # 2 per group and adds 2 guided ones: 18 completions generated for the 12 returned.
    ctx, plain_ctx = _ctx(tok), _ctx(tok)
    plain = build("sampler", "plain").sample(policy, _problems(), 4, plain_ctx)  # the same first draw
    batch = build("sampler", "hint", guide_when="fixed_ratio", guide_ratio=0.5).sample(policy, _problems(), 4, ctx)
    guided = [i for i in range(12) if i % 4 >= 2]
    assert batch.num_rows == 12 and ctx.spent.completions == 18
    assert ctx.spent.tokens == plain_ctx.spent.tokens + _tokens(batch, guided, (Origin.GUIDED, Origin.POLICY))
    assert ctx.spent.tokens > _tokens(batch, origins=(Origin.GUIDED, Origin.POLICY))  # the replaced rows count


def test_prefix_counts_the_weak_models_drafts(tok, policy):
    # G = 4, rho = 1/2: per group 2 plain rows, 2 weak drafts and 2 continuations of their prefixes.
    ctx = _ctx(tok)
    sampler = build("sampler", "prefix", weak_model="reference", prefix_fraction=0.5)
    batch = sampler.sample(policy, _problems(), 4, SampleContext(**{**ctx.__dict__, "reference": policy}))
    assert batch.num_rows == 12
    assert ctx.spent.completions == 18
    assert ctx.spent.tokens > _tokens(batch)  # the drafts' tokens beyond their kept prefixes count too


def test_hi_ttrl_counts_discarded_rows_and_every_mcmc_draw(tok, policy, monkeypatch):
    # m = 3 of G = 4 and an empty band: each of the 2 groups replaces its last plain row by a hinted
    # continuation. Generated: 8 plain rows, 2 chains' initial draws, every proposal, 2 continuations.
    proposed = []
    real_mh = hi_ttrl_module.power_mh

    def spy(*args, **kw):
        result = real_mh(*args, **kw)
        proposed.append(result.proposed)
        return result

    monkeypatch.setattr(hi_ttrl_module, "power_mh", spy)
    ctx = _ctx(tok)
    sampler = build("sampler", "hi_ttrl", partial_m=3, c_lo=0.5, c_hi=0.5, alpha_sharp=4.0, alpha_flat=0.5,
                    mh_steps=3, hint_fraction=0.5)
    batch = sampler.sample(policy, _problems(2), 4, ctx)
    assert batch.num_rows == 8 and sum(proposed) > 0
    assert ctx.spent.completions == 8 + 2 + sum(proposed) + 2


def test_tcpo_counts_counterfactual_alternatives(tok, policy):
    # 1 problem, G = 2 episodes of 3 turns; the top half of the 6 turns (3) each get M = 2 alternatives.
    ctx = _ctx(tok)
    sampler = build("sampler", "multi_turn", env="scripted_test", max_turns=3, cf_samples=2,
                    cf_selector="surprisal_top_q", cf_top_q=0.5)
    batch = sampler.sample(policy, _problems(1), 2, ctx)
    assert batch.num_rows == 2 and ctx.spent.completions == 2 + 3 * 2
    assert ctx.spent.tokens > _tokens(batch)  # every turn's tokens plus the alternatives'


def test_budget_spends_generated_completions_and_refills(tmp_path):
    # OC-GRPO-style sampler guiding every group: 4 prompts × (4 plain + 2 guided) = 24 completions a
    # step for 16 returned rows. A (hard) budget of 50 ends the run after step 2 (48 generated; a third
    # would make 72); counting returned rows (16 a step) it would run 3 steps (48, a fourth 64 > 50).
    cfg = tiny_config(tmp_path / "hint", ["run.steps=100", "run.max_rollouts=50",
                                          "rollout.sampler={name: hint, guide_when: fixed_ratio, guide_ratio: 0.5}",
                                          "algorithm.loss.name=oc_grpo"])
    result = Trainer(cfg).train()
    rows = read_metrics(tmp_path / "hint")
    assert result["stopped_by"] == "rollouts" and result["steps"] == 2 and result["rollouts"] == 48
    assert [r["rollout/generated_completions"] for r in rows] == [24, 24]
    assert [r["rollout/sampled_rows"] for r in rows] == [16, 16]
    assert all(r["rollout/generated_tokens"] > 0 for r in rows)
    # Refills: every round's generation is counted (zero_std with a tolerance no group passes).
    cfg = tiny_config(tmp_path / "refill", ["run.steps=1", "rollout.refill_rounds=2",
                                            "algorithm.filters=[{name: zero_std, tol: 10.0}]"])
    Trainer(cfg).train()
    row = read_metrics(tmp_path / "refill")[0]
    assert row["rollout/rounds"] == 3 and row["rollout/generated_completions"] == 48 and row["rollout/spent"] == 48


def test_refill_rounds_stop_at_the_rollout_cap(tmp_path):
    # No group passes the filter, so every step would refill twice (3 rounds x 16). Under a cap of 40 the
    # first step stops after 2 rounds (32; a third would make 48), and no second step starts (32 + 16 > 40).
    cfg = tiny_config(tmp_path, ["run.steps=100", "run.max_rollouts=40", "rollout.refill_rounds=2",
                                 "algorithm.filters=[{name: zero_std, tol: 10.0}]"])
    result = Trainer(cfg).train()
    row, = read_metrics(tmp_path)
    assert result["stopped_by"] == "rollouts" and result["steps"] == 1 and result["rollouts"] == 32
    assert row["rollout/rounds"] == 2 and row["rollout/refills_capped"] == 1.0
    assert row["rollout/first_round_completions"] == 16
