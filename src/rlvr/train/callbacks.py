"""Callbacks: observe or stop a run from a notebook or a sweep without subclassing the trainer.

A callback is any object with some of these methods (missing ones are skipped; subclassing
``Callback`` is optional):

- ``on_step_end(trainer, step, metrics) -> bool | None``: after every optimizer step, once the
  step's metrics are logged; returning True stops the run after this step (a final checkpoint is
  written and the summary's ``stopped_by`` is ``"callback"``). Under data parallelism every rank
  calls it with the rank-averaged metrics (the main process also sees the evaluation's), and the
  run stops when any rank asks.
- ``on_evaluate(trainer, step, metrics)``: after a held-out evaluation (main process only), with
  its metrics (e.g. ``eval/accuracy``).
- ``on_save(trainer, step, path)``: after a checkpoint folder was written (main process only).

From Python: ``Trainer(cfg, callbacks=[MyCallback()])`` or ``train_run(cfg, callbacks=[...])``;
from a config: ``run.callbacks: ["pkg.module:Object", {name: "pkg.module:Class", params: {...}}]``
(a class is instantiated, with ``params`` as keyword arguments; any other object is used as it is).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import torch

from rlvr.collectives import collective_device


class Callback:
    """No-op hooks to override (optional base class)."""

    def on_step_end(self, trainer: Any, step: int, metrics: dict[str, float]) -> bool | None:
        return None

    def on_evaluate(self, trainer: Any, step: int, metrics: dict[str, float]) -> None:
        return None

    def on_save(self, trainer: Any, step: int, path: Path) -> None:
        return None


HOOKS = ("on_step_end", "on_evaluate", "on_save")


class Callbacks:
    """The run's callbacks, called in order."""

    def __init__(self, callbacks: Iterable[Any] = ()) -> None:
        self.items: list[Any] = []
        self.add(*callbacks)

    def add(self, *callbacks: Any) -> None:
        for cb in callbacks:
            if not any(callable(getattr(cb, hook, None)) for hook in HOOKS):
                raise TypeError(f"callback {cb!r} has none of the hooks {', '.join(HOOKS)}")
            self.items.append(cb)

    def step_end(self, trainer: Any, step: int, metrics: dict[str, float]) -> bool:
        """True when a callback asks to stop (on any rank: the answer is agreed across ranks)."""
        stop = False
        for cb in self._with("on_step_end"):
            stop = bool(cb.on_step_end(trainer, step, metrics)) or stop
        acc = trainer.acc  # every loop has one (rlvr.train.loop.Runnable)
        if acc.num_processes > 1 and self.items:  # a collective: every rank holds the same list
            flag = torch.tensor(float(stop), device=collective_device(acc))  # ()
            stop = bool(acc.reduce(flag, reduction="sum").item() > 0)
        return stop

    def evaluate(self, trainer: Any, step: int, metrics: dict[str, float]) -> None:
        for cb in self._with("on_evaluate"):
            cb.on_evaluate(trainer, step, metrics)

    def save(self, trainer: Any, step: int, path: Path) -> None:
        for cb in self._with("on_save"):
            cb.on_save(trainer, step, path)

    def _with(self, hook: str) -> list[Any]:
        return [cb for cb in self.items if callable(getattr(cb, hook, None))]


def load_callbacks(specs: Iterable[Any]) -> list[Any]:
    """Callbacks named in ``run.callbacks`` (``PluginSpec``: ``"pkg.module:Object"`` with optional
    ``params``); a class is instantiated with ``params`` as keyword arguments."""
    import inspect

    from rlvr.registry import import_object
    out = []
    for spec in specs:
        obj = import_object(spec.name, what="run.callbacks entry")
        if inspect.isclass(obj):
            obj = obj(**spec.params)
        elif spec.params:
            raise ValueError(f"run.callbacks: '{spec.name}' is not a class, so it takes no params "
                             f"(got {sorted(spec.params)})")
        out.append(obj)
    return out


def run_callbacks(cfg: Any, extra: Iterable[Any] | None = None) -> Callbacks:
    """The callbacks named in ``cfg.run.callbacks`` followed by ``extra`` (passed from Python)."""
    return Callbacks([*load_callbacks(getattr(cfg.run, "callbacks", []) or []), *(extra or [])])
