"""Run outputs: metrics as JSONL, sample completions, the trackers of ``run.report_to``, timed phases."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

from rlvr.notice import notice
from rlvr.train.trackers import Tracker, build_trackers, finite_scalars


class PhaseTimer:
    """Accumulates wall-clock seconds per named phase; ``timing/<phase>`` metrics."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def pop(self) -> dict[str, float]:
        out = {f"timing/{k}": v for k, v in self.seconds.items()}
        out["timing/step"] = sum(self.seconds.values())
        self.seconds = defaultdict(float)
        return out


class RunLogger:
    """Writes ``metrics.jsonl`` and ``samples.jsonl`` in the run folder (main process only), and
    sends the same scalars to the trackers named in ``report_to`` (:mod:`rlvr.train.trackers`;
    empty = the JSONL files alone), with a completions table every ``table_every`` steps."""

    def __init__(self, run_dir: str | Path, enabled: bool = True, resume_step: int = 0,
                 report_to: Any = (), table_every: int = 0, config: dict | None = None) -> None:
        self.dir = Path(run_dir)
        self.enabled = enabled
        self.table_every = table_every
        self.trackers: list[Tracker] = []
        if not enabled:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        for name in ("metrics.jsonl", "samples.jsonl"):
            _truncate_after(self.dir / name, resume_step)
        self.trackers = build_trackers(report_to, self.dir, config)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        row = {"step": step, **{k: _scalar(v) for k, v in metrics.items()}}
        with open(self.dir / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps(row) + "\n")
        scalars = finite_scalars(row)
        for tracker in self.trackers:
            tracker.log(step, scalars)

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        if not self.enabled or not rows:
            return
        with open(self.dir / "samples.jsonl", "a") as fh:
            for row in rows:
                fh.write(json.dumps({"step": step, **row}) + "\n")
        if self.table_every and step % self.table_every == 0:
            for tracker in self.trackers:
                if tracker.supports_tables:
                    tracker.table(step, rows)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()
        self.trackers = []


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` (a torn last line, from an interrupted write, left out)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return read_jsonl(path)[0]


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    """The rows of a JSONL log and its torn last line (text that is not one whole JSON row, as an
    interrupted write or a full disk leaves), or None; a bad line before the last is a ValueError."""
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    rows = []
    for n, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except ValueError:
            if n == len(lines):
                return rows, line
            raise ValueError(f"{path}: line {n} is not valid JSON; repair or remove that line") from None
        rows.append(row)
    return rows, None


def _scalar(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    return value


def _truncate_after(path: Path, step: int) -> None:
    """On resume, drop rows logged after the checkpoint so the file reads as one uninterrupted run."""
    if not path.exists():
        return
    if step <= 0:
        path.unlink()
        return
    rows, torn = read_jsonl(path)
    if torn is not None:
        notice(f"{path}: dropped a torn last line ({len(torn)} characters) left by an interrupted write")
    keep = [row for row in rows if row.get("step", 0) <= step]
    path.write_text("".join(json.dumps(row) + "\n" for row in keep))
