"""CAS: confidence-based adaptive test-time scaling, and majority voting at the same sample budget.

Paper: C3RL + CAS (arXiv:2607.01612), docs/methods.md §2.28. The procedure is a RECONSTRUCTION from
the abstract; its thresholds are required options (docs/methods.md §2.28 lists no defaults).

Rule, per problem: draw one sample; if its confidence ``c ≥ tau_stop`` answer with it. Otherwise
draw up to ``max_extra`` more, one at a time, and stop as soon as the confidence-weighted vote share
of the leading answer, ``max_a W_a / Σ_a W_a`` with ``W_a = Σ_{i: a_i = a} c_i``, exceeds
``tau_vote``. The answer is ``argmax_a W_a`` (ties: the answer seen first). Samples without a parsed
answer do not vote; when every voting weight is 0 (no sample states a confidence) the vote falls
back to plain counts. A problem is answered correctly when a sample carrying the chosen answer was
verified correct (as ``maj@k`` in :func:`rlvr.eval.evaluate`).

Batched: round r draws one sample for every problem still sampling, in one call of ``draw``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from rlvr.registry import param

CONFIDENCE_SOURCES = ("stated", "sequence")
STOPS = ("confident", "vote", "budget")


@dataclass(frozen=True)
class CASConfig:
    tau_stop: float | None = param(None, "required: stop after the first sample when its confidence is >= tau_stop")
    tau_vote: float | None = param(None, "required: stop once the leading answer's confidence-weighted vote "
                                         "share exceeds tau_vote")
    max_extra: int | None = param(None, "required: most extra samples N after the first (budget N + 1)")
    confidence: str = param("stated", "stated (parsed 'confidence: 0.8' from the completion) | sequence "
                                      "(exp of the mean token log-prob, for models that state none)")
    missing_confidence: float = param(0.0, "confidence of a sample that states none (stated source): 0 never "
                                           "stops early and does not weigh in the vote")

    def __post_init__(self) -> None:
        missing = [n for n in ("tau_stop", "tau_vote", "max_extra") if getattr(self, n) is None]
        if missing:
            raise ValueError(f"cas: {missing} are required (docs/methods.md §2.28 gives no defaults)")
        if self.max_extra < 0:
            raise ValueError(f"cas: max_extra must be >= 0, got {self.max_extra}")
        if self.confidence not in CONFIDENCE_SOURCES:
            raise ValueError(f"cas: confidence must be one of {CONFIDENCE_SOURCES}, got '{self.confidence}'")
        if not 0.0 <= self.missing_confidence <= 1.0:
            raise ValueError(f"cas: missing_confidence must be in [0, 1], got {self.missing_confidence}")


@dataclass
class Sample:
    """One sampled answer: the parsed answer (None = none), its confidence in [0, 1], its verdict."""

    answer: str | None
    confidence: float
    correct: bool


@dataclass
class CASOutcome:
    answer: str | None
    correct: bool
    samples: list[Sample] = field(default_factory=list)
    stop: str = "budget"  # confident | vote | budget

    @property
    def num_samples(self) -> int:
        return len(self.samples)


def weighted_vote(samples: Sequence[Sample]) -> tuple[str | None, float]:
    """``(argmax_a W_a, max_a W_a / Σ W)`` with ``W_a`` the summed confidence of answer a; counts
    replace weights when all weights are 0; ``(None, 0.0)`` when no sample has an answer."""
    voters = [s for s in samples if s.answer is not None]
    if not voters:
        return None, 0.0
    use_counts = all(s.confidence <= 0.0 for s in voters)
    weights: dict[str, float] = {}
    for s in voters:
        key = s.answer.strip()
        weights[key] = weights.get(key, 0.0) + (1.0 if use_counts else s.confidence)
    best = max(weights, key=lambda a: weights[a])  # max keeps the first of equal weights (insertion order)
    total = sum(weights.values())
    return best, (weights[best] / total if total > 0 else 0.0)


def chosen_correct(samples: Sequence[Sample], answer: str | None) -> bool:
    return answer is not None and any(s.answer is not None and s.answer.strip() == answer and s.correct
                                      for s in samples)


def run_cas(draw: Callable[[list[int], int], list[Sample]], num_problems: int, cfg: CASConfig) -> list[CASOutcome]:
    """CAS for ``num_problems`` problems; ``draw(indices, round)`` returns one new sample per index."""
    outcomes = [CASOutcome(None, False) for _ in range(num_problems)]
    active = list(range(num_problems))
    for round_ in range(cfg.max_extra + 1):
        if not active:
            break
        new = draw(active, round_)
        if len(new) != len(active):
            raise ValueError(f"cas: draw returned {len(new)} samples for {len(active)} problems")
        still = []
        for i, sample in zip(active, new):
            out = outcomes[i]
            out.samples.append(sample)
            if round_ == 0 and sample.confidence >= cfg.tau_stop:
                out.stop = "confident"
            elif round_ > 0 and weighted_vote(out.samples)[1] > cfg.tau_vote:
                out.stop = "vote"
            else:
                still.append(i)
        active = still
    for out in outcomes:
        out.answer = weighted_vote(out.samples)[0]
        out.correct = chosen_correct(out.samples, out.answer)
    return outcomes


def equal_budget(total: int, num_problems: int) -> list[int]:
    """Samples per problem for majority voting with exactly ``total`` samples: ⌊total/P⌋ each, one more
    for the first ``total mod P`` problems."""
    base, extra = divmod(total, num_problems)
    return [base + (1 if i < extra else 0) for i in range(num_problems)]


def majority_correct(samples: Sequence[Sample]) -> bool:
    """Plain (unweighted) majority over parsed answers, right when a sample with that answer is correct."""
    counted = [Sample(s.answer, 0.0, s.correct) for s in samples]  # weights 0 → counts
    return chosen_correct(samples, weighted_vote(counted)[0])


def summarize(outcomes: Sequence[CASOutcome], majority: Sequence[bool]) -> dict[str, float]:
    """CAS accuracy, samples used and stop reasons, with majority voting's accuracy at the same total budget."""
    p = len(outcomes)
    total = sum(o.num_samples for o in outcomes)
    out = {"cas/accuracy": sum(o.correct for o in outcomes) / p, "cas/mean_samples": total / p,
           "budget/total_samples": float(total), "majority/accuracy": sum(majority) / len(majority),
           "majority/mean_samples": total / p}
    out.update({f"cas/stop_{s}": sum(o.stop == s for o in outcomes) / p for s in STOPS})
    return out


def sequence_confidence(logprobs: Any, mask: Any) -> list[float]:
    """Per row, ``exp(mean log-prob)`` of the generated tokens: the geometric-mean token probability."""
    lengths = mask.sum(-1).clamp(min=1)
    mean = (logprobs * mask).sum(-1) / lengths
    return [math.exp(float(v)) for v in mean]


# --- with a model ------------------------------------------------------------------------------

def sample_answers(model: Any, tokenizer: Any, task: Any, problems: Sequence[Any], *, confidence: str,
                   missing_confidence: float, max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
                   seed: int = 0, batch_size: int = 64) -> tuple[list[Sample], list[str], list[Any]]:
    """One sampled completion per problem (repeat a problem for more): samples, texts and verifier scores."""
    from rlvr.models.loading import render_prompt
    from rlvr.rewards.answer import parse_confidence
    from rlvr.rollout.hf import generate
    from rlvr.tasks import verify_all

    samples, texts, scores = [], [], []
    for b, lo in enumerate(range(0, len(problems), batch_size)):
        chunk = list(problems[lo:lo + batch_size])
        gen = generate(model, tokenizer, [render_prompt(tokenizer, p) for p in chunk],
                       max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, do_sample=True,
                       seed=seed + b)
        verdicts = verify_all(task, chunk, gen.texts)
        if confidence == "sequence":
            conf = sequence_confidence(gen.logprobs, gen.completion_mask)
        else:
            conf = [missing_confidence if (c := parse_confidence(t)) is None else c for t in gen.texts]
        samples += [Sample(s.parsed, c, s.value >= 0.5) for s, c in zip(verdicts, conf)]
        texts += gen.texts
        scores += verdicts
    return samples, texts, scores


def cas_evaluate(model: Any, tokenizer: Any, task: Any, problems: Sequence[Any], cfg: CASConfig, *,
                 max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
                 batch_size: int = 64, num_bins: int = 10) -> dict[str, Any]:
    """CAS on ``problems`` with real, adaptive sampling (round r samples only the problems still
    unsure), then majority voting over fresh samples with exactly the same total number of samples
    (:func:`equal_budget`). Calibration metrics of the CAS samples are added when they state confidence."""
    if not problems:
        raise ValueError("cas_evaluate: no problems")
    opts = dict(confidence=cfg.confidence, missing_confidence=cfg.missing_confidence, max_new_tokens=max_new_tokens,
                temperature=temperature, top_p=top_p, batch_size=batch_size)
    texts: list[str] = []
    scores: list[Any] = []

    def draw(indices: list[int], round_: int) -> list[Sample]:
        got, t, s = sample_answers(model, tokenizer, task, [problems[i] for i in indices], seed=seed + 1000 * round_,
                                   **opts)
        texts.extend(t)
        scores.extend(s)
        return got

    from rlvr.eval.calibration import calibration_metrics

    outcomes = run_cas(draw, len(problems), cfg)
    budgets = equal_budget(sum(o.num_samples for o in outcomes), len(problems))
    k = max(budgets)
    pool, _, _ = sample_answers(model, tokenizer, task, [p for p in problems for _ in range(k)],
                                seed=seed + 10**6, **opts)
    majority = [majority_correct(pool[i * k:i * k + n]) for i, n in enumerate(budgets)]
    return {"strategy": "cas", "num_problems": len(problems), "cas/max_samples": cfg.max_extra + 1,
            **summarize(outcomes, majority), **calibration_metrics(texts, scores, num_bins=num_bins)}
