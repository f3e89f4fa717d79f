"""The real-architecture example: BPE tokenizer with a chat template, Qwen2/Llama models, word problems."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.models import count_parameters, load_model, load_tokenizer
from rlvr.models.real import SIZES, build_bpe_tokenizer, build_real_model, make_example, word_problem
from rlvr.rollout import generate
from rlvr.registry import build


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    return make_example(tmp_path_factory.mktemp("example"), size="tiny", problems=200)


def test_export_loads_with_auto_classes_and_keeps_text(example):
    model = AutoModelForCausalLM.from_pretrained(example["model"])
    tok = AutoTokenizer.from_pretrained(example["model"])
    assert type(model).__name__ == "Qwen2ForCausalLM"
    text = "Ana has 12 apples and buys 7 more. \\boxed{19}"
    assert tok.decode(tok(text)["input_ids"]) == text  # byte-level BPE: spaces and symbols survive
    rendered = tok.apply_chat_template([{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "2+2?"}], tokenize=False,
                                       add_generation_prompt=True)
    assert rendered == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n" \
                       "<|im_start|>assistant\n"
    assert model.generation_config.eos_token_id == [tok.convert_tokens_to_ids(t) for t in
                                                    ("<|endoftext|>", "<|im_end|>")]


def test_rlvr_loaders_generate_from_the_example(example):
    model, tok = load_model(example["model"]), load_tokenizer(example["model"])
    assert tok.pad_token == "<|endoftext|>" and tok.padding_side == "left"
    gen = generate(model, tok, ["Ana has 3 apples.", "Ben has 4 coins and finds 2 more."], max_new_tokens=6,
                   seed=0)
    assert gen.completion_ids.shape[0] == 2 and torch.isfinite(gen.logprobs).all()


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_sizes_and_architectures(arch):
    tok = build_bpe_tokenizer(["a few words of text", "user", "assistant"], vocab_size=300)
    model = build_real_model(tok, arch=arch, size="tiny", seed=1)
    assert model.config.model_type == arch and model.config.vocab_size == len(tok)
    again = build_real_model(tok, arch=arch, size="tiny", seed=1)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    with pytest.raises(ValueError, match="unknown size"):
        build_real_model(tok, arch=arch, size="huge")
    assert set(SIZES) >= {"tiny", "30m", "100m", "0.5b"}
    assert count_parameters(model) > 0


def test_word_problems_are_solved_by_their_own_solutions(example):
    import random
    row = word_problem(random.Random(3))
    assert row["solution"].endswith(f"\\boxed{{{row['answer']}}}.")
    task = build("task", "dataset", path=example["data"])
    problems = task.problems(8, seed=0)
    assert all(task.verify(p, p.solution).value == 1.0 for p in problems)
    first = json.loads(open(example["data"]).readline())
    assert set(first) == {"prompt", "answer", "solution"}


def test_example_config_trains_one_step(example, tmp_path):
    from pathlib import Path

    from rlvr.train.config import load_config
    from rlvr.train.trainer import Trainer

    path = Path(__file__).resolve().parents[2] / "configs" / "examples" / "qwen2_grpo.yaml"
    cfg = load_config(path, [f"model.path={example['model']}", f"task.params.path={example['data']}",
                             f"run.out_dir={tmp_path}", "run.steps=1", "rollout.prompts_per_step=2",
                             "rollout.max_new_tokens=8", "run.save_every=0"])
    result = Trainer(cfg).train()
    assert result["steps"] == 1 and (tmp_path / "checkpoints" / "latest").exists()
