"""A 2-"node" launch on one machine: two ``accelerate launch --num_machines 2 --machine_rank R`` commands
(one gloo process per "node", rendezvous over loopback) run ``rlvr train`` against one plain process.

Each "node" runs in its own working folder with a relative ``run.out_dir``, as separate machines with
separate disks would: everything the run writes must appear once, on node 0, and nothing on node 1.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers.tiny import TINY
from tests.helpers.tolerance import UPDATE_RTOL, update_gap

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {**TINY, "task": {"name": "tests.helpers.tiny:ToyDigit"},
          # completions that depend only on the problem: the same global batch on 1 or 2 processes
          "rollout": {**TINY["rollout"], "sampler": {"name": "tests.e2e.rank_free:RankFreeSampler"}},
          "run": {**TINY["run"], "steps": 2, "save_every": 1, "eval_problems": 4, "out_dir": "run"}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    path = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def _launch_nodes(config: Path, nodes: list[Path]) -> None:
    """Both "nodes" at once (each waits for the other at the rendezvous)."""
    port = free_port()
    procs = []
    for rank, cwd in enumerate(nodes):
        cwd.mkdir(parents=True)
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "2",
               "--num_processes", "2", "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1",
               "--main_process_port", str(port), "--mixed_precision", "no", "--dynamo_backend", "no",
               "-m", "rlvr.cli", "train", str(config)]
        procs.append(subprocess.Popen(cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outs = []
    for proc in procs:
        try:
            outs.append(proc.communicate(timeout=300)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
    for rank, (proc, out) in enumerate(zip(procs, outs)):
        assert proc.returncode == 0, f"node {rank}:\n{out[-4000:]}"


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file
    return load_file(str(folder / "model.safetensors"))


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def write_config(folder: Path, **run: object) -> Path:
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump({**CONFIG, "run": {**CONFIG["run"], **run}}))
    return config


def run_cli(launcher: list[str], config: Path, cwd: Path) -> Path:
    """``LAUNCHER -m rlvr.cli train CONFIG`` in ``cwd``; the run folder ``cwd/run``."""
    cwd.mkdir()
    proc = subprocess.run([*launcher, "-m", "rlvr.cli", "train", str(config)], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return cwd / "run"


def assert_same_updates(run: Path, one: Path, processes: int) -> None:
    """Each step's checkpoint and the exported final/ weights of ``run`` equal the 1-process ``one``'s
    within float32 reordering (tests/helpers/tolerance.py), measured against one step's movement of ``one``."""
    assert json.loads((run / "summary.json").read_text())["processes"] == processes
    assert json.loads((one / "summary.json").read_text())["processes"] == 1
    first, second = (_weights(one / "checkpoints" / s) for s in ("step_000001", "step_000002"))
    assert _max_diff(first, second) > 1e-6  # the second step changed the weights: the comparison is not of idle runs
    step = {k: first[k] - second[k] for k in first}  # one step's movement, the scale of the comparison
    for got, want in ((_weights(run / "checkpoints" / "step_000001"), first),
                      (_weights(run / "checkpoints" / "step_000002"), second),
                      (_weights(run / "final"), _weights(one / "final"))):
        assert got.keys() == want.keys()
        assert update_gap(got, want, {k: want[k] + step[k] for k in want}) <= UPDATE_RTOL


def test_two_node_launch_equals_one_process_and_writes_once(tmp_path):
    config = write_config(tmp_path)
    node0, node1 = tmp_path / "node0", tmp_path / "node1"
    _launch_nodes(config, [node0, node1])
    run, one = node0 / "run", run_cli([sys.executable], config, tmp_path / "single")
    assert_same_updates(run, one, processes=2)

    # rank-0-only outputs, written once: every file on node 0, nothing at all on node 1
    assert not list(node1.iterdir())
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step_000001", "step_000002"]
    assert (run / "final" / "config.json").is_file() and (run / "config.yaml").is_file()
    assert sorted(p.name for p in run.iterdir()) == sorted(p.name for p in one.iterdir())
