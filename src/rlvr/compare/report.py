"""Comparison report: per-run numbers, across-seed means with 95 % intervals, a Markdown table, PNGs.

Inputs are the run folders written by the trainer (``summary.json``, ``metrics.jsonl``); nothing is
recomputed from the models. Outputs in the comparison folder: ``results.json``, ``results.md``,
``curves_steps.png``, ``curves_rollouts.png``, ``pass_at_k.png`` and ``entropy.png``.

Conventions:
- "final" reward / entropy / response length = mean of that metric over the last 10 % of logged
  steps (at least one step), which damps the step-to-step noise of a single batch.
- Cells are mean ± t_{0.975, n−1}·s/√n over the finished seeds (``stats.mean_ci``, s with ddof = 1);
  n counts finished runs only; failed and missing runs are listed, never averaged in as zeros.
- Bold marks the best mean of a column when at least two methods have a value and no other method
  ties it: higher is better for accuracy, gain, pass@k, maj@k and reward; lower for rollouts and
  seconds (cost). Entropy and response length have no better direction and are never marked.
  Bold is a ranking of means, not a significance claim: read the intervals.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

from rlvr.compare.plots import write_figures, write_paired_figure
from rlvr.compare.problem_pairs import compact_outcomes, problem_lines, problem_table
from rlvr.compare.starts import differing_lines, differing_starts
from rlvr.compare.stats import mean_ci, paired_difference
from rlvr.files import write_text_atomic
from rlvr.train.logging import read_metrics

FINAL_FRACTION = 0.1
HIGHER = ("accuracy_after", "accuracy_gain", "final_reward")  # + pass@K, maj@K (added per report)
CALIBRATION = ("calibration/brier", "calibration/ece")  # of stated confidences (C3RL's claim): lower is better
LOWER = ("rollouts", "seconds", *CALIBRATION)
HELDOUT = "heldout/"  # eval keys of a training loop's own held-out measure (rlvr.loops.lure_eval), paired too
PAIRED = ["accuracy_after", "final_reward"]  # + pass@K and subsets (added per report), then PAIRED_LAST; the
# gain's difference equals the after-accuracy's when methods share the seed's warm start, so it is not repeated
PAIRED_LAST = ["seconds"]  # the cost side (SpecRoll's claim is about it): lower is better


def final_mean(rows: list[dict[str, Any]], key: str, fraction: float = FINAL_FRACTION) -> float | None:
    """Mean of ``key`` over the last ``fraction`` of the rows that log it (at least one row)."""
    values = [float(r[key]) for r in rows if r.get(key) is not None]
    if not values:
        return None
    n = max(1, math.ceil(fraction * len(values)))
    return sum(values[-n:]) / n


def run_record(run: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The per-run record for results.json and the run's metric rows (empty unless finished).

    A run reported "done" whose summary.json is absent becomes "missing" (its numbers are unknown). A
    stored record (``stored_from``: :mod:`rlvr.compare.stored`) is already a record: kept as it is,
    without metric rows.
    """
    if run.get("stored_from"):
        return dict(run), []
    run_dir = Path(run["run_dir"])
    rec: dict[str, Any] = {"method": run["method"], "seed": run["seed"], "status": run["status"],
                           "run_dir": str(run_dir)}
    rec.update({k: v for k, v in run.items() if k not in rec and k != "error"})  # e.g. the runner's "reused"
    if run.get("error"):
        rec["error"] = str(run["error"])
    summary_path = run_dir / "summary.json"
    if rec["status"] == "done" and not summary_path.exists():
        rec.update(status="missing", error=rec.get("error") or f"no summary.json in {run_dir}")
    if rec["status"] != "done":
        return rec, []
    try:
        summary, rows = json.loads(summary_path.read_text()), read_metrics(run_dir)
    except (OSError, ValueError) as err:  # a damaged file fails this run, not the whole report
        rec.update(status="failed", error=f"unreadable run files in {run_dir}: {err}")
        return rec, []
    after, before = summary.get("eval_after") or {}, summary.get("eval_before") or {}
    acc_before, acc_after = summary.get("accuracy_before"), summary.get("accuracy_after")
    rec.update({
        "accuracy_before": acc_before,
        "accuracy_after": acc_after,
        "accuracy_gain": None if acc_before is None or acc_after is None else acc_after - acc_before,
        "pass_at_k": _prefixed(after, "pass@"), "pass_at_k_before": _prefixed(before, "pass@"),
        "maj_at_k": _prefixed(after, "maj@"), "maj_at_k_before": _prefixed(before, "maj@"),
        "subsets": {k: v for k, v in after.items() if "/" in k},  # e.g. greedy_accuracy/hard, pass@8/hard
        "subsets_before": {k: v for k, v in before.items() if "/" in k},  # also a loop's own, heldout/...
        "final_reward": final_mean(rows, "reward/mean"),
        "final_entropy": final_mean(rows, "rollout/entropy"),
        "final_response_length": final_mean(rows, "rollout/response_length"),
        "rollouts": summary.get("rollouts"), "seconds": summary.get("seconds"),
        "steps": summary.get("steps"), "stopped_by": summary.get("stopped_by"),
    })
    outcomes = compact_outcomes(run_dir)  # per-problem, for pairing problem by problem (rlvr.eval.outcomes)
    if outcomes is not None:
        rec["outcomes"] = outcomes
    return rec, rows


def _prefixed(d: dict[str, Any], prefix: str) -> dict[str, float]:
    """The whole-set ``pass@j`` / ``maj@j`` entries by j (per-subset ones, ``pass@j/name``, are apart)."""
    keys = sorted((k for k in d if k.startswith(prefix) and "/" not in k), key=lambda k: int(k.split("@")[1]))
    return {k: d[k] for k in keys}


def flat_metrics(rec: dict[str, Any]) -> dict[str, Any]:
    """One number per metric name: the scalar fields plus every ``pass@j`` and ``maj@k``."""
    out = {k: rec.get(k) for k in ("accuracy_before", "accuracy_after", "accuracy_gain", "final_reward",
                                   "final_entropy", "final_response_length", "rollouts", "seconds", "steps")}
    out.update(rec.get("pass_at_k") or {})
    out.update(rec.get("maj_at_k") or {})
    out.update(rec.get("subsets") or {})
    return out


def aggregate(records: list[dict[str, Any]], methods: list[str]) -> dict[str, dict[str, dict]]:
    """Per method and metric, ``mean_ci`` over that method's finished runs."""
    out: dict[str, dict[str, dict]] = {}
    for method in methods:
        flats = [flat_metrics(r) for r in records if r["method"] == method and r["status"] == "done"]
        names = sorted({k for f in flats for k in f}, key=_metric_order)
        out[method] = {name: mean_ci([f.get(name) for f in flats]) for name in names}
    return out


def _metric_order(name: str) -> tuple[int, int, str]:
    if "@" in name:
        return (1, int(name.split("@")[1].split("/")[0]), name)
    return (0, 0, name)


def subset_metrics(records: list[dict[str, Any]], k: int | None) -> list[str]:
    """Per-subset greedy accuracy and pass@k that every finished run reports (e.g. the hard regime's),
    then every ``heldout/…`` measure and the calibration errors (Brier, ECE) they all report."""
    sets = [set(r.get("subsets") or {}) for r in records if r["status"] == "done"]
    common = set.intersection(*sets) if sets else set()
    names = sorted({m.split("/", 1)[1] for m in common})
    wanted = [f"greedy_accuracy/{n}" for n in names] + ([f"pass@{k}/{n}" for n in names] if k else [])
    own = sorted(m for m in common if m.startswith(HELDOUT))  # a training loop's own measure (LURE's capture)
    return [m for m in wanted if m in common] + own + [m for m in CALIBRATION if m in common]


def largest_k(records: list[dict[str, Any]]) -> int | None:
    """The largest k with pass@k reported by every finished run (None when there is none)."""
    sets = [{int(k.split("@")[1]) for k in r.get("pass_at_k") or {}} for r in records if r["status"] == "done"]
    common = set.intersection(*sets) if sets else set()
    return max(common) if common else None


def best_methods(methods_stats: dict[str, dict[str, dict]], metrics: list[str]) -> dict[str, str]:
    """Per rankable metric, the method with the best mean (unique, among at least two methods)."""
    best: dict[str, str] = {}
    for metric in metrics:
        lower = metric in LOWER
        means = {m: s[metric]["mean"] for m, s in methods_stats.items()
                 if metric in s and s[metric]["mean"] is not None}
        if len(means) < 2:
            continue
        top = min(means.values()) if lower else max(means.values())
        winners = [m for m, v in means.items() if math.isclose(v, top, rel_tol=1e-12, abs_tol=1e-12)]
        if len(winners) == 1:
            best[metric] = winners[0]
    return best


def paired(records: list[dict[str, Any]], methods: list[str], baseline: str,
           metrics: list[str]) -> dict[str, Any]:
    """Per method other than ``baseline`` and per metric, ``paired_difference`` over the seeds where
    both finished (every method of a seed starts from the same warm start: the seed is the pair)."""
    by_seed = {m: {r["seed"]: flat_metrics(r) for r in records if r["method"] == m and r["status"] == "done"}
               for m in methods}
    out: dict[str, Any] = {}
    for method in methods:
        if method == baseline:
            continue
        out[method] = {metric: paired_difference({s: f.get(metric) for s, f in by_seed[method].items()},
                                                 {s: f.get(metric) for s, f in by_seed[baseline].items()},
                                                 higher_is_better=metric not in LOWER)
                       for metric in metrics}
    return {"baseline": baseline, "metrics": metrics, "methods": out}


def build_report(out_dir: str | Path, runs: list[dict[str, Any]], budget: dict[str, Any],
                 smooth: int = 20, baseline: str | None = None,
                 power_of: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None,
                 shared_start: bool = False) -> dict[str, Any]:
    """Write results.json, results.md and the PNGs into ``out_dir``; return the results dict.

    ``runs``: one dict per (method, seed) with ``method``, ``seed``, ``run_dir``, ``status``
    ("done" | "failed" | "missing") and optionally ``error``. ``budget``: what every run was given
    (see ``describe_budget``); it is copied into results.json as is. ``baseline``: the method every
    other is paired against, seed by seed (default: the first method). ``power_of``: records →
    the power section (``rlvr.compare.power.compare_power``), shown after the paired table. ``shared_start``:
    every method of a seed started from one model, so results.json gets ``differing_starts`` (the runs whose
    before-RL numbers say otherwise: :mod:`rlvr.compare.starts`), and results.md a warning where it is not empty.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pairs = [run_record(run) for run in runs]
    records = [rec for rec, _ in pairs]
    methods = list(dict.fromkeys(r["method"] for r in records))  # the runner's order
    stats = aggregate(records, methods)
    k = largest_k(records)
    k_metrics = [f"pass@{k}", f"maj@{k}"] if k else []
    baseline = baseline or methods[0]
    if baseline not in methods:
        raise ValueError(f"baseline '{baseline}' is not one of the methods {methods}")
    results = {"budget": budget, "runs": records, "methods": stats,
               "best": best_methods(stats, [*HIGHER, *k_metrics, *LOWER]), "largest_k": k,
               "paired": paired(records, methods, baseline,
                                [*PAIRED, *k_metrics[:1], *subset_metrics(records, k), *PAIRED_LAST]),
               "problem_pairs": problem_table(records, methods, baseline, ["accuracy_after", *k_metrics], LOWER)}
    if power_of is not None:  # the runner's: pooled SD and MDE per claim metric (rlvr.compare.power)
        results["power"] = power_of(records)
    if shared_start:
        results["differing_starts"] = differing_starts(records)
    write_text_atomic(out / "results.json", json.dumps(results, indent=2))
    finished = {m: [(rec, rows) for rec, rows in pairs if rec["method"] == m and rec["status"] == "done"]
                for m in methods}
    figures = write_figures(out, {m: items for m, items in finished.items() if items}, smooth=smooth)
    if results["paired"]["methods"]:
        figures.append(write_paired_figure(out, results["paired"]))
    write_text_atomic(out / "results.md", render_markdown(results, [p.name for p in figures]))
    return results


# --- Markdown ---------------------------------------------------------------------------------

BUDGET_PHRASES = {
    "steps": "{} optimizer steps per run",
    "rollouts": "{} sampled completions (rollouts) per run",
    "seconds": "{} seconds of RL wall-clock per run",
}
BUDGET_ALIASES = {"max_rollouts": "rollouts", "max_seconds": "seconds", "max_steps": "steps"}


def describe_budget(budget: dict[str, Any]) -> str:
    """One line naming the budget every run was given.

    A ``"text"`` entry (the runner's own sentence) is used as given. Otherwise accepts
    ``{"kind": "steps" | "rollouts" | "seconds", "value": N}`` or the limits themselves,
    ``{"steps": N, "rollouts"/"max_rollouts": N, "seconds"/"max_seconds": N}`` (zero or None = no limit;
    several limits: a run stops at whichever it reaches first).
    """
    if budget.get("text"):
        return f"Budget: {str(budget['text']).rstrip('.')}."
    limits: dict[str, Any] = {}
    if "kind" in budget:
        limits[BUDGET_ALIASES.get(budget["kind"], budget["kind"])] = budget.get("value")
    for key, value in budget.items():
        name = BUDGET_ALIASES.get(key, key)
        if name in BUDGET_PHRASES and value and name not in limits:
            limits[name] = value
    parts = [BUDGET_PHRASES[k].format(_number(v)) if k in BUDGET_PHRASES else f"{k} = {v}"
             for k, v in limits.items()]
    if not parts:
        return "Budget: not recorded."
    joined = parts[0] if len(parts) == 1 else "; ".join(parts) + " (a run stops at the first it reaches)"
    return f"Budget: {joined}, equal for every run."


def _number(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


# (metric, column header, decimals)
COLUMNS_HEAD = [("accuracy_after", "greedy acc. after", 3), ("accuracy_gain", "gain over before", 3)]
COLUMNS_TAIL = [("final_reward", "reward (final)", 3), ("final_entropy", "entropy (final)", 3),
                ("final_response_length", "response length (final)", 1), ("rollouts", "rollouts spent", 0),
                ("seconds", "seconds", 1)]


def format_cell(stat: dict[str, Any] | None, digits: int) -> str:
    """``mean ± ci (n=…)``; ``mean (n=1)`` for a single run; an em dash for none."""
    if not stat or stat.get("mean") is None:
        return "—"
    text = f"{stat['mean']:.{digits}f}"
    if stat.get("ci") is not None:
        text += f" ± {stat['ci']:.{digits}f}"
    return f"{text} (n={stat['n']})"


def render_markdown(results: dict[str, Any], figures: list[str]) -> str:
    """results.md: budget and seeds, the method table, failed/missing runs, the figures."""
    k = results.get("largest_k")
    columns = COLUMNS_HEAD + ([(f"pass@{k}", f"pass@{k}", 3), (f"maj@{k}", f"maj@{k}", 3)] if k else [])
    columns += COLUMNS_TAIL
    lines = ["# Comparison results", "", describe_budget(results["budget"]), *_seed_lines(results["runs"]), "",
             *_paired_lines(results.get("paired")), *power_lines(results.get("power")),
             *problem_lines(results.get("problem_pairs") or {}, (results.get("paired") or {}).get("baseline", "")),
             "## Per method", "",
             "Cells: mean ± 95 % confidence half-width (Student t with n − 1 degrees of freedom, sample "
             "standard deviation with ddof = 1) over the finished seeds; n = finished runs. Final reward, "
             "entropy and response length: mean over the last 10 % of logged steps. **Bold**: the best mean "
             "in a column (higher is better, except rollouts and seconds where lower is; entropy and "
             "response length are not ranked; ties mark nothing) — a ranking of means, not a significance test. "
             "Entropy is `rollout/entropy`, the mean over the rows the update computed: with "
             "`optim.skip_zero_rows` on (the default where no part needs every row) zero-advantage rows are "
             "left out, so it is comparable only between methods that skip alike. " + SECONDS_NOTE,
             "", "| method | " + " | ".join(c[1] for c in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for method, stats in results["methods"].items():
        cells = []
        for metric, _, digits in columns:
            cell = format_cell(stats.get(metric), digits)
            cells.append(f"**{cell}**" if results["best"].get(metric) == method else cell)
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += _failure_lines(results["runs"]) + differing_lines(results.get("differing_starts") or [])
    lines += ["", "## Figures", ""] + [f"![{name}]({name})" for name in figures]
    return "\n".join(lines) + "\n"


SECONDS_NOTE = ("Seconds (and Δ RL seconds) are each run's RL wall clock: where runs went side by side "
                "(`--jobs` above 1) or beside other work, they shared the CPU and the column is **not a speed "
                "measurement**; speed claims come from `benchmarks/`, one process at a time.")

PAIRED_HEADERS = {"accuracy_after": "greedy acc.", "final_reward": "reward (final)", "seconds": "RL seconds",
                  "calibration/brier": "Brier (lower better)", "calibration/ece": "ECE (lower better)"}
PAIRED_DIGITS = {"seconds": 1}  # decimals per metric (3 otherwise)


def _paired_lines(paired_results: dict[str, Any] | None) -> list[str]:
    """The leading table: each method's per-seed difference from the baseline."""
    if not paired_results or not paired_results["methods"]:
        return []
    metrics = paired_results["metrics"]
    head = ["method"] + [f"Δ {PAIRED_HEADERS.get(m, m)} | p | W/T/L" for m in metrics]
    lines = [f"## Paired differences from {paired_results['baseline']}", "",
             f"Each cell: mean over seeds of (method − {paired_results['baseline']}) on the same seed's warm start "
             "and held-out problems, ± the 95 % Student-t half-width of the paired differences (ddof = 1); "
             "p: two-sided sign-flip permutation test (exact; with n seeds p cannot be below 2/2ⁿ, e.g. 0.0625 "
             "for 5 seeds); W/T/L: seeds where the method was better / equal / worse.", "",
             "| " + " | ".join(head) + " |", "|---|" + "---:|---:|---:|" * len(metrics)]
    for method, per_metric in paired_results["methods"].items():
        cells = []
        for metric in metrics:
            d, nd = per_metric[metric], PAIRED_DIGITS.get(metric, 3)
            diff = "—" if d["mean"] is None else f"{d['mean']:+.{nd}f}" + ("" if d["ci"] is None else f" ± {d['ci']:.{nd}f}")
            cells += [f"{diff} (n={d['n']})", "—" if d["p"] is None else f"{d['p']:.3f}",
                      f"{d['wins']}/{d['ties']}/{d['losses']}"]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return lines + [""]


def power_lines(power: dict[str, Any] | None) -> list[str]:
    """The power section: per claim metric, pooled SD of the paired differences and the MDE."""
    if not power or not power.get("rows"):
        return []
    m, alpha = power["m"], power["alpha"]
    what = "the file's pre-registered claims against the baseline" if power["registered"] else \
        "every method against the baseline on greedy accuracy (the file registers no claims)"
    lines = ["## Power", "",
             f"Over {what}: pooled SD of the per-seed paired differences and the minimum detectable effect "
             f"(80 % power, paired t) at α = {alpha:g} and at α/m = {alpha / m:.3g} (m = {m}, Holm's strictest "
             "step; `rlvr findings` corrects across all its claims, a stricter level), and the seeds an MDE of "
             "0.03 at α/m needs.", "",
             "| metric | seeds | SD of paired Δ | MDE at α | MDE at α/m | seeds for 0.03 |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in power["rows"]:
        cells = ["—" if row[k] is None else f"{row[k]:.3f}" for k in ("sd", "mde", "mde_corrected")]
        lines.append(f"| {row['metric']} | {row['n']} | {' | '.join(cells)} | "
                     f"{'—' if row['seeds_3pt'] is None else row['seeds_3pt']} |")
    return lines + [""]


def _seed_lines(records: list[dict[str, Any]]) -> list[str]:
    seeds = sorted({r["seed"] for r in records}, key=str)
    done = sum(r["status"] == "done" for r in records)
    lines = [f"Seeds: {', '.join(map(str, seeds))}; {len(records)} runs, {done} finished, "
             f"{len(records) - done} failed or missing."]
    stops: dict[str, int] = {}
    for r in records:
        if r["status"] == "done":
            stops[str(r.get("stopped_by"))] = stops.get(str(r.get("stopped_by")), 0) + 1
    if stops:
        counts = [f"{k} ({v} run{'' if v == 1 else 's'})" for k, v in sorted(stops.items())]
        lines.append("Stopped by: " + ", ".join(counts) + ".")
    return lines


def _failure_lines(records: list[dict[str, Any]]) -> list[str]:
    bad = [r for r in records if r["status"] != "done"]
    if not bad:
        return []
    lines = ["", "## Failed or missing runs", ""]
    for r in bad:
        error = " ".join(str(r.get("error") or "no error recorded").split())
        error = error if len(error) <= 400 else error[:400] + " …"
        lines.append(f"- {r['method']} seed {r['seed']}: {r['status']} — {error}")
    return lines
