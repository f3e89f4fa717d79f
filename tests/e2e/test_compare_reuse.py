"""Issue 30, items 2 and 9: `rlvr compare` reuses finished runs across --jobs/--threads and a moved
comparison folder, archives (never deletes) a run whose config changed, and stops its child runs when
it is terminated. `--dry-run` reads each of those states and does nothing; `--only` names each item
that matches no run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rlvr.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path, out: Path, steps: int, warm: int = 2, seeds: tuple[int, ...] = (0,)) -> Path:
    spec = {
        "out_dir": str(out),
        "base": {"task": {"name": "tests.helpers.tiny:ToyDigit"},
                 "model": {"hidden": 32, "layers": 1, "heads": 2},
                 "warm_start": {"steps": warm, "batch_size": 4},
                 "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 12},
                 "run": {"eval_every": 0, "eval_problems": 2, "eval_k": 1, "save_every": 1}},
        "methods": {"grpo": {"preset": "grpo"}},
        "seeds": list(seeds),
        "budget": {"steps": steps},
    }
    path = tmp_path / f"cmp_{steps}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(autouse=True)
def _importable_tests(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]))


def test_finished_runs_survive_other_jobs_threads_and_a_moved_folder(tmp_path, capsys):
    out = tmp_path / "cmp"
    first = _dry(_spec(tmp_path, out, steps=1), capsys)  # --dry-run reads each state below and writes nothing
    assert not out.exists() and f"warm starts in {out / 'warm'}: 1 to build (0)" in first
    assert "runs (1): 1 to start, 0 to resume" in first and "grpo  start 0" in first
    assert main(["compare", str(_spec(tmp_path, out, steps=1)), "--jobs", "1"]) == 0
    summary = out / "runs" / "grpo" / "seed0" / "summary.json"
    stamp = summary.stat().st_mtime_ns
    assert "1 cached (0)" in (dry := _dry(_spec(tmp_path, out, steps=1), capsys)) and "grpo  reuse 0" in dry
    assert main(["compare", str(_spec(tmp_path, out, steps=1)), "--jobs", "2", "--threads", "2"]) == 0
    assert summary.stat().st_mtime_ns == stamp and "[rlvr compare] start " not in capsys.readouterr().out  # reused
    moved = tmp_path / "elsewhere"
    shutil.move(str(out), str(moved))
    assert main(["compare", str(_spec(tmp_path, moved, steps=1)), "--threads", "1"]) == 0
    plan = json.loads((moved / "plan.json").read_text())
    assert plan[0]["reused"] is True and "[rlvr compare] start " not in capsys.readouterr().out
    before = json.loads((moved / "runs" / "grpo" / "seed0" / "summary.json").read_text())

    files = sorted(moved.rglob("*"))
    dry = _dry(_spec(tmp_path, moved, steps=2), capsys)
    assert "grpo  archive 0" in dry and "grpo seed 0 changed: run.steps" in dry and sorted(moved.rglob("*")) == files
    assert main(["compare", str(_spec(tmp_path, moved, steps=2))]) == 0  # the budget changed: a new run
    err = capsys.readouterr().err
    assert "rlvr compare: grpo seed 0 changed (run.steps)" in err and "moved the previous run" in err
    archived = list((moved / "runs" / "grpo").glob("seed0.archived-*"))
    assert len(archived) == 1
    assert json.loads((archived[0] / "summary.json").read_text()) == before  # kept, not deleted
    assert json.loads((moved / "runs" / "grpo" / "seed0" / "summary.json").read_text())["steps"] == 2

    (moved / "runs" / "grpo" / "seed0" / "summary.json").unlink()  # as if killed after its last checkpoint
    shutil.rmtree(moved / "warm" / "seed0")
    dry = _dry(_spec(tmp_path, moved, steps=2), capsys)
    assert "1 to build (0)" in dry and "grpo  resume 0" in dry


def _dry(spec: Path, capsys, *extra: str) -> str:
    capsys.readouterr()
    assert main(["compare", str(spec), "--dry-run", *extra]) == 0
    return capsys.readouterr().out


def _alive(pid: int, session: int | None = None) -> bool:
    """Running (not a zombie) and, with ``session``, still in that session: a pid read from a file
    may be reused by an unrelated process once its own has ended, and must not be killed then."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()  # state ppid pgrp session ...
    except FileNotFoundError:
        return False
    return fields[0] != "Z" and (session is None or int(fields[3]) == session)


def test_a_terminated_comparison_stops_its_child_run(tmp_path):
    out = tmp_path / "cmp"
    path = _spec(tmp_path, out, steps=100000, warm=0)
    proc = subprocess.Popen([sys.executable, "-m", "rlvr", "compare", str(path)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lock = out / "runs" / "grpo" / "seed0" / ".lock"
    child = None
    try:
        deadline = time.time() + 240
        while not lock.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert lock.exists(), "the child run never started"
        child = int(lock.read_text().split()[0])
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130 and "Traceback" not in err
        assert "rlvr compare: interrupted" in err
        deadline = time.time() + 30
        while _alive(child, session=proc.pid) and time.time() < deadline:
            time.sleep(0.2)
        assert not _alive(child, session=proc.pid), "the child `rlvr train` kept running"
    finally:  # never leave a 100000-step run behind, whatever failed -- and kill nothing else
        if proc.poll() is None:  # not reaped yet: its pid is still ours
            os.kill(proc.pid, signal.SIGKILL)
        if child is not None and _alive(child, session=proc.pid):  # a live member keeps the session id ours
            os.kill(child, signal.SIGKILL)
        proc.wait()



def test_only_names_each_item_that_matches_no_run(tmp_path, capsys):
    spec = _spec(tmp_path, tmp_path / "cmp", 1, seeds=(0, 1))
    assert main(["compare", str(spec), "--dry-run", "--only", "grpo:1", "gspo", "grpo:7"]) == 2
    err = capsys.readouterr().err
    assert "['gspo', 'grpo:7'] matches no run" in err and "'grpo:1'" not in err

