"""PNG figures for a comparison: per method, the mean over seeds with a min–max band across seeds.

Curves of different seeds are put on a common x grid by linear interpolation, and a method's curve
spans only the x range every one of its seeds covers (no extrapolation, and no jump where a seed
drops out): under a steps budget that is every step; under a seconds budget the curve ends where the
shortest seed ended. Figures are drawn on ``matplotlib.figure.Figure`` (Agg, no pyplot, no global backend).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

BAND_NOTE = "line: mean over seeds; band: min–max across seeds"


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` values (fewer at the start, so lengths match)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def xy(rows: list[dict[str, Any]], x_key: str, y_key: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) arrays from the metric rows that hold both keys, in logged order."""
    pts = [(float(r[x_key]), float(r[y_key])) for r in rows
           if r.get(x_key) is not None and r.get(y_key) is not None]
    return np.array([p[0] for p in pts]), np.array([p[1] for p in pts])


def band(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray) -> tuple[np.ndarray, ...]:
    """Mean, min and max over curves interpolated on ``grid`` (NaN where no curve covers x)."""
    stack = np.full((len(curves), len(grid)), np.nan)  # (seeds, grid)
    for i, (x, y) in enumerate(curves):
        if len(x):
            stack[i] = np.interp(grid, x, y, left=np.nan, right=np.nan)
    covered = ~np.isnan(stack).all(axis=0)  # (grid,)
    mean, lo, hi = (np.full(len(grid), np.nan) for _ in range(3))
    if covered.any():
        mean[covered] = np.nanmean(stack[:, covered], axis=0)
        lo[covered] = np.nanmin(stack[:, covered], axis=0)
        hi[covered] = np.nanmax(stack[:, covered], axis=0)
    return mean, lo, hi


def common_grid(xs: list[np.ndarray], dense: bool = False, points: int = 200) -> np.ndarray:
    """x values inside the range every curve covers: their union, or ``points`` evenly spaced if
    ``dense``. Empty when a curve is empty or the ranges do not overlap."""
    if not xs or any(len(x) == 0 for x in xs):
        return np.array([])
    start, stop = max(x.min() for x in xs), min(x.max() for x in xs)
    if start > stop:
        return np.array([])
    if dense:
        return np.linspace(start, stop, points)
    union = np.unique(np.concatenate(xs))
    return union[(union >= start) & (union <= stop)]


def draw_band(ax: Any, curves: list[tuple[np.ndarray, np.ndarray]], color: str, label: str,
              dense: bool = False, marker: str | None = None) -> None:
    """Mean line and min–max band over the x range all curves share (see ``common_grid``)."""
    grid = common_grid([x for x, _ in curves], dense)
    if not len(grid):
        return
    mean, lo, hi = band(curves, grid)
    ax.plot(grid, mean, color=color, label=label, marker=marker, markersize=3)
    if len(curves) > 1:
        ax.fill_between(grid, lo, hi, color=color, alpha=0.2, linewidth=0)


def eval_points(rows: list[dict[str, Any]], record: dict[str, Any], x_key: str) -> tuple[np.ndarray, np.ndarray]:
    """Held-out greedy accuracy: before training at x = 0, periodic evals, after at the last x."""
    points: dict[float, float] = {}
    if record.get("accuracy_before") is not None:
        points[0.0] = record["accuracy_before"]
    x, y = xy(rows, x_key, "eval/accuracy")
    points.update(zip(x.tolist(), y.tolist()))
    last_x = xy(rows, x_key, "step")[0]
    if record.get("accuracy_after") is not None and len(last_x):
        points[float(last_x[-1])] = record["accuracy_after"]
    keys = sorted(points)
    return np.array(keys), np.array([points[k] for k in keys])


def _legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:  # an empty legend only warns
        ax.legend(fontsize=8)


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def _new_figure(panels: int) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure
    fig = Figure(figsize=(5.5 * panels, 4))
    axes = fig.subplots(1, panels)
    return fig, list(np.atleast_1d(axes))


def plot_curves(path: Path, runs: dict[str, list[tuple[dict, list[dict]]]], x_key: str, x_label: str,
                smooth: int = 20) -> Path:
    """Smoothed training reward and held-out accuracy per method against ``x_key``.

    ``runs`` maps a method to its finished runs as (record, metric rows) pairs.
    """
    fig, (ax_r, ax_a) = _new_figure(2)
    dense = x_key != "step"
    for i, (method, items) in enumerate(runs.items()):
        color = f"C{i % 10}"
        rewards = []
        for _, rows in items:
            x, y = xy(rows, x_key, "reward/mean")
            rewards.append((x, np.array(moving_average(y.tolist(), smooth))))
        draw_band(ax_r, rewards, color, method, dense=dense)
        evals = [eval_points(rows, rec, x_key) for rec, rows in items]
        draw_band(ax_a, evals, color, method, marker="o")
    ax_r.set(xlabel=x_label, ylabel=f"reward/mean (moving average, {smooth} steps)",
             title="training reward (sampled)")
    ax_a.set(xlabel=x_label, ylabel="greedy accuracy", title="held-out greedy accuracy", ylim=(-0.02, 1.02))
    for ax in (ax_r, ax_a):
        _legend(ax)
    fig.suptitle(BAND_NOTE, fontsize=8)
    return _save(fig, path)


def plot_pass_at_k(path: Path, records: dict[str, list[dict[str, Any]]]) -> Path:
    """pass@k against k per method: mean over seeds after training (solid) and before (dashed)."""
    fig, (ax,) = _new_figure(1)
    all_ks: set[int] = set()
    for i, (method, recs) in enumerate(records.items()):
        color = f"C{i % 10}"
        for field, style, suffix in (("pass_at_k", "-", "after"), ("pass_at_k_before", "--", "before")):
            ks, means = _mean_by_k([r.get(field) or {} for r in recs])
            all_ks.update(ks)
            if ks:
                ax.plot(ks, means, style, color=color, marker="o", markersize=3, label=f"{method} ({suffix})")
    if all_ks:
        ax.set_xticks(sorted(all_ks))
    ax.set(xlabel="k", ylabel="pass@k (unbiased estimator)", title="held-out pass@k, mean over seeds",
           ylim=(-0.02, 1.02))
    _legend(ax)
    return _save(fig, path)


def _mean_by_k(dicts: list[dict[str, float]]) -> tuple[list[int], list[float]]:
    """Per k present in every dict, the mean of ``pass@k`` over the dicts."""
    if not dicts or not all(dicts):
        return [], []
    common = set.intersection(*(set(d) for d in dicts))
    ks = sorted(int(key.split("@")[1]) for key in common)
    return ks, [sum(d[f"pass@{k}"] for d in dicts) / len(dicts) for k in ks]


def plot_entropy(path: Path, runs: dict[str, list[tuple[dict, list[dict]]]]) -> Path:
    """Policy entropy on the sampled tokens and mean response length against steps."""
    fig, (ax_e, ax_l) = _new_figure(2)
    for i, (method, items) in enumerate(runs.items()):
        color = f"C{i % 10}"
        draw_band(ax_e, [xy(rows, "step", "rollout/entropy") for _, rows in items], color, method)
        draw_band(ax_l, [xy(rows, "step", "rollout/response_length") for _, rows in items], color, method)
    ax_e.set(xlabel="step", ylabel="rollout/entropy (nats/token)", title="policy entropy")
    ax_l.set(xlabel="step", ylabel="rollout/response_length (tokens)", title="response length")
    for ax in (ax_e, ax_l):
        _legend(ax)
    fig.suptitle(BAND_NOTE, fontsize=8)
    return _save(fig, path)


def write_figures(out_dir: Path, runs: dict[str, list[tuple[dict, list[dict]]]], smooth: int = 20) -> list[Path]:
    """The four comparison PNGs in ``out_dir``; ``runs`` holds only finished runs, per method."""
    records = {m: [rec for rec, _ in items] for m, items in runs.items()}
    return [
        plot_curves(out_dir / "curves_steps.png", runs, "step", "optimizer step", smooth),
        plot_curves(out_dir / "curves_rollouts.png", runs, "rollout/spent", "sampled completions (cumulative)",
                    smooth),
        plot_pass_at_k(out_dir / "pass_at_k.png", records),
        plot_entropy(out_dir / "entropy.png", runs),
    ]


def write_paired_figure(out_dir: Path, paired_results: dict[str, Any]) -> Path:
    """``paired_differences.png``: per paired metric, each method's per-seed differences from the
    baseline (dots) and their mean with the 95 % interval (bar), against a zero line."""
    metrics, methods = paired_results["metrics"], list(paired_results["methods"])
    fig, axes = _new_figure(len(metrics))
    for ax, metric in zip(axes, metrics):
        for i, method in enumerate(methods):
            d = paired_results["methods"][method][metric]
            if d["diffs"]:
                ax.plot(d["diffs"], [i] * len(d["diffs"]), "o", color="0.6", markersize=3)
            if d["mean"] is not None:
                ax.errorbar([d["mean"]], [i], xerr=None if d["ci"] is None else [[d["ci"]], [d["ci"]]],
                            fmt="s", color=f"C{i % 10}", capsize=3)
        ax.axvline(0.0, color="k", linewidth=0.8)
        ax.set_yticks(range(len(methods)), methods)
        ax.set(xlabel=f"{metric}: method − {paired_results['baseline']}", title=f"paired difference, {metric}")
    fig.suptitle("dots: per-seed differences; square and bar: mean and 95 % t interval", fontsize=8)
    return _save(fig, out_dir / "paired_differences.png")
