"""A stand-in ``vllm`` module for CPU tests of the vLLM engine's plumbing (no vLLM installed): an ``LLM``
that records its keywords, its sleep / wake calls and every weight push (names, dtypes, and how many
pushed tensors were alive at once), and answers ``generate`` with fixed tokens."""

from __future__ import annotations

import sys
import types
import weakref
from types import SimpleNamespace
from typing import Any

import torch


class FakeLLM:
    """Records what the engine does to it; ``generate`` gives ``max_tokens`` copies of token 5."""

    instances: list["FakeLLM"] = []

    def __init__(self, dtype: torch.dtype | str = "auto", **kwargs: Any) -> None:
        self.kwargs = kwargs
        if isinstance(dtype, str):  # vLLM's 'auto' serves a float32 checkpoint in bf16 where bf16 is supported
            dtype = torch.bfloat16 if dtype == "auto" else getattr(torch, dtype)
        self.llm_engine = SimpleNamespace(model_config=SimpleNamespace(dtype=dtype))
        self.calls: list[str] = []  # "sleep" / "wake" / "generate" / "push", in order
        self.pushes: list[dict[str, Any]] = []
        self.refuse_generators = False  # as a vLLM that pickles the call to worker processes
        FakeLLM.instances.append(self)

    def sleep(self, level: int) -> None:
        self.calls.append("sleep")

    def wake_up(self, tags: Any = None) -> None:
        self.calls.append("wake")

    def reset_prefix_cache(self) -> None:
        pass

    def collective_rpc(self, method: str, kwargs: dict[str, Any]) -> None:
        weights = kwargs["weights_iterator"]
        if self.refuse_generators and not isinstance(weights, list):
            raise TypeError("cannot pickle 'generator' object")
        self.calls.append("push")
        live, most = [0], [0]
        names, dtypes = [], set()
        for name, tensor in weights:  # what vLLM's load_weights does: copy each in, keep nothing
            live[0] += 1
            most[0] = max(most[0], live[0])
            weakref.finalize(tensor, lambda: live.__setitem__(0, live[0] - 1))
            names.append(name)
            dtypes.add(tensor.dtype)
            del tensor
        self.pushes.append({"names": names, "dtypes": dtypes, "most_alive": most[0],
                            "streamed": not isinstance(weights, list)})

    def generate(self, prompts: list, sampling_params: list, use_tqdm: bool = False) -> list:
        self.calls.append("generate")
        out = []
        for params in sampling_params:
            n = params.kwargs["max_tokens"]
            out.append(SimpleNamespace(outputs=[SimpleNamespace(
                token_ids=[5] * n, logprobs=[{5: SimpleNamespace(logprob=-0.5)} for _ in range(n)])]))
        return out


class SamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def install(monkeypatch: Any) -> type[FakeLLM]:
    """Put the stand-in ``vllm`` (and ``vllm.platforms``, with sleep mode) into ``sys.modules``."""
    FakeLLM.instances = []
    vllm = types.ModuleType("vllm")
    vllm.LLM = FakeLLM
    vllm.SamplingParams = SamplingParams
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(is_sleep_mode_available=lambda: True, device_name="fake")
    vllm.platforms = platforms
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return FakeLLM
