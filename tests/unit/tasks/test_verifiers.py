"""Verifiers: gold answers score 1.0, wrong ones 0, adversarial completions end within the limit with 0
and a recorded reason; a task may pick its verifier; weight-0 objectives are not optimised."""

from __future__ import annotations

import json
import time

import pytest
import torch

from rlvr.advantages.grpo import GRPO
from rlvr.registry import RegistryError, build, names
from rlvr.rewards.answer import extract_answer, normalise
from rlvr.rewards.verifiers import Verifier, last_number, nesting_depth, to_number
from rlvr.types import AdvantageInputs, Problem, Score

VERIFIERS = ["exact", "numeric", "math_verify"]


def test_registered():
    assert set(VERIFIERS) <= set(names("verifier"))
    with pytest.raises(ValueError, match="isolation"):
        build("verifier", "exact", isolation="fiber")
    with pytest.raises(RegistryError, match="unknown parameter"):
        build("verifier", "numeric", tol=1.0)


@pytest.mark.parametrize("name", VERIFIERS)
@pytest.mark.parametrize("completion", ["so the answer: 17", "we get \\boxed{17}", "17",
                                        "... answer: 17 confidence: 0.8"])
def test_gold_answer_scores_one(name, completion):
    score = build("verifier", name)(Problem("q", "17"), completion)
    assert score.value == 1.0 and not score.meta.get("error"), score


@pytest.mark.parametrize("name", VERIFIERS)
@pytest.mark.parametrize("completion", ["answer: 18", "\\boxed{-17}", "no idea", ""])
def test_wrong_answer_scores_zero(name, completion):
    assert build("verifier", name)(Problem("q", "17"), completion).value == 0.0


def test_confidence_is_not_read_as_the_answer():
    # Without stripping, the last number is the confidence 0.8, not the answer 17.
    numeric = build("verifier", "numeric", extract="full")
    assert numeric(Problem("q", "17"), "17 confidence: 0.8").value == 1.0
    raw = build("verifier", "numeric", extract="full", strip_confidence=False)
    assert raw(Problem("q", "17"), "17 confidence: 0.8").value == 0.0


def test_exact_normalisation():
    v = build("verifier", "exact", extract="full")
    assert normalise("  $Paris$. ") == "paris"
    assert v(Problem("q", "Paris"), " $PARIS$. ").value == 1.0
    assert v(Problem("q", "17"), "17.0").value == 0.0  # exact is textual; numeric would accept it


def test_numeric_tolerance_and_number_forms():
    v = build("verifier", "numeric", abs_tol=1e-3, rel_tol=0.0)
    assert v(Problem("q", "0.5"), "answer: 0.5004").value == 1.0  # |diff| = 4e-4 <= 1e-3
    assert v(Problem("q", "0.5"), "answer: 0.502").value == 0.0  # 2e-3 > 1e-3
    rel = build("verifier", "numeric", abs_tol=0.0, rel_tol=0.01)
    assert rel(Problem("q", "1000"), "answer: 1,009").value == 1.0  # 9 <= 0.01 * 1000
    assert rel(Problem("q", "1000"), "answer: 1,011").value == 0.0
    assert build("verifier", "numeric")(Problem("q", "0.75"), "answer: 3/4").value == 1.0
    assert to_number("2.5e3") == 2500.0 and to_number("1/0") is None and to_number("abc") is None
    assert last_number("7+5=12;#12") == "12"


def test_math_verify_symbolic_equivalence():
    v = build("verifier", "math_verify")
    assert v(Problem("q", "\\frac{1}{2}"), "so it is $0.5$").value == 1.0
    assert v(Problem("q", "\\frac{1}{2}"), "so it is $0.25$").value == 0.0


def test_extract_answer_modes():
    text = "steps\nanswer: 42\nthe end"
    assert extract_answer(text) == "42"
    assert extract_answer("x \\boxed{\\frac{1}{2}} answer: 3") == "\\frac{1}{2}"  # boxed wins
    assert extract_answer("just 5") == "just 5"
    assert extract_answer("no marker", mode="marker") is None
    assert nesting_depth("((a)[{b}])") == 3


def test_verifier_error_scores_zero_with_reason():
    score = build("verifier", "numeric")(Problem("q", "seventeen"), "answer: 17")
    assert score.value == 0.0 and "not a number" in score.meta["error"]
    assert "no gold answer" in build("verifier", "exact")(Problem("q", None), "17").meta["error"]

    class Exploding(Verifier):
        def check(self, problem, text):
            raise RuntimeError("parser exploded")

    score = Exploding()(Problem("q", "1"), "1")
    assert score.value == 0.0 and score.meta["error"] == "RuntimeError: parser exploded"


# Adversarial completions: huge exponents (sympy would compute a 10^8-digit power), deep nesting,
# a 1 MB string. Each must come back with 0 and a reason within a generous bound (5x the limit + 2 s
# for the fork), which is a guard against hangs, not a timing claim.
ADVERSARIAL = {
    "power_tower": "9**9**9**9",
    "latex_tower": "$9^{9^{9^{9}}}$",
    "nested_parens": "(" * 5000 + "1" + ")" * 5000,
    "nested_frac": "\\frac{" * 3000 + "1" + "}{2}" * 3000,
    "one_megabyte": "7" * 1_000_000,
}


@pytest.mark.parametrize("name", VERIFIERS)
@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_adversarial_returns_zero_within_limit(name, kind):
    limit = 1.0
    verifier = build("verifier", name, timeout_s=limit)
    start = time.monotonic()
    score = verifier(Problem("q", "17"), ADVERSARIAL[kind])
    assert time.monotonic() - start < 5 * limit + 2.0
    assert score.value == 0.0
    if name == "math_verify" or kind in ("nested_parens", "nested_frac", "one_megabyte"):
        assert score.meta.get("error"), score  # math-verify's towers time out; size/nesting guards fire first
    if kind == "one_megabyte":
        assert "max_chars" in score.meta["error"]


def test_power_tower_times_out_in_process_isolation():
    score = build("verifier", "math_verify", timeout_s=1.0)(Problem("q", "17"), "9**9**9**9")
    assert score.meta["error"] == "timeout after 1 s"


def test_dataset_task_picks_its_verifier(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"p{i}", "answer": "0.5"}) for i in range(4)) + "\n")
    p = Problem("q", "0.5")
    numeric = build("task", "dataset", path=str(path), verifier="numeric")
    assert numeric.verify(p, "answer: 0.5000000001").value == 1.0
    exact = build("task", "dataset", path=str(path), verifier="exact")
    assert exact.verify(p, "answer: 1/2").value == 0.0  # textual
    assert build("task", "dataset", path=str(path)).verify(p, "answer: $\\frac{1}{2}$").value == 1.0  # math_verify


def test_weight_zero_objective_is_logged_not_optimised():
    # rewards (N=4, K=2): objective 1 differs between the two batches; with weights (1, 0) the
    # scalar reward is objective 0 alone, so GRPO's advantages are identical.
    mask = torch.ones(4, 3, dtype=torch.bool)
    gid = torch.tensor([0, 0, 1, 1])
    w = torch.tensor([1.0, 0.0])
    a = AdvantageInputs(rewards=torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 5.0], [0.0, 0.0]]), mask=mask,
                        group_ids=gid, reward_weights=w)
    b = AdvantageInputs(rewards=torch.tensor([[1.0, 9.0], [0.0, -3.0], [1.0, 0.0], [0.0, 2.0]]), mask=mask,
                        group_ids=gid, reward_weights=w)
    assert torch.equal(a.scalar_rewards(), torch.tensor([1.0, 0.0, 1.0, 0.0]))
    assert torch.equal(GRPO()(a).advantages, GRPO()(b).advantages)
    # ...while a non-zero weight on objective 1 does change them (the check can fail).
    c = AdvantageInputs(rewards=b.rewards, mask=mask, group_ids=gid, reward_weights=torch.tensor([1.0, 0.5]))
    assert not torch.equal(GRPO()(a).advantages, GRPO()(c).advantages)


def test_score_type_is_returned():
    assert isinstance(build("verifier", "exact")(Problem("q", "a"), "a"), Score)


def test_verl_compute_score():
    from rlvr.integrations.verl import compute_score, make_compute_score

    # called with keywords as verl's reward managers do; reward_kwargs (verifier=...) merged in
    got = compute_score(data_source="gsm8k", solution_str="answer: 18", ground_truth="18", extra_info={},
                        verifier="numeric")
    assert got == {"score": 1.0, "acc": 1.0, "verifier_error": 0.0}
    assert compute_score("math", "\\boxed{\\frac{1}{2}}", "0.5")["score"] == 1.0  # default math_verify
    assert compute_score("x", "answer: 1", "2", {"rlvr_verifier": "exact"})["score"] == 0.0  # per-row override
    bad = make_compute_score("math_verify", timeout_s=1.0)("math", "9**9**9**9", "17")
    assert bad == {"score": 0.0, "acc": 0.0, "verifier_error": 1.0}


@pytest.mark.peers
def test_verl_compute_score_signature_matches_default():
    import inspect

    reward_score = pytest.importorskip("verl.utils.reward_score")
    from rlvr.integrations.verl import compute_score

    ours = list(inspect.signature(compute_score).parameters)[:4]
    assert ours == list(inspect.signature(reward_score.default_compute_score).parameters)[:4]


# Cases from Math-Verify's own tests (tests/test_all.py: test_precision, test_set_rel_assymetry;
# tests/test_strict.py): each option turns the verdict around on its case.
MATH_VERIFY_OPTIONS = [
    ("float_rounding", 4, r"$\frac{1}{3}$", "$0.3333$"),  # rounded to 4 places: equal; to 6: not
    ("float_rounding", 3, r"$\frac{1}{3}$", "$0.333$"),
    ("strict", False, "$f(x)$", "$f(y)$"),  # strict compares variable names
    ("allow_set_relation_comp", True, r"$x \in [-2,7]$", r"$-2 \le x \le 7$"),  # set gold vs inequality
]


@pytest.mark.parametrize("option,value,gold,pred", MATH_VERIFY_OPTIONS)
def test_math_verify_options_change_the_verdict(option, value, gold, pred):
    default = build("verifier", "math_verify", isolation="thread")(Problem("q", gold), pred)
    changed = build("verifier", "math_verify", isolation="thread", **{option: value})(Problem("q", gold), pred)
    assert default.value == 0.0 and not default.meta.get("error"), default
    assert changed.value == 1.0, changed


def test_math_verify_options_checked():
    with pytest.raises(ValueError, match="float_rounding"):
        build("verifier", "math_verify", float_rounding=-1)
    task_default = build("verifier", "math_verify").config
    assert (task_default.float_rounding, task_default.strict, task_default.allow_set_relation_comp) == (6, True, False)
