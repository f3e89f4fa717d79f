"""The base every plug-in shares: a frozen ``Config`` dataclass and a ``paper`` citation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class NoConfig:
    """No hyperparameters."""


class Plugin:
    """A plug-in holds its hyperparameters in ``self.config`` (an instance of ``Config``)."""

    Config: ClassVar[type] = NoConfig
    paper: ClassVar[str] = ""  # "Title (arXiv:xxxx.xxxxx)"; empty for infrastructure
    # Optional input fields (of AdvantageInputs / LossInputs) without which the method is not itself:
    # each entry lists alternatives, at least one of which must be given. An engine that cannot supply
    # them (rlvr.integrations.verl) refuses the method by name instead of running what is left of it.
    mechanism_inputs: ClassVar[tuple[tuple[str, ...], ...]] = ()

    def __init__(self, config: Any = None) -> None:
        self.config = self.Config() if config is None else config
        if not isinstance(self.config, self.Config):
            raise TypeError(f"{type(self).__name__} expects a {self.Config.__name__}, got {type(self.config).__name__}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config})"
