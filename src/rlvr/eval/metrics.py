"""Sampling metrics: the unbiased pass@k estimator and majority-vote accuracy."""

from __future__ import annotations

from collections import Counter


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al., "Evaluating Large
    Language Models Trained on Code", arXiv:2107.03374):

        pass@k = 1 − C(n−c, k) / C(n, k) = 1 − ∏_{i=n−c+1}^{n} (1 − k / i)

    The product form never builds the huge binomials. When fewer than k samples are wrong
    (n − c < k) every k-subset holds a correct one, so pass@k = 1.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def majority(answers: list[str | None]) -> str | None:
    """The most frequent non-None answer (stripped); ties go to the one seen first."""
    counts = Counter(a.strip() for a in answers if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(a.strip() for a in answers if a is not None and counts[a.strip()] == best)


def maj_at_k(answers: list[str | None], gold: str, k: int) -> float:
    """1.0 when the majority vote over the first k extracted answers equals ``gold`` (as
    stripped text), else 0.0. Unparsed answers (None) do not vote."""
    if not 1 <= k <= len(answers):
        raise ValueError(f"maj_at_k: need 1 <= k <= len(answers) = {len(answers)}, got k={k}")
    vote = majority(answers[:k])
    return 1.0 if vote is not None and vote == str(gold).strip() else 0.0
