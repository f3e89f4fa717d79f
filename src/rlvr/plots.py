"""PNG learning curves from a run's metrics.jsonl (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

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
