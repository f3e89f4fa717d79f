"""``model.lora``: the settings of a LoRA adapter on the policy (``rlvr.models.lora`` applies them).
Plain data, free of torch: the run config (``rlvr.train.config``) holds one."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.registry import param


@dataclass(frozen=True)
class LoraSpec:
    """``model.lora``: a LoRA adapter on the policy (None or ``{}`` = full fine-tuning)."""

    r: int = param(16, "adapter rank r")
    alpha: float = param(32.0, "scale numerator: the update is (alpha / r) * B A")
    dropout: float = param(0.0, "dropout on the adapter's input")
    target_modules: tuple = param(("all-linear",), "module names that get an adapter (e.g. [q_proj, v_proj]); "
                                                   "'all-linear' = every linear layer except the output head")

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ValueError(f"model.lora.r must be >= 1, got {self.r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.lora.dropout must be in [0, 1), got {self.dropout}")
        targets = (self.target_modules,) if isinstance(self.target_modules, str) else tuple(self.target_modules)
        if not targets or not all(isinstance(t, str) and t for t in targets):
            raise ValueError(f"model.lora.target_modules must be a non-empty list of module names, "
                             f"got {self.target_modules!r}")
        object.__setattr__(self, "target_modules", targets)
