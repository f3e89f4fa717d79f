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

``--regime smollm2 --model PATH`` times a real pretrained model: PATH is the folder
``rlvr model get smollm2-135m-instruct DIR`` writes (a Q4_1-rounded SmolLM2-135M-Instruct, Llama
architecture, ChatML chat template), or any Llama/Qwen2 folder with a chat template. Both frameworks
get the same reasoning-gym prompts: the recipe's task (``configs/examples/smollm2_reasoning_gym.yaml``:
2-term ``chain_sum``, ``answer_format: last_number``), the problems rlvr's uniform selector draws for
each step, rendered with the model's chat template by rlvr's ``render_prompt`` and handed to TRL as
plain text in that order (``shuffle_dataset=False``); the JSON's ``same_prompts`` compares the prompt
token ids each framework actually generated from, step by step. The reward is the task's ``verify``
for both (rlvr scores in-process, ``rollout.verify_workers=0``, as TRL calls its reward function).
Both load float32 master weights and run bf16 autocast (rlvr ``run.mixed_precision=bf16``; TRL
``bf16=True``, which transformers allows with ``use_cpu=True``: accelerate's CPU autocast); the JSON
reads which autocast dtype each framework's generation and training forwards actually ran under.
Defaults follow the recipe: 8 prompts x 8, 32 new tokens, lr 1e-5. rlvr's fast paths are its defaults
(``optim.packing=auto``, the loop engine's lean decoder) and the JSON says which fired, read while it
ran: the attention kernel the policy holds, the decoder class each rollout used, the share of the
update's micro-batches that were packed, the autocast state of rollout and update forwards.

For every regime each framework reports its split of a step (TRL's read by wrappers installed after
``GRPOTrainer`` is built: ``generation`` times the trainer's ``_generate`` — prompt tokenization,
``model.generate`` and decoding, as rlvr's rollout stage — with ``model.generate`` alone beside it;
``forward_backward`` times ``compute_loss`` plus ``accelerator.backward``; ``optimizer`` runs from the
``on_pre_optimizer_step`` to the ``on_optimizer_step`` callback, i.e. ``optimizer.step()`` alone, the
gradient clip falling under ``other``), the process's peak resident memory (``VmHWM``; rlvr's run
resets it before each update, so its peak is the largest value read before each reset and at the end)
and the settings it ran with.

``--packing`` sets rlvr's ``optim.packing`` (``auto``, the default, and ``always``: packed,
padding-free passes, the tiny models' sdpa running row-wise, ``rlvr.models.rowwise_attention``;
``never``: padded and trimmed, transformers' sdpa) and ``--max-tokens`` its token budget per update
micro-batch and scoring pass (0 = none).

    python benchmarks/step_speed.py            # prints one JSON object on stdout
    python benchmarks/step_speed.py --regime learning --repeats 2
    python benchmarks/step_speed.py --regime learning --only rlvr --packing always
    python benchmarks/step_speed.py --regime long --only rlvr --packing always --max-tokens 1024
    python benchmarks/step_speed.py --regime smollm2 --model models/smollm2 --repeats 3 --steps 5 --warmup 1
    python benchmarks/step_speed.py --regime smollm2 --model models/smollm2 --micro-batch 0 --gradient-checkpointing
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
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
ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "examples" / "smollm2_reasoning_gym.yaml"  # the smollm2 regime's task
# Regime defaults: the tiny testbed's, and the SmolLM2 recipe's (32 new tokens, lr 1e-5).
DEFAULT_TOKENS = {"long": 400, "smollm2": 32}
DEFAULT_LR = {"smollm2": 1e-5}
DEFAULT_MICRO_BATCH = {"smollm2": 16}  # the recipe's optim.micro_batch_size


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="timed steps per framework")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before the timed ones")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step (B)")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="completion length cap T (48; long: 400; smollm2: 32)")
    p.add_argument("--lr", type=float, default=None, help="constant AdamW learning rate (1e-4; smollm2: 1e-5)")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads per process")
    p.add_argument("--regime", choices=("zero", "learning", "long", "smollm2"), default="zero",
                   help="zero: --sft-steps of warm start (reward ~0, pure throughput); learning: the quickstart's "
                        "warm start (>= 400 steps until 20%% validation accuracy; --sft-steps is ignored); long: "
                        "no warm start, a 400-token cap, every row computed (completion lengths spread > 10x); "
                        "smollm2: the real model at --model on the SmolLM2 recipe's reasoning-gym task")
    p.add_argument("--model", default=None,
                   help="--regime smollm2: the model folder (`rlvr model get smollm2-135m-instruct DIR` writes one)")
    p.add_argument("--packing", choices=("auto", "always", "never"), default="auto", help="rlvr's optim.packing")
    p.add_argument("--no-lean", action="store_true",
                   help="rlvr's loop engine decodes with the model's own forward (rollout.engine.lean=false)")
    p.add_argument("--activation-memory", action="store_true",
                   help="also report the update's peak bytes saved for backward (rlvr; saved-tensor hooks)")
    p.add_argument("--max-tokens", type=int, default=0,
                   help="rlvr's optim.max_tokens_per_micro_batch and max_tokens_per_scoring_pass (0 = rows)")
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute decoder layers' activations in the backward pass, in both frameworks "
                        "(rlvr model.gradient_checkpointing, TRL gradient_checkpointing)")
    p.add_argument("--recompute", choices=("none", "all", "elementwise"), default=None,
                   help="rlvr only: model.recompute with model.gradient_checkpointing on (elementwise: keep matmul "
                        "and attention outputs, recompute the rest; TRL has no such setting); default: none, or "
                        "all with --gradient-checkpointing")
    p.add_argument("--micro-batch", type=int, default=None,
                   help="rows per forward/backward in both frameworks (rlvr optim.micro_batch_size; TRL "
                        "per_device_train_batch_size with gradient_accumulation_steps = prompts x group / N, one "
                        "optimizer step per generation batch either way); 0 = the whole batch in one pass "
                        "(default: smollm2 16, the recipe's; else 0)")
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
        args.max_new_tokens = DEFAULT_TOKENS.get(args.regime, 48)
    if args.lr is None:
        args.lr = DEFAULT_LR.get(args.regime, 1e-4)
    if args.recompute is None:
        args.recompute = "all" if args.gradient_checkpointing else "none"
    if args.recompute == "none" and args.gradient_checkpointing:
        p.error("--recompute none contradicts --gradient-checkpointing (which checkpoints both frameworks)")
    if args.micro_batch is None:
        args.micro_batch = DEFAULT_MICRO_BATCH.get(args.regime, 0)
    rows = args.prompts * args.group
    if args.micro_batch >= rows:  # a micro-batch as large as the batch is the batch in one pass
        args.micro_batch = 0
    if args.micro_batch and rows % args.micro_batch:
        p.error(f"--micro-batch {args.micro_batch} must divide prompts x group = {rows} (TRL accumulates whole "
                "micro-batches)")
    if args.regime in ("long", "smollm2"):
        args.sft_steps = 0
    if args.worker is None:
        problem = model_problem(args)
        if problem:
            p.error(problem)
    return args


def model_problem(args: argparse.Namespace) -> str | None:
    """Why ``--model`` does not fit ``--regime`` (None: it does): smollm2 needs a Hugging Face model
    folder whose tokenizer carries a chat template; the tiny regimes build their own model."""
    if args.regime != "smollm2":
        return f"--model is for --regime smollm2 (--regime {args.regime} builds its own model)" if args.model else None
    if not args.model:
        return "--regime smollm2 needs --model PATH: the folder `rlvr model get smollm2-135m-instruct DIR` writes"
    folder = Path(args.model)
    if not folder.is_dir():
        return f"--model {folder}: no such folder"
    missing = [f for f in ("config.json", "tokenizer_config.json") if not (folder / f).is_file()]
    if missing or not (any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))):
        what = ", ".join(missing) or "weights (*.safetensors or *.bin)"
        return f"--model {folder} is not a Hugging Face model folder: it has no {what}"
    if not (folder / "chat_template.jinja").is_file() and \
            "chat_template" not in json.loads((folder / "tokenizer_config.json").read_text()):
        return f"--model {folder}: its tokenizer has no chat template (the smollm2 regime renders prompts with it)"
    return None


def recipe_task() -> dict[str, Any]:
    """The SmolLM2 recipe's task block (name and params), read from the recipe so the two stay equal."""
    import yaml
    return yaml.safe_load(RECIPE.read_text())["task"]


def model_info(folder: str) -> dict[str, Any]:
    """What the smollm2 regime's model folder declares (read from config.json; nothing loaded)."""
    config = json.loads((Path(folder) / "config.json").read_text())
    keep = ("architectures", "model_type", "vocab_size", "hidden_size", "num_hidden_layers", "dtype")
    return {"regime": "smollm2", "model": str(Path(folder).resolve()), "task": recipe_task(),
            **{f"model_{k}": config[k] for k in keep if k in config}}


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

def rlvr_base(args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    """rlvr's config for the regime: the tiny regimes' arithmetic, or the SmolLM2 recipe's task with
    bf16 autocast over float32 master weights and in-process scoring (as TRL calls its reward)."""
    base: dict[str, Any] = {
        "model": {"path": args.model_dir, "gradient_checkpointing": args.recompute != "none",
                  "recompute": "all" if args.recompute == "none" else args.recompute},
        "task": {"name": "arithmetic"},
        "warm_start": {"steps": 0},
        "rollout": {"prompts_per_step": args.prompts, "group_size": args.group,
                    "max_new_tokens": args.max_new_tokens, "temperature": 1.0,
                    "engine": {"name": "loop", "lean": not args.no_lean}},
        "algorithm": {"loss": {"name": "ppo_clip"}, "aggregation": {"mode": "token-mean"}, "kl_coef": 0.0},
        "optim": {"lr": args.lr, "schedule": "constant", "grad_clip": 1.0, "ppo_epochs": 1,
                  "micro_batch_size": args.micro_batch,
                  "packing": args.packing, "max_tokens_per_micro_batch": args.max_tokens,
                  "max_tokens_per_scoring_pass": args.max_tokens, "skip_zero_rows": args.regime != "long"},
        "run": {"steps": args.warmup + args.steps, "seed": args.seed, "out_dir": str(out_dir), "eval_every": 0,
                "save_every": 0, "log_samples": 0, "threads": args.threads},
    }
    if args.regime == "smollm2":
        base["task"] = recipe_task()
        base["rollout"]["verify_workers"] = 0
        base["run"]["mixed_precision"] = "bf16"
    return base


# rlvr settings printed in the JSON (dotted config paths).
RLVR_SETTINGS = ("task.name", "task.params", "rollout.prompts_per_step", "rollout.group_size",
                 "rollout.max_new_tokens", "rollout.temperature", "rollout.top_p", "rollout.top_k",
                 "rollout.engine", "rollout.verify_workers", "algorithm.loss", "algorithm.aggregation",
                 "algorithm.kl_coef", "optim.name", "optim.lr", "optim.schedule", "optim.grad_clip",
                 "optim.weight_decay", "optim.ppo_epochs", "optim.micro_batch_size", "optim.packing",
                 "optim.skip_zero_rows", "model.dtype", "model.gradient_checkpointing", "model.recompute",
                 "model.attn_implementation", "run.mixed_precision",
                 "run.seed", "run.threads")


def run_rlvr(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from rlvr.models import load_model, load_tokenizer
    from rlvr.train.config import load_config
    from rlvr.train.logging import read_metrics
    from rlvr.train.trainer import Trainer
    torch.set_num_threads(args.threads)
    out_dir = Path(args.result).parent / "rlvr_run"
    cfg = load_config(None, None, base=rlvr_base(args, out_dir))
    model, tokenizer = load_model(args.model_dir, dtype=torch.float32), load_tokenizer(args.model_dir)
    trainer = Trainer(cfg, model=model, tokenizer=tokenizer)
    probe = RlvrProbe(trainer)
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
        probe.before_update(batch)
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
            **{key: [r.get(f"update/{name}") for r in rows] for key, name in WORK.items()},
            **probe.report(cfg, trainer.policy)}


def _autocast_state(device_type: str) -> str:
    """The autocast dtype active on ``device_type`` right now ("off" when none)."""
    import torch
    if not torch.is_autocast_enabled(device_type):
        return "off"
    return str(torch.get_autocast_dtype(device_type)).removeprefix("torch.")


def _forward_probe(model: Any, seen: dict[str, set], inner: bool) -> None:
    """Record the autocast state of every pass through ``model``, keyed by whether it tracks gradients:
    ``train_forward`` (the loss's forward) or ``no_grad_forward`` (generation, scoring). ``inner``: hook
    the decoder (``base_model``), inside the model's forward, so an autocast wrapper around that forward
    (accelerate's, TRL) counts; else the model itself, leaving the decoder without hooks (rlvr: its lean
    decoder refuses a decoder with hooks, and rlvr's autocast is a context around the call)."""
    import torch
    device = next(model.parameters()).device.type

    def hook(module: Any, inputs: Any) -> None:
        key = "train_forward" if torch.is_grad_enabled() else "no_grad_forward"
        seen.setdefault(key, set()).add(_autocast_state(device))

    (getattr(model, "base_model", model) if inner else model).register_forward_pre_hook(hook)


class RlvrProbe:
    """What rlvr actually ran, read while it runs: the decoder class each rollout used
    (``rollout.engines.loop.decode_steps``) and the autocast state it decoded under, whether each update
    micro-batch was packed (``rlvr.batching.UpdatePlan.count``), the autocast state of the policy's
    forwards, the prompt token ids of each step's batch and the process's peak resident memory."""

    def __init__(self, trainer: Any) -> None:
        from rlvr.batching import UpdatePlan
        from rlvr.rollout.engines import loop
        from rlvr.rollout.engines.lean import lean_refusal
        self.decoders: set[str] = set()
        self.refusals: set[str] = set()
        self.autocast: dict[str, set] = {}
        self.packed: list[bool] = []
        self.digests: list[str] = []
        self.peak = 0.0
        decode_steps, count = loop.decode_steps, UpdatePlan.count

        def probed_decode_steps(model: Any, *a: Any, **kw: Any) -> Any:
            decoder = decode_steps(model, *a, **kw)
            self.decoders.add(type(decoder).__name__)
            if type(decoder).__name__ != "LeanDecoder":  # why not (None: rollout.engine.lean=false or lock-step)
                self.refusals.add(str(lean_refusal(model)))
            self.autocast.setdefault("rollout", set()).add(_autocast_state(next(model.parameters()).device.type))
            return decoder

        def probed_count(plan: Any, part: Any) -> None:
            self.packed.append(bool(plan.packed))
            count(plan, part)

        loop.decode_steps, UpdatePlan.count = probed_decode_steps, probed_count
        _forward_probe(trainer.policy, self.autocast, inner=False)

    def before_update(self, batch: Any) -> None:
        rows = [ids[mask.bool()].tolist() for ids, mask in zip(batch.prompt_ids, batch.prompt_mask)]
        self.digests.append(prompt_digest(rows))
        self.peak = max(self.peak, _peak_rss_mb())  # before the update resets VmHWM

    def report(self, cfg: Any, policy: Any) -> dict[str, list]:
        config = getattr(policy, "config", None)
        fast = {"attention": getattr(config, "_attn_implementation", None), "decoder": sorted(self.decoders),
                "lean_refusals": sorted(self.refusals),
                "update_micro_batches_packed": f"{sum(self.packed)}/{len(self.packed)}",
                "autocast": {k: sorted(v) for k, v in sorted(self.autocast.items())}}
        return {"peak_rss_mb": [max(self.peak, _peak_rss_mb())], "fast_paths": [fast],
                "prompt_digests": self.digests, "settings": [{**_pick(cfg, RLVR_SETTINGS), **_params(policy)}]}


def prompt_digest(rows: list[list[int]]) -> str:
    """One step's prompts as a short digest of their token ids (rows sorted: order within a step is free)."""
    return hashlib.sha1(json.dumps(sorted(rows)).encode()).hexdigest()[:16]


def _pick(obj: Any, paths: tuple[str, ...]) -> dict[str, Any]:
    """``{path: value}`` for dotted attribute paths, values made JSON-safe."""
    out = {}
    for path in paths:
        value = obj
        for part in path.split("."):
            value = getattr(value, part, None)
        out[path] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return {k: _plain(getattr(value, k)) for k in value.__dataclass_fields__}
    return str(value)


def _params(model: Any) -> dict[str, Any]:
    params = list(model.parameters())
    return {"parameters": sum(p.numel() for p in params),
            "parameter_dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in params})}


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
    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer(args.model_dir)
    task, problems, prompts = trl_prompts(args, tokenizer)
    data = Dataset.from_dict({"prompt": prompts, "index": list(range(len(prompts)))})
    lengths: list[float] = []
    rewards: list[float] = []
    work: dict[str, list[float]] = {key: [] for key in WORK}

    def correct(completions: list[str], index: list[int], completion_ids: list[list[int]], prompts: list[str],
                **_: Any) -> list[float]:
        scores = [task.verify(problems[i], c).value for c, i in zip(completions, index)]
        lengths.append(sum(len(ids) for ids in completion_ids) / len(completion_ids))
        rewards.append(sum(scores) / len(scores))
        _trl_work(work, [len(tokenizer(p)["input_ids"]) for p in prompts], [len(c) for c in completion_ids])
        return scores

    clock = _StepClock(TrainerCallback)
    config = GRPOConfig(**trl_settings(args))
    model = load_model(args.model_dir, dtype=torch.float32)
    trainer = GRPOTrainer(model=model, reward_funcs=correct, args=config, train_dataset=data,
                          processing_class=tokenizer, callbacks=[clock])
    seen: dict[str, set] = {}
    _time_trl(trainer, model, clock)
    _forward_probe(model, seen, inner=True)
    trainer.train()
    w = args.warmup
    settings = {**{k: _plain(getattr(config, k)) for k in TRL_SETTINGS}, **_params(model)}
    return {"spans": clock.spans[w:], "loop": _intervals(clock.starts)[w:], "phases": clock.phases[w:],
            "response_length": lengths[w:], "reward": rewards[w:], **{k: v[w:] for k, v in work.items()},
            "peak_rss_mb": [_peak_rss_mb()], "prompt_digests": clock.digests, "settings": [settings],
            "precision": [{"autocast": {k: sorted(v) for k, v in sorted(seen.items())}}]}


# GRPOConfig fields printed in the JSON.
TRL_SETTINGS = ("use_cpu", "bf16", "fp16", "learning_rate", "lr_scheduler_type", "optim", "weight_decay",
                "max_grad_norm", "per_device_train_batch_size", "gradient_accumulation_steps", "num_generations",
                "num_iterations", "max_completion_length", "temperature", "top_p", "top_k", "beta", "loss_type",
                "epsilon", "scale_rewards", "shuffle_dataset", "gradient_checkpointing", "seed")


def trl_settings(args: argparse.Namespace) -> dict[str, Any]:
    """GRPOConfig's arguments: rlvr's settings in TRL's terms (dapo = token-mean clipped loss, beta 0)."""
    return dict(
        output_dir=str(Path(args.result).parent / "trl_run"), use_cpu=True, bf16=args.regime == "smollm2",
        fp16=False, gradient_checkpointing=args.gradient_checkpointing, report_to=[], logging_steps=10**6, save_strategy="no",
        disable_tqdm=False, seed=args.seed, max_steps=args.warmup + args.steps, learning_rate=args.lr,
        lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch", weight_decay=0.0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0,
        per_device_train_batch_size=args.micro_batch or args.prompts * args.group,
        gradient_accumulation_steps=args.prompts * args.group // (args.micro_batch or args.prompts * args.group),
        num_generations=args.group, num_iterations=1, max_completion_length=args.max_new_tokens,
        temperature=1.0, top_p=1.0, top_k=0, beta=0.0, loss_type="dapo", epsilon=0.2,
        scale_rewards="group", log_completions=False, dataloader_num_workers=0,
        shuffle_dataset=args.regime != "smollm2")


def trl_prompts(args: argparse.Namespace, tokenizer: Any) -> tuple[Any, list, list[str]]:
    """(task, problems, prompt texts) for TRL. smollm2: for each step in order, the problems rlvr's
    uniform selector draws at that step (``Collector._select``: ``step_seed(seed, step)``), rendered with
    the model's chat template as rlvr renders them; the tiny regimes: the arithmetic stream, unrendered."""
    from rlvr.models.loading import render_prompt
    from rlvr.tasks import Arithmetic
    total = args.warmup + args.steps
    if args.regime != "smollm2":
        task = Arithmetic()
        problems = task.problems(total * args.prompts, seed=args.seed)
        return task, problems, [p.prompt for p in problems]
    from rlvr.selection.uniform import Uniform
    from rlvr.train.build import build_plugin
    from rlvr.train.collect import step_seed
    from rlvr.train.config import PluginSpec
    spec = recipe_task()
    task = build_plugin("task", PluginSpec(spec["name"], spec.get("params", {})))
    selector = Uniform()
    problems = [p for step in range(total)
                for p in selector.select(task, args.prompts, step, step_seed(args.seed, step))]
    return task, problems, [render_prompt(tokenizer, p) for p in problems]


def _time_trl(trainer: Any, model: Any, clock: Any) -> None:
    """Wrap the trainer's generation (``_generate``: tokenize, ``model.generate``, decode; its prompt ids
    are digested), ``model.generate`` alone, ``compute_loss`` and ``accelerator.backward`` with timers
    that add into ``clock``'s current step."""
    def timed(fn: Any, phase: str, after: Any = None) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            clock.add(phase, time.perf_counter() - t0)
            if after is not None:
                after(out)
            return out
        return wrapper

    trainer._generate = timed(trainer._generate, "generation",
                              after=lambda out: clock.digests.append(prompt_digest([list(r) for r in out[0]])))
    model.generate = timed(model.generate, "model_generate")
    trainer.compute_loss = timed(trainer.compute_loss, "forward_backward")
    trainer.accelerator.backward = timed(trainer.accelerator.backward, "forward_backward")


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
        """Step wall time (``on_step_begin`` to ``on_step_end``), the optimizer step (from
        ``on_pre_optimizer_step`` to ``on_optimizer_step``: ``optimizer.step()`` alone) and the seconds
        the wrappers of ``_time_trl`` add, per step."""

        def __init__(self) -> None:
            self.starts: list[float] = []
            self.spans: list[float] = []
            self.phases: list[dict[str, float]] = []
            self.digests: list[str] = []
            self.current: dict[str, float] = {}
            self.optimizer_start = 0.0

        def add(self, phase: str, seconds: float) -> None:
            self.current[phase] = self.current.get(phase, 0.0) + seconds

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.starts.append(time.perf_counter())
            self.current = {}

        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.optimizer_start = time.perf_counter()

        def on_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.add("optimizer", time.perf_counter() - self.optimizer_start)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.spans.append(time.perf_counter() - self.starts[-1])
            self.phases.append(self.current)

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


def trl_split(res: dict[str, Any]) -> dict[str, Any]:
    """TRL's mean seconds per phase over the timed steps (``_time_trl`` and the step clock's optimizer
    interval), in rlvr_split's groups; ``other`` is the step's wall time outside them (rewards,
    advantages, the gradient clip, logging); ``model_generate_s`` is the part of generation spent in
    ``model.generate``."""
    steps = res["phases"]
    mean = {g: sum(p.get(g, 0.0) for p in steps) / len(steps) for g in (*COMPUTE_PHASES, "model_generate")}
    wall = _mean(res["spans"])
    groups = {g: mean[g] for g in COMPUTE_PHASES}
    other = max(wall - sum(groups.values()), 0.0)
    return {"mean_step_s": round(wall, 4),
            "seconds": {**{g: round(v, 4) for g, v in groups.items()}, "other": round(other, 4)},
            "fraction": {g: round(v / wall, 3) for g, v in {**groups, "other": other}.items()},
            "model_generate_s": round(mean["model_generate"], 4),
            "model_compute_fraction": round(sum(groups.values()) / wall, 3)}


def _per_run(name: str, res: dict[str, Any]) -> dict[str, Any]:
    """What each run of a framework reported once: its peak memory (the largest over repeats), its
    settings, and what it ran (rlvr's fast paths, TRL's autocast states; one entry per distinct value)."""
    out: dict[str, Any] = {"runs": len(res["peak_rss_mb"]), "peak_rss_mb": round(max(res["peak_rss_mb"]), 1),
                           "settings": res["settings"][0]}
    key = "fast_paths" if name == "rlvr" else "precision"
    distinct = [json.loads(x) for x in dict.fromkeys(json.dumps(v, sort_keys=True) for v in res[key])]
    out[key] = distinct[0] if len(distinct) == 1 else distinct
    return out


def summarise(args: argparse.Namespace, results: dict[str, dict], info: dict[str, Any]) -> dict[str, Any]:
    n = args.prompts * args.group
    out: dict[str, Any] = {"setting": {"prompts": args.prompts, "group": args.group, "completions_per_step": n,
                                       "max_new_tokens": args.max_new_tokens, "lr": args.lr, "threads": args.threads,
                                       "packing": args.packing, "max_tokens": args.max_tokens, "lean": not args.no_lean,
                                       "micro_batch": args.micro_batch,
                                       "gradient_checkpointing": args.gradient_checkpointing,
                                       "rlvr_recompute": args.recompute,
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
        out[name].update(_per_run(name, res))
    if "rlvr" in results:
        out["rlvr"]["split"] = rlvr_split(results["rlvr"])
    if "trl" in results:
        out["trl"]["split"] = trl_split(results["trl"])
    if len(results) == 2:
        # the prompt token ids each framework generated from, step by step, in every repeat
        out["same_prompts"] = results["rlvr"]["prompt_digests"] == results["trl"]["prompt_digests"]
        out["peak_rss_ratio_rlvr_over_trl"] = round(out["rlvr"]["peak_rss_mb"] / out["trl"]["peak_rss_mb"], 3)
        out["ratio_rlvr_over_trl"] = round(out["rlvr"]["s_per_step"] / out["trl"]["s_per_step"], 3)
        # Fastest steps are the least disturbed by other load: a cross-check of the median ratio.
        out["ratio_of_fastest_steps"] = round(out["rlvr"]["s_per_step_min"] / out["trl"]["s_per_step_min"], 3)
    return out


def run_worker(args: argparse.Namespace, name: str, folder: Path) -> dict[str, Any]:
    result = folder / f"{name}.json"
    model_dir = args.model if args.regime == "smollm2" else str(folder / "model")
    cmd = [sys.executable, __file__, "--worker", name, "--model-dir", model_dir, "--result", str(result),
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
            "max_tokens", "sft_steps", "micro_batch")
    flags = (["--no-lean"] * args.no_lean + ["--activation-memory"] * args.activation_memory
             + ["--gradient-checkpointing"] * args.gradient_checkpointing + ["--recompute", args.recompute])
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
            info = model_info(args.model) if args.regime == "smollm2" else prepare_model(args, folder / "model")
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
