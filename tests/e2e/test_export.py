"""Hugging Face outputs: RUN/final/ after every run and `rlvr export RUN_OR_CHECKPOINT OUT` load with
AutoModelForCausalLM / AutoTokenizer and reproduce rlvr's greedy completions token for token (tiny
testbed model with the char tokenizer, and the Qwen2 example with a BPE tokenizer; with and without LoRA)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from rlvr.cli import main
from rlvr.models import format_prompt
from rlvr.train.run_policy import load_run_policy
from rlvr.models.real import make_example
from rlvr.rollout import generate
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.run import train_run

from tests.helpers.tiny import tiny_config

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "examples" / "qwen2_grpo.yaml"
LORA = ["model.lora.r=4", "model.lora.alpha=16"]
PROMPTS = ["12345:", "7:", "Ana has 3 apples and buys 4 more."]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    return make_example(tmp_path_factory.mktemp("example"), size="tiny", problems=64)


def _run(tmp_path: Path, kind: str, lora: bool, example: dict) -> tuple[Path, dict]:
    if lora:
        pytest.importorskip("peft")
    extra = [*LORA] if lora else []
    if kind == "tiny":
        cfg = tiny_config(tmp_path, ["run.steps=2", "optim.lr=1e-2", *extra])
    else:
        cfg = tiny_config(tmp_path, ["run.steps=2", "optim.lr=1e-2", f"model.path={example['model']}",
                                     f"task.params.path={example['data']}", "rollout.max_new_tokens=8",
                                     "rollout.prompts_per_step=2", "rollout.group_size=2", "run.eval_problems=2",
                                     f"run.out_dir={tmp_path}",
                                     "run.eval_k=1", *extra],
                          path=str(EXAMPLE))
    return Path(cfg.run.out_dir), train_run(cfg)


def _hf_greedy(folder: Path, prompts: list[str], max_new_tokens: int) -> list[list[int]]:
    """Greedy completions with transformers alone (one prompt at a time, no padding), through eos."""
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    tok = AutoTokenizer.from_pretrained(str(folder))
    assert isinstance(tok, PreTrainedTokenizerFast)
    out = []
    for text in prompts:
        ids = tok(format_prompt(tok, text), return_tensors="pt")
        gen = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        out.append(gen[0, ids["input_ids"].shape[1]:].tolist())
    return out


def _rlvr_greedy(model: torch.nn.Module, tok, prompts: list[str], max_new_tokens: int) -> list[list[int]]:
    outs = []
    for text in prompts:  # one at a time: the same (unpadded) inputs as the transformers side
        gen = generate(model, tok, [format_prompt(tok, text)], max_new_tokens=max_new_tokens, do_sample=False)
        outs.append(gen.completion_ids[0][gen.completion_mask[0]].tolist())
    return outs


def _top2_gap(model: torch.nn.Module, tok, text: str, prefix: list[int]) -> tuple[float, float]:
    """The gap between the two largest next-token logits after ``prefix``, and the most that two float32
    computations of those logits (rlvr's generation, transformers' on the exported folder: LoRA merged or
    not, other kernels and shapes) can disagree by: each logit is a chain of float32 dot products over
    the hidden size H per layer, off by up to ~H·eps relative each, so 2·(layers + 1)·H·eps·max|logit|.
    A gap above it cannot be flipped by rounding: the two greedy decodes must pick the same token there,
    on any CPU. (The trained runs' smallest gap is ~1e-2, this bound ~1e-5.)"""
    ids = tok(format_prompt(tok, text), return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(torch.cat([ids, torch.tensor([prefix], dtype=ids.dtype)], 1)).logits[0, -1].float()
    top = logits.topk(2).values
    cfg = model.config
    bound = 2 * (cfg.num_hidden_layers + 1) * cfg.hidden_size * torch.finfo(torch.float32).eps
    return float(top[0] - top[1]), bound * float(logits.abs().max())


def _until_eos(ids: list[int], eos: set[int]) -> list[int]:
    for i, t in enumerate(ids):
        if t in eos:
            return ids[:i + 1]
    return ids


@pytest.mark.parametrize("kind", ["tiny", "qwen2"])
@pytest.mark.parametrize("lora", [False, True])
def test_final_export_reproduces_greedy_completions(tmp_path, example, kind, lora):
    run, summary = _run(tmp_path / "run", kind, lora, example)
    final = run / "final"
    assert summary["final"] == str(final)
    assert (final / "config.json").is_file() and (final / "generation_config.json").is_file()
    assert (final / "adapter" / "adapter_config.json").is_file() == lora
    assert not any(".lora_" in k or "base_layer" in k for k in load_file(str(final / "model.safetensors")))
    policy, tok, _ = load_run_policy(run)
    want = _rlvr_greedy(policy, tok, PROMPTS, 10)
    eos = set(tok.all_special_ids) - {tok.pad_token_id}
    got = _hf_greedy(final, PROMPTS, 10)
    for text, g, w in zip(PROMPTS, got, want):
        g, w = _until_eos(g, eos), _until_eos(w, eos)
        if g != w:  # only a near-tie of the two top logits may go either way (see _top2_gap)
            i = next((j for j, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))
            gap, tol = _top2_gap(policy, tok, text, w[:i])
            assert gap <= tol, (text, g, w, i, gap, tol)
    assert any(len(w) > 1 for w in want)  # a real comparison, not only an immediate eos


@pytest.mark.parametrize("lora", [False, True])
def test_export_command_on_run_and_checkpoint(tmp_path, lora, capsys):
    run, _ = _run(tmp_path / "run", "tiny", lora, {})
    ckpt = latest_checkpoint(run)
    assert main(["export", str(run), str(tmp_path / "from_run")]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert reply["checkpoint"] == str(ckpt) and ("adapter" in reply) == lora
    assert main(["export", str(ckpt), str(tmp_path / "from_ckpt")]) == 0
    final = load_file(str(run / "final" / "model.safetensors"))
    for folder in ("from_run", "from_ckpt"):
        exported = load_file(str(tmp_path / folder / "model.safetensors"))
        assert exported.keys() == final.keys()
        assert all(torch.equal(exported[k], final[k]) for k in final)
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "from_ckpt"))
    text = "12 + 3 = 15\n a  b"
    assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == text  # char vocabulary, spaces kept


def test_export_of_a_folder_that_is_no_run_is_one_clear_line(tmp_path, capsys):
    assert main(["export", str(tmp_path), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "neither a run folder (config.yaml) nor a checkpoint folder (state.json)" in err and "\n" not in err
