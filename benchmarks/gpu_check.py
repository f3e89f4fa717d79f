"""One prepared check of rlvr's GPU paths, printing one JSON object (run through benchmarks/gpu_check.sh).

On a random Qwen2-architecture model (``rlvr.models.real``: ≈0.48 B parameters at ``--size 0.5b``
with a locally trained BPE tokenizer and word problems; nothing downloaded), each setting runs in a
fresh process:

- ``fp32``, ``bf16_gc`` (bf16 autocast, float32 master weights, gradient checkpointing), ``lora``
  (r 16 on every decoder linear layer, float32) and ``bf16_gc_hf`` (the ``hf`` generation engine):
  GRPO steps of rlvr's trainer (sdpa attention; every row computed, ``skip_zero_rows=false``,
  since a random model's rewards are all 0 and TRL computes every row), seconds per step,
  generation tokens/s (completion tokens over the rollout phase), update tokens/s (positions over
  forward + backward) and peak memory (``torch.cuda.max_memory_allocated`` on a GPU, the peak
  resident set on CPU);
- ``trl_bf16_gc``: TRL's ``GRPOTrainer`` on the same model and prompts with the same precision
  settings (skipped, with the reason, where trl or datasets cannot be imported);
- ``update_packed`` / ``update_padded``: the update alone on one fixed batch whose completion
  lengths spread over 10x (a random model never says eos, so sampled rows are all full length),
  ``optim.packing=always`` (row-wise sdpa) against ``never`` (transformers' sdpa, padded) under
  the same token budget, bf16 + checkpointing.

``--cpu-smoke`` runs the same code on the CPU with the ``tiny`` size, few rows and tokens, every
setting in one process (peak memory is then cumulative): it checks that the script works, not how
fast anything is.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LORA = ("model.lora={r: 16, alpha: 32, dropout: 0.0, target_modules: [q_proj, k_proj, v_proj, o_proj, "
        "gate_proj, up_proj, down_proj]}")
BF16_GC = ["run.mixed_precision=bf16", "model.gradient_checkpointing=true"]
SETTINGS: dict[str, list[str]] = {
    "fp32": [],
    "bf16_gc": BF16_GC,
    "lora": [LORA],
    "bf16_gc_hf": [*BF16_GC, "rollout.engine=hf"],
    "trl_bf16_gc": BF16_GC,
    "update_packed": [*BF16_GC, "optim.packing=always"],
    "update_padded": [*BF16_GC, "optim.packing=never"],
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-smoke", action="store_true", help="the same code on CPU with a tiny model (< 1 min)")
    p.add_argument("--size", default=None, help="rlvr.models.real size (0.5b; tiny with --cpu-smoke)")
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--steps", type=int, default=None, help="timed GRPO steps per setting (3; 1 with --cpu-smoke)")
    p.add_argument("--prompts", type=int, default=None, help="prompts per step B (8; 2 with --cpu-smoke)")
    p.add_argument("--group", type=int, default=None, help="completions per prompt G (8; 2 with --cpu-smoke)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="completion cap T (256; 12 with --cpu-smoke)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="token budget of the packed/padded update micro-batches (8192; 64 with --cpu-smoke)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--example", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    smoke = args.cpu_smoke
    for name, full, small in (("size", "0.5b", "tiny"), ("steps", 3, 1), ("prompts", 8, 2), ("group", 8, 2),
                              ("max_new_tokens", 256, 12), ("max_tokens", 8192, 64)):
        if getattr(args, name) is None:
            setattr(args, name, small if smoke else full)
    return args


# --- one setting in its own process -------------------------------------------------------------

def _config(args: argparse.Namespace, setting: str, example: Path, out: Path):
    from rlvr.train.config import load_config
    overrides = [f"model.path={example / 'model'}", f"task.params.path={example / 'data' / 'train.jsonl'}",
                 "task.params.verifier=numeric", f"rollout.prompts_per_step={args.prompts}",
                 f"rollout.group_size={args.group}", f"rollout.max_new_tokens={args.max_new_tokens}",
                 f"run.steps={args.steps + 1}", f"run.out_dir={out}", "run.save_every=0", "run.log_samples=0",
                 "run.eval_every=0", "optim.skip_zero_rows=false",  # a random model: every reward 0, rows kept
                 f"optim.max_tokens_per_micro_batch={args.max_tokens if setting.startswith('update') else 0}",
                 *SETTINGS[setting]]
    return load_config(ROOT / "configs" / "examples" / "qwen2_grpo.yaml", overrides)


def _peak_memory_mb() -> float:
    import torch
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rlvr_worker(args: argparse.Namespace, setting: str, example: Path, out: Path) -> dict[str, Any]:
    """GRPO steps of rlvr's trainer: the first untimed, the median of the rest."""
    from rlvr.train.trainer import Trainer
    trainer = Trainer(_config(args, setting, example, out))
    spans, gen, upd = [], [], []
    for i in range(args.steps + 1):
        _sync()
        t0 = time.perf_counter()
        metrics, batch = trainer.train_step()
        _sync()
        trainer.step += 1
        if i == 0:
            continue  # warm-up: kernels, allocator, caches
        spans.append(time.perf_counter() - t0)
        gen.append(int(batch.attention.sum()) / max(metrics.get("timing/rollout", 0.0), 1e-9))
        compute = metrics.get("timing/loss", 0.0)  # the update's forwards, losses and backwards
        upd.append(metrics.get("update/tokens", 0.0) / max(compute, 1e-9))
    return {"s_per_step": round(statistics.median(spans), 4),
            "generation_tokens_per_s": round(statistics.median(gen), 1),
            "update_tokens_per_s": round(statistics.median(upd), 1), "peak_memory_mb": round(_peak_memory_mb(), 1),
            "update_padding_frac": round(metrics.get("update/padding_frac", float("nan")), 3),
            "trainable_parameters": sum(p.numel() for p in trainer.policy.parameters() if p.requires_grad),
            "parameters": sum(p.numel() for p in {id(p): p for p in trainer.policy.parameters()}.values())}


def update_worker(args: argparse.Namespace, setting: str, example: Path, out: Path) -> dict[str, Any]:
    """The update alone on one fixed batch with completions of T/10 .. T tokens (uneven on purpose)."""
    import torch
    from rlvr.train.trainer import Trainer
    from rlvr.types import Problem, Rollouts
    trainer = Trainer(_config(args, setting, example, out))
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
    batch.advantages = (torch.randn(n, 1, generator=gen).to(device) * mask.to(device))
    spans = []
    for i in range(args.steps + 1):
        batch.old_logprobs = None
        _sync()
        t0 = time.perf_counter()
        metrics = trainer.update(batch)
        _sync()
        if i:
            spans.append(time.perf_counter() - t0)
    return {"s_per_update": round(statistics.median(spans), 4), "update_tokens": metrics["update/tokens"],
            "update_padding_frac": round(metrics["update/padding_frac"], 3),
            "real_tokens": int(batch.prompt_mask.sum() + batch.completion_mask.sum()),
            "completion_len_min_max": [int(lengths.min()), int(lengths.max())],
            "peak_memory_mb": round(_peak_memory_mb(), 1)}


def trl_worker(args: argparse.Namespace, setting: str, example: Path, out: Path) -> dict[str, Any]:
    """TRL's GRPOTrainer on the same model and prompts: loss dapo (token-mean), beta 0, same precision."""
    try:
        import torch
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as err:
        return {"skipped": f"trl or datasets not importable: {err}"}
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
    return {"s_per_step": round(statistics.median(spans[1:] or spans), 4),
            "peak_memory_mb": round(_peak_memory_mb(), 1),
            "note": "reward 0 everywhere (random model); precision bf16 + gradient checkpointing on a GPU"}


def _sync() -> None:
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# --- the driver ---------------------------------------------------------------------------------

WORKERS = {"trl": trl_worker, "update": update_worker}  # by the setting's first word; rlvr_worker otherwise


def run_in_process(args: argparse.Namespace, setting: str, example: Path, work: Path) -> dict[str, Any]:
    """``--cpu-smoke``: the setting in this interpreter (no start-up per setting; peak memory is then
    this process's so far, not the setting's own)."""
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the JSON (TRL prints its logs)
            result = WORKERS.get(setting.split("_")[0], rlvr_worker)(args, setting, example, work / setting / "run")
    except Exception as err:  # noqa: BLE001 — the report names what failed and goes on
        return {"error": f"{type(err).__name__}: {err}"}
    return {**result, "process_s": round(time.perf_counter() - t0, 1)}


def run_setting(args: argparse.Namespace, setting: str, example: Path, work: Path) -> dict[str, Any]:
    """One setting in a fresh process (its own peak memory, no state left by another)."""
    result = work / setting / "result.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, "--worker", setting, "--example", str(example), "--result", str(result),
           "--size", args.size, "--steps", str(args.steps), "--prompts", str(args.prompts), "--group", str(args.group),
           "--max-new-tokens", str(args.max_new_tokens), "--max-tokens", str(args.max_tokens)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if proc.returncode != 0:
        return {"error": proc.stderr[-1500:]}
    return {**json.loads(result.read_text()), "process_s": round(time.perf_counter() - t0, 1)}


def environment() -> dict[str, Any]:
    import torch
    import transformers
    env: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__,
                           "cuda": torch.cuda.is_available()}
    if env["cuda"]:
        env["gpu"] = torch.cuda.get_device_name(0)
    for name in ("trl", "peft", "accelerate"):
        try:
            env[name] = __import__(name).__version__
        except ImportError:
            env[name] = None
    return env


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the JSON (libraries log on import)
        if args.worker:
            run_worker(args)
            return
        report = build_report(args)
    print(json.dumps(report, indent=2), file=stdout)


def run_worker(args: argparse.Namespace) -> None:
    """One setting in this process (``--worker``); its result goes to ``--result``."""
    import torch
    if not torch.cuda.is_available():
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    worker = WORKERS.get(args.worker.split("_")[0], rlvr_worker)
    result = worker(args, args.worker, Path(args.example), Path(args.result).parent / "run")
    Path(args.result).write_text(json.dumps(result))


def build_report(args: argparse.Namespace) -> dict[str, Any]:
    """Every setting of ``args.settings`` on one example model, and the ratios between them."""
    from rlvr.models.real import Size, make_example
    # Qwen2.5-0.5B's width, heads and MLP; 32 layers instead of 24 make up for the 4k-token vocabulary
    # (151k in the real checkpoint): ≈0.48 B parameters.
    size = Size(896, 32, 14, 2, 4864) if args.size == "0.5b" else args.size
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        example = Path(tmp) / "example"
        make_example(example, arch="qwen2", size=size, problems=max(200, (args.steps + 1) * args.prompts))
        report: dict[str, Any] = {"environment": environment(),
                                  "setting": {k: getattr(args, k) for k in ("cpu_smoke", "size", "steps", "prompts",
                                                                            "group", "max_new_tokens", "max_tokens")},
                                  "build_s": round(time.perf_counter() - t0, 1)}
        run = run_in_process if args.cpu_smoke else run_setting
        if args.cpu_smoke:
            import torch
            torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
        report["runs"] = {s: run(args, s, example, Path(tmp)) for s in args.settings}
    runs = report["runs"]
    if "s_per_step" in runs.get("bf16_gc", {}) and "s_per_step" in runs.get("trl_bf16_gc", {}):
        report["ratio_rlvr_over_trl_bf16_gc"] = round(
            runs["bf16_gc"]["s_per_step"] / runs["trl_bf16_gc"]["s_per_step"], 3)
    if "s_per_update" in runs.get("update_packed", {}) and "s_per_update" in runs.get("update_padded", {}):
        report["ratio_packed_over_padded_update"] = round(
            runs["update_packed"]["s_per_update"] / runs["update_padded"]["s_per_update"], 3)
    report["total_s"] = round(time.perf_counter() - t0, 1)
    return report


if __name__ == "__main__":
    main()
