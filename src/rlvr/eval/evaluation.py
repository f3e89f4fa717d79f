"""Evaluate a policy on a task: greedy accuracy, pass@1..k and maj@k over held-out problems."""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.eval.calibration import calibration_metrics
from rlvr.eval.metrics import majority, pass_at_k
from rlvr.eval.outcomes import outcome_rows
from rlvr.models.loading import render_prompt
from rlvr.rollout.hf import generate
from rlvr.tasks.base import Task
from rlvr.tasks import verify_all
from rlvr.types import Problem, Score


def evaluate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, task: Task, problems: list[Problem], *,
             k: int = 8, max_new_tokens: int | None = None, temperature: float = 1.0, batch_size: int = 64,
             seed: int = 0, top_p: float = 1.0, engine: str = "loop",
             outcomes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Greedy accuracy plus, when ``k > 0``, k samples per problem at ``temperature``.

    Returns ``greedy_accuracy``, ``pass@1`` … ``pass@k`` (unbiased estimator with n = k),
    ``maj@k`` (majority vote over parsed answers; the vote counts as right when a sample carrying
    that answer was verified correct), ``greedy_well_formed`` and ``sample_well_formed`` (the share
    of replies in which the task found an answer in its asked form: ``Score.parsed`` is set), ``num_problems``, ``greedy_length`` and ``sample_length``
    (mean generated tokens, eos included), and calibration (``calibration/brier``, ``calibration/ece``
    over 10 bins, ...) of the samples that state a confidence. ``max_new_tokens`` defaults to the task's budget.
    ``outcomes``: a list that receives one row per problem (``rlvr.eval.outcomes``: greedy reward, correct
    samples of k, majority right), for pairing runs problem by problem.
    """
    if not problems:
        raise ValueError("evaluate: no problems")
    budget = max_new_tokens or task.max_new_tokens
    prompts = [render_prompt(tokenizer, p) for p in problems]
    greedy, greedy_len = _scores(model, tokenizer, task, problems, prompts, budget, batch_size,
                                 dict(do_sample=False), seed)
    out: dict[str, Any] = {"num_problems": len(problems),
                           "greedy_accuracy": sum(s.value for s in greedy) / len(problems),
                           "greedy_well_formed": well_formed(greedy),
                           "greedy_length": greedy_len}
    subsets = _subsets(problems)
    out.update({f"greedy_accuracy/{name}": sum(greedy[i].value for i in rows) / len(rows)
                for name, rows in subsets.items()})
    if k <= 0:
        if outcomes is not None:
            outcomes.extend(outcome_rows(problems, greedy, None, 0, None))
        return out
    rows = [i for i in range(len(problems)) for _ in range(k)]  # k contiguous samples per problem
    texts: list[str] = []
    samples, sample_len = _scores(model, tokenizer, task, [problems[i] for i in rows], [prompts[i] for i in rows],
                                  budget, batch_size, dict(do_sample=True, temperature=temperature, top_p=top_p), seed,
                                  texts)
    correct = [sum(s.value == 1.0 for s in samples[i * k:(i + 1) * k]) for i in range(len(problems))]
    for j in range(1, k + 1):
        out[f"pass@{j}"] = sum(pass_at_k(k, c, j) for c in correct) / len(problems)
    maj = [_majority_right(samples[i * k:(i + 1) * k]) for i in range(len(problems))]
    out[f"maj@{k}"] = sum(maj) / len(problems)
    if outcomes is not None:
        outcomes.extend(outcome_rows(problems, greedy, correct, k, maj))
    for name, rows in subsets.items():  # regimes that mix difficulties report each part (e.g. 'hard')
        out[f"pass@{k}/{name}"] = sum(pass_at_k(k, correct[i], k) for i in rows) / len(rows)
        out[f"maj@{k}/{name}"] = sum(maj[i] for i in rows) / len(rows)
    out["sample_length"] = sample_len
    out["sample_well_formed"] = well_formed(samples)
    out.update(calibration_metrics(texts, samples, num_bins=10))  # only when completions state a confidence
    return out


def well_formed(scores: list[Score]) -> float:
    """The share of replies the task could read an answer from (``Score.parsed`` not None): a policy
    that learns the asked form (``<answer>`` tags, ``\\boxed{}``) raises it before it raises accuracy."""
    return sum(s.parsed is not None for s in scores) / len(scores)


def _subsets(problems: list[Problem]) -> dict[str, list[int]]:
    """Row indices per ``meta['subset']`` label, when the task labels its problems (else empty)."""
    out: dict[str, list[int]] = {}
    for i, p in enumerate(problems):
        if "subset" in p.meta:
            out.setdefault(str(p.meta["subset"]), []).append(i)
    return out


def _scores(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, task: Task, problems: list[Problem],
            prompts: list[str], budget: int, batch_size: int, sampling: dict[str, Any],
            seed: int, texts: list[str] | None = None) -> tuple[list[Score], float]:
    scores: list[Score] = []
    tokens = 0
    for b, lo in enumerate(range(0, len(prompts), batch_size)):
        gen = generate(model, tokenizer, prompts[lo:lo + batch_size], max_new_tokens=budget,
                       seed=seed + b, **sampling)
        tokens += int(gen.completion_mask.sum())
        scores += verify_all(task, problems[lo:lo + batch_size], gen.texts)
        if texts is not None:
            texts += gen.texts
    return scores, tokens / len(prompts)


def _majority_right(scores: list[Score]) -> float:
    vote = majority([s.parsed for s in scores])
    return float(any(s.parsed is not None and s.parsed.strip() == vote and s.value == 1.0 for s in scores))
