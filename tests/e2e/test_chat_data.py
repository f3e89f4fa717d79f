"""A JSONL of chat messages with a system prompt trains 2 steps on a Qwen2-architecture model and
evaluates; the logged prompt is exactly the chat template's rendering."""

from __future__ import annotations

import json
import random

import yaml

from rlvr.cli import main
from rlvr.models.real import CHAT_TEMPLATE, build_bpe_tokenizer, build_real_model
from rlvr.rollout.hf import generate
from rlvr.train.logging import read_metrics
from rlvr.train.run import evaluate_path, train_run

from tests.helpers.tiny import tiny_config

TEMPLATE = CHAT_TEMPLATE + "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}"
SYSTEM = "Answer with the number only."


def _rows(n: int) -> list[dict]:
    rng = random.Random(0)
    rows = []
    for _ in range(n):
        a, b = rng.randint(1, 20), rng.randint(1, 20)
        history = [{"role": "user", "content": "Ready?"}, {"role": "assistant", "content": "Yes."}]
        history = history if a % 3 == 0 else []
        rows.append({"prompt": [*history, {"role": "user", "content": f"What is {a}+{b}?"}], "answer": str(a + b)})
    return rows


def test_chat_jsonl_with_system_prompt_trains_and_evaluates(tmp_path, monkeypatch):
    rows = _rows(40)
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok = build_bpe_tokenizer([json.dumps(r) for r in rows] + [SYSTEM, "system user assistant"], vocab_size=400,
                              chat_template=TEMPLATE)
    model_dir = tmp_path / "model"
    build_real_model(tok, arch="qwen2", size="tiny", seed=0).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"path": str(model_dir)},
        "task": {"name": "dataset", "params": {"path": str(data), "verifier": "numeric", "test_fraction": 0.2,
                                               "system_prompt": SYSTEM,
                                               "chat_template_kwargs": {"enable_thinking": False}}},
        "rollout": {"max_new_tokens": 6}, "run": {"steps": 2, "log_samples": 16, "eval_problems": 4, "eval_k": 2}}))
    cfg = tiny_config(tmp_path / "run", path=str(config))
    summary = train_run(cfg)
    assert summary["steps"] == 2 and "accuracy_before" in summary and "accuracy_after" in summary
    assert len(read_metrics(tmp_path / "run")) == 2

    by_question = {}
    for r in rows:
        by_question.setdefault(r["prompt"][-1]["content"], []).append(r["prompt"])
    logged = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert len(logged) >= 16
    for sample in logged:
        expected = {tok.apply_chat_template([{"role": "system", "content": SYSTEM}, *messages], tokenize=False,
                                            add_generation_prompt=True, enable_thinking=False)
                    for messages in by_question[sample["problem"]]}
        assert sample["prompt"] in expected
        assert sample["prompt"].startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n")
        assert sample["prompt"].endswith("<|im_start|>assistant\n<think></think>")

    import rlvr.eval.evaluation as evaluation
    seen: list[str] = []

    def recording(model, tokenizer, prompts, **kwargs):
        seen.extend(prompts)
        return generate(model, tokenizer, prompts, **kwargs)

    monkeypatch.setattr(evaluation, "generate", recording)
    result = evaluate_path(str(tmp_path / "run"), problems=4, k=2, max_new_tokens=6)  # `rlvr eval RUN`
    assert result["problems"] == 4 and 0.0 <= result["greedy_accuracy"] <= 1.0
    assert seen and all(p.startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n") and p.endswith("<think></think>")
                        for p in seen)
    # `rlvr eval MODEL_DIR` with the task's options as overrides renders the same prompts.
    seen.clear()
    assert main(["eval", str(model_dir), f"task.params.path={data}", "task.params.verifier=numeric",
                 "task.params.test_fraction=0.2", f"task.params.system_prompt={SYSTEM}",
                 "task.params.chat_template_kwargs={enable_thinking: false}",
                 "--task", "dataset", "--problems", "3", "--k", "0", "--max-new-tokens", "4"]) == 0
    assert len(seen) == 3 and all(p.startswith(f"<|im_start|>system\n{SYSTEM}") and p.endswith("<think></think>")
                                  for p in seen)
