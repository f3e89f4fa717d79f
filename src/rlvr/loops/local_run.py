"""The set-up the single-process search loops (Hyper-ES, Progressive RLVR) hold as their ``run``: a
component, not a base class. It builds what such a loop starts from — the run folder, the pipeline
parts, the model placed as the gradient Trainer places it, a collector without shapers or filters, the
run's callbacks, a one-process ``acc`` — and answers for it what is the same for both: a resume is
refused (their search state is not checkpointed), config.yaml is written at the start, a checkpoint
holds the policy and no optimizer state."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from rlvr.train.callbacks import run_callbacks
from rlvr.train.config import write_config


class LocalProcess:
    """The ``acc`` surface train_run needs, for loops that run in one process (a launch with
    several processes is refused: every rank would repeat the whole search and write the same files)."""

    is_main_process = True
    num_processes = 1
    process_index = 0

    def __init__(self, method: str) -> None:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world > 1:
            raise ValueError(f"{method} runs in one process; launched with WORLD_SIZE={world}")


def save_policy_checkpoint(run_dir: Path, step: int, model: torch.nn.Module, state: dict) -> Path:
    """A standard run checkpoint of ``model`` (``rlvr eval RUN`` loads it); no optimizer state, as
    search-based loops keep none (an empty SGD stands in for the file layout)."""
    from rlvr.train.checkpoint import save_checkpoint
    empty = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
    return save_checkpoint(run_dir, step, model, empty, state)


class LocalRun:
    """A single-process loop's run: ``cfg``, ``method``, ``callbacks``, ``acc``, ``run_dir``, ``parts``,
    ``model``, ``tokenizer``, ``timer`` and ``collector``. ``no_resume`` says why a resume is refused,
    in the refusal's words."""

    def __init__(self, cfg: Any, method: str, *, model: torch.nn.Module | None = None, tokenizer: Any = None,
                 no_resume: str = "") -> None:
        from rlvr.train.build import build_model, build_pipeline
        from rlvr.train.collect import Collector
        from rlvr.train.logging import PhaseTimer
        self.cfg, self.method, self.no_resume = cfg, method, no_resume
        self.callbacks = run_callbacks(cfg)
        if cfg.run.threads:
            torch.set_num_threads(cfg.run.threads)
        self.acc = LocalProcess(method)
        self.run_dir = Path(cfg.run.out_dir)
        self.parts = build_pipeline(cfg)
        torch.manual_seed(cfg.run.training_seed)
        if model is None:
            model, tokenizer = build_model(cfg)
        self.model = model.to("cuda" if torch.cuda.is_available() else "cpu")  # as the gradient Trainer places it
        self.tokenizer = tokenizer
        self.timer = PhaseTimer()
        self.collector = Collector(task=self.parts.task, selector=self.parts.selector, shapers=[], filters=[],
                                   rollout_cfg=cfg.rollout, tokenizer=tokenizer, seed=cfg.run.training_seed, rank=0,
                                   world_size=1, timer=self.timer)

    def start(self, resume: bool) -> None:
        """The loop's ``begin`` starts here: refuse a resume, write config.yaml."""
        if resume:
            self.refuse_resume()
        write_config(self.run_dir, self.cfg)

    def refuse_resume(self) -> None:
        raise ValueError(f"{self.method}: resume is not supported{self.no_resume}; start a new run")

    def save(self, step: int, model: torch.nn.Module, state: dict[str, Any]) -> Path:
        return save_policy_checkpoint(self.run_dir, step, model, state)
