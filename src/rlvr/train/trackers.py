"""Experiment trackers behind one small interface: ``run.report_to: [tensorboard, wandb, trackio, mlflow]``.

Each tracker is a registered plug-in (``@register("tracker", name)``; ``rlvr list --kind tracker``) whose
class names the package it needs (``package``); a ``"pkg.module:Object"`` path names a tracker of one's own.

``metrics.jsonl`` is always written (:class:`rlvr.train.logging.RunLogger`); each tracker named in
``run.report_to`` receives the same scalars (finite numbers only) at the same steps and, where it
has tables (wandb, trackio, mlflow), a completions table (prompt, completion, reward, advantage)
every ``run.table_every`` steps. A tracker's package is imported only when the run starts; a
missing one is a config error naming the package. Nothing here needs the network: W&B honours
``WANDB_MODE=offline``, trackio writes a local SQLite file (``TRACKIO_DIR``), TensorBoard and
MLflow (``file:`` store in the run folder) write local files.
"""

from __future__ import annotations

import importlib.util
import math
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from rlvr.plugin import NoConfig
from rlvr.registry import RegistryError, get, names, register

NO_TRACKER = "none"  # report_to: [none] (or []): metrics.jsonl only
TABLE_COLUMNS = ("prompt", "completion", "reward", "advantage")


def check_report_to(report_to: Any) -> tuple[str, ...]:
    """The tracker names of ``run.report_to`` ('none' dropped); a clear error for an unknown name
    or a tracker whose package is not installed."""
    wanted = [report_to] if isinstance(report_to, str) else list(report_to or [])
    classes = {n: _tracker_class(n) for n in wanted if n != NO_TRACKER}
    unknown = [n for n in wanted if n != NO_TRACKER and classes[n] is None]
    if unknown:
        raise ValueError(f"run.report_to: unknown tracker(s) {unknown}; valid: {[NO_TRACKER, *names('tracker')]}")
    for name, cls in classes.items():
        package = getattr(cls, "package", None)
        if package and importlib.util.find_spec(package) is None:
            raise ValueError(f"run.report_to: '{name}' needs the {package} package (pip install {package})")
    return tuple(classes)


def _tracker_class(name: str) -> type | None:
    """The tracker class registered as ``name`` (or at ``"pkg.module:Object"``); None when there is none."""
    if not isinstance(name, str):
        return None
    try:
        return get("tracker", name)
    except RegistryError:
        return None


class Tracker(ABC):
    """One experiment tracker: scalars per step, optionally tables, closed at the end. A registered
    tracker is built as ``cls(run_dir, config)`` when the run starts."""

    Config: ClassVar[type] = NoConfig  # trackers take no hyperparameters (their settings: environment)
    package: ClassVar[str | None] = None  # the package its import needs; checked when the config is built
    supports_tables = False

    @abstractmethod
    def log(self, step: int, scalars: dict[str, float]) -> None:
        """Send one step's finite scalars; every tracker implements it."""

    def table(self, step: int, rows: list[dict[str, Any]]) -> None:
        """A completions table (columns :data:`TABLE_COLUMNS`); only where ``supports_tables``."""

    def close(self) -> None:
        pass


@register("tracker", "tensorboard")
class TensorBoardTracker(Tracker):
    """Event files in ``<run>/tb`` (read them with ``tensorboard --logdir``)."""

    package = "tensorboard"

    def __init__(self, run_dir: Path, config: dict) -> None:
        from torch.utils.tensorboard import SummaryWriter
        self.writer = SummaryWriter(str(run_dir / "tb"))

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


class _RunTracker(Tracker):
    """A tracker whose run object has ``log(dict, step=)`` and ``finish()`` and a ``Table`` class."""

    supports_tables = True

    def __init__(self, run: Any, table_cls: Any) -> None:
        self.run, self.table_cls = run, table_cls

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def table(self, step: int, rows: list[dict[str, Any]]) -> None:
        data = [[_cell(r.get(c)) for c in TABLE_COLUMNS] for r in rows]
        self.run.log({"completions": self.table_cls(columns=list(TABLE_COLUMNS), data=data)}, step=step)

    def close(self) -> None:
        self.run.finish()


@register("tracker", "wandb")
class WandbTracker(_RunTracker):
    """A W&B run in ``<run>/wandb`` (project ``WANDB_PROJECT`` or 'rlvr'; ``WANDB_MODE=offline`` works)."""

    package = "wandb"

    def __init__(self, run_dir: Path, config: dict) -> None:
        import wandb
        run = wandb.init(project=os.environ.get("WANDB_PROJECT", "rlvr"), name=run_dir.name, dir=str(run_dir),
                         config=config, reinit="create_new")
        super().__init__(run, wandb.Table)


@register("tracker", "trackio")
class TrackioTracker(_RunTracker):
    """A trackio run (local SQLite under ``TRACKIO_DIR``; project ``TRACKIO_PROJECT`` or 'rlvr')."""

    package = "trackio"

    def __init__(self, run_dir: Path, config: dict) -> None:
        import trackio
        run = trackio.init(project=os.environ.get("TRACKIO_PROJECT", "rlvr"), name=run_dir.name, config=config,
                           auto_log_cpu=False, auto_log_gpu=False)
        super().__init__(run, trackio.Table)


@register("tracker", "mlflow")
class MlflowTracker(Tracker):
    """An MLflow run (``MLFLOW_TRACKING_URI`` or a ``file:`` store in ``<run>/mlruns``)."""

    package = "mlflow"
    supports_tables = True

    def __init__(self, run_dir: Path, config: dict) -> None:
        import mlflow
        self.mlflow = mlflow
        if "MLFLOW_TRACKING_URI" not in os.environ:
            mlflow.set_tracking_uri((run_dir / "mlruns").resolve().as_uri())
        self.run = mlflow.start_run(run_name=run_dir.name)
        mlflow.log_params({k: str(v)[:250] for k, v in _flatten(config).items()})

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.mlflow.log_metrics({k.replace("@", "_at_"): v for k, v in scalars.items()}, step=step)

    def table(self, step: int, rows: list[dict[str, Any]]) -> None:
        data = {c: [_cell(r.get(c)) for r in rows] for c in TABLE_COLUMNS}
        self.mlflow.log_table(data, artifact_file=f"completions/step_{step:06d}.json")

    def close(self) -> None:
        self.mlflow.end_run()


def build_trackers(report_to: Any, run_dir: Path, config: dict | None = None) -> list[Tracker]:
    """The trackers named in ``report_to``, started (``none`` or empty: no tracker)."""
    return [get("tracker", name)(run_dir, config or {}) for name in check_report_to(report_to)]


def finite_scalars(row: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics row (``step`` excluded): what every tracker receives."""
    return {k: float(v) for k, v in row.items() if k != "step" and isinstance(v, (int, float)) and math.isfinite(v)}


def _cell(value: Any) -> Any:
    """A table cell: numbers and text as they are, anything else (a reward vector) as text."""
    return value if value is None or isinstance(value, (int, float, str)) else str(value)


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
