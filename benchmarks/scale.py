"""Peak memory and seconds per GRPO step of a real-architecture model on this CPU, by precision setting.

The example architecture (``rlvr.models.real``: a random Qwen2-shaped model, a BPE tokenizer trained
locally, word problems, ``math_verify``) at ≈30 M and ≈100 M parameters. Each (size, setting) runs
in a fresh Python process, builds the trainer from ``configs/examples/qwen2_grpo.yaml`` and takes
``--steps`` GRPO steps (generation, verification, one forward/backward, one AdamW step; no reference
model, as the GRPO preset) on B prompts × G completions of exactly T new tokens (a random model
never says eos, so every row is T long: the activations scale with B·G·T). Settings:

- ``fp32``: float32 everything (today's default);
- ``bf16``: ``run.mixed_precision=bf16`` (autocast, float32 master weights and AdamW state);
- ``bf16_gc``: bf16 plus ``model.gradient_checkpointing=true``;
- ``lora``: float32 base frozen, LoRA r = 16 on every linear layer of the decoder (through peft
  directly, ``--lora-via peft``, or ``model.lora`` where the config has it: ``--lora-via config``);
- ``lora_bf16_gc``: LoRA plus bf16 and gradient checkpointing.

Peak memory is the process's peak resident set (``ru_maxrss``): model, optimizer state, activations
and everything Python holds, from process start. ``rss_before_step_mb`` is the resident set after the
trainer is built, so ``peak - before`` is what the step itself adds.

    python benchmarks/scale.py                  # prints one JSON object on stdout (~10 min idle)
    python benchmarks/scale.py --sizes 30m --settings fp32 bf16_gc --steps 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {
    "fp32": [],
    "bf16": ["run.mixed_precision=bf16"],
    "bf16_gc": ["run.mixed_precision=bf16", "model.gradient_checkpointing=true"],
    "lora": [],
    "lora_bf16_gc": ["run.mixed_precision=bf16", "model.gradient_checkpointing=true"],
}
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", nargs="+", default=["30m", "100m"], help="rlvr.models.real SIZES")
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--steps", type=int, default=1, help="GRPO steps per setting (the median is reported)")
    p.add_argument("--prompts", type=int, default=2, help="prompts per step (B)")
    p.add_argument("--group", type=int, default=4, help="completions per prompt (G)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="completion length T")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--lora-via", choices=("peft", "config"), default="peft",
                   help="peft: wrap the model here; config: model.lora={r, alpha, dropout, target_modules}")
    p.add_argument("--work-dir", default=None, help="where example models are built (default: a temp folder)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--example", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# --- one (size, setting) in its own process -----------------------------------------------------

def overrides(args: argparse.Namespace, setting: str, example: Path, out: Path) -> list[str]:
    lora = []
    if setting.startswith("lora") and args.lora_via == "config":
        lora = [f"model.lora={{r: {args.lora_rank}, alpha: {2 * args.lora_rank}, dropout: 0.0, "
                f"target_modules: [{', '.join(LORA_TARGETS)}]}}"]
    return [f"model.path={example / 'model'}", f"task.params.path={example / 'data' / 'train.jsonl'}",
            f"rollout.prompts_per_step={args.prompts}", f"rollout.group_size={args.group}",
            f"rollout.max_new_tokens={args.max_new_tokens}", "rollout.verify_timeout_s=10",
            f"run.steps={args.steps}", f"run.out_dir={out}", f"run.threads={args.threads}",
            "run.save_every=0", "run.log_samples=0", *SETTINGS[setting], *lora]


def run_worker(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from rlvr.models.tiny import count_parameters
    from rlvr.train.build import build_model
    from rlvr.train.config import load_config
    from rlvr.train.trainer import Trainer
    example, setting = Path(args.example), args.worker
    torch.set_num_threads(args.threads)
    cfg = load_config(ROOT / "configs" / "examples" / "qwen2_grpo.yaml",
                      overrides(args, setting, example, Path(args.result).parent / "run"))
    model, tokenizer = build_model(cfg)
    total = count_parameters(model)
    if setting.startswith("lora") and args.lora_via == "peft":
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, lora_dropout=0.0,
                                                 target_modules=LORA_TARGETS))
    trainer = Trainer(cfg, model=model, tokenizer=tokenizer)
    trainable = sum(p.numel() for p in trainer.policy.parameters() if p.requires_grad)
    before = _rss_mb()
    spans, rows = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        metrics, batch = trainer.train_step()
        spans.append(time.perf_counter() - t0)
        rows.append({"tokens": int(batch.completion_mask.sum()), "rows": batch.num_rows,
                     **{k: round(v, 2) for k, v in metrics.items() if k.startswith("timing/")}})
        trainer.step += 1
    return {"parameters": total, "trainable": trainable, "rss_before_step_mb": before,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "seconds_per_step": sorted(spans)[len(spans) // 2], "steps": rows}


def _rss_mb() -> float:
    import psutil
    return psutil.Process().memory_info().rss / 2**20


# --- the driver ---------------------------------------------------------------------------------

def build_example(size: str, folder: Path) -> Path:
    from rlvr.models.real import make_example
    if not (folder / "model" / "config.json").exists():
        make_example(folder, size=size, problems=500)
    return folder


def run_setting(args: argparse.Namespace, size: str, setting: str, example: Path, work: Path) -> dict[str, Any]:
    result = work / f"{size}_{setting}" / "result.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, "--worker", setting, "--example", str(example), "--result", str(result),
           "--steps", str(args.steps), "--prompts", str(args.prompts), "--group", str(args.group),
           "--max-new-tokens", str(args.max_new_tokens), "--threads", str(args.threads),
           "--lora-rank", str(args.lora_rank), "--lora-via", args.lora_via]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    load = os.getloadavg()[0]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return {**json.loads(result.read_text()), "load_before": round(load, 1), "load_after": round(os.getloadavg()[0], 1)}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        Path(args.result).write_text(json.dumps(run_worker(args)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work_dir or tmp)
        report: dict[str, Any] = {"setup": {"prompts": args.prompts, "group": args.group,
                                            "max_new_tokens": args.max_new_tokens, "threads": args.threads,
                                            "steps": args.steps, "cores": os.cpu_count()}}
        for size in args.sizes:
            example = build_example(size, work / f"example_{size}")
            runs = {s: run_setting(args, size, s, example, work) for s in args.settings}
            report[size] = {"settings": runs, "peak_vs_fp32": _relative(runs)}
        print(json.dumps(report, indent=2))


def _relative(runs: dict[str, dict]) -> dict[str, float]:
    """Each setting's peak RSS as a fraction of fp32's (0.6 = 40 % less)."""
    base = runs.get("fp32", {}).get("peak_rss_mb")
    if not base:
        return {}
    return {k: round(v["peak_rss_mb"] / base, 3) for k, v in runs.items() if "peak_rss_mb" in v}


if __name__ == "__main__":
    main()
