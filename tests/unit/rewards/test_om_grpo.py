"""OM-GRPO rewards: soft consensus and the contrast term by hand, reductions (η = 0, all agree), the
judges, label-free operation, and the preset's answer-span mask."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from rlvr.advantages.grpo import GRPO
from rlvr.registry import build
from rlvr.rewards.om_grpo import draw_pairs, soft_consensus, win_rates
from rlvr.rewards.pairwise_judge import PairwiseJudge, parse_preference
from rlvr.rewards.consensus import agreement_counts
from rlvr.types import AdvantageInputs, BatchError, Problem
from tests.unit.rewards.test_ttrl import PoisonAnswer, batch

PRESET = Path(__file__).resolve().parents[3] / "configs" / "methods" / "om_grpo.yaml"


def logprob_rows(means: list[float]) -> torch.Tensor:
    """(N, 3) rollout log-probs whose per-row mean is ``means`` (constant rows)."""
    return torch.tensor(means)[:, None].repeat(1, 3)


def test_soft_consensus_golden():
    # docs/methods.md §2.13 test 3: G = 4, answers {A, A, A, B}: leave-one-out (count − 1)/(G − 1) = [2/3, 2/3, 2/3, 0];
    # inclusive count/G = [3/4, 3/4, 3/4, 1/4]. An unparsed row scores 0 either way.
    count, size = agreement_counts(["A", "A", "A", "B"], torch.zeros(4, dtype=torch.long))
    assert torch.allclose(soft_consensus(count, size), torch.tensor([2 / 3, 2 / 3, 2 / 3, 0.0]))
    assert torch.allclose(soft_consensus(count, size, "inclusive"), torch.tensor([0.75, 0.75, 0.75, 0.25]))
    count, size = agreement_counts(["A", None, "A"], torch.zeros(3, dtype=torch.long))
    assert soft_consensus(count, size).tolist() == [0.5, 0.0, 0.5]
    assert soft_consensus(count, size, "inclusive")[1] == 0.0


def test_contrast_by_hand_all_pairs():
    # G = 3, answers A, A, B; mean log-probs -1, -2, -3; P = 3 = all pairs. Self-certainty: the higher
    # mean wins, so w = [2/2, 1/2, 0/2] = [1, .5, 0]. Soft consensus (LOO) = [1/2, 1/2, 0].
    # r = cons + 0.2·(w − .5) = [0.5 + 0.1, 0.5 + 0, 0 − 0.1] = [0.6, 0.5, −0.1].
    shaper = build("shaper", "om_grpo", contrast_pairs=3, contrast_eta=0.2, judge="self_certainty", pairs="any")
    out = shaper(batch(["A", "A", "B"], [0, 0, 0], logprobs=logprob_rows([-1.0, -2.0, -3.0])))
    assert torch.allclose(out.rewards[:, 0], torch.tensor([0.6, 0.5, -0.1]))
    assert out.reward_names == ["om_grpo", "format", "correct"]
    m = out.meta["shaper_metrics"]
    assert m["reward/contrast_pairs"] == 3.0
    assert m["reward/contrast_abs_mean"] == pytest.approx(0.2 / 3)
    assert m["reward/soft_consensus_mean"] == pytest.approx(1 / 3)


def test_win_rates_and_pair_draws():
    # Pairs (0 beats 1 w.p. .75), (0 vs 2 tie): w0 = (.75 + .5)/2, w1 = .25, w2 = .5, w3 never played = .5.
    assert torch.allclose(win_rates([(0, 1, 0.75), (0, 2, 0.5)], 4), torch.tensor([0.625, 0.25, 0.5, 0.5]))
    gen = torch.Generator().manual_seed(0)
    two = draw_pairs([3, 5, 8, 9], 2, gen)
    assert len(two) == 2 and len(set(two)) == 2 and all(i < j and {i, j} <= {3, 5, 8, 9} for i, j in two)
    assert len(draw_pairs([3, 5, 8, 9], 100, gen)) == 6  # capped at G(G−1)/2


def test_only_p_pairs_are_judged_per_group():
    # P = 1 per group, two groups of 4: exactly two rows of each group leave w = 0.5.
    shaper = build("shaper", "om_grpo", contrast_pairs=1, contrast_eta=1.0, judge="self_certainty", pairs="any")
    out = shaper(batch(["A"] * 8, [0, 0, 0, 0, 1, 1, 1, 1], logprobs=logprob_rows([-1, -2, -3, -4, -5, -6, -7, -8])))
    contrast = out.row_stats["contrast"]
    for rows in ([0, 1, 2, 3], [4, 5, 6, 7]):
        assert sorted(contrast[rows].tolist()) == [-0.5, 0.0, 0.0, 0.5]  # one winner, one loser
    assert out.meta["shaper_metrics"]["reward/contrast_pairs"] == 1.0


def test_eta_zero_is_soft_consensus_only():
    rows = batch(["A", "B", "A", "A"], [0, 0, 0, 0], logprobs=logprob_rows([-1.0, -0.5, -3.0, -2.0]))
    out = build("shaper", "om_grpo", contrast_pairs=6, contrast_eta=0.0, judge="self_certainty")(rows)
    assert torch.allclose(out.rewards[:, 0], torch.tensor([2 / 3, 0.0, 2 / 3, 2 / 3]))
    with_contrast = build("shaper", "om_grpo", contrast_pairs=6, contrast_eta=0.2, judge="self_certainty")(rows)
    assert not torch.allclose(with_contrast.rewards[:, 0], out.rewards[:, 0])  # the knob does something


def _grpo_advantage(out):
    return GRPO()(AdvantageInputs(rewards=out.rewards, mask=out.completion_mask, group_ids=out.group_ids)).advantages


@pytest.mark.parametrize("judge", ["policy", "small_llm", "self_certainty"])
@pytest.mark.parametrize("eta", [0.0, 0.2])
def test_all_identical_answers_give_r_one_and_zero_advantage(judge, eta, tok, policy):
    # docs/methods.md §2.13 test 2, with DISTINCT log-probs (self-certainty would rank the rows) and judges
    # that always prefer one side: a unanimous group has no disagreeing pair, so w = .5, r ≡ 1, A ≡ 0.
    params = {"judge_fn": "tests.unit.rewards.test_om_grpo:judge_prefers_first"} if judge == "small_llm" else {}
    shaper = build("shaper", "om_grpo", contrast_pairs=6, contrast_eta=eta, judge=judge, **params)
    out = shaper(batch(["9"] * 4, [0] * 4, logprobs=logprob_rows([-1.0, -2.0, -0.5, -3.0])), policy=policy, tokenizer=tok)
    assert out.rewards[:, 0].tolist() == [1.0] * 4
    assert torch.equal(_grpo_advantage(out), torch.zeros(4, 3))


def test_pairing_agreeing_rows_is_the_old_nonzero_advantage():
    # The old rule (pairs: any, judge: self_certainty) on the same unanimous group ranks the rows by
    # their mean log-prob, so GRPO gives them non-zero advantages: what docs/methods.md §2.13 test 2 forbids.
    shaper = build("shaper", "om_grpo", contrast_pairs=6, judge="self_certainty", pairs="any")
    out = shaper(batch(["9"] * 4, [0] * 4, logprobs=logprob_rows([-1.0, -2.0, -0.5, -3.0])))
    assert _grpo_advantage(out).abs().max() > 1.0


class FakeClient:
    """A chat model that prefers the solution containing 'good' (or always says A)."""

    def __init__(self, always_a: bool = False) -> None:
        self.always_a, self.prompts = always_a, []

    def ask(self, prompt: str) -> str:
        self.prompts.append(prompt)
        a = prompt.split("Solution A:\n")[1].split("\nSolution B:")[0]
        return "better: A" if self.always_a or "good" in a else "Better: **B**"


def test_pairwise_judge_asks_both_orders_and_cancels_position_bias():
    judge = PairwiseJudge(FakeClient())
    assert judge(Problem(prompt="2+2="), "good 4", "bad 5") == 1.0 and judge(Problem(prompt="2+2="), "bad", "good") == 0.0
    biased = PairwiseJudge(FakeClient(always_a=True))
    assert biased(Problem(prompt="x"), "u", "v") == 0.5  # 'A' both times: A then B wins, a tie
    assert PairwiseJudge(FakeClient(always_a=True), both_orders=False)(Problem(prompt="x"), "u", "v") == 1.0
    prompt = judge.client.prompts[0]
    assert "Problem: 2+2=" in prompt and "Solution A:\ngood 4" in prompt and "Solution B:\nbad 5" in prompt
    assert judge.pop_stats() == {"calls": 4, "unparsable": 0, "error": 0}


def test_parse_preference():
    assert [parse_preference(r) for r in ("better: A", "Better: **b**.", "<think>A?</think> the better solution is B",
                                          "A", "(b)", "Solution B", "no idea", "")] == \
        [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, None, None]


def test_policy_judge_prompts_the_policy_and_a_tie_stands_for_garbage(tok, policy):
    # The untrained tiny policy answers garbage: every verdict is unparsable, so each pair is a tie
    # (no contrast), and the calls are counted: 2 disagreeing pairs (A–B, A–B of rows 0/2 vs 1) × 2 orders.
    shaper = build("shaper", "om_grpo", contrast_pairs=6, judge="policy", judge_max_new_tokens=4)
    assert shaper.needs_policy
    out = shaper(batch(["A", "B", "A"], [0, 0, 0]), policy=policy, tokenizer=tok)
    m = out.meta["shaper_metrics"]
    assert m["reward/judge_calls"] == 4 and m["reward/contrast_pairs"] == 2
    assert m["reward/judge_unparsable_frac"] + m["reward/judge_error_frac"] == 1.0
    assert out.row_stats["contrast"].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(BatchError, match="needs the policy"):
        shaper(batch(["A", "B"], [0, 0]))


def test_judge_model_over_http_through_the_teacher_client(monkeypatch):
    # small_llm with judge_model: the same client the LLM teacher uses, here with its HTTP call stubbed.
    from rlvr.rewards import teacher
    monkeypatch.setattr(teacher.ChatClient, "_ask_http", lambda self, prompt: FakeClient().ask(prompt))
    shaper = build("shaper", "om_grpo", contrast_pairs=1, contrast_eta=0.2, judge="small_llm",
                   judge_model={"backend": "http", "model": "judge-1"})
    rows = batch(["A", "B"], [0, 0])
    rows.texts = ["bad", "good"]
    out = shaper(rows)
    assert torch.allclose(out.row_stats["contrast"], torch.tensor([-0.1, 0.1]))
    assert out.meta["shaper_metrics"]["reward/judge_calls"] == 2


def judge_prefers_first(problem, text_a, text_b) -> float:  # a "small LLM" stand-in
    return 0.75


def test_small_llm_judge():
    # G = 2, answers A, B, P = 1: the pair (0, 1) with P(0 sounder) = .75 → w = [.75, .25]; cons (LOO) =
    # [0, 0]; r = 0 + 0.2·(w − .5) = [0.05, −0.05].
    shaper = build("shaper", "om_grpo", contrast_pairs=1, judge="small_llm",
                   judge_fn="tests.unit.rewards.test_om_grpo:judge_prefers_first")
    out = shaper(batch(["A", "B"], [0, 0]))
    assert torch.allclose(out.rewards[:, 0], torch.tensor([0.05, -0.05]))


def test_label_free_and_no_gold_read():
    parsed, gids, lp = ["A", "A", "B", "C"], [0, 0, 0, 0], logprob_rows([-1.0, -2.0, -1.5, -0.5])
    shaper = build("shaper", "om_grpo", contrast_pairs=6, judge="self_certainty")
    free = shaper(batch(parsed, gids, logprobs=lp))
    poisoned = shaper(batch(parsed, gids, verdict=[1, 0, 0, 1], answers=[PoisonAnswer()] * 4, logprobs=lp))
    assert torch.equal(free.rewards[:, 0], poisoned.rewards[:, 0])
    assert "reward/gold_accuracy" not in free.meta["shaper_metrics"]


def test_pairs_are_reproducible():
    rows = batch(["A", "B"] * 4, [0] * 8, logprobs=logprob_rows([-1, -2, -3, -4, -5, -6, -7, -8]))
    a = build("shaper", "om_grpo", contrast_pairs=3, judge="self_certainty")(rows)
    b = build("shaper", "om_grpo", contrast_pairs=3, judge="self_certainty")(rows)
    assert torch.equal(a.rewards, b.rewards)


def test_config_errors():
    with pytest.raises(ValueError, match="contrast_pairs"):
        build("shaper", "om_grpo")
    with pytest.raises(ValueError, match="exactly one of judge_model .* or judge_fn"):
        build("shaper", "om_grpo", contrast_pairs=2, judge="small_llm")
    with pytest.raises(ValueError, match="needs `model`"):
        build("shaper", "om_grpo", contrast_pairs=2, judge="small_llm", judge_model={"backend": "http"})
    with pytest.raises(ValueError, match="pairs"):
        build("shaper", "om_grpo", contrast_pairs=2, pairs="some")
    with pytest.raises(ValueError, match="consensus"):
        build("shaper", "om_grpo", contrast_pairs=2, consensus="soft")


def test_preset_masks_the_answer_span():
    # The third part of OM-GRPO: the preset pairs the reward with the answer-span weighting.
    algo = yaml.safe_load(PRESET.read_text())["algorithm"]
    assert [s["name"] for s in algo["shapers"]] == ["om_grpo"]
    assert [w["name"] for w in algo["weightings"]] == ["answer_mask"]
