"""A client that sends one prompt to a language model and returns its reply: an OpenAI-compatible
HTTP server (``backend='http'``, ``POST <base_url>/v1/chat/completions``) or a local Hugging Face
checkpoint (``backend='hf'``). The LLM teacher (:mod:`rlvr.rewards.teacher`), OM-GRPO's judge model
(:mod:`rlvr.rewards.om_grpo`) and the pairwise judge (:mod:`rlvr.rewards.pairwise_judge`) ask through it.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.registry import param

BACKENDS = ("http", "hf")


@dataclass(frozen=True)
class ChatConfig:
    """How to reach a language model that answers one prompt: an HTTP server or a local checkpoint."""

    backend: str = param("http", "'http' (OpenAI-compatible chat completions server) or 'hf' (local checkpoint)")
    base_url: str = param("http://127.0.0.1:8000/v1", "http: server address, with or without the trailing /v1")
    model: str = param("", "http: the model name sent in the request")
    api_key_env: str = param("OPENAI_API_KEY", "http: environment variable holding the API key "
                                               "(unset = no Authorization header, fine for local servers)")
    model_path: str = param("", "hf: local Hugging Face checkpoint folder of the teacher")
    device: str = param("auto", "hf: torch device of the teacher ('auto' = cuda when available, else cpu)")
    timeout_s: float = param(60.0, "http: socket timeout per request; hf: generation time limit (max_time)")
    max_new_tokens: int = param(256, "longest teacher reply, in tokens")
    temperature: float = param(0.0, "sampling temperature (0 = greedy)")
    max_workers: int = param(8, "http: requests in flight at once")

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"chat model: backend must be one of {BACKENDS}, got '{self.backend}'")
        if self.timeout_s <= 0 or self.max_new_tokens < 1 or self.max_workers < 1:
            raise ValueError("chat model: timeout_s must be > 0, max_new_tokens and max_workers >= 1")

    def check_source(self, where: str) -> None:
        """A clear error unless the model is named: ``model`` for http, ``model_path`` for hf."""
        if self.backend == "http" and not self.model:
            raise ValueError(f"{where}: backend 'http' needs `model` (the served model's name)")
        if self.backend == "hf" and not self.model_path:
            raise ValueError(f"{where}: backend 'hf' needs `model_path` (a local checkpoint folder)")


class ChatClient:
    """Sends one prompt to the model of a :class:`ChatConfig` and returns its reply text.

    ``backend='http'``: ``POST <base_url>/v1/chat/completions``. ``backend='hf'``: generation with a
    local checkpoint (``model_path``), or with ``model``/``tokenizer`` passed in (e.g. the policy).
    A reply cut by the time limit raises :class:`ChatTimeout` unless ``accept(reply)`` says the
    part received is usable. Transport errors propagate: callers decide the fallback.
    """

    def __init__(self, config: ChatConfig, model: Any = None, tokenizer: Any = None,
                 accept: Any = None) -> None:
        self.config, self._model, self._tokenizer = config, model, tokenizer
        self.accept = accept or (lambda reply: False)

    def ask(self, prompt: str) -> str:
        return self._ask_http(prompt) if self.config.backend == "http" else self._ask_hf(prompt)

    def _ask_http(self, prompt: str) -> str:
        cfg = self.config
        body = {"model": cfg.model, "messages": [{"role": "user", "content": prompt}],
                "max_tokens": cfg.max_new_tokens, "temperature": cfg.temperature}
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(chat_url(cfg.base_url), data=json.dumps(body).encode("utf-8"),
                                         headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=cfg.timeout_s) as response:
                payload = json.loads(response.read().decode("utf-8"))
        except TimeoutError as err:
            raise ChatTimeout(f"no answer within {cfg.timeout_s}s") from err
        except urllib.error.URLError as err:
            if isinstance(err.reason, TimeoutError):
                raise ChatTimeout(f"no answer within {cfg.timeout_s}s") from err
            raise
        return str(payload["choices"][0]["message"]["content"])

    def _ask_hf(self, prompt: str) -> str:
        model, tokenizer = self._load()
        from rlvr.models import format_prompt  # lazy: transformers is heavy

        enc = tokenizer(format_prompt(tokenizer, prompt), return_tensors="pt").to(model.device)
        cfg = self.config
        start = time.monotonic()
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=cfg.max_new_tokens, max_time=cfg.timeout_s,
                                 do_sample=cfg.temperature > 0, temperature=cfg.temperature or None,
                                 pad_token_id=tokenizer.pad_token_id)
        reply = tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        if time.monotonic() - start >= cfg.timeout_s and not self.accept(reply):
            raise ChatTimeout(f"generation hit max_time={cfg.timeout_s}s")
        return reply

    def _load(self) -> tuple[Any, Any]:
        if self._model is None or self._tokenizer is None:
            from rlvr.models import load_model, load_tokenizer

            device = self.config.device
            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            self._tokenizer = self._tokenizer or load_tokenizer(self.config.model_path)
            self._model = (self._model or load_model(self.config.model_path)).to(device).eval()
        return self._model, self._tokenizer


class ChatTimeout(Exception):
    """The model did not answer in time (the LLM teacher turns it into its fallback)."""


def chat_url(base_url: str) -> str:
    """``<base_url>/v1/chat/completions``, not doubling a ``/v1`` the base URL already ends with."""
    base = base_url.rstrip("/")
    return f"{base}/chat/completions" if base.endswith("/v1") else f"{base}/v1/chat/completions"
