"""Running a comparison: one process per (method, seed), ``jobs`` at a time, resumable.

A finished run (``summary.json`` present and its config unchanged) is reused; a run that was
killed resumes from its last checkpoint (exactly, as ``rlvr train --resume`` does); a run that
fails is reported with the tail of its log and does not stop the others. ``only`` re-runs a
selection alone. With ``shared_warm_start`` every method of a seed starts from the same
warm-started model, built once per seed; with ``warm_cache`` that model is kept under a key of what it
depends on (model, task, warm start, generation cap; not the thread count) and reused by any other
comparison whose key agrees.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from rlvr.compare.config import CompareConfig, Method
from rlvr.train.config import ConfigError, merge, to_dict


def run_comparison(cfg: CompareConfig, jobs: int | None = None, only: list[str] | None = None,
                   progress: bool = True, threads: int | None = None) -> dict[str, Any]:
    """Run (or reuse) every run of the comparison, then write the report; returns the results.
    ``threads``: torch threads per run, over the file's ``run.threads`` (default: cores / jobs)."""
    from rlvr.compare.report import build_report
    jobs = max(1, jobs or cfg.jobs)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    (cfg.out_dir / "compare.yaml").write_text(yaml.safe_dump(cfg.source, sort_keys=False))
    plan = [(m, s) for m in cfg.methods for s in cfg.seeds if _selected(m.name, s, only)]
    if only and not plan:
        raise ConfigError(f"--only {only} matches no run; runs are METHOD or METHOD:SEED with methods "
                          f"{[m.name for m in cfg.methods]} and seeds {list(cfg.seeds)}")
    forced = threads is not None
    threads = max(1, threads if forced else (os.cpu_count() or 1) // jobs)
    starts = _warm_starts(cfg, sorted({s for _, s in plan}), threads, jobs, progress)
    trees = {(m.name, s): _tree(cfg, m, s, starts, threads, forced) for m, s in plan}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        statuses = list(pool.map(lambda ms: _run_one(cfg, ms[0], ms[1], trees[(ms[0].name, ms[1])], progress), plan))
    runs = [_record(cfg, m, s) for m in cfg.methods for s in cfg.seeds]
    for status in statuses:  # this invocation's outcome wins over what the folder says
        next(r for r in runs if r["method"] == status["method"] and r["seed"] == status["seed"]).update(status)
    (cfg.out_dir / "plan.json").write_text(json.dumps(runs, indent=1))
    return build_report(cfg.out_dir, runs, {**cfg.budget, "text": cfg.budget_text()}, baseline=cfg.baseline)


def _selected(method: str, seed: int, only: list[str] | None) -> bool:
    if not only:
        return True
    return any(o == method or o == f"{method}:{seed}" for o in only)


def _tree(cfg: CompareConfig, method: Method, seed: int, starts: dict[int, Path], threads: int,
          forced: bool = False) -> dict:
    tree = cfg.run_tree(method, seed)
    if seed in starts:
        if any(tree.get(k) != cfg.base.get(k) for k in ("model", "task", "warm_start")):
            raise ConfigError(f"method '{method.name}' changes model, task or warm_start, so it cannot share the "
                              f"warm start; set shared_warm_start: false")
        tree = merge(tree, {"model": {"path": str(starts[seed].resolve())}, "warm_start": {"steps": 0}})
    if forced or "threads" not in cfg.base.get("run", {}):
        tree = merge(tree, {"run": {"threads": threads}})
    return to_dict(_validated(tree))


def _validated(tree: dict) -> Any:
    from rlvr.train.config import load_config
    return load_config(None, base=tree)


def _warm_starts(cfg: CompareConfig, seeds: list[int], threads: int, jobs: int, progress: bool) -> dict[int, Path]:
    """One warm-started model per seed (built once, reused by every method and every re-run)."""
    base = _validated(cfg.base)
    if not cfg.shared_warm_start or base.model.path or base.warm_start.steps <= 0:
        return {}
    out: dict[int, Path] = {}

    root = cfg.out_dir / "warm" if cfg.warm_cache is None else cfg.warm_cache / warm_key(cfg.base)

    def build(seed: int) -> None:
        folder = root / f"seed{seed}"
        out[seed] = folder
        if (folder / "config.json").exists():
            return
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tree = merge(cfg.base, {"run": {"seed": seed, "threads": threads}})
        spec = cfg.out_dir / "configs" / f"warm_seed{seed}.yaml"
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(yaml.safe_dump(to_dict(_validated(tree)), sort_keys=False))
        code = _launch(["sft", str(spec), "--out", str(tmp)], tmp.with_suffix(".log"), progress, f"warm start seed {seed}")
        if code != 0:
            raise RuntimeError(f"warm start for seed {seed} failed (exit {code}); see {tmp.with_suffix('.log')}")
        os.replace(tmp, folder)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(build, seeds))
    return out


def warm_key(base: dict) -> str:
    """A short digest of what a warm start depends on, so equal warm starts share one cache folder."""
    cfg = to_dict(_validated(base))
    what = {k: cfg[k] for k in ("model", "task", "warm_start")}
    what["max_new_tokens"] = cfg["rollout"]["max_new_tokens"]  # the target-accuracy check generates
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


def _run_one(cfg: CompareConfig, method: Method, seed: int, tree: dict, progress: bool) -> dict[str, Any]:
    run_dir = Path(tree["run"]["out_dir"])
    spec = cfg.out_dir / "configs" / f"{method.name}_seed{seed}.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(yaml.safe_dump(tree, sort_keys=False))
    status = {"method": method.name, "seed": seed, "run_dir": str(run_dir)}
    previous = _previous_config(run_dir)
    if previous is not None and previous != tree:  # the run folder holds a different experiment
        shutil.rmtree(run_dir)
        previous = None
    if previous is not None and (run_dir / "summary.json").exists():
        return {**status, "status": "done", "reused": True}
    resumable = previous is not None and any((run_dir / "checkpoints").glob("step_*"))
    args = ["train", "--resume", str(run_dir)] if resumable else ["train", str(spec)]
    if not resumable and run_dir.exists():  # killed before its first checkpoint: start it over
        args.append("--overwrite")
    log = run_dir.parent / f"seed{seed}.log"
    code = _launch(args, log, progress, f"{method.name} seed {seed}" + (" (resumed)" if resumable else ""))
    if code == 0 and (run_dir / "summary.json").exists():
        return {**status, "status": "done", "reused": False, "resumed": resumable}
    return {**status, "status": "failed", "error": f"exit code {code}; last lines of {log}:\n{_tail(log)}"}


def _previous_config(run_dir: Path) -> dict | None:
    path = run_dir / "config.yaml"
    return yaml.safe_load(path.read_text()) if path.exists() else None


def _launch(args: list[str], log: Path, progress: bool, label: str) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    if progress:
        print(f"[rlvr compare] start  {label}", flush=True)
    with open(log, "w") as fh:
        code = subprocess.run([sys.executable, "-m", "rlvr", *args], stdout=fh, stderr=subprocess.STDOUT,
                              env={**os.environ, "TQDM_DISABLE": "1"}).returncode
    if progress:
        print(f"[rlvr compare] {'done  ' if code == 0 else 'FAILED'} {label}", flush=True)
    return code


def _record(cfg: CompareConfig, method: Method, seed: int) -> dict[str, Any]:
    run_dir = cfg.out_dir / "runs" / method.name / f"seed{seed}"
    status = "done" if (run_dir / "summary.json").exists() else "missing"
    return {"method": method.name, "seed": seed, "run_dir": str(run_dir), "status": status}


def _tail(path: Path, lines: int = 15) -> str:
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
