"""KGPS (docs/methods.md §2.17): Kalman predict/update, expected utility, selection and state."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from rlvr.registry import build
from rlvr.selection.kgps import KGPS, KGPSConfig, expected_utility, kalman_predict, kalman_update
from rlvr.types import Problem


class ListTask:
    """A finite task: ``rows`` gives the pool, ``problems`` the same list (order ignored by KGPS)."""

    def __init__(self, problems: list[Problem]) -> None:
        self._rows = problems

    def rows(self, split: str) -> list[Problem]:
        return list(self._rows)

    def problems(self, n: int, seed: int, split: str = "train") -> list[Problem]:
        return self._rows[:n]


def _task(n: int) -> ListTask:
    return ListTask([Problem(f"q{i}", "1", uid=f"q{i}") for i in range(n)])


def _feedback(results: dict[str, list[float]], metrics: dict | None = None) -> dict:
    problems = [Problem(u, "1", uid=u) for u, rs in results.items() for _ in rs]
    rewards = torch.tensor([[r] for rs in results.values() for r in rs])
    return {"problems": problems, "rewards": rewards, "metrics": {} if metrics is None else metrics}


def test_predict_then_update_matches_methods_golden():
    # docs/methods.md §2.17 test 1: μ=0, P=1, Q=0.1 → P=1.1; k=6, n=8:
    #   z = log(6.5/2.5) = 0.95551; p̃ = 6.5/9 = 0.72222; R = 1/(9·0.72222·0.27778) = 0.55385;
    #   K = 1.1/(1.1 + 0.55385) = 0.66512; μ' = 0.66512·0.95551 = 0.63553; P' = (1 − K)·1.1 = 0.36837.
    var = kalman_predict(1.0, 0.1)
    mean, var = kalman_update(0.0, var, 6, 8)
    assert mean == pytest.approx(0.6355, abs=1e-4)
    assert var == pytest.approx(0.3684, abs=1e-4)


def test_two_step_filter_by_hand():
    # Through the selector, q0 = 0.1, κ = 0 (Q = 0.1 each step), P_0 = 1; observe = update then predict.
    # Step 1: k=2 of n=2. z = log(2.5/0.5) = log 5 = 1.609438; p̃ = 2.5/3; R = 1/(3·(5/6)(1/6)) = 2.4;
    #   K = 1/(1 + 2.4) = 0.294118; μ = 0.294118·1.609438 = 0.473364; P = 0.705882; predict → 0.805882.
    # Step 2: k=0 of n=2. z = log(0.5/2.5) = −1.609438; R = 2.4 (symmetric);
    #   K = 0.805882/(0.805882 + 2.4) = 0.251376; μ = 0.473364 + 0.251376·(−1.609438 − 0.473364)
    #   = 0.473364 − 0.523567 = −0.050203; P = (1 − 0.251376)·0.805882 = 0.603303; predict → 0.703303.
    sel = KGPS(KGPSConfig(q0=0.1, kappa=0.0, pool_size=0))
    sel.observe(_feedback({"a": [1.0, 1.0]}))
    assert sel.posterior("a") == pytest.approx((0.473364, 0.805882), abs=1e-6)
    sel.observe(_feedback({"a": [0.0, 0.0]}))
    assert sel.posterior("a") == pytest.approx((-0.050203, 0.703303), abs=1e-6)
    # An untouched prompt kept the prior mean and gained Q twice: 1 + 0.2.
    assert sel.posterior("never") == pytest.approx((0.0, 1.2))


def test_process_noise_follows_update_size():
    # Q_t = q0 + κ·u_t; u_t = the trainer's KL(π_t‖π_{t−1}) (kl), ‖Δθ‖² (param_sq_norm) or grad_norm²
    # (grad_norm_sq). q0=0.01, κ=2: kl u = 0.05 → Q = 0.11; param_sq_norm u = 0.2 → Q = 0.41;
    # grad_norm_sq u = 0.3² = 0.09 → Q = 0.19; the loss's approx_kl is not read. Untouched P = 1 + Q.
    for magnitude, expected in (("kl", 0.11), ("param_sq_norm", 0.41), ("grad_norm_sq", 0.19), ("none", 0.01)):
        sel = KGPS(KGPSConfig(q0=0.01, kappa=2.0, update_magnitude=magnitude, pool_size=0))
        metrics = {"optim/policy_kl": 0.05, "optim/param_delta_sq": 0.2, "optim/grad_norm": 0.3,
                   "loss/approx_kl": 7.0}
        sel.observe(_feedback({"a": [1.0]}, metrics))
        assert sel.posterior("b")[1] == pytest.approx(1.0 + expected)
        assert metrics["select/kgps_q"] == pytest.approx(expected)
        assert sel.update_measure == {"kl": "policy_kl", "param_sq_norm": "param_delta_sq"}.get(magnitude)


def test_unselected_variance_grows_linearly_and_static_without_noise():
    # docs/methods.md §2.17 tests 2 and 3: a never-selected prompt's P = P_0 + Σ Q_t; κ = q0 = 0 → P only shrinks.
    sel = KGPS(KGPSConfig(q0=0.05, kappa=1.0, pool_size=0))
    for t, kl in enumerate([0.1, 0.2, 0.0], 1):
        sel.observe(_feedback({"a": [1.0, 0.0]}, {"optim/policy_kl": kl}))
    assert sel.posterior("z")[1] == pytest.approx(1.0 + 0.15 + 0.3)
    static = KGPS(KGPSConfig(q0=0.0, kappa=0.0, pool_size=0))
    variances = []
    for _ in range(3):
        static.observe(_feedback({"a": [1.0, 0.0]}, {"optim/policy_kl": 5.0}))
        variances.append(static.posterior("a")[1])
    assert variances[0] > variances[1] > variances[2]
    assert static.posterior("z")[1] == 1.0


def test_expected_utility_derived_values():
    # docs/methods.md §2.17 (DERIVED, verified): E[p(1−p)] at μ=0 falls with P (0.2494 → 0.1514), at μ=3
    # rises with P (0.0453 → 0.0779): uncertain easy/hard prompts get revisited.
    u = expected_utility(np.array([0.0, 0.0, 3.0, 3.0]), np.array([0.01, 4.0, 0.01, 4.0]))
    assert u == pytest.approx([0.2494, 0.1514, 0.0453, 0.0779], abs=1e-4)
    # sqrt utility at P → 0 is sqrt(p(1−p)) at σ(μ): μ=0 → 0.5.
    assert expected_utility(np.array([0.0]), np.array([1e-12]), "sqrt(p(1-p))")[0] == pytest.approx(0.5)


def test_selects_intermediate_over_solved_and_hopeless():
    # Four prompts, four visits of 16 rollouts each, q0 = κ = 0: solved (16/16), hopeless (0/16),
    # intermediate (8/16) and a second intermediate (7/16). Per visit of 16/16: z = log(16.5/0.5) =
    # 3.4965, R = 17/(16.5·0.5) = 2.0606; four updates from (0, 1) give μ = ±2.3077, P = 0.34 and
    # U = E[p(1−p)] = 0.0886; 8/16: z = 0, R = 0.2353 → μ = 0, P = 0.0556, U = 0.2466; 7/16 → U = 0.2437.
    # Top-2 must be the two intermediate prompts.
    task = ListTask([Problem(u, "1", uid=u) for u in ("solved", "hopeless", "mid", "mid2")])
    sel = KGPS(KGPSConfig(q0=0.0, kappa=0.0, pool_size=0))
    for _ in range(4):
        sel.observe(_feedback({"solved": [1.0] * 16, "hopeless": [0.0] * 16, "mid": [1.0] * 8 + [0.0] * 8,
                               "mid2": [1.0] * 7 + [0.0] * 9}))
    picked = {p.uid for p in sel.select(task, 2, step=1, seed=0)}
    assert picked == {"mid", "mid2"}
    u = sel.utilities(task.rows("train"))
    assert u == pytest.approx([0.0886, 0.0886, 0.2466, 0.2437], abs=1e-4)


def test_uncertain_extreme_prompt_is_revisited():
    # A prompt solved 2/2 once long ago (large P after much process noise) beats one solved 16/16
    # recently (small P) although both have high estimated success: E[p(1−p)] grows with P far from 0.
    task = ListTask([Problem(u, "1", uid=u) for u in ("old", "fresh")])
    sel = KGPS(KGPSConfig(q0=0.0, kappa=1.0, update_magnitude="kl", pool_size=0))
    sel.observe(_feedback({"old": [1.0, 1.0]}, {"optim/policy_kl": 0.0}))
    for _ in range(3):
        sel.observe(_feedback({"fresh": [1.0] * 16}, {"optim/policy_kl": 1.0}))
    (m_old, p_old), (m_new, p_new) = sel.posterior("old"), sel.posterior("fresh")
    assert p_old > p_new
    assert [p.uid for p in sel.select(task, 1, step=4, seed=0)] == ["old"]


def test_proportional_selection_is_seeded_and_no_extra_problems():
    sel = KGPS(KGPSConfig(selection="proportional", pool_size=0))
    task = _task(10)
    a = [p.uid for p in sel.select(task, 4, step=0, seed=5)]
    b = [p.uid for p in sel.select(task, 4, step=0, seed=5)]
    assert a == b and len(set(a)) == 4


def test_state_round_trips_through_json():
    sel = KGPS(KGPSConfig(q0=0.01, kappa=0.5, pool_size=0))
    sel.observe(_feedback({"a": [1.0, 0.0, 1.0], "b": [0.0]}, {"optim/policy_kl": 0.0123}))
    again = build("selector", "kgps", q0=0.01, kappa=0.5, pool_size=0)
    again.load_state_dict(json.loads(json.dumps(sel.state_dict())))
    assert again.state_dict() == sel.state_dict()
    for uid in ("a", "b", "never"):
        assert again.posterior(uid) == sel.posterior(uid)
    assert not math.isnan(again.posterior("a")[0])
