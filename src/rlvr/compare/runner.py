"""Running a comparison: one process per (method, seed), ``jobs`` at a time, resumable.

A finished run (``summary.json`` present and its config unchanged in what changes its result: not
the thread count, the folders or where the shared warm start lies) is reused; a run whose config
changed is archived next to itself (``<run>.archived-<time>``, said on the console), never deleted; a
run that was killed resumes from its last checkpoint (exactly, as ``rlvr train --resume`` does); a run that
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
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import yaml

from rlvr.compare.config import CompareConfig, Method
from rlvr.compare.console import Console
from rlvr.compare.stored import stand_in
from rlvr.train.config import ConfigError, merge, to_dict


def run_comparison(cfg: CompareConfig, jobs: int | None = None, only: list[str] | None = None,
                   progress: bool = True, threads: int | None = None,
                   records: str | Path | None = None) -> dict[str, Any]:
    """Run (or reuse) every run of the comparison, then write the report; returns the results.
    ``threads``: torch threads per run, over the file's ``run.threads`` (default: cores / jobs).
    ``records``: a committed results.json whose records stand in for runs missing here
    (:mod:`rlvr.compare.stored`)."""
    from rlvr.compare.power import compare_power
    from rlvr.compare.report import build_report
    jobs = max(1, jobs or cfg.jobs)
    plan, threads, forced = _plan(cfg, jobs, only, threads)
    folders = warm_folders(cfg, sorted({s for _, s in plan}))
    trees = {(m.name, s): _tree(cfg, m, s, folders, threads, forced) for m, s in plan}
    if progress:  # what is about to happen, as --dry-run says it
        from rlvr.compare.dry_run import dry_run_text
        for line in dry_run_text(_plan_view(cfg, plan, folders, trees)).splitlines():
            print(f"[rlvr compare] {line}", flush=True)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    (cfg.out_dir / "compare.yaml").write_text(yaml.safe_dump(cfg.source, sort_keys=False))
    _STOPPING.clear()
    _warm_starts(cfg, folders, threads, jobs, progress)
    console = Console("runs", len(plan), enabled=progress)
    statuses = _map(lambda ms: _run_one(cfg, ms[0], ms[1], trees[(ms[0].name, ms[1])], console), plan, jobs)
    runs = [_record(cfg, m, s) for m in cfg.methods for s in cfg.seeds]
    for status in statuses:  # this invocation's outcome wins over what the folder says
        next(r for r in runs if r["method"] == status["method"] and r["seed"] == status["seed"]).update(status)
    if records is not None:
        runs = stand_in(runs, records)
    (cfg.out_dir / "plan.json").write_text(json.dumps(runs, indent=1))
    results = build_report(cfg.out_dir, runs, {**cfg.budget, "text": cfg.budget_text()}, baseline=cfg.baseline,
                           power_of=lambda records: compare_power(cfg, records), shared_start=bool(folders))
    for item in results.get("differing_starts") or []:
        print(f"[rlvr compare] warning: seed {item['seed']}: {', '.join(item['differ'])} did not start like "
              f"{item['reference']} (before-RL numbers differ; see results.md)", file=sys.stderr, flush=True)
    return results


def plan_comparison(cfg: CompareConfig, jobs: int | None = None, only: list[str] | None = None,
                    threads: int | None = None) -> dict[str, Any]:
    """What ``run_comparison`` would do, doing none of it and writing nothing: each shared warm start
    ``cached`` or ``build`` (under ``warm_root``), and each run's action (``run_action``) with the keys of
    its saved config that changed."""
    plan, threads, forced = _plan(cfg, max(1, jobs or cfg.jobs), only, threads)
    folders = warm_folders(cfg, sorted({s for _, s in plan}))
    return _plan_view(cfg, plan, folders, {(m.name, s): _tree(cfg, m, s, folders, threads, forced) for m, s in plan})


def _plan_view(cfg: CompareConfig, plan: list[tuple[Method, int]], folders: dict[int, Path],
               trees: dict[tuple[str, int], dict]) -> dict[str, Any]:
    warm = {seed: "cached" if (folder / "config.json").exists() else "build" for seed, folder in folders.items()}
    runs = []
    for method, seed in plan:
        action, changed = run_action(cfg, seed, trees[(method.name, seed)])
        runs.append({"method": method.name, "seed": seed, "action": action, "changed": changed})
    root = next(iter(folders.values())).parent if folders else None
    return {"warm_root": None if root is None else str(root), "warm": warm, "runs": runs}


def _plan(cfg: CompareConfig, jobs: int, only: list[str] | None,
          threads: int | None) -> tuple[list[tuple[Method, int]], int, bool]:
    """The (method, seed) pairs ``only`` selects, the torch threads per run and whether they were forced."""
    plan = [(m, s) for m in cfg.methods for s in cfg.seeds if _selected(m.name, s, only)]
    unmatched = [o for o in only or [] if not any(_selected(m.name, s, [o]) for m in cfg.methods for s in cfg.seeds)]
    if unmatched:  # a typo would otherwise drop its runs in silence
        raise ConfigError(f"--only {unmatched} matches no run; runs are METHOD or METHOD:SEED with methods "
                          f"{[m.name for m in cfg.methods]} and seeds {list(cfg.seeds)}")
    forced = threads is not None
    return plan, max(1, threads if forced else (os.cpu_count() or 1) // jobs), forced


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


def warm_folders(cfg: CompareConfig, seeds: list[int]) -> dict[int, Path]:
    """Where each seed's shared warm start lies, built or not; ``{}`` when every run makes its own."""
    base = _validated(cfg.base)
    if not cfg.shared_warm_start or base.model.path or base.warm_start.steps <= 0:
        return {}
    root = cfg.out_dir / "warm" if cfg.warm_cache is None else cfg.warm_cache / warm_key(cfg.base)
    return {seed: root / f"seed{seed}" for seed in seeds}


def _warm_starts(cfg: CompareConfig, folders: dict[int, Path], threads: int, jobs: int, progress: bool) -> None:
    """Build each seed's warm start in its folder (``warm_folders``) unless it is there: one per seed, reused
    by every method and every re-run."""
    console = Console("warm starts", len(folders), enabled=progress)

    def build(seed: int) -> None:
        folder = folders[seed]
        if (folder / "config.json").exists():
            console.skip()
            return
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tree = merge(cfg.base, {"run": {"seed": seed, "threads": threads}})
        spec = cfg.out_dir / "configs" / f"warm_seed{seed}.yaml"
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(yaml.safe_dump(to_dict(_validated(tree)), sort_keys=False))
        code = _launch(["sft", str(spec), "--out", str(tmp)], tmp.with_suffix(".log"), console, f"warm start seed {seed}")
        if code != 0:
            raise RuntimeError(f"warm start for seed {seed} failed (exit {code}); see {tmp.with_suffix('.log')}")
        os.replace(tmp, folder)

    _map(build, list(folders), jobs)


def warm_key(base: dict) -> str:
    """A short digest of what a warm start depends on, so equal warm starts share one cache folder."""
    cfg = to_dict(_validated(base))
    what = {k: cfg[k] for k in ("model", "task", "warm_start")}
    what["max_new_tokens"] = cfg["rollout"]["max_new_tokens"]  # the target-accuracy check generates
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


def _run_one(cfg: CompareConfig, method: Method, seed: int, tree: dict, console: Console) -> dict[str, Any]:
    run_dir = Path(tree["run"]["out_dir"])
    spec = cfg.out_dir / "configs" / f"{method.name}_seed{seed}.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(yaml.safe_dump(tree, sort_keys=False))
    status = {"method": method.name, "seed": seed, "run_dir": str(run_dir)}
    action, changed = run_action(cfg, seed, tree)
    if action == "archive":  # the run folder holds a different experiment: keep it aside, never delete it
        from rlvr.train.run_dir import archive
        archive(run_dir, why=f"rlvr compare: {method.name} seed {seed} changed ({', '.join(changed[:6])}"
                             f"{', ...' if len(changed) > 6 else ''})")
    if action == "reuse":
        console.skip()
        return {**status, "status": "done", "reused": True}
    resumable = action == "resume"
    args = ["train", "--resume", str(run_dir)] if resumable else ["train", str(spec)]
    if resumable and "threads" in tree["run"]:  # this invocation's --jobs / --threads
        args.append(f"run.threads={tree['run']['threads']}")
    if not resumable and run_dir.exists():  # killed before its first checkpoint: start it over
        args.append("--overwrite")
    log = run_dir.parent / f"seed{seed}.log"
    code = _launch(args, log, console, f"{method.name} seed {seed}" + (" (resumed)" if resumable else ""))
    if code == 0 and (run_dir / "summary.json").exists():
        return {**status, "status": "done", "reused": False, "resumed": resumable}
    return {**status, "status": "failed", "error": f"exit code {code}; last lines of {log}:\n{_tail(log)}"}


def run_action(cfg: CompareConfig, seed: int, tree: dict) -> tuple[str, list[str]]:
    """What running a run (its config ``tree``) does with its folder: ``reuse`` (finished, same config),
    ``resume`` (killed after a checkpoint), ``start`` (never run, or killed before its first checkpoint)
    or ``archive`` (the folder holds a different config: set aside, then started); and the changed keys."""
    run_dir = Path(tree["run"]["out_dir"])
    previous = _previous_config(run_dir)
    if previous is None:
        return "start", []
    changed = config_changes(previous, tree, cfg, seed)
    if changed:
        return "archive", changed
    if (run_dir / "summary.json").exists():
        return "reuse", []
    return ("resume" if any((run_dir / "checkpoints").glob("step_*")) else "start"), []


# Keys that do not change a run's result: how fast it runs, where its folders are, what it logs.
_IGNORED = ("run.threads", "run.out_dir", "run.overwrite", "run.report_to", "run.table_every", "run.log_samples",
            "rollout.verify_workers")


def config_changes(previous: dict, tree: dict, cfg: CompareConfig, seed: int) -> list[str]:
    """The keys (``a.b.c``) in which a run's saved config differs from the comparison's, leaving out
    ``_IGNORED`` and a model.path that is this seed's shared warm start in either place it is kept
    (the comparison's ``warm/`` or the warm cache), wherever the comparison folder now lies."""
    old, new = _flat(_as_written_now(previous)), _flat(tree)
    for flat in (old, new):
        for key in _IGNORED:
            flat.pop(key, None)
        if flat.get("run.rl_seed") is None:  # unset = the run's seed, as in configs saved before rl_seed
            flat.pop("run.rl_seed", None)
        path = flat.get("model.path")
        if isinstance(path, str) and _is_warm_start(Path(path), cfg, seed):
            flat["model.path"] = "<the shared warm start>"
    return sorted(k for k in set(old) | set(new) if old.get(k, "<unset>") != new.get(k, "<unset>"))


def _as_written_now(previous: dict) -> dict:
    """A saved config as this version writes it, so an older spelling of the same run (a bare
    ``rollout.engine`` name) is no change; as saved when it no longer loads."""
    try:
        return to_dict(_validated(previous))
    except ConfigError:
        return previous


def _is_warm_start(path: Path, cfg: CompareConfig, seed: int) -> bool:
    return path.name == f"seed{seed}" and path.parent.name in ("warm", warm_key(cfg.base))


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _previous_config(run_dir: Path) -> dict | None:
    path = run_dir / "config.yaml"
    return yaml.safe_load(path.read_text()) if path.exists() else None


# The `rlvr train` / `rlvr sft` children now running; on an interrupt (Ctrl-C, SIGTERM: rlvr.cli turns
# it into KeyboardInterrupt) they are stopped, and no new one starts.
_CHILDREN: set[subprocess.Popen] = set()
_CHILDREN_LOCK = threading.Lock()
_STOPPING = threading.Event()


def _map(fn: Callable[[Any], Any], items: list, jobs: int) -> list:
    """``[fn(x) for x in items]``, ``jobs`` at a time; an interrupt stops every child run first."""
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        return list(pool.map(fn, items))
    except BaseException:
        stop_children()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def stop_children(grace_s: float = 20.0) -> None:
    """Terminate (SIGTERM, then SIGKILL after ``grace_s``) every running child; start no new one."""
    _STOPPING.set()
    with _CHILDREN_LOCK:
        children = list(_CHILDREN)
    for proc in children:
        proc.terminate()
    for proc in children:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _launch(args: list[str], log: Path, console: Console, label: str) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    console.start(label)
    with open(log, "w") as fh:
        with _CHILDREN_LOCK:
            if _STOPPING.is_set():
                return 130
            proc = subprocess.Popen([sys.executable, "-m", "rlvr", *args], stdout=fh, stderr=subprocess.STDOUT,
                                    env={**os.environ, "TQDM_DISABLE": "1"})
            _CHILDREN.add(proc)
        try:
            code = proc.wait()
        finally:
            with _CHILDREN_LOCK:
                _CHILDREN.discard(proc)
    console.end(label, ok=code == 0)
    return code


def _record(cfg: CompareConfig, method: Method, seed: int) -> dict[str, Any]:
    """The plan's entry of one run: ``seed`` is the warm start's (and the held-out problems'), ``rl_seed``
    the RL loop's, ``role`` what the run is for (method, baseline or a control)."""
    run_dir = cfg.out_dir / "runs" / method.name / f"seed{seed}"
    status = "done" if (run_dir / "summary.json").exists() else "missing"
    rl_seed = seed if method.rl_seed_offset is None else seed + method.rl_seed_offset
    role = "baseline" if method.name == (cfg.baseline or cfg.methods[0].name) else method.role
    return {"method": method.name, "seed": seed, "rl_seed": rl_seed, "role": role, "run_dir": str(run_dir),
            "status": status}


def _tail(path: Path, lines: int = 15) -> str:
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
