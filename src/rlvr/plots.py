"""PNG learning curves from a run's metrics.jsonl (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.train.logging import read_metrics


def plot_run(run_dir: str | Path, out: str | Path | None = None, smooth: int = 20,
             before: float | None = None, after: float | None = None) -> Path:
    """Reward (raw and moving average) and held-out greedy accuracy against steps."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    out = Path(out) if out else Path(run_dir) / "learning_curve.png"
    steps = [r["step"] for r in rows if "reward/mean" in r]
    reward = [r["reward/mean"] for r in rows if "reward/mean" in r]
    acc = [(r["step"], r["eval/accuracy"]) for r in rows if "eval/accuracy" in r]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot(steps, reward, alpha=0.3, label="batch mean reward")
    if len(reward) >= smooth:
        avg = [sum(reward[i - smooth + 1:i + 1]) / smooth for i in range(smooth - 1, len(reward))]
        ax1.plot(steps[smooth - 1:], avg, label=f"moving average ({smooth} steps)")
    ax1.set(xlabel="step", ylabel="reward (sampled, T=1)", title="training reward")
    ax1.legend()
    points = ([(0, before)] if before is not None else []) + acc
    if after is not None and steps:
        points.append((steps[-1], after))
    points.sort()
    if points:
        ax2.plot([p[0] for p in points], [p[1] for p in points], marker="o")
    ax2.set(xlabel="step", ylabel="greedy accuracy", title="held-out greedy accuracy", ylim=(0, 1))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_runs(run_dirs: list[str | Path], out: str | Path | None = None, smooth: int = 20) -> list[Path]:
    """One multi-panel PNG per run folder (``rlvr plot RUN_DIR...``); returns the paths written.

    Where each goes: ``out`` None → ``<run_dir>/curves.png``; ``out`` ending in ``.png`` with a
    single run → that file; otherwise ``out`` is a folder and each run gets ``<parent>_<name>.png``
    (e.g. ``grpo_seed0.png``). A folder without ``metrics.jsonl`` raises FileNotFoundError.
    """
    dirs = [Path(d) for d in run_dirs]
    missing = [str(d) for d in dirs if not (d / "metrics.jsonl").exists()]
    if missing:
        raise FileNotFoundError(f"no metrics.jsonl in {', '.join(missing)} (is it a run folder?)")
    if out is not None and str(out).endswith(".png") and len(dirs) > 1:
        raise ValueError(f"{len(dirs)} run folders need an output folder, not the single file {out}")
    paths = []
    for d in dirs:
        if out is None:
            target = d / "curves.png"
        elif str(out).endswith(".png"):
            target = Path(out)
        else:
            target = Path(out) / f"{d.resolve().parent.name}_{d.resolve().name}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        paths.append(plot_run_panels(d, target, smooth))
    return paths


def plot_run_panels(run_dir: str | Path, out: str | Path, smooth: int = 20) -> Path:
    """Six panels from one run: reward, held-out accuracy, entropy, response length, losses, pass@k."""
    import json

    from matplotlib.figure import Figure

    from rlvr.compare.plots import eval_points, moving_average, xy
    rows = read_metrics(run_dir)
    summary_path = Path(run_dir) / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    fig = Figure(figsize=(15, 8))
    ax = fig.subplots(2, 3).ravel()
    x, reward = xy(rows, "step", "reward/mean")
    ax[0].plot(x, reward, alpha=0.3, label="batch mean")
    ax[0].plot(x, moving_average(reward.tolist(), smooth), label=f"moving average ({smooth} steps)")
    ax[0].set(xlabel="step", ylabel="reward/mean", title="training reward (sampled)")
    ax[1].plot(*eval_points(rows, summary, "step"), marker="o")
    ax[1].set(xlabel="step", ylabel="greedy accuracy", title="held-out greedy accuracy (step 0 = before)",
              ylim=(-0.02, 1.02))
    ax[2].plot(*xy(rows, "step", "rollout/entropy"))
    ax[2].set(xlabel="step", ylabel="nats/token", title="rollout/entropy")
    ax[3].plot(*xy(rows, "step", "rollout/response_length"))
    ax[3].set(xlabel="step", ylabel="tokens", title="rollout/response_length")
    for key in ("loss/total", "loss/policy", "loss/kl"):
        if any(key in r for r in rows):
            ax[4].plot(*xy(rows, "step", key), label=key)
    ax[4].set(xlabel="step", ylabel="loss", title="losses")
    _pass_at_k_panel(ax[5], summary)
    for a in (ax[0], ax[4], ax[5]):
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=8)
    fig.suptitle(str(run_dir), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    return Path(out)


def _pass_at_k_panel(ax: Any, summary: dict[str, Any]) -> None:
    """pass@k against k before (dashed) and after (solid) training, from summary.json."""
    for field, style, label in (("eval_before", "--", "before"), ("eval_after", "-", "after")):
        evals = summary.get(field) or {}
        ks = sorted(int(k.split("@")[1]) for k in evals if k.startswith("pass@"))
        if ks:
            ax.plot(ks, [evals[f"pass@{k}"] for k in ks], style, marker="o", label=label)
            ax.set_xticks(ks)
    ax.set(xlabel="k", ylabel="pass@k", title="held-out pass@k", ylim=(-0.02, 1.02))
