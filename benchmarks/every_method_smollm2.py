"""Every method preset on a real model: each ``configs/methods/*.yaml`` runs a few steps on a SmolLM2
folder over the SmolLM2 recipe's reasoning-gym task (or its own environment, where the preset names
one), and its mechanism check from ``tests/e2e/mechanisms.py`` is read off the run's metrics.

    python benchmarks/every_method_smollm2.py --model models/smollm2 --out table.json --markdown table.md

Each run is a fresh subprocess (isolation, and its own peak resident memory: ``VmHWM``), trained by
``make_trainer`` after ``validate_run`` (the checks ``rlvr train`` makes; no evaluation, no checkpoint).
A preset's status: ``fired`` (every check true), ``did_not_fire`` (it ran; a check read false),
``refused`` (rlvr stopped it with a ``ConfigError`` before training: the reason is rlvr's message) or
``failed`` (any other error). Stdout carries one JSON object; ``--markdown PATH`` writes the table.

The checks are the CI run's (``MECHANISMS``; loops and chess: ``MORE_MECHANISMS``), with the testbed-only
settings some of them need swapped for the real model's equivalents (``SMOLLM2_SETTINGS`` below).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.e2e.mechanisms import (  # noqa: E402
    DIGIT_STEPS, EVERY_ROW, FADE_TARGET, LONG, MECHANISMS, MIXED, MORE_MECHANISMS, Check, some, tether_rule)

PRESETS = ROOT / "configs" / "methods"
RECIPE = ROOT / "configs" / "examples" / "smollm2_reasoning_gym.yaml"

# Testbed-only overrides of the CI checks and what the SmolLM2 run uses instead (None: left out; a tuple:
# several settings in its place).
SMOLLM2_SETTINGS: dict[str, str | tuple[str, ...] | None] = {
    # toy_mixed_test (rewards 1, 0, 1, 0 by construction) is a test task of the tiny testbed; on SmolLM2 the
    # same chain_sum with one-digit terms, which the untrained model gets right about half the time, so
    # most groups are mixed (the recipe's two-digit terms: ~0.1-0.2, whole steps without a mixed group).
    MIXED: "task.params.config={min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}",  # ONE_DIGIT
    # The 96-token cap let the character model stop before the cap; SmolLM2 writes eos on its own.
    LONG: None,
    # FADE's target must exceed the largest entropy a batch can have: ln(49,152) ≈ 10.80 nats here.
    FADE_TARGET: "algorithm.advantage.entropy_target=11.0",
    # Digit tokens as step boundaries, plus the sentence ends a chat model writes.
    DIGIT_STEPS: "rollout.sampler.step_separators=['0','1','2','3','4','5','6','7','8','9','.',',']",
    # SA-MRPO's second objective: the toy task's "contains a 3" becomes a reward function (a brief reply).
    "task.params.second_digit=3": "algorithm.rewards=[{fn: 'benchmarks.every_method_smollm2:brief_reply'}]",
    # The testbed's supervised warm start teaches a random model the answer form; SmolLM2 is pretrained.
    "warm_start.steps=100": None, "warm_start.steps=120": None, "warm_start.batch_size=32": None,
    # TaCo's 8 prompts (of 8) gave the tiny model enough positive tail tokens; 64 rows cost minutes a step here.
    "rollout.prompts_per_step=8": None,
    # OM-GRPO's unanimous groups: near-greedy sampling; at 0.05 SmolLM2's close top logits still split groups.
    # Under bf16 autocast even 0.001 split groups (consensus 0.81, 0.88 in the first pass), most likely where
    # the top two logits round to one bf16 value (8 mantissa bits: steps of 1/16 to 1/8 at 10-20) and the
    # draw between them is a coin flip per row: the check samples from float32 logits, as the testbed does.
    "rollout.temperature=0.05": ("rollout.temperature=0.001", "run.mixed_precision='no'"),
    # UP: a large step makes ratios leave [1-ε, 1+ε] within one batch; 0.03 is for the tiny model.
    "optim.lr=0.03": "optim.lr=1e-3",
}

ONE_DIGIT = SMOLLM2_SETTINGS[MIXED]
# Settings a preset needs on the real model beyond its checks' own (why, for each).
SMOLLM2_EXTRA: dict[str, list[str]] = {
    # The preset's weak model is the testbed's warm start at 25 %; the real model's frozen start is weaker
    # than the policy once it trains, and is the prefix writer rlvr offers for a model.path run.
    "outer_prefix": ["rollout.sampler.weak_model=reference"],
    # OC-GRPO's hint is a prefix of the problem's solution cut back to a step end; the testbed's solutions
    # are steps ('3;5;7'), reasoning-gym's the bare answer ('42'): its digits are the steps here. A share of
    # [0.3, 0.7] of '42' is '' or '4' (of a one-digit answer always ''), and in the first pass no guided row
    # was right, so none carried an advantage into the loss; nor in a second pass at [0.5, 1] (the first digit or
    # the whole answer as the response's start: the reply's last number is what counts). The guidance here is the
    # method's other form, privileged text in the prompt (placement: prompt): the whole answer as a hint line.
    # The trainer still sees the unguided prompt, importance-corrected toward it.
    "oc_grpo": [SMOLLM2_SETTINGS[DIGIT_STEPS], "rollout.sampler.hint_len_range=[1.0, 1.0]",
                "rollout.sampler.placement=prompt", 'rollout.sampler.template="{prompt}\\nHint: the answer is {hint}."'],
    # TaCo reweights positive credit: one-digit sums give the groups rewards to be positive about.
    "taco": [ONE_DIGIT],
    # SpecRoll's head fits: 100 Adam steps over a 49,152-token output per fit took over 5 minutes of step 1.
    "specroll": ["rollout.engine.fit_steps=10"],
    # BPCO's 64 single-completion rows per step are cut to the table's 16 rows (below).
    # The answer span of a reply in the last_number form is its last number: the weighting's marker '#'
    # belongs to the testbed's '#answer' form.
    "answer_mask": ["algorithm.weightings=[{name: answer_mask, span: after_marker, marker: ' is'}]"],
    # ES: a small population on sampled fitness (the CI run's sizes, tests/e2e/test_es.py), on one-digit
    # sums (the CI runs' toy tasks make fitness vary by construction; here the model's ~1/2 accuracy does).
    **{name: [ONE_DIGIT, "optim.params.population=4", "optim.params.prompts=3", "optim.params.samples_per_prompt=2",
              "optim.params.sigma=0.001", "optim.params.alpha=0.0005", "optim.params.temperature=1.0"]
       for name in ("es", "grpo_then_es")},
    "hyper_es": [ONE_DIGIT, "optim.params.direction_steps=1", "optim.params.cma_popsize=3", "optim.params.dare_drop_p=0.5",
                 "optim.params.ties_keep_rho=0.5"],
    # Progressive: the teacher's RL steps need a signal for the student to have something to distil. In the
    # first pass (one teacher step, 24 tokens) 81 % of replies ran to the token cap and every row of
    # the teacher's and the student's steps scored 0: no advantage, the teacher stayed the base (reverse KL 0).
    # Here 3 teacher steps (the preset's 50 would take about 15 minutes here) with room for the answer (48 tokens).
    "progressive_rlvr": [ONE_DIGIT, "optim.params.rl_steps=3", "rollout.max_new_tokens=48"],
    # LURE: no demonstration warm start (the model is pretrained), the CI run's small self-play, and its
    # entropy bonus so every step moves the weights (tests/e2e/test_lure.py).
    "lure": ["optim.params.warm_start_steps=0", "optim.params.round_steps=2", "optim.params.evader_group=2",
             "optim.params.captures_per_task=2", "optim.params.max_turns=3", "optim.params.turn_tokens=16",
             "algorithm.entropy_coef=0.01"],
    # C3RL's check warm-starts the answer + confidence form (warm_start.demo_suffix) as in CI, at a pretrained
    # model's size: a short supervised run at a fine-tuning learning rate (the testbed's 120 steps at 3e-3
    # train a random model from scratch); SmolLM2 asked for a confidence in the prompt never stated one.
    "c3rl": ["warm_start.steps=16", "warm_start.batch_size=8", "warm_start.lr=1e-4", "warm_start.warmup=0"],
    # BPCO's critic warms up for 2 steps with the policy frozen (CI runs 3 steps); 1 here, so step 2 updates.
    "bpco": ["rollout.batch_size=16", "critic.warmup_steps=1"],
    "bpco_privileged": ["rollout.batch_size=16", "critic.warmup_steps=1"],
}
STEPS = {"grpo_then_es": 3, "lure": 3, "hyper_es": 1}  # a phase switch / a round's end needs its own steps
PHASES = {"grpo_then_es": ["optim.params.grpo_steps=1"]}


def brief_reply(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
    """A second objective for SA-MRPO: 1 when the reply is at most 60 characters."""
    return [float(len(c.strip()) <= 60) for c in completions]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a chat model folder (`rlvr model get smollm2-135m-instruct DIR`)")
    p.add_argument("--presets", default="", help="comma-separated preset names (default: every one)")
    p.add_argument("--steps", type=int, default=2, help="RL steps per run (2)")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take before it counts as failed")
    p.add_argument("--out", default="", help="also write the JSON here")
    p.add_argument("--markdown", default="", help="write the table as Markdown here")
    p.add_argument("--update", default="", help="an earlier table's JSON: the presets run now replace their rows")
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def preset_names(selected: str) -> list[str]:
    names = sorted(p.stem for p in PRESETS.glob("*.yaml"))
    if not selected:
        return names
    wanted = [s.strip() for s in selected.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise SystemExit(f"unknown preset(s) {unknown}; presets: {', '.join(names)}")
    return wanted


# Checks whose CI predicate holds only by the testbed's construction, in the form that holds on any model.
REAL_MODEL_CHECKS = {
    # The CI check pins step 1 to w = 7/16 (toy_mixed_test's rewards 1, 0, 1, 0 and a fresh critic's V = 1/2);
    # here the rule itself, w = clip(1 − MSE_V/Var_grp, 0, 1) on every step, with a group signal (Var_grp > 0).
    "tether": [Check("w = clip(1 − MSE_V/Var_grp, 0, 1) on every step, with a group signal (Var_grp > 0)",
                     lambda r, b: tether_rule(r, b) and some(r, "adv/tether_var_grp"), overrides=(MIXED,))],
}


def checks_of(preset: str) -> list[Check]:
    return REAL_MODEL_CHECKS.get(preset) or MECHANISMS.get(preset) or MORE_MECHANISMS.get(preset) or []


def smollm2_overrides(preset: str, check: Check | None) -> list[str]:
    """The check's overrides with each testbed-only one swapped for its SmolLM2 equivalent, and the
    preset's own real-model settings."""
    out = []
    for item in (check.overrides if check else ()):
        swapped = SMOLLM2_SETTINGS.get(item, item)
        out.extend(swapped if isinstance(swapped, tuple) else [swapped])
    return [o for o in out if o] + SMOLLM2_EXTRA.get(preset, []) + PHASES.get(preset, [])


def run_base(args: argparse.Namespace, preset: str, out_dir: str) -> dict[str, Any]:
    """The recipe's model, task and precision at the table's small sizes, under the preset (a preset
    that names its own task keeps it: its environment is part of the method)."""
    from rlvr.train.config import read_yaml
    recipe, own = read_yaml(RECIPE), read_yaml(PRESETS / f"{preset}.yaml")
    base: dict[str, Any] = {
        "model": {"path": str(Path(args.model).resolve())},
        "warm_start": {"steps": 0},
        "rollout": {**recipe["rollout"], "prompts_per_step": args.prompts, "group_size": args.group,
                    "max_new_tokens": args.max_new_tokens, "verify_workers": 0},
        "optim": dict(recipe["optim"]),
        "run": {"steps": STEPS.get(preset, args.steps), "seed": args.seed, "threads": args.threads,
                "mixed_precision": _precision(recipe, own), "eval_every": 0, "eval_problems": 4,
                "eval_k": 0, "save_every": 0, "log_samples": 0, "out_dir": out_dir},
    }
    if "task" not in own:
        base["task"] = recipe["task"]
    return base


def _precision(recipe: dict[str, Any], preset: dict[str, Any]) -> str:
    """The recipe's bf16 autocast, or float32 for a loop of its own (ES and friends refuse autocast)."""
    from rlvr.train.loop_plugin import loop_class
    loop = loop_class((preset.get("optim") or {}).get("name", "gradient"))
    return recipe["run"]["mixed_precision"] if loop.gradient_knobs else "no"


def sizes(args: argparse.Namespace, preset: str) -> list[str]:
    """The table's sizes, over what a preset sets (a preset's own sizes would cost minutes a step here);
    a preset's own group size stays (BPCO's single completions are its method)."""
    from rlvr.train.config import read_yaml
    rollout = read_yaml(PRESETS / f"{preset}.yaml").get("rollout") or {}
    group = [] if "group_size" in rollout else [f"rollout.group_size={args.group}"]
    return [f"rollout.prompts_per_step={args.prompts}", *group, f"rollout.max_new_tokens={args.max_new_tokens}",
            f"run.steps={STEPS.get(preset, args.steps)}", "run.save_every=0"]


def work(spec: dict[str, Any]) -> dict[str, Any]:
    """One run in this process: config, checks, training; the metrics rows and what it cost."""
    import torch
    from rlvr.train.config import ConfigError, load_config
    from rlvr.train.logging import read_metrics
    from rlvr.train.precision import check_supported
    from rlvr.train.run import make_trainer
    from rlvr.train.validate import validate_run
    torch.set_num_threads(spec["threads"])
    try:
        cfg = load_config(spec["path"], spec["overrides"], base=spec["base"])
        check_supported(cfg)
        parts = validate_run(cfg)
        model = tokenizer = None
        if spec.get("warm"):  # as the CI check: the policy after the run's supervised warm start
            from rlvr.train.warm_start import warm_start_model
            model, tokenizer, _ = warm_start_model(cfg, task=None if parts is None else parts.task)
        trainer = make_trainer(cfg, model=model, tokenizer=tokenizer, parts=parts, checked=True)
    except ConfigError as err:
        return {"status": "refused", "reason": str(err)}
    from rlvr.train import loop as loop_module
    loop_module._save = lambda loop: loop.step  # no checkpoint: the final save of 135 M weights + optimizer state
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    rows = read_metrics(cfg.run.out_dir)
    stepped = rows[-1].get("time/elapsed", seconds) if rows else seconds  # the steps' own time, set-up excluded
    return {"status": "ran", "rows": rows, "seconds": seconds, "task": cfg.task.name,
            "s_per_step": stepped / max(len(rows), 1)}


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker_main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    try:
        with contextlib.redirect_stdout(sys.stderr):
            result = work(spec)
    except Exception as err:  # noqa: BLE001 — the table records any failure with its message
        import traceback
        result = {"status": "failed", "reason": f"{type(err).__name__}: {err}",
                  "traceback": traceback.format_exc()[-2000:]}
    result["peak_rss_mb"] = round(peak_rss_mb(), 1)
    Path(spec["result"]).write_text(json.dumps(result))


class Read(dict):
    """A metrics row that remembers which keys a predicate read."""

    def __init__(self, row: dict[str, Any], seen: set[str]) -> None:
        super().__init__(row)
        self.seen = seen

    def __getitem__(self, key: str) -> Any:
        self.seen.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.seen.add(str(key))
        return super().__contains__(key)


def judge(check: Check, rows: list[dict], base: list[dict]) -> dict[str, Any]:
    """The check on the run's rows: whether it fired and the values of every metric it read."""
    seen: set[str] = set()
    seen_base: set[str] = set()
    try:
        fired = bool(check.active([Read(r, seen) for r in rows], [Read(r, seen_base) for r in base]))
        note = ""
    except (KeyError, IndexError) as err:
        fired, note = False, f"metric missing: {err}"
    out = {"what": check.what, "fired": fired, "metrics": _values(rows, seen)}
    if seen_base:
        out["grpo_metrics"] = _values(base, seen_base)  # the plain GRPO run it compared with
    return {**out, "note": note} if note else out


def _values(rows: list[dict], keys: set[str]) -> dict[str, list]:
    return {k: [r.get(k) for r in rows] for k in sorted(keys) if any(k in r for r in rows)}


def run_once(args: argparse.Namespace, preset: str, overrides: list[str], tmp: Path,
             warm: bool = False) -> dict[str, Any]:
    """One preset run in a fresh subprocess (results cached per preset, overrides and warm start)."""
    key = json.dumps([preset, overrides, warm])
    if key in CACHE:
        return CACHE[key]
    folder = Path(tempfile.mkdtemp(prefix=f"{preset}_", dir=tmp))
    spec = {"path": str(PRESETS / f"{preset}.yaml"), "base": run_base(args, preset, str(folder / "run")),
            "overrides": [*sizes(args, preset), *overrides], "threads": args.threads,
            "result": str(folder / "result.json"), "warm": warm}
    (folder / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    log = folder / "log.txt"
    try:
        with open(log, "w") as fh:
            subprocess.run([sys.executable, __file__, "--model", args.model, "--worker", str(folder / "spec.json")],
                           stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=args.timeout, check=False)
        result = json.loads(Path(spec["result"]).read_text())
    except subprocess.TimeoutExpired:
        result = {"status": "failed", "reason": f"timed out after {args.timeout:.0f} s"}
    except (OSError, ValueError):
        result = {"status": "failed", "reason": "the worker wrote no result: " + log.read_text()[-1500:]}
    result["overrides"] = overrides
    CACHE[key] = result
    return result


CACHE: dict[str, dict[str, Any]] = {}


def base_rows(args: argparse.Namespace, check: Check, tmp: Path) -> list[dict]:
    """The plain grpo preset's rows to compare with (every row computed, and the check's base settings)."""
    if not check.base:
        return []
    run = run_once(args, "grpo", [EVERY_ROW, *smollm2_overrides("grpo", Check("", check.active, check.base))], tmp)
    return run.get("rows", [])


def evaluate_preset(args: argparse.Namespace, preset: str, tmp: Path) -> dict[str, Any]:
    """The preset's runs (one per distinct set of check overrides) and its row of the table."""
    checks = checks_of(preset) or [None]
    runs, judged = [], []
    for check in checks:
        run = run_once(args, preset, smollm2_overrides(preset, check), tmp, warm=bool(check and check.warm))
        runs.append(run)
        if run["status"] != "ran":
            break
        if check is not None:
            judged.append(judge(check, run["rows"], base_rows(args, check, tmp)))
    out: dict[str, Any] = {"preset": preset, "task": next((r["task"] for r in runs if "task" in r), None),
                           "checks": judged, "runs": len(runs),
                           "peak_rss_mb": max(r.get("peak_rss_mb", 0.0) for r in runs)}
    stopped = next((r for r in runs if r["status"] != "ran"), None)
    if stopped is not None:
        out.update(status=stopped["status"], reason=stopped["reason"], overrides=stopped["overrides"])
        if "traceback" in stopped:
            out["traceback"] = stopped["traceback"]
        return out
    out["status"] = "fired" if judged and all(c["fired"] for c in judged) else "did_not_fire"
    out["s_per_step"] = [round(r["s_per_step"], 2) for r in runs]
    out["steps"] = [len(r["rows"]) for r in runs]
    out["overrides"] = [r["overrides"] for r in runs]
    return out


def setting(args: argparse.Namespace) -> dict[str, Any]:
    import platform
    config = json.loads((Path(args.model) / "config.json").read_text())
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return {"model": str(Path(args.model).resolve()), "model_architectures": config.get("architectures"),
            "vocab_size": config.get("vocab_size"), "processor": cpu, "threads": args.threads,
            "steps": args.steps, "prompts": args.prompts, "group": args.group,
            "max_new_tokens": args.max_new_tokens, "seed": args.seed, "recipe": str(RECIPE.relative_to(ROOT))}


def markdown(table: dict[str, Any]) -> str:
    lines = ["| preset | status | task | mechanism: metric values per step | s/step | peak RSS (MB) |",
             "|---|---|---|---|---|---|"]
    for row in table["presets"]:
        if row["status"] in ("refused", "failed"):
            what = row["reason"].replace("|", "\\|").replace("\n", " ")
        else:
            what = "; ".join(_check_text(c) for c in row["checks"])
        speed = ", ".join(f"{s:g}" for s in row.get("s_per_step", [])) or "–"
        lines.append(f"| {row['preset']} | {row['status']} | {row.get('task') or '–'} | {what} | {speed} | "
                     f"{row['peak_rss_mb']:.0f} |")
    counts = ", ".join(f"{k} {v}" for k, v in table["counts"].items())
    return "\n".join([*lines, "", f"Counts: {counts}.", ""])


def _check_text(check: dict[str, Any]) -> str:
    text = f"{'✓' if check['fired'] else '✗'} {check['what']}: " + ", ".join(
        f"{k} {_fmt(v)}" for k, v in check["metrics"].items())
    if check.get("grpo_metrics"):
        text += " (grpo: " + ", ".join(f"{k} {_fmt(v)}" for k, v in check["grpo_metrics"].items()) + ")"
    return text


def _fmt(values: list) -> str:
    return "[" + ", ".join("–" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v) for v in values) + "]"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return
    names = preset_names(args.presets)
    start = time.perf_counter()
    earlier = json.loads(Path(args.update).read_text())["presets"] if args.update else []
    with tempfile.TemporaryDirectory(prefix="every_method_") as tmp:
        rows = []
        for name in names:
            rows.append(evaluate_preset(args, name, Path(tmp)))
            print(f"{name}: {rows[-1]['status']}", file=sys.stderr, flush=True)
            table = make_table(args, earlier, rows, start)
            if args.out:  # after every preset: a stopped run keeps what it measured
                Path(args.out).write_text(json.dumps(table, indent=1) + "\n")
    print(json.dumps(table, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(markdown(table))


def make_table(args: argparse.Namespace, earlier: list[dict], rows: list[dict], start: float) -> dict[str, Any]:
    """The table of ``rows``; with an earlier table's rows (``--update``), the presets run now replace theirs."""
    fresh = {r["preset"]: r for r in rows}
    rows = [fresh.pop(r["preset"], r) for r in earlier] + list(fresh.values())
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return {"setting": setting(args), "counts": counts, "presets": rows,
            "wall_seconds_this_invocation": round(time.perf_counter() - start, 1)}


if __name__ == "__main__":
    main()
