"""The token-weighting protocol (the reweight stage): advantages (N, T) → re-weighted advantages (N, T).

Runs inside the actor step, after the current policy's forward, so it can read the current
log-probs and entropy (detached). Composable: several weightings apply in order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from torch import Tensor

from rlvr.plugin import Plugin
from rlvr.types import check_mask, check_shape


@dataclass
class WeightingInputs:
    advantages: Tensor  # (N, T)
    mask: Tensor  # (N, T) bool, True = trained token
    logprobs: Tensor | None = None  # (N, T) current policy log-probs of the sampled tokens (detached)
    entropy: Tensor | None = None  # (N, T) current policy entropy (detached)
    answer_mask: Tensor | None = None  # (N, T) bool, True on the tokens of the final answer span

    def __post_init__(self) -> None:
        n, t = check_mask(self.mask, "mask")
        for name in ("advantages", "logprobs", "entropy", "answer_mask"):
            value = getattr(self, name)
            if value is not None:
                check_shape(value, (n, t), name)


@dataclass
class WeightingOutput:
    advantages: Tensor  # (N, T)
    metrics: dict[str, Tensor] = field(default_factory=dict)  # detached scalars, logged under adv/


class TokenWeighting(Plugin, ABC):
    needs_answer_mask = False  # the trainer locates answer spans only for weightings that need them
    # False only for weightings that map a zero advantage to zero and read no other row (row-local):
    # then rows with zero advantage may be left out of the update (optim.skip_zero_rows).
    needs_every_row = True

    @abstractmethod
    def __call__(self, inputs: WeightingInputs) -> WeightingOutput:
        """Return re-weighted advantages; a reward field never receives an advantage."""
