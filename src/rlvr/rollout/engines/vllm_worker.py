"""The server side of ``rollout.engine: vllm_server``'s weight sync: a vLLM worker extension.

``vllm serve`` mixes this class into each of its workers when started with
``--worker-extension-cls rlvr.rollout.engines.vllm_worker.WeightReceiver`` (rlvr must be importable
in the server's environment) and ``VLLM_SERVER_DEV_MODE=1``, which opens the ``/collective_rpc``
endpoint. The trainer then calls two methods over HTTP:

* ``rlvr_signature()``: the served model's shape (architecture, vocabulary, layers, width) and the
  server's log-prob mode, so the engine can refuse a server that serves another model;
* ``rlvr_stage_weights(payload)``: a chunk of the policy's weights, encoded by :func:`encode_weights`
  (safetensors bytes in base64 text: ``/collective_rpc`` only carries strings), kept until
* ``rlvr_apply_weights()``: all staged weights loaded at once by vLLM's in-place ``reload_weights``
  (Hugging Face names; vLLM fuses, shards and post-processes them as when loading a checkpoint);
* ``rlvr_weight_pushes()``: how many pushes were applied so far.

Nothing is written to disk: the weights travel in the request body. The encoding helpers are shared
with the client (:mod:`rlvr.rollout.engines.vllm_server`); this module imports neither vLLM nor
torch.distributed, so the engine registry can import it anywhere.
"""

from __future__ import annotations

import base64
from typing import Any, Iterable, Iterator

from torch import Tensor

SIGNATURE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")


def standalone(weights: Iterable[tuple[str, Tensor]]) -> dict[str, Tensor]:
    """{name: CPU tensor} that safetensors accepts: tensors sharing storage (tied embeddings) are
    copied so each name stands alone."""
    seen: set[int] = set()
    tensors = {}
    for name, tensor in weights:
        t = tensor.detach().cpu().contiguous()
        if t.data_ptr() in seen:
            t = t.clone()
        seen.add(t.data_ptr())
        tensors[name] = t
    return tensors


def encode_weights(weights: Iterable[tuple[str, Tensor]]) -> str:
    """(name, tensor) pairs → base64 text of a safetensors file."""
    from safetensors.torch import save
    return base64.b64encode(save(standalone(weights))).decode("ascii")


def decode_weights(payload: str) -> dict[str, Tensor]:
    """Inverse of :func:`encode_weights`."""
    from safetensors.torch import load
    return load(base64.b64decode(payload.encode("ascii")))


def chunk_weights(weights: Iterable[tuple[str, Tensor]], max_bytes: int) -> Iterator[list[tuple[str, Tensor]]]:
    """Consecutive groups of (name, tensor) of at most ``max_bytes`` each (a larger tensor goes alone)."""
    group: list[tuple[str, Tensor]] = []
    size = 0
    for name, tensor in weights:
        nbytes = tensor.numel() * tensor.element_size()
        if group and size + nbytes > max_bytes:
            yield group
            group, size = [], 0
        group.append((name, tensor))
        size += nbytes
    if group:
        yield group


def model_signature(config: Any) -> dict[str, Any]:
    """The fields of a Hugging Face model config that tell two models apart cheaply."""
    return {"architectures": sorted(getattr(config, "architectures", None) or []),
            **{key: getattr(config, key, None) for key in SIGNATURE_KEYS}}


class WeightReceiver:
    """Methods added to each vLLM worker (``--worker-extension-cls``); ``self`` is the worker."""

    def rlvr_signature(self) -> dict[str, Any]:
        model_config = self.vllm_config.model_config  # type: ignore[attr-defined]
        return {**model_signature(model_config.hf_config),
                "logprobs_mode": str(getattr(model_config, "logprobs_mode", ""))}

    def rlvr_stage_weights(self, payload: str) -> int:
        staged = self.__dict__.setdefault("_rlvr_staged", {})
        staged.update(decode_weights(payload))
        return len(staged)

    def rlvr_apply_weights(self) -> int:
        staged = self.__dict__.pop("_rlvr_staged", {})
        if staged:
            self.reload_weights(weights_iterator=list(staged.items()))  # type: ignore[attr-defined]
            self.__dict__["_rlvr_pushes"] = self.rlvr_weight_pushes() + 1
        return len(staged)

    def rlvr_weight_pushes(self) -> int:
        """How many weight pushes this worker has applied (for tests and monitoring)."""
        return self.__dict__.get("_rlvr_pushes", 0)
