"""Auto-bidding over one day of impression opportunities: a planner paces the budget, an executor bids.

A small simulator in the spirit of AIGB-R1 (docs/methods.md §2.21; the paper's simulator is not public, so
this one is the team's own, documented here). One advertiser with a budget ``B`` and a target cost
per acquisition ``C`` faces a day of ``P`` periods with ``K`` impression opportunities each.
Impression i has a conversion probability ``q_i`` (its value) and a market price ``c_i`` (the
highest competing bid). Auctions are second-price: bidding ``b_i >= c_i`` wins the impression, pays
``c_i`` and gains ``q_i`` expected conversions.

Turns: the **planner** states a budget split over the periods (text; the numbers are read, e.g.
``"60 40"`` or ``"0.6, 0.4"``, normalised to sum 1; none → an even split); then, period by period,
the **executor** states a bid scale ``α_p`` (the last number of its text, clipped to
``[0, bid_cap]``; none → ``default_scale``), and bids ``b_i = α_p · q_i · C`` on every impression of
the period (the linear bid under a CPA target).

Accounting (everything the golden test checks):
  * period cap ``cap_p = f_p·B + (unspent caps of earlier periods)`` (rollover);
  * impression i is won iff ``b_i >= c_i``, ``spend_p + c_i <= cap_p`` and ``spend + c_i <= B``;
    then ``spend += c_i``, ``value += q_i``; so total spend never exceeds ``B``;
  * ``cpa = spend / value`` (0 with no value), penalty ``min(1, (C / cpa)^β)`` (AuctionNet-style
    soft CPA constraint, β = ``cpa_power``; 1 when nothing is won);
  * score = ``value · penalty / value_ref`` with ``value_ref`` the value of a greedy reference (all
    impressions by ascending ``c_i/q_i``, taken while within the budget and the CPA target); the
    reference is not an upper bound, so a score can exceed 1 slightly.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from rlvr.envs.base import EnvError, Environment, episode_of, episode_score, register_env
from rlvr.registry import param, register
from rlvr.tasks.base import Task, TaskConfig
from rlvr.types import Problem, Score

_NUMBER = re.compile(r"\d*\.?\d+")
ROLE_PLANNER, ROLE_EXECUTOR = "planner", "executor"


def parse_numbers(text: str, limit: int) -> list[float]:
    """The first ``limit`` non-negative decimal numbers in ``text`` (signs are ignored: a bid or a
    share is never negative)."""
    out = []
    for m in _NUMBER.finditer(text):
        try:
            out.append(float(m.group()))
        except ValueError:  # pragma: no cover - the pattern only matches numbers
            continue
        if len(out) == limit:
            break
    return out


def budget_split(text: str, periods: int) -> list[float]:
    """Shares f_p (sum 1) from the planner's text: the first ``periods`` numbers, missing ones
    filled with the mean of the given ones, normalised; an even split when nothing usable is given."""
    nums = parse_numbers(text, periods)
    if not nums or sum(nums) <= 0:
        return [1.0 / periods] * periods
    fill = sum(nums) / len(nums)
    nums = nums + [fill] * (periods - len(nums))
    total = sum(nums)
    return [x / total for x in nums]


def market(problem: Problem, seed: int) -> list[tuple[int, float, float]]:
    """The day's impressions [(period, q, price)]: ``problem.meta['impressions']`` when given (tests),
    else drawn from ``problem.meta['market_seed']`` (falling back to ``seed``)."""
    meta = problem.meta
    if "impressions" in meta:
        return [(int(p), float(q), float(c)) for p, q, c in meta["impressions"]]
    rng = random.Random(f"bidding:{meta.get('market_seed', seed)}")
    out = []
    for p, level in enumerate(meta["levels"]):
        for _ in range(int(meta["impressions_per_period"])):
            q = round(rng.uniform(0.02, 0.3), 3)
            out.append((p, q, round(q * meta["cpa"] * level * rng.lognormvariate(0.0, 0.4), 3)))
    return out


def reference(impressions: list[tuple[int, float, float]], budget: float, cpa: float) -> tuple[float, list[float]]:
    """The greedy reference: cheapest conversions first (ascending price/q), each taken while the
    spend stays within the budget and the running CPA within the target. Returns (value, spend per
    period)."""
    periods = 1 + max(p for p, _, _ in impressions)
    spend, value, per = 0.0, 0.0, [0.0] * periods
    for p, q, c in sorted(impressions, key=lambda x: x[2] / x[1]):
        if spend + c <= budget and spend + c <= cpa * (value + q):
            spend, value = spend + c, value + q
            per[p] += c
    return value, per


@dataclass(frozen=True)
class BiddingConfig:
    bid_cap: float = param(5.0, "largest bid scale α an executor turn can set (larger numbers are clipped)")
    default_scale: float = param(1.0, "bid scale of an executor turn whose text holds no number")
    cpa_power: float = param(2.0, "β of the CPA penalty min(1, (C/cpa)^β)")
    planner: bool = param(True, "start with a planner turn (budget split); False = executor turns only, even split")

    def __post_init__(self) -> None:
        if self.bid_cap <= 0 or self.default_scale < 0 or self.cpa_power < 0:
            raise ValueError("bidding: bid_cap must be > 0, default_scale and cpa_power >= 0")


@register_env("auto_bidding")
class AutoBidding(Environment):
    """One advertiser's day: a planner turn (budget split) then one executor turn (bid scale) per period.

    ``info``: ``spend``, ``value``, ``cpa``, ``penalty``, ``value_ref``, ``wins``, ``split``,
    ``scales``, ``period_spend``. Roles: "planner" then "executor".
    """

    Config = BiddingConfig

    def reset(self, problem: Problem, seed: int) -> str:
        meta = problem.meta
        self.budget, self.cpa = float(meta["budget"]), float(meta["cpa"])
        self.impressions = market(problem, seed)
        self.periods = 1 + max(p for p, _, _ in self.impressions)
        self.turn, self.rollover = 0, 0.0
        self.info = {"spend": 0.0, "value": 0.0, "cpa": 0.0, "penalty": 1.0, "wins": 0, "split": None,
                     "scales": [], "period_spend": [],
                     "value_ref": reference(self.impressions, self.budget, self.cpa)[0]}
        if not self.config.planner:
            self.info["split"] = [1.0 / self.periods] * self.periods
        self._done = False
        return problem.prompt

    def role(self) -> str:
        return ROLE_PLANNER if self.info.get("split") is None else ROLE_EXECUTOR

    def step(self, action: str) -> tuple[str, float, bool]:
        if not hasattr(self, "impressions"):
            raise EnvError("auto_bidding: step before reset")
        if self._done:
            raise EnvError("auto_bidding: step after the episode ended")
        if self.info["split"] is None:
            self.info["split"] = budget_split(action, self.periods)
            return "\nbid1:", 0.0, False
        nums = parse_numbers(action, 64)
        scale = min(nums[-1], self.config.bid_cap) if nums else self.config.default_scale
        self._run_period(self.turn, scale)
        self.turn += 1
        self._done = self.turn == self.periods
        obs = f"\nspent {self.info['spend']:.2f} won {self.info['value']:.2f} bid{self.turn + 1}:"
        return obs, self.score(), self._done

    def _run_period(self, p: int, scale: float) -> None:
        info = self.info
        cap = info["split"][p] * self.budget + self.rollover
        spent = 0.0
        for period, q, c in self.impressions:
            if period != p:
                continue
            if scale * q * self.cpa >= c and spent + c <= cap and info["spend"] + c <= self.budget:
                spent += c
                info["spend"] += c
                info["value"] += q
                info["wins"] += 1
        self.rollover = cap - spent
        info["scales"].append(scale)
        info["period_spend"].append(spent)

    def score(self) -> float:
        """value · penalty / value_ref (0 when the reference wins nothing)."""
        info = self.info
        value, spend = info["value"], info["spend"]
        info["cpa"] = spend / value if value > 0 else 0.0
        info["penalty"] = min(1.0, (self.cpa / info["cpa"]) ** self.config.cpa_power) if info["cpa"] > 0 else 1.0
        return value * info["penalty"] / info["value_ref"] if info["value_ref"] > 0 else 0.0


@dataclass(frozen=True)
class AutoBiddingTaskConfig(TaskConfig):
    periods: int = param(2, "periods of the day (one executor turn each)")
    impressions_per_period: int = param(24, "impression opportunities per period")
    budget_range: tuple = param((8, 20), "the budget B is an integer drawn uniformly from [low, high]")
    cpa_range: tuple = param((3, 8), "the CPA target C is an integer drawn uniformly from [low, high]")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("budget_range", "cpa_range"):
            lo, hi = (int(x) for x in getattr(self, name))
            if not 0 < lo <= hi:
                raise ValueError(f"auto_bidding: {name} must be [low, high] with 0 < low <= high")
            object.__setattr__(self, name, (lo, hi))
        if self.periods < 1 or self.impressions_per_period < 1:
            raise ValueError("auto_bidding: periods and impressions_per_period must be >= 1")


@register("task", "auto_bidding")
class AutoBiddingTask(Task):
    """Advertiser days for the ``auto_bidding`` environment (AIGB-R1 / D-GRPO, docs/methods.md §2.21).

    Prompt ``budget 12 cpa 5 load 0.8,1.3 plan:`` (``load``: each period's price level, public).
    Differs from arithmetic-style tasks:
      * the reward is a simulator score, not a verdict: an episode row (``multi_turn`` sampler) is
        scored by its episode reward; a single completion (evaluation) is read as a whole strategy:
        its numbers are the budget split and its last number the bid scale of every period;
      * the demonstration ``"60 40 x1"`` is the split proportional to each period's reference spend
        and the scale 1 (the planner reads the first P numbers, an executor the last one).
    Shapes: n/a.
    """

    Config = AutoBiddingTaskConfig
    needs_timeout = False  # a bounded simulation
    max_new_tokens: ClassVar[int] = 16

    def sample(self, rng: random.Random) -> Problem:
        cfg = self.config
        budget, cpa = rng.randint(*cfg.budget_range), rng.randint(*cfg.cpa_range)
        levels = [round(rng.uniform(0.6, 1.4), 1) for _ in range(cfg.periods)]
        meta: dict[str, Any] = {"budget": budget, "cpa": cpa, "levels": levels,
                                "impressions_per_period": cfg.impressions_per_period,
                                "market_seed": rng.randrange(2**31)}
        prompt = f"budget {budget} cpa {cpa} load {','.join(str(x) for x in levels)} plan:"
        return Problem(prompt=prompt, answer=None, meta=meta)

    def verify(self, problem: Problem, completion: str) -> Score:
        if episode_of(problem) is not None:
            return episode_score(problem)
        env = AutoBidding()
        env.reset(problem, 0)
        env.step(completion)
        nums = parse_numbers(completion, 64)
        scale = f"{nums[-1]}" if nums else ""
        score, done = 0.0, False
        while not done:
            _, score, done = env.step(scale)
        return Score(score, parsed=scale or None)

    def demonstration(self, problem: Problem) -> str:
        _, per = reference(market(problem, 0), float(problem.meta["budget"]), float(problem.meta["cpa"]))
        total = sum(per) or 1.0
        return " ".join(str(round(100 * s / total)) for s in per) + " x1"
