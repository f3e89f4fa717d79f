"""Run folders on the command line (issue 22, cases 1, 2 and 5): a used folder is refused unless
--overwrite (which archives it), one writer at a time, --resume trains the folder it is given,
and a torn last log line does not block resume."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from safetensors.torch import load_file

from rlvr.cli import main
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.run_dir import RunDirError, run_lock
from tests.helpers.tiny import TINY


def _config(tmp_path, out, **run):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, "run": {**TINY["run"], "eval_problems": 2, "eval_k": 1,
                                                    "out_dir": str(out), **run}}))
    return str(path)


def _weights(ckpt):
    return {k: v.clone() for k, v in load_file(str(ckpt / "model.safetensors")).items()}


def _metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_second_run_into_a_used_folder_is_refused_and_loses_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    config = _config(tmp_path, out, steps=4, save_every=1)
    assert main(["train", config]) == 0
    before = {p.name: _weights(p) for p in (out / "checkpoints").glob("step_*")}
    metrics = _metrics(out)
    capsys.readouterr()
    assert main(["train", config, "run.steps=2"]) == 2
    err = capsys.readouterr().err
    assert f"run folder {out} already holds a run" in err and "--overwrite" in err and len(err.splitlines()) == 1
    assert {p.name: _weights(p) for p in (out / "checkpoints").glob("step_*")}.keys() == before.keys()
    assert _metrics(out) == metrics and latest_checkpoint(out).name == "step_000004"

    assert main(["train", config, "run.steps=2", "--overwrite"]) == 0
    archived = list(tmp_path.glob("run.archived-*"))
    assert len(archived) == 1 and "moved the previous run" in capsys.readouterr().err
    assert _metrics(archived[0]) == metrics
    kept = _weights(archived[0] / "checkpoints" / "step_000004")
    assert all((kept[k] == v).all() for k, v in before["step_000004"].items())
    assert latest_checkpoint(out).name == "step_000002" and [r["step"] for r in _metrics(out)] == [1, 2]
    assert not (out / ".lock").exists()  # released when the run ended


def test_resume_trains_the_folder_it_is_given_even_copied_or_moved(tmp_path):
    a = tmp_path / "a"
    assert main(["train", _config(tmp_path, a, steps=2)]) == 0
    a_ckpts = sorted(p.name for p in (a / "checkpoints").glob("step_*"))
    b = tmp_path / "b"
    shutil.copytree(a, b)
    assert main(["train", "--resume", str(b), "run.steps=3"]) == 0
    assert latest_checkpoint(b).name == "step_000003"
    assert sorted(p.name for p in (a / "checkpoints").glob("step_*")) == a_ckpts  # the original is untouched
    assert [r["step"] for r in _metrics(a)] == [1, 2]
    c = tmp_path / "moved"
    os.replace(a, c)
    assert main(["train", "--resume", str(c), "run.steps=3"]) == 0
    assert latest_checkpoint(c).name == "step_000003" and not a.exists()


def test_a_folder_locked_by_a_live_process_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", _config(tmp_path, out, steps=1)]) == 0
    (out / ".lock").write_text(f"{os.getppid()} {os.uname().nodename}\n")  # our parent: alive
    assert main(["train", "--resume", str(out), "run.steps=2"]) == 2
    assert f"is in use by process {os.getppid()}" in capsys.readouterr().err
    assert latest_checkpoint(out).name == "step_000001"
    with pytest.raises(RunDirError, match="in use"):
        with run_lock(out):
            pass
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (out / ".lock").write_text(f"{gone.pid} {os.uname().nodename}\n")  # a process that has ended
    with run_lock(out):
        assert (out / ".lock").read_text().startswith(str(os.getpid()))
    assert "removing the stale lock" in capsys.readouterr().err and not (out / ".lock").exists()


def test_a_torn_last_log_line_is_dropped_on_resume(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", _config(tmp_path, out, steps=2)]) == 0
    for name in ("metrics.jsonl", "samples.jsonl"):
        with open(out / name, "a") as fh:
            fh.write('{"step": 3, "loss/total": 0.1, "rew')  # a write cut short (full disk, kill)
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "run.steps=3"]) == 0
    err = capsys.readouterr().err
    assert "metrics.jsonl: dropped a torn last line" in err and "samples.jsonl: dropped a torn last line" in err
    assert [r["step"] for r in _metrics(out)] == [1, 2, 3]
    assert all(json.loads(line)["step"] <= 3 for line in (out / "samples.jsonl").read_text().splitlines())
