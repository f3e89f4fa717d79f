"""How ``rlvr eval --strategy NAME`` evaluates a saved policy: one registered plug-in per strategy
(``@register("eval_strategy", name)``; ``rlvr list --kind eval_strategy``), its options its ``Config``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from rlvr.eval.cas import CASConfig, cas_evaluate
from rlvr.eval.evaluation import evaluate
from rlvr.plugin import Plugin
from rlvr.registry import register


def evaluate_under(model: Any, tokenizer: Any, task: Any, problems: list, cfg: Any, k: int,
                   outcomes: list | None = None) -> dict[str, Any]:
    """:func:`rlvr.eval.evaluate` with the run config's sampling settings (``cfg``: a run ``Config``)."""
    return evaluate(model, tokenizer, task, problems, k=k, max_new_tokens=cfg.rollout.max_new_tokens,
                    temperature=cfg.rollout.temperature, seed=cfg.run.seed, outcomes=outcomes)


class EvalStrategy(Plugin, ABC):
    """One way to evaluate a policy on held-out problems."""

    @abstractmethod
    def evaluate(self, model: Any, tokenizer: Any, task: Any, problems: list, cfg: Any, *, k: int,
                 seed: int) -> dict[str, Any]:
        """The strategy's metrics; ``cfg`` is the run ``Config`` (its rollout settings), ``k`` the samples
        per problem, ``seed`` the evaluation's seed."""


@register("eval_strategy", "standard")
class Standard(EvalStrategy):
    """Greedy accuracy, pass@k and maj@k (``rlvr.eval.evaluate``) under the run's sampling settings."""

    def evaluate(self, model: Any, tokenizer: Any, task: Any, problems: list, cfg: Any, *, k: int,
                 seed: int) -> dict[str, Any]:
        return evaluate_under(model, tokenizer, task, problems, cfg, k)


@register("eval_strategy", "cas")
class CAS(EvalStrategy):
    """Confidence-based adaptive sampling (CAS) against majority voting at the same number of samples.

    The rule and its reconstruction: :mod:`rlvr.eval.cas`; the thresholds are required options."""

    Config = CASConfig
    paper = "C3RL: correctness and confidence calibration RL (arXiv:2607.01612)"

    def evaluate(self, model: Any, tokenizer: Any, task: Any, problems: list, cfg: Any, *, k: int,
                 seed: int) -> dict[str, Any]:
        return cas_evaluate(model, tokenizer, task, problems, self.config, max_new_tokens=cfg.rollout.max_new_tokens,
                            temperature=cfg.rollout.temperature, seed=seed)
