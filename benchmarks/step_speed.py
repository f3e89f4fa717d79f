"""Seconds per GRPO step: rlvr's trainer against TRL's ``GRPOTrainer`` on the same tiny setting.

Both frameworks start from the same warm-started tiny model (saved once, loaded by each),
sample B prompts × G completions of at most T tokens at temperature 1, score them with the
arithmetic verifier, and take one AdamW step (constant lr, grad-norm clip 1, β = 0, no
reference model) with a token-mean clipped loss (TRL ``loss_type="dapo"``, rlvr
``aggregation.mode=token-mean`` with ``ppo_clip``). Each framework runs in its own Python
process so neither inherits the other's thread pools, caches or imports.

A step is timed from just before generation to just after the optimizer step (TRL:
``on_step_begin``/``on_step_end``; rlvr: around ``Trainer.train_step``). The first
``--warmup`` steps are skipped, the median of the next ``--steps`` is reported. rlvr's split
comes from its own ``timing/*`` metrics in ``metrics.jsonl``.

Two regimes of the shared starting model: ``--regime zero`` (default) warm-starts it for
``--sft-steps`` (100) steps, so almost every completion is wrong (pure throughput, nearly every group
unanimous); ``--regime learning`` warm-starts it as ``rlvr quickstart`` does (at least 400 steps,
until 20 % greedy validation accuracy), so the batch reward is between about 0.15 and 0.6 and groups
carry signal; ``--regime long`` starts from the untrained model (no warm start) with a 400-token cap,
so completions end wherever the random policy samples eos (lengths spread over more than 10x in one
batch, padding most of a padded pass) and rlvr computes every row (``optim.skip_zero_rows=false``:
every group is unanimous there, and the regime measures the update's work, not its signal).
For each framework the report gives the update's work per step: the fraction of rows left out of
the training forward/backward (rlvr's ``optim.skip_zero_rows``; TRL computes every row), the fraction
of the positions it computed that were padding, the positions computed against the real tokens
among them, and for rlvr the update's peak resident memory above its start (``VmHWM`` reset before
each update, Linux only) and, with ``--activation-memory``, the peak bytes it held for backward
(``SavedForBackward``: saved-tensor hooks, independent of how the allocator reuses pages).

``--packing`` sets rlvr's ``optim.packing`` (``auto``, the default, and ``always``: packed,
padding-free passes, the tiny models' sdpa running row-wise, ``rlvr.models.rowwise_attention``;
``never``: padded and trimmed, transformers' sdpa) and ``--max-tokens`` its token budget per update
micro-batch and scoring pass (0 = none).

    python benchmarks/step_speed.py            # prints one JSON object on stdout
    python benchmarks/step_speed.py --regime learning --repeats 2
    python benchmarks/step_speed.py --regime learning --only rlvr --packing always
    python benchmarks/step_speed.py --regime long --only rlvr --packing always --max-tokens 1024
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The update's work per step (report key -> rlvr's update/ metric).
WORK = {"skipped_row_frac": "skipped_row_frac", "padding_frac": "padding_frac", "tokens": "tokens"}

# rlvr phases that are model compute; everything else in a step is "other".
# rlvr's stage timers (docs/design.md): generation is the rollout stage, the update's forwards and
# backwards are the loss stage (per micro-batch), the optimizer step is the update stage.
COMPUTE_PHASES = {"generation": ("rollout",), "forward_backward": ("loss",), "optimizer": ("update",)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="timed steps per framework")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before the timed ones")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step (B)")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="completion length cap T (48; long: 400)")
    p.add_argument("--lr", type=float, default=1e-4, help="constant AdamW learning rate")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads per process")
    p.add_argument("--regime", choices=("zero", "learning", "long"), default="zero",
                   help="zero: --sft-steps of warm start (reward ~0, pure throughput); learning: the quickstart's "
                        "warm start (>= 400 steps until 20%% validation accuracy; --sft-steps is ignored); long: "
                        "no warm start, a 400-token cap, every row computed (completion lengths spread > 10x)")
    p.add_argument("--packing", choices=("auto", "always", "never"), default="auto", help="rlvr's optim.packing")
    p.add_argument("--no-lean", action="store_true",
                   help="rlvr's loop engine decodes with the model's own forward (rollout.engine.lean=false)")
    p.add_argument("--activation-memory", action="store_true",
                   help="also report the update's peak bytes saved for backward (rlvr; saved-tensor hooks)")
    p.add_argument("--max-tokens", type=int, default=0,
                   help="rlvr's optim.max_tokens_per_micro_batch and max_tokens_per_scoring_pass (0 = rows)")
    p.add_argument("--sft-steps", type=int, default=100, help="warm-start steps for the shared starting model")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=1,
                   help="run the pair this many times in alternating order (A B, B A, ...) and pool the timed "
                        "steps, so slow drift in machine load hits both frameworks alike")
    p.add_argument("--only", choices=("rlvr", "trl"), default=None, help="run one framework (both by default)")
    p.add_argument("--worker", choices=("rlvr", "trl"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.max_new_tokens is None:
        args.max_new_tokens = 400 if args.regime == "long" else 48
    if args.regime == "long":
        args.sft_steps = 0
    return args


# --- the shared starting model -------------------------------------------------------------

def prepare_model(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Build the tiny model, warm-start it briefly and save model + tokenizer to ``folder``."""
    import torch
    from rlvr.models import build_char_tokenizer, build_tiny_model
    from rlvr.sft import warm_start
    from rlvr.tasks import Arithmetic
    torch.set_num_threads(args.threads)
    if args.regime == "learning":
        return _quickstart_model(args, folder)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, hidden=args.hidden, layers=args.layers, heads=args.heads, seed=args.seed)
    info: dict[str, Any] = {"regime": args.regime, "sft_steps": args.sft_steps}
    if args.sft_steps > 0:
        result = warm_start(model, tokenizer, Arithmetic(), steps=args.sft_steps, seed=args.seed, progress=False)
        info["sft_seconds"] = round(result["seconds"], 1)
        info["sft_loss"] = round(result["loss"], 4)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return info


def _quickstart_model(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """The quickstart's warm start (``rlvr.quickstart.QUICKSTART``) of the benchmark's model size."""
    from rlvr.quickstart import QUICKSTART
    from rlvr.train.config import load_config
    from rlvr.train.run import warm_start_model
    base = {"warm_start": QUICKSTART["warm_start"], "task": {"name": "arithmetic"},
            "model": {"hidden": args.hidden, "layers": args.layers, "heads": args.heads},
            "rollout": {"max_new_tokens": args.max_new_tokens},
            "run": {"seed": args.seed, "threads": args.threads, "out_dir": str(folder.parent / "warm")}}
    model, tokenizer, info = warm_start_model(load_config(None, None, base=base))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    keep = ("warm_start_steps", "warm_start_validation", "warm_start_seconds", "warm_start_loss")
    return {"regime": args.regime, **{k: info[k] for k in keep if k in info}}


# --- rlvr worker ---------------------------------------------------------------------------

def run_rlvr(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from rlvr.models import load_model, load_tokenizer
    from rlvr.train.config import load_config
    from rlvr.train.logging import read_metrics
    from rlvr.train.trainer import Trainer
    torch.set_num_threads(args.threads)
    out_dir = Path(args.result).parent / "rlvr_run"
    base = {
        "model": {"path": args.model_dir},
        "task": {"name": "arithmetic"},
        "warm_start": {"steps": 0},
        "rollout": {"prompts_per_step": args.prompts, "group_size": args.group,
                    "max_new_tokens": args.max_new_tokens, "temperature": 1.0,
                    "engine": {"name": "loop", "lean": not args.no_lean}},
        "algorithm": {"loss": {"name": "ppo_clip"}, "aggregation": {"mode": "token-mean"}, "kl_coef": 0.0},
        "optim": {"lr": args.lr, "schedule": "constant", "grad_clip": 1.0, "ppo_epochs": 1, "micro_batch_size": 0,
                  "packing": args.packing, "max_tokens_per_micro_batch": args.max_tokens,
                  "max_tokens_per_scoring_pass": args.max_tokens, "skip_zero_rows": args.regime != "long"},
        "run": {"steps": args.warmup + args.steps, "seed": args.seed, "out_dir": str(out_dir), "eval_every": 0,
                "save_every": 0, "log_samples": 0, "threads": args.threads},
    }
    cfg = load_config(None, None, base=base)
    model, tokenizer = load_model(args.model_dir, dtype=torch.float32), load_tokenizer(args.model_dir)
    trainer = Trainer(cfg, model=model, tokenizer=tokenizer)
    starts, spans = [], []
    inner = trainer.train_step

    def timed_step():  # wall time of one step: generation through optimizer step
        t0 = time.perf_counter()
        starts.append(t0)
        result = inner()
        spans.append(time.perf_counter() - t0)
        return result

    peaks: list[float] = []
    spread: list[list[int]] = []  # per step: shortest and longest completion of the batch
    update = trainer.update

    saved: list[float] = []

    def measured_update(batch):  # the update's peak resident memory above its start
        lengths = batch.attention.sum(-1)
        spread.append([int(lengths.min()), int(lengths.max())])
        start = _reset_peak_rss()
        meter = SavedForBackward(trainer.policy) if args.activation_memory else contextlib.nullcontext()
        with meter:
            result = update(batch)
        peaks.append(_peak_rss_mb() - start if start is not None else float("nan"))
        if args.activation_memory:
            saved.append(meter.peak / 2**20)
        return result

    trainer.train_step, trainer.update = timed_step, measured_update
    trainer.train()
    rows = read_metrics(out_dir)[args.warmup:]
    return {"spans": spans[args.warmup:], "loop": _intervals(starts)[args.warmup:],
            "timing": [{k[len("timing/"):]: v for k, v in r.items() if k.startswith("timing/")} for r in rows],
            "response_length": [r.get("rollout/response_length") for r in rows],
            "reward": [r.get("reward/mean") for r in rows], "update_peak_rss_mb": peaks[args.warmup:],
            "update_peak_saved_mb": saved[args.warmup:],
            "completion_len_min_max": spread[args.warmup:],
            **{key: [r.get(f"update/{name}") for r in rows] for key, name in WORK.items()}}


class SavedForBackward:
    """The peak bytes of activations held for backward while it is entered: distinct storages saved by
    autograd (saved-tensor hooks), the model's parameters left out. Unlike resident memory it does not
    depend on the allocator reusing freed pages, so it shows what a token budget bounds."""

    def __init__(self, model: Any) -> None:
        import torch
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.live: dict[int, list[int]] = {}  # storage -> [bytes, saved references]
        self.now = self.peak = 0
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, t: Any) -> Any:
        key = t.untyped_storage().data_ptr()
        if key not in self.params:
            entry = self.live.setdefault(key, [t.untyped_storage().nbytes(), 0])
            if entry[1] == 0:
                self.now += entry[0]
                self.peak = max(self.peak, self.now)
            entry[1] += 1
        return key, t

    def _unpack(self, packed: Any) -> Any:
        key, t = packed
        entry = self.live.get(key)
        if entry is not None:  # released at its first use in backward (retain_graph is not used here)
            entry[1] -= 1
            if entry[1] == 0:
                self.now -= entry[0]
                del self.live[key]
        return t

    def __enter__(self) -> SavedForBackward:
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.hooks.__exit__(*exc)


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB
    raise KeyError(field)


def _reset_peak_rss() -> float | None:
    """Reset this process's peak resident set (``VmHWM``) to its current size; that size in MB (None
    where /proc does not allow it)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _status_mb("VmRSS")
    except (OSError, KeyError):
        return None


def _peak_rss_mb() -> float:
    return _status_mb("VmHWM")


# --- TRL worker ----------------------------------------------------------------------------

def run_trl(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from rlvr.models import load_model, load_tokenizer
    from rlvr.tasks import Arithmetic
    from rlvr.types import Problem
    torch.set_num_threads(args.threads)
    total = args.warmup + args.steps
    task = Arithmetic()
    problems = task.problems(total * args.prompts, seed=args.seed)
    data = Dataset.from_dict({"prompt": [p.prompt for p in problems], "answer": [p.answer for p in problems]})
    lengths: list[float] = []
    rewards: list[float] = []
    work: dict[str, list[float]] = {key: [] for key in WORK}
    tokenizer = load_tokenizer(args.model_dir)

    def correct(completions: list[str], answer: list[str], completion_ids: list[list[int]], prompts: list[str],
                **_: Any) -> list[float]:
        scores = [task.verify(Problem(prompt="", answer=a), c).value for c, a in zip(completions, answer)]
        lengths.append(sum(len(ids) for ids in completion_ids) / len(completion_ids))
        rewards.append(sum(scores) / len(scores))
        _trl_work(work, [len(tokenizer(p)["input_ids"]) for p in prompts], [len(c) for c in completion_ids])
        return scores

    clock = _StepClock(TrainerCallback)
    config = GRPOConfig(
        output_dir=str(Path(args.result).parent / "trl_run"), use_cpu=True, bf16=False, fp16=False,
        gradient_checkpointing=False, report_to=[], logging_steps=10**6, save_strategy="no",
        disable_tqdm=False, seed=args.seed, max_steps=total, learning_rate=args.lr,
        lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch", weight_decay=0.0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0,
        per_device_train_batch_size=args.prompts * args.group, gradient_accumulation_steps=1,
        num_generations=args.group, num_iterations=1, max_completion_length=args.max_new_tokens,
        temperature=1.0, top_p=1.0, top_k=0, beta=0.0, loss_type="dapo", epsilon=0.2,
        scale_rewards="group", log_completions=False, dataloader_num_workers=0)
    model = load_model(args.model_dir, dtype=torch.float32)
    trainer = GRPOTrainer(model=model, reward_funcs=correct, args=config, train_dataset=data,
                          processing_class=tokenizer, callbacks=[clock])
    trainer.train()
    w = args.warmup
    return {"spans": clock.spans[w:], "loop": _intervals(clock.starts)[w:],
            "response_length": lengths[w:], "reward": rewards[w:], **{k: v[w:] for k, v in work.items()}}


def _trl_work(work: dict[str, list[float]], prompt_lengths: list[int], completion_lengths: list[int]) -> None:
    """TRL's training forward: every row, prompts left-padded to the batch's longest, completions
    right-padded to the batch's longest (``GRPOTrainer._generate_and_score_completions``)."""
    n = len(prompt_lengths)
    positions = n * (max(prompt_lengths) + max(completion_lengths))
    work["skipped_row_frac"].append(0.0)
    work["padding_frac"].append(1.0 - (sum(prompt_lengths) + sum(completion_lengths)) / positions)
    work["tokens"].append(float(positions))


def _StepClock(base: type) -> Any:  # noqa: N802 — builds the callback lazily (transformers imported in the worker)
    class StepClock(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self.starts: list[float] = []
            self.spans: list[float] = []

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.starts.append(time.perf_counter())

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.spans.append(time.perf_counter() - self.starts[-1])

    return StepClock()


def _intervals(starts: list[float]) -> list[float]:
    """Start-to-start seconds: a whole loop iteration, logging and progress bar included."""
    return [b - a for a, b in zip(starts, starts[1:])]


# --- the report ----------------------------------------------------------------------------

def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else float("nan")


def rlvr_split(res: dict[str, Any]) -> dict[str, Any]:
    """Mean seconds per phase over the timed steps, grouped as generation / forward_backward /
    optimizer / other; "untimed" is step wall time outside every rlvr phase (python between phases)."""
    phases: dict[str, float] = {}
    for row in res["timing"]:
        for k, v in row.items():
            if k != "step":
                phases[k] = phases.get(k, 0.0) + v / len(res["timing"])
    wall = _mean(res["spans"])
    phases["untimed"] = max(wall - sum(phases.values()), 0.0)
    groups = {g: sum(phases.pop(k, 0.0) for k in keys) for g, keys in COMPUTE_PHASES.items()}
    compute = sum(groups.values())
    other = dict(sorted(phases.items(), key=lambda kv: -kv[1]))
    return {"mean_step_s": round(wall, 4),
            "seconds": {**{g: round(v, 4) for g, v in groups.items()}, "other": round(sum(other.values()), 4)},
            "fraction": {g: round(v / wall, 3) for g, v in {**groups, "other": sum(other.values())}.items()},
            "other_breakdown_s": {k: round(v, 5) for k, v in other.items()},
            "model_compute_fraction": round(compute / wall, 3)}


def summarise(args: argparse.Namespace, results: dict[str, dict], info: dict[str, Any]) -> dict[str, Any]:
    n = args.prompts * args.group
    out: dict[str, Any] = {"setting": {"prompts": args.prompts, "group": args.group, "completions_per_step": n,
                                       "max_new_tokens": args.max_new_tokens, "threads": args.threads,
                                       "packing": args.packing, "max_tokens": args.max_tokens, "lean": not args.no_lean,
                                       "warmup_steps": args.warmup, "timed_steps": args.steps, **info}}
    for name, res in results.items():
        med = statistics.median(res["spans"])
        out[name] = {"s_per_step": round(med, 4), "completions_per_s": round(n / med, 1),
                     "s_per_step_min": round(min(res["spans"]), 4), "s_per_step_max": round(max(res["spans"]), 4),
                     "s_per_iteration_incl_logging": round(statistics.median(res["loop"]), 4) if res["loop"] else None,
                     "mean_completion_tokens": round(_mean(res["response_length"]), 2),
                     "mean_reward": round(_mean(res["reward"]), 3),
                     "update_skipped_row_frac": round(_mean(res["skipped_row_frac"]), 3),
                     "update_padding_frac": round(_mean(res["padding_frac"]), 3),
                     "update_tokens_per_step": round(_mean(res["tokens"]), 1),
                     "update_real_tokens_per_step": round(_mean([t * (1 - p) for t, p in
                                                                 zip(res["tokens"], res["padding_frac"])]), 1)}
        if res.get("completion_len_min_max"):
            out[name]["completion_len_min_max_per_step"] = res["completion_len_min_max"]
        if res.get("update_peak_rss_mb"):
            out[name]["update_peak_rss_mb_above_start"] = round(max(res["update_peak_rss_mb"]), 1)
        if res.get("update_peak_saved_mb"):
            out[name]["update_peak_saved_for_backward_mb"] = round(max(res["update_peak_saved_mb"]), 2)
    if "rlvr" in results:
        out["rlvr"]["split"] = rlvr_split(results["rlvr"])
    if len(results) == 2:
        out["ratio_rlvr_over_trl"] = round(out["rlvr"]["s_per_step"] / out["trl"]["s_per_step"], 3)
        # Fastest steps are the least disturbed by other load: a cross-check of the median ratio.
        out["ratio_of_fastest_steps"] = round(out["rlvr"]["s_per_step_min"] / out["trl"]["s_per_step_min"], 3)
    return out


def run_worker(args: argparse.Namespace, name: str, folder: Path) -> dict[str, Any]:
    result = folder / f"{name}.json"
    cmd = [sys.executable, __file__, "--worker", name, "--model-dir", str(folder / "model"), "--result", str(result),
           *_forward_args(args)]
    log = folder / f"{name}.log"
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if proc.returncode != 0:
        sys.stderr.write(log.read_text()[-4000:])
        raise SystemExit(f"{name} worker failed (exit {proc.returncode}); log above")
    return json.loads(result.read_text())


def _forward_args(args: argparse.Namespace) -> list[str]:
    keys = ("steps", "warmup", "prompts", "group", "max_new_tokens", "lr", "threads", "seed", "regime", "packing",
            "max_tokens", "sft_steps")
    flags = ["--no-lean"] * args.no_lean + ["--activation-memory"] * args.activation_memory
    return [x for k in keys for x in (f"--{k.replace('_', '-')}", str(getattr(args, k)))] + flags


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        res = run_rlvr(args) if args.worker == "rlvr" else run_trl(args)
        Path(args.result).write_text(json.dumps(res))
        return
    names = [args.only] if args.only else ["rlvr", "trl"]
    load = [round(os.getloadavg()[0], 2)]
    with tempfile.TemporaryDirectory(prefix="step_speed_") as tmp:
        folder = Path(tmp)
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the JSON (libraries log on import)
            info = prepare_model(args, folder / "model")
        results: dict[str, dict] = {}
        for r in range(args.repeats):
            for name in (names if r % 2 == 0 else names[::-1]):
                res = run_worker(args, name, folder)
                for key, value in res.items():
                    results.setdefault(name, {}).setdefault(key, []).extend(value)
                load.append(round(os.getloadavg()[0], 2))
    info["repeats"] = args.repeats
    info["load_avg_1min_start_then_after_each_run"] = load
    print(json.dumps(summarise(args, results, info), indent=2))


if __name__ == "__main__":
    main()
