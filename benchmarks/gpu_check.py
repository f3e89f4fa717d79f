"""A staged check of rlvr's GPU paths, one JSON line per stage (run through benchmarks/gpu_check.sh).

On a random Qwen2-architecture model (``rlvr.models.real``: ≈0.48 B parameters at ``--size 0.5b``
with a locally trained BPE tokenizer and word problems; nothing downloaded), the driver builds the
model once (stage ``build``), then runs each stage as its own process group under its own time limit
and prints that stage's line as soon as it ends. A stage that crashes or runs out of time gives a line
with ``ok: false``, the reason and the tail of its output, and the next stage still runs. Stages:

- ``ddp``, ``fsdp2``, ``zero2``: GRPO steps of rlvr's trainer launched as a distributed job of one
  process on the GPU (NCCL; a world of one still initialises the process group, wraps or shards the
  model and runs every collective): ``fsdp2`` and ``zero2`` through ``accelerate launch`` with
  ``configs/accelerate/fsdp2.yaml`` / ``zero2.yaml``; ``ddp`` through torchrun, since ``accelerate
  launch --multi_gpu`` refuses one process. Each first runs all_reduce, all_gather and broadcast on the
  device and checks their results; the line records the model's wrapper. accelerate wraps a model in
  DistributedDataParallel only for a world of 2 or more, so on one GPU ``ddp`` checks the NCCL group,
  its collectives and the trainer under torchrun, not DDP's gradient buckets (the CPU smoke, with 2
  processes, does wrap). ``zero2`` is skipped, with the reason, where deepspeed does not import.
- ``packed_lora_bf16``: bf16 autocast + gradient checkpointing + LoRA, the update of one fixed uneven
  batch (completions of T/10 .. T tokens) with packed, padding-free passes (``optim.packing=always``)
  against padded ones (``never``) from the same weights: the two updates must agree within bf16's
  rounding (``EXACT_RTOL``); also the seconds of a second update of each.
- ``async_k1``: ``rollout.async_rollout.max_staleness=1`` (the generator worker process) and its
  seconds per step on the CPU; on a GPU the trainer refuses it by name when it is built (the worker
  holds a CPU copy of the policy: ``rlvr.train.async_check.check_async_device``), and the line
  records the refusal (``refused``), ``ok`` when the message names ``rollout.async_rollout``.
- ``bf16_gc``: plain one-process GRPO steps, bf16 + checkpointing (the reference step time).

Optional stages (``--stages``): ``fp32``, ``lora``, ``bf16_gc_hf`` and ``trl_bf16_gc`` (TRL's
``GRPOTrainer`` on the same model and prompts; skipped where trl or datasets cannot be imported).
Every line carries ``peak_memory_mb`` of the stage's (rank-0) process: ``torch.cuda.max_memory_allocated``
on a GPU, the peak resident set on the CPU.

``--cpu-smoke`` runs every stage on the CPU with the ``tiny`` size and few rows and tokens, the
distributed stages with 2 gloo processes (``--cpu`` runs of the ``_cpu`` twins: ``fsdp2_cpu.yaml``,
``accelerate launch --multi_gpu`` for DDP): it checks that the code works, not how fast anything is.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ACCELERATE = ROOT / "configs" / "accelerate"
LORA = ("model.lora={r: 16, alpha: 32, dropout: 0.0, target_modules: [q_proj, k_proj, v_proj, o_proj, "
        "gate_proj, up_proj, down_proj]}")
BF16_GC = ["run.mixed_precision=bf16", "model.gradient_checkpointing=true"]
OVERRIDES: dict[str, list[str]] = {
    "ddp": BF16_GC, "fsdp2": BF16_GC, "zero2": BF16_GC,
    "packed_lora_bf16": [LORA],  # exact_worker adds BF16_GC (and runs a float32 control)
    # fp32, the loss async generation asks for (truncated IS against the generator's log-probs)
    "async_k1": ["rollout.async_rollout.max_staleness=1", "algorithm.loss.name=ppo_clip_is"],
    "bf16_gc": BF16_GC, "fp32": [], "lora": [LORA], "bf16_gc_hf": [*BF16_GC, "rollout.engine=hf"],
    "trl_bf16_gc": BF16_GC,
}
DEFAULT_STAGES = ["ddp", "fsdp2", "zero2", "packed_lora_bf16", "async_k1", "bf16_gc"]
LAUNCHED = ("ddp", "fsdp2", "zero2")  # distributed jobs; the others are one plain process each
# Seconds per stage on the GPU (with a build of a minute at most, the default stages fit in 12 minutes);
# --cpu-smoke allows each stage SMOKE_LIMIT_S on a loaded 2-core machine.
LIMIT_S = {"ddp": 110, "fsdp2": 110, "zero2": 110, "packed_lora_bf16": 120, "async_k1": 120, "bf16_gc": 90}
SMOKE_LIMIT_S = 300
# ‖Δpacked − Δpadded‖ / ‖Δpadded‖ allowed. float32: the reordering bound of tests/helpers/tolerance.py
# (seen on CPU: 1e-6). bf16 autocast rounds every matmul input to 8 bits, at other places in a packed
# pass than in a padded one, and AdamW's first step (≈ lr·sign(g)) magnifies that on near-zero
# gradient entries (seen on CPU, tiny model: 0.024 with LoRA, 0.034 without); a real difference (a row
# lost, a mask off by one, a leak across rows) moves the update by tens of percent.
EXACT_RTOL = {"bf16": 0.1, "fp32": 1e-3}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-smoke", action="store_true", help="every stage on CPU/gloo with a tiny model (minutes)")
    p.add_argument("--size", default=None, help="rlvr.models.real size (0.5b; tiny with --cpu-smoke)")
    p.add_argument("--stages", nargs="+", default=DEFAULT_STAGES, choices=list(OVERRIDES))
    p.add_argument("--steps", type=int, default=None, help="timed GRPO steps per stage after one warm-up (2; 1 smoke)")
    p.add_argument("--prompts", type=int, default=None, help="prompts per step B (8; 2 with --cpu-smoke)")
    p.add_argument("--group", type=int, default=None, help="completions per prompt G (8; 2 with --cpu-smoke)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="completion cap T (128; 12 with --cpu-smoke)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="token budget of the packed/padded update micro-batches (8192; 64 with --cpu-smoke)")
    p.add_argument("--limit-s", type=float, default=None, help="one time limit for every stage (default: LIMIT_S)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--example", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    smoke = args.cpu_smoke
    for name, full, small in (("size", "0.5b", "tiny"), ("steps", 2, 1), ("prompts", 8, 2), ("group", 8, 2),
                              ("max_new_tokens", 128, 12), ("max_tokens", 8192, 64)):
        if getattr(args, name) is None:
            setattr(args, name, small if smoke else full)
    return args


# --- the workers: one stage in this process (or in each rank of a launched job) -------------------

def _config(args: argparse.Namespace, stage: str, example: Path, out: Path, extra: tuple[str, ...] = ()):
    from rlvr.train.config import load_config
    overrides = [f"model.path={example / 'model'}", f"task.params.path={example / 'data' / 'train.jsonl'}",
                 "task.params.verifier=numeric", f"rollout.prompts_per_step={args.prompts}",
                 f"rollout.group_size={args.group}", f"rollout.max_new_tokens={args.max_new_tokens}",
                 f"run.steps={args.steps + 1}", f"run.out_dir={out}", "run.save_every=0", "run.log_samples=0",
                 "run.eval_every=0", "optim.skip_zero_rows=false",  # a random model: every reward 0, rows kept
                 *OVERRIDES[stage], *extra]
    return load_config(ROOT / "configs" / "examples" / "qwen2_grpo.yaml", overrides)


def _peak_memory_mb() -> float:
    import torch
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _sync() -> None:
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed_steps(trainer: Any, steps: int) -> dict[str, Any]:
    """``steps`` GRPO steps after one untimed warm-up (kernels, allocator, caches): medians."""
    spans, gen, upd, waits = [], [], [], []
    for i in range(steps + 1):
        _sync()
        t0 = time.perf_counter()
        metrics, batch = trainer.train_step()
        _sync()
        trainer.step += 1
        if i == 0:
            continue
        spans.append(time.perf_counter() - t0)
        gen.append(int(batch.attention.sum()) / max(metrics.get("timing/rollout", 0.0), 1e-9))
        upd.append(metrics.get("update/tokens", 0.0) / max(metrics.get("timing/loss", 0.0), 1e-9))
        waits.append(metrics.get("async/wait_seconds", 0.0))
    out = {"s_per_step": round(statistics.median(spans), 4),
           "generation_tokens_per_s": round(statistics.median(gen), 1),
           "update_tokens_per_s": round(statistics.median(upd), 1),
           "loss_finite": math.isfinite(metrics.get("loss/total", float("nan")))}
    if trainer.cfg.rollout.async_rollout.enabled:  # generation runs in the worker, outside timing/rollout
        out["async_wait_s"] = round(statistics.median(waits), 4)
        del out["generation_tokens_per_s"]
    return out


def _placement(trainer: Any) -> dict[str, Any]:
    params = list(trainer.policy.parameters())
    return {"device": str(trainer.acc.device), "param_devices": sorted({str(p.device) for p in params}),
            "param_dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in params}),
            "trainable_parameters": sum(p.numel() for p in params if p.requires_grad)}


def rlvr_worker(args: argparse.Namespace, stage: str, example: Path, out: Path) -> dict[str, Any]:
    """GRPO steps of rlvr's trainer in one process (``async_k1``: with its generator worker process)."""
    from rlvr.train.config import ConfigError
    from rlvr.train.trainer import Trainer
    try:
        trainer = Trainer(_config(args, stage, example, out))
    except ConfigError as err:  # async on an accelerator: refused by name when the trainer is built
        if stage != "async_k1" or "rollout.async_rollout" not in str(err):
            raise
        return {"ok": True, "refused": str(err), "peak_memory_mb": round(_peak_memory_mb(), 1)}
    with trainer.collector.session():  # the generator process of rollout.async_rollout, if any
        result = timed_steps(trainer, args.steps)
    if trainer.cfg.rollout.async_rollout.enabled:
        # rlvr.rollout.generator.GeneratorProcess hands its worker a CPU copy of the policy
        result["generator_device"] = "cpu"
    return {"ok": result["loss_finite"], **result, **_placement(trainer), "peak_memory_mb": round(_peak_memory_mb(), 1)}


def collectives(device: Any) -> dict[str, Any]:
    """all_reduce, all_gather and broadcast of small tensors on ``device``, each result checked."""
    import torch
    import torch.distributed as dist
    world, rank = dist.get_world_size(), dist.get_rank()
    x = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(x)
    parts = [torch.empty(2, device=device) for _ in range(world)]
    dist.all_gather(parts, torch.full((2,), float(rank), device=device))
    y = torch.full((3,), 7.0 if rank == 0 else -1.0, device=device)
    dist.broadcast(y, src=0)
    _sync()
    checks = {"all_reduce": bool((x == world * (world + 1) / 2).all()),
              "all_gather": all(bool((p == r).all()) for r, p in enumerate(parts)),
              "broadcast": bool((y == 7.0).all())}
    return {"backend": dist.get_backend(), "world": world, "collectives": checks,
            "collectives_device": str(x.device)}


def launched_worker(args: argparse.Namespace, stage: str, example: Path, out: Path) -> dict[str, Any]:
    """One rank of a distributed job (DDP, FSDP2, ZeRO-2): collectives, then GRPO steps of the trainer."""
    import torch.distributed as dist
    from rlvr.train.trainer import Trainer
    trainer = Trainer(_config(args, stage, example, out))
    comm = collectives(trainer.acc.device) if dist.is_initialized() else {"backend": None, "collectives": {}}
    with trainer.collector.session():
        result = timed_steps(trainer, args.steps)
    ok = bool(comm["collectives"]) and all(comm["collectives"].values()) and result["loss_finite"]
    return {"ok": ok, "distributed_type": str(trainer.acc.distributed_type).rsplit(".", 1)[-1],
            "sharding": trainer.sharding.name, "model_wrapper": type(trainer.model).__name__, **comm, **result,
            **_placement(trainer), "peak_memory_mb": round(_peak_memory_mb(), 1)}


def uneven_batch(args: argparse.Namespace, trainer: Any) -> Any:
    """One fixed batch on the trainer's device, completions of T/10 .. T tokens (uneven on purpose)."""
    import torch
    from rlvr.types import Problem, Rollouts
    n, t, p = args.prompts * args.group, args.max_new_tokens, 32
    gen = torch.Generator().manual_seed(0)
    vocab = trainer.policy.config.vocab_size
    lengths = torch.randint(max(t // 10, 1), t + 1, (n,), generator=gen)
    mask = torch.arange(t)[None] < lengths[:, None]  # (N, T)
    device = trainer.acc.device
    batch = Rollouts(problems=[Problem(prompt=str(i)) for i in range(n)],
                     prompt_ids=torch.randint(3, vocab, (n, p), generator=gen),
                     prompt_mask=torch.ones(n, p, dtype=torch.bool),
                     completion_ids=torch.randint(3, vocab, (n, t), generator=gen) * mask, completion_mask=mask,
                     group_ids=torch.arange(n) // args.group, rewards=torch.rand(n, 1, generator=gen)).to(device)
    batch.advantages = torch.randn(n, 1, generator=gen).to(device) * mask.to(device)
    return batch


def _trainable(trainer: Any) -> dict[str, Any]:
    return {k: v.detach().float().cpu().clone() for k, v in trainer.policy.named_parameters() if v.requires_grad}


def one_update(args: argparse.Namespace, stage: str, example: Path, out: Path, packing: str,
               start: dict[str, Any] | None, precision: tuple[str, ...] = ()) -> dict[str, Any]:
    """A trainer with ``optim.packing=packing`` from the ``start`` weights (its own when None): two updates
    of the uneven batch, the trainable weights after the first and the seconds of the second."""
    import torch
    from rlvr.train.trainer import Trainer
    extra = (*precision, f"optim.packing={packing}", f"optim.max_tokens_per_micro_batch={args.max_tokens}")
    trainer = Trainer(_config(args, stage, example, out / packing, extra))
    named = dict(trainer.policy.named_parameters())
    before = _trainable(trainer) if start is None else start
    with torch.no_grad():
        for k, v in before.items():
            named[k].copy_(v.to(named[k].device, named[k].dtype))
    batch = uneven_batch(args, trainer)
    spans, first = [], {}
    for i in range(2):
        batch.old_logprobs = None
        _sync()
        t0 = time.perf_counter()
        metrics = trainer.update(batch)
        _sync()
        spans.append(time.perf_counter() - t0)
        if i == 0:
            first = {"after": _trainable(trainer)}
    real = int(batch.prompt_mask.sum() + batch.completion_mask.sum())
    return {**first, "before": before, "s_per_update": round(spans[1], 4), "update_tokens": metrics["update/tokens"],
            "update_padding_frac": round(metrics["update/padding_frac"], 3), "real_tokens": real}


def _update_gap(a: dict[str, Any], b: dict[str, Any], before: dict[str, Any]) -> float:
    """‖(a − before) − (b − before)‖ / ‖b − before‖ over every trainable weight."""
    import torch
    da = torch.cat([(a[k] - before[k]).double().flatten() for k in sorted(before)])
    db = torch.cat([(b[k] - before[k]).double().flatten() for k in sorted(before)])
    return float((da - db).norm() / db.norm().clamp_min(1e-30))


def exact_worker(args: argparse.Namespace, stage: str, example: Path, out: Path) -> dict[str, Any]:
    """LoRA on the device: the packed update equals the padded one from the same weights, under bf16
    autocast + checkpointing (within EXACT_RTOL["bf16"]) and in float32 (the control)."""
    line: dict[str, Any] = {"ok": True, "rtol": EXACT_RTOL}
    for name, precision in (("bf16", tuple(BF16_GC)), ("fp32", ())):
        padded = one_update(args, stage, example, out / name, "never", None, precision)
        _free_device()
        packed = one_update(args, stage, example, out / name, "always", padded["before"], precision)
        _free_device()
        gap = _update_gap(packed["after"], padded["after"], padded["before"])
        clean = packed["update_padding_frac"] == 0.0 and packed["update_tokens"] == packed["real_tokens"]
        line["ok"] = line["ok"] and gap <= EXACT_RTOL[name] and clean
        line[f"{name}_update_gap"] = float(f"{gap:.3g}")
        line[f"{name}_packed_s_per_update"] = packed["s_per_update"]
        line[f"{name}_padded_s_per_update"] = padded["s_per_update"]
    line.update(real_tokens=packed["real_tokens"], padded_update_tokens=padded["update_tokens"],
                padded_padding_frac=padded["update_padding_frac"], peak_memory_mb=round(_peak_memory_mb(), 1))
    return line


def _free_device() -> None:
    import gc

    import torch
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def trl_worker(args: argparse.Namespace, stage: str, example: Path, out: Path) -> dict[str, Any]:
    """TRL's GRPOTrainer on the same model and prompts: loss dapo (token-mean), beta 0, same precision."""
    try:
        import torch
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as err:
        return {"ok": True, "skipped": f"trl or datasets not importable: {err}"}
    rows = [json.loads(x) for x in (example / "data" / "train.jsonl").read_text().splitlines()]
    total = (args.steps + 1) * args.prompts
    data = Dataset.from_dict({"prompt": [r["prompt"] for r in rows[:total]]})
    cuda = torch.cuda.is_available()
    spans: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            _sync()
            self.t0 = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            _sync()
            spans.append(time.perf_counter() - self.t0)

    config = GRPOConfig(output_dir=str(out), use_cpu=not cuda, bf16=cuda, gradient_checkpointing=True,
                        report_to=[], save_strategy="no", logging_steps=10**6, disable_tqdm=True,
                        max_steps=args.steps + 1, learning_rate=1e-5,
                        per_device_train_batch_size=args.prompts * args.group,
                        num_generations=args.group, max_completion_length=args.max_new_tokens, temperature=1.0,
                        beta=0.0, loss_type="dapo", dataloader_num_workers=0)
    model = AutoModelForCausalLM.from_pretrained(example / "model", torch_dtype=torch.float32,
                                                 attn_implementation="sdpa")
    tokenizer = AutoTokenizer.from_pretrained(example / "model")
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **_: [0.0] * len(completions),
                          args=config, train_dataset=data, processing_class=tokenizer, callbacks=[Clock()])
    trainer.train()
    return {"ok": True, "s_per_step": round(statistics.median(spans[1:] or spans), 4),
            "peak_memory_mb": round(_peak_memory_mb(), 1),
            "note": "reward 0 everywhere (random model); precision bf16 + gradient checkpointing on a GPU"}



# --- the driver: one process group per stage, one JSON line per stage -----------------------------

def worker_for(stage: str):
    if stage in LAUNCHED:
        return launched_worker
    return {"packed_lora_bf16": exact_worker, "trl_bf16_gc": trl_worker}.get(stage, rlvr_worker)


def skip_reason(stage: str) -> str | None:
    """Why a stage cannot run here (ZeRO-2 without an importable deepspeed), else None."""
    if stage != "zero2":
        return None
    if importlib.util.find_spec("deepspeed") is None:
        return "deepspeed is not installed"
    proc = subprocess.run([sys.executable, "-c", "import deepspeed"], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return "import deepspeed failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launcher(args: argparse.Namespace, stage: str) -> list[str]:
    """How a stage starts: a plain process, or a distributed job (1 GPU process; 2 gloo processes on CPU)."""
    if stage not in LAUNCHED:
        return [sys.executable]
    n, port = ("2" if args.cpu_smoke else "1"), str(_free_port())
    if stage == "ddp" and not args.cpu_smoke:  # accelerate launch --multi_gpu refuses a world of one
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", n, "--master_port", port]
    acc = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", n, "--main_process_port", port]
    if stage == "ddp":
        return [*acc, "--multi_gpu"]  # on a machine without GPUs: gloo processes
    name = {"fsdp2": "fsdp2_cpu.yaml" if args.cpu_smoke else "fsdp2.yaml", "zero2": "zero2.yaml"}[stage]
    return [*acc, "--config_file", str(ACCELERATE / name)]


def stage_command(args: argparse.Namespace, stage: str, example: Path, result: Path) -> list[str]:
    return [*launcher(args, stage), __file__, "--worker", stage, "--example", str(example), "--result", str(result),
            "--size", args.size, "--steps", str(args.steps), "--prompts", str(args.prompts), "--group",
            str(args.group), "--max-new-tokens", str(args.max_new_tokens), "--max-tokens", str(args.max_tokens)]


def _tail(path: Path, chars: int = 2000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


MARK = "RLVR_GPU_CHECK_STAGE"  # in every stage's environment, inherited by each rank it starts


def marked(token: str) -> list[int]:
    """Live processes whose environment carries ``MARK=token`` (read from /proc; [] where there is none)."""
    needle, found = f"{MARK}={token}".encode(), []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def sweep(token: str) -> None:
    """Kill what a stage left behind: the launchers start each rank in a session of its own, so killing
    the launcher's group misses a rank that outlived it (one left waiting at rendezvous sleeps for good)."""
    for pid in marked(token):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def run_stage(args: argparse.Namespace, stage: str, example: Path, work: Path) -> dict[str, Any]:
    """One stage in its own process group under its time limit; a hang or a crash is reported, not fatal."""
    reason = skip_reason(stage)
    if reason:
        return {"ok": True, "skipped": reason}
    folder = work / stage
    folder.mkdir(parents=True, exist_ok=True)
    result, log = folder / "result.json", folder / "output.log"
    limit = args.limit_s or (SMOKE_LIMIT_S if args.cpu_smoke else LIMIT_S.get(stage, 120))
    token = os.urandom(8).hex()
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", MARK: token}
    if args.cpu_smoke:
        env["OMP_NUM_THREADS"] = "1"
    with log.open("w") as out:
        proc = subprocess.Popen(stage_command(args, stage, example, result), stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=ROOT, start_new_session=True)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its own group
            proc.wait()
            sweep(token)  # and every rank it started in a session of its own
            return {"ok": False, "error": f"timed out after {limit:g} s", "output_tail": _tail(log)}
        sweep(token)
    if code != 0 or not result.exists():
        return {"ok": False, "error": f"exit status {code}", "output_tail": _tail(log)}
    return json.loads(result.read_text())


def environment() -> dict[str, Any]:
    import torch
    import transformers
    env: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__,
                           "cuda": torch.cuda.is_available()}
    if env["cuda"]:
        env["gpu"] = torch.cuda.get_device_name(0)
    for name in ("trl", "peft", "accelerate", "deepspeed"):
        env[name] = None
        if importlib.util.find_spec(name) is not None and name != "deepspeed":
            env[name] = __import__(name).__version__
    return env


def emit(line: dict[str, Any], stdout: Any) -> None:
    print(json.dumps(line), file=stdout, flush=True)


def build(args: argparse.Namespace, example: Path) -> dict[str, Any]:
    """The example model and data, once for every stage."""
    from rlvr.models.real import Size, make_example
    # Qwen2.5-0.5B's width, heads and MLP; 32 layers instead of 24 make up for the 4k-token vocabulary
    # (151k in the real checkpoint): ≈0.48 B parameters.
    size = Size(896, 32, 14, 2, 4864) if args.size == "0.5b" else args.size
    make_example(example, arch="qwen2", size=size, problems=max(200, (args.steps + 1) * args.prompts))
    return {"ok": True, "environment": environment(),
            "setting": {k: getattr(args, k) for k in ("cpu_smoke", "size", "steps", "prompts", "group",
                                                      "max_new_tokens", "max_tokens")}}


def run_all(args: argparse.Namespace, stdout: Any) -> bool:
    """The build, then every stage of ``args.stages``, each line printed as its stage ends."""
    t0, all_ok = time.perf_counter(), True
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        example = Path(tmp) / "example"
        emit({"stage": "build", **build(args, example), "s": round(time.perf_counter() - t0, 1)}, stdout)
        for stage in args.stages:
            start = time.perf_counter()
            line = run_stage(args, stage, example, Path(tmp))
            all_ok &= bool(line.get("ok"))
            emit({"stage": stage, **line, "s": round(time.perf_counter() - start, 1)}, stdout)
    emit({"stage": "total", "ok": all_ok, "s": round(time.perf_counter() - t0, 1)}, stdout)
    return all_ok


def run_worker(args: argparse.Namespace) -> None:
    """One stage in this process (``--worker``); rank 0 writes its result to ``--result``."""
    import torch
    if not torch.cuda.is_available():
        torch.set_num_threads(1 if args.worker in LAUNCHED else max(1, min(2, os.cpu_count() or 1)))
    result = worker_for(args.worker)(args, args.worker, Path(args.example), Path(args.result).parent / "run")
    if int(os.environ.get("RANK", "0")) == 0:
        Path(args.result).write_text(json.dumps(result))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the JSON lines (libraries log)
        if args.worker:
            run_worker(args)
            return 0
        return 0 if run_all(args, stdout) else 1


if __name__ == "__main__":
    sys.exit(main())
