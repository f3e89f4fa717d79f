"""The engine contract: what :func:`rlvr.rollout.generate_ids` hands an engine and gets back.

An engine is a registered class (``@register("engine", name)``) with a frozen ``Config`` and a
``decode(model, request) -> (tokens (N, T), logprobs (N, T))``. ``generate_ids`` does everything
around it (encoding, micro-batches, the eos mask, padding, decoding text), so an engine only
produces tokens and their log-probs under the convention of :mod:`rlvr.rollout.hf`. One engine
object is kept per (policy, engine name) by :func:`engine_for`, so stateful engines (SpecRoll's
heads, vLLM's LLM) persist across RL steps with no change to the trainer.
"""

from __future__ import annotations

import inspect
import weakref
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel

from rlvr.registry import RegistryError, get, make_config
from rlvr.rollout.sampling import Sampler


@dataclass
class Generation:
    """N completions, one per prompt (repeat a prompt G times in ``prompts`` for a group)."""

    prompt_ids: Tensor  # (N, P) left-padded
    prompt_mask: Tensor  # (N, P) bool, True = real prompt token
    completion_ids: Tensor  # (N, T) right-padded with the pad id
    completion_mask: Tensor  # (N, T) bool, True on generated tokens up to and including the first eos
    logprobs: Tensor  # (N, T) float32 log-probs of the sampled tokens (0 where the mask is False)
    texts: list[str]  # (N,) decoded completions without special tokens
    hidden: Tensor | None = None  # (N, T, H) float32 output-layer inputs h_t (h_t predicts token t),
    # 0 where the mask is False; only with ``keep_hidden=True`` (GAR reads them: no second forward)
    stats: dict[str, float] = field(default_factory=dict)  # engine metrics (rollout/spec_*), may be empty

    @property
    def lengths(self) -> Tensor:
        """(N,) number of generated tokens (eos included)."""
        return self.completion_mask.sum(-1)


@dataclass
class DecodeRequest:
    """One engine call: a micro-batch of left-padded prompts and how to sample after them."""

    prompt_ids: Tensor  # (N, P) left-padded, on the model's device
    prompt_mask: Tensor  # (N, P) bool, True = real prompt token
    max_new_tokens: int
    sampler: Sampler  # temperature, filters, penalty and the seeded generator
    pad_id: int
    eos_ids: Tensor  # (E,) ids that end a completion
    capture: "HiddenCapture | None" = None  # set when the caller asked for hidden states


@dataclass(frozen=True)
class NoConfig:
    """An engine without options."""


class Engine(ABC):
    """Base of the generation engines: ``decode`` returns tokens (N, T) and log-probs (N, T),
    T ≤ ``max_new_tokens`` (tokens after a row's eos are masked by the caller), and may leave
    metrics in ``last_stats``."""

    Config: ClassVar[type] = NoConfig
    paper: ClassVar[str] = ""
    supports_hidden: ClassVar[bool] = False  # fills ``request.capture`` (keep_hidden)
    supports_repetition_penalty: ClassVar[bool] = True
    runs_in_worker: ClassVar[bool] = False  # the generator process of asynchronous generation can run it

    def __init__(self, config: Any = None) -> None:
        self.config = config if config is not None else self.Config()
        self.last_stats: dict[str, float] = {}

    @abstractmethod
    def decode(self, model: PreTrainedModel, request: DecodeRequest) -> tuple[Tensor, Tensor]:
        """Tokens (N, T) and their log-probs (N, T) for ``request``; every engine implements it."""

    def release(self) -> None:
        """Give back what the engine holds only while it generates (vLLM's sleep mode); an engine
        calls :func:`release_after` at the end of ``decode``, which calls this now or at the end of the
        open :func:`generation_phase`. Nothing by default."""


_PHASES: list[dict[int, Engine]] = []  # the open generation phase's engines waiting to release


@contextmanager
def generation_phase() -> Iterator[None]:
    """One step's generation as one phase: an engine that releases its memory between calls (vLLM's
    sleep mode) keeps it through every call inside (micro-batches, refill rounds, samplers' extra
    generations) and releases once when the phase ends, errors included. The trainer opens one around
    a step's collection; a phase inside a phase joins the outer one. Outside any phase an engine
    releases after each call, as a lone ``generate`` needs."""
    if _PHASES:
        yield
        return
    _PHASES.append({})
    try:
        yield
    finally:
        for engine in _PHASES.pop().values():
            engine.release()


def release_after(engine: Engine) -> None:
    """End of a ``decode``: release ``engine`` now, or at the end of the open generation phase."""
    if _PHASES:
        _PHASES[-1][id(engine)] = engine
    else:
        engine.release()


def engine_class(name: str) -> type:
    """The engine registered as ``name`` (or imported from ``"pkg.module:Object"``), as a ValueError."""
    try:
        cls = get("engine", name)
    except RegistryError as err:
        raise ValueError(f"rollout.engine: {err}") from None
    if not (inspect.isclass(cls) and hasattr(cls, "decode") and hasattr(cls, "Config")):
        raise ValueError(f"rollout.engine: '{name}' is not an engine (a class with Config and decode)")
    return cls


def engine_config(name: str, params: dict | None) -> Any:
    """The engine's Config from the options of ``rollout.engine`` (unknown keys are a ValueError)."""
    try:
        return make_config(engine_class(name).Config, dict(params or {}), where=f"rollout.engine ({name})")
    except RegistryError as err:
        raise ValueError(str(err)) from None


def check_engine(name: str, params: dict | None, repetition_penalty: float = 1.0) -> None:
    """Fail fast (at config time) on an unknown engine, invalid options (``params``) or a sampling
    option the engine does not support."""
    engine_config(name, params)
    if repetition_penalty != 1.0 and not engine_class(name).supports_repetition_penalty:
        raise ValueError(f"rollout.repetition_penalty: engine '{name}' does not support it (use loop or hf)")


_INSTANCES: "weakref.WeakKeyDictionary[torch.nn.Module, dict[str, Engine]]" = weakref.WeakKeyDictionary()


def engine_for(model: torch.nn.Module, name: str, params: dict | None = None) -> Engine:
    """The engine ``name`` of ``model``: created on first use, rebuilt when ``params`` change, and
    otherwise the same object for as long as the policy lives."""
    config = engine_config(name, params)
    per_model = _INSTANCES.setdefault(model, {})
    engine = per_model.get(name)
    if engine is None or engine.config != config:
        engine = per_model[name] = engine_class(name)(config)
    return engine


def existing_engine(model: torch.nn.Module, name: str) -> Engine | None:
    """The engine ``name`` already built for ``model``, or None."""
    return _INSTANCES.get(model, {}).get(name)


class HiddenCapture:
    """A forward hook on the output layer that keeps its input at the last position of every call
    (the hidden state h_t that produced token t); ``store(rows, t)`` files the latest one."""

    def __init__(self, model: PreTrainedModel, n: int, max_new_tokens: int) -> None:
        head = model.get_output_embeddings()
        if head is None:
            raise ValueError("generate: keep_hidden needs a model with an output layer (get_output_embeddings)")
        self.hidden = torch.zeros((n, max_new_tokens, head.weight.shape[1]), dtype=torch.float32,
                                  device=head.weight.device)  # (N, T, H)
        self.calls: list[Tensor] = []
        self.handle = head.register_forward_hook(lambda _m, inputs, _out: self.calls.append(inputs[0][:, -1].float()))

    def store(self, rows: Tensor, t: int) -> None:
        self.hidden[rows, t] = self.calls.pop()  # (B, H): the forward that produced step t's logits

    def close(self) -> None:
        self.handle.remove()


def cache_kwargs(model: PreTrainedModel, cache: DynamicCache) -> dict[str, DynamicCache]:
    """``{name: cache}`` for the model's forward: transformers renamed ``past_key_values`` to ``cache``
    (5.2x), and an older forward silently ignores the new name (every decode step would then run
    without the cache)."""
    forward = getattr(model, "forward", model)
    name = _CACHE_ARG.get(type(model))
    if name is None:
        name = "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"
        _CACHE_ARG[type(model)] = name
    return {name: cache}


_CACHE_ARG: dict[type, str] = {}
