"""rlvr verifiers and tasks as TRL reward functions, called the way TRL 1.16's GRPOTrainer calls them.

``GRPOTrainer._calculate_rewards`` (trl/trainer/grpo_trainer.py) passes ``prompts``,
``completions``, ``completion_ids``, every dataset column but ``prompt``/``completion`` as a list
(one value per completion), ``trainer_state``, ``log_extra`` and ``log_metric``, and puts the
returned floats in column i of ``rewards_per_func (N, F)``. The first test runs that method itself
on a stand-in ``self``; the last runs one real GRPOTrainer step on CPU with a tiny model.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("trl")
from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: E402

from rlvr.integrations.trl import as_trl_reward, message_text  # noqa: E402
from rlvr.tasks import Arithmetic  # noqa: E402

pytestmark = pytest.mark.peers


def stand_in(reward_funcs):
    """The attributes ``_calculate_rewards`` reads, with TRL's logging hooks recorded."""
    extra, metrics = defaultdict(list), defaultdict(list)
    return SimpleNamespace(
        accelerator=SimpleNamespace(device=torch.device("cpu"), is_main_process=True),
        args=SimpleNamespace(report_to=[]), state=SimpleNamespace(global_step=0),
        reward_funcs=reward_funcs, reward_processing_classes=[None] * len(reward_funcs),
        reward_func_names=[f.__name__ for f in reward_funcs], environments=None,
        _log_completion_extra=lambda column, values: extra[column].extend(values),
        _log_metric=lambda name, value: metrics[name].append(value)), extra, metrics


def test_grpo_trainer_reward_call():
    # 4 completions of 2 prompts; columns 'answer' and 'level' repeated per completion as TRL does.
    inputs = [{"prompt": "1+1=", "answer": "2", "level": 1}] * 2 + [{"prompt": "2+3=", "answer": "5", "level": 2}] * 2
    prompts = [x["prompt"] for x in inputs]
    completions = ["answer: 2 confidence: 0.9", "answer: 3", "\\boxed{5}", "9**9**9**9"]
    funcs = [as_trl_reward("math_verify", timeout_s=2.0), as_trl_reward("numeric")]
    fake, extra, metrics = stand_in(funcs)
    rewards = GRPOTrainer._calculate_rewards(fake, inputs, prompts, completions, [[1]] * 4)  # (N=4, F=2)
    assert rewards.shape == (4, 2)
    assert rewards[:, 0].tolist() == [1.0, 0.0, 1.0, 0.0]  # the power tower times out: 0
    assert rewards[:, 1].tolist() == [1.0, 0.0, 1.0, 0.0]  # numeric reads 9, wrong
    assert funcs[0].__name__ == "rlvr_math_verify"
    assert metrics["rlvr_math_verify/verifier_errors"] == [1.0] and metrics["rlvr_numeric/verifier_errors"] == [0.0]
    assert extra["rlvr_math_verify_error"][3].startswith("timeout")


def test_task_and_objective_and_conversational_format():
    task = Arithmetic()
    verdict, fmt = as_trl_reward(task), as_trl_reward(task, objective="format")
    prompts = [[{"role": "user", "content": "12+5="}]] * 2
    completions = [[{"role": "assistant", "content": "2+5=7;1+0=1;#17"}], [{"role": "assistant", "content": "no"}]]
    assert verdict(prompts=prompts, completions=completions, answer=["17", "17"]) == [1.0, 0.0]
    assert fmt(prompts=prompts, completions=completions, answer=["17", "17"]) == [1.0, 0.0]
    assert fmt.__name__ == "rlvr_arithmetic_format" and message_text(prompts[0]) == "12+5="


def test_missing_answer_column_is_named():
    with pytest.raises(KeyError, match="no 'solution' column"):
        as_trl_reward("exact", answer_column="solution")(prompts=["q"], completions=["a"], answer=["a"])
    with pytest.raises(TypeError, match="need a verifier name"):
        as_trl_reward(Arithmetic(), timeout_s=1.0, extract="full")


def test_one_grpo_step_on_cpu(tmp_path):
    datasets = pytest.importorskip("datasets")
    from trl import GRPOConfig

    from rlvr.models import build_char_tokenizer, build_tiny_model

    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, hidden=16, layers=1, heads=2)
    seen = []
    reward = as_trl_reward("numeric")

    def spy(prompts, completions, **kwargs):
        out = reward(prompts, completions, **kwargs)
        seen.append((list(kwargs["answer"]), out))
        return out

    data = datasets.Dataset.from_dict({"prompt": ["1+1=", "2+2="], "answer": ["2", "4"]})
    config = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
                        report_to=[], save_strategy="no", max_steps=1, per_device_train_batch_size=4,
                        num_generations=2, max_completion_length=6, logging_steps=1, disable_tqdm=True,
                        dataloader_num_workers=0, beta=0.0)
    trainer = GRPOTrainer(model=model, reward_funcs=[spy], args=config, train_dataset=data, processing_class=tokenizer)
    trainer.train()
    assert len(seen) == 1 and sorted(seen[0][0]) == ["2", "2", "4", "4"] and len(seen[0][1]) == 4
    assert all(r in (0.0, 1.0) for r in seen[0][1])
