"""Chat-format data (rlvr.tasks.chat, render_prompt) and load_dataset names from the local cache."""

from __future__ import annotations

import json
import shutil

import pytest

from rlvr.models import build_char_tokenizer, format_prompt, render_prompt
from rlvr.models.real import CHAT_TEMPLATE, build_bpe_tokenizer
from rlvr.registry import build
from rlvr.sft import demonstration_batch
from rlvr.tasks.chat import prompt_fields
from rlvr.tasks.dataset import read_table
from rlvr.types import Problem

# ChatML plus a flag a template kwarg switches (as Qwen3's enable_thinking does).
THINK_TEMPLATE = CHAT_TEMPLATE + "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}"
CHATS = [
    {"prompt": [{"role": "user", "content": "What is 2+3?"}], "answer": "5", "solution": "2+3=5"},
    {"prompt": [{"role": "system", "content": "Own system."}, {"role": "user", "content": "What is 4+4?"}],
     "answer": "8", "solution": "4+4=8"},
    {"prompt": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                {"role": "user", "content": "What is 2+3?"}], "answer": "5", "solution": "2+3=5"},
]


@pytest.fixture(scope="module")
def tok():
    return build_bpe_tokenizer(["What is 2+3? 4+4 Hello Hi system user assistant Be brief."], vocab_size=300,
                               chat_template=THINK_TEMPLATE)


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _task(path, **params):
    return build("task", "dataset", path=str(path), verifier="exact", test_fraction=0.01, **params)


def test_prompt_fields_plain_system_and_conversation():
    assert prompt_fields("2+2?", system_prompt="", template_kwargs={}, where="w") == ("2+2?", "2+2?", {})
    text, ident, meta = prompt_fields("2+2?", system_prompt="Be brief.", template_kwargs={"enable_thinking": False},
                                      where="w")
    assert (text, ident) == ("2+2?", "2+2?")  # the identity (uid, split) ignores the system prompt
    assert meta == {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
                    "chat_template_kwargs": {"enable_thinking": False}}
    text, _, meta = prompt_fields(CHATS[1]["prompt"], system_prompt="Be brief.", template_kwargs={}, where="w")
    assert text == "What is 4+4?" and meta["messages"] == CHATS[1]["prompt"]  # its own system message wins
    text, _, meta = prompt_fields(CHATS[2]["prompt"], system_prompt="", template_kwargs={}, where="w")
    assert text == "What is 2+3?" and meta == {"messages": CHATS[2]["prompt"]}


@pytest.mark.parametrize("cell, match", [([], "conversation is empty"), ([{"role": "user"}], "message 0"),
                                         (["hi"], "expected \\{role: str, content: str\\}"),
                                         ({"role": "user"}, "expected a string or a list")])
def test_bad_conversations_are_clear_errors(cell, match):
    with pytest.raises(ValueError, match=match):
        prompt_fields(cell, system_prompt="", template_kwargs={}, where="data.jsonl, row 3")


def test_dataset_task_renders_exactly_the_chat_template(tmp_path, tok):
    kwargs = {"enable_thinking": False}
    task = _task(_jsonl(tmp_path / "chat.jsonl", CHATS), system_prompt="Be brief.", chat_template_kwargs=kwargs)
    rows = task.rows("train")
    assert [p.prompt for p in rows] == ["What is 2+3?", "What is 4+4?", "What is 2+3?"]
    assert rows[0].uid != rows[2].uid  # same question, different conversations: different problems
    for p, row in zip(rows, CHATS):
        messages = row["prompt"] if row["prompt"][0]["role"] == "system" else \
            [{"role": "system", "content": "Be brief."}, *row["prompt"]]
        expected = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
        assert render_prompt(tok, p) == expected and expected.endswith("<think></think>")
    # Warm start tokenizes the same rendering (prompt labels ignored, then the demonstration).
    batch = demonstration_batch(tok, task, rows[:1])
    prompt_ids = tok(render_prompt(tok, rows[0]), add_special_tokens=False)["input_ids"]
    assert batch["input_ids"][0, :len(prompt_ids)].tolist() == prompt_ids
    assert (batch["labels"][0, :len(prompt_ids)] == -100).all() and (batch["labels"][0, len(prompt_ids):] != -100).any()


def test_plain_rows_render_as_before_and_hints_replace_the_last_user_turn(tmp_path, tok):
    plain = Problem("What is 2+3?")
    assert render_prompt(tok, plain) == format_prompt(tok, "What is 2+3?")
    char = build_char_tokenizer()
    assert render_prompt(char, plain) == "What is 2+3?"  # no chat template: the text as it is
    chat = _task(_jsonl(tmp_path / "c.jsonl", CHATS)).rows("train")[2]
    hinted = render_prompt(tok, chat, "What is 2+3? Hint: 5")
    hinted_chat = [*CHATS[2]["prompt"][:2], {"role": "user", "content": "What is 2+3? Hint: 5"}]
    assert hinted == tok.apply_chat_template(hinted_chat, tokenize=False, add_generation_prompt=True)
    with pytest.raises(ValueError, match="needs a tokenizer with a chat template"):
        render_prompt(char, chat)


def _cache_dataset(cache, tmp_path, repo_id, config, splits):
    """A genuine entry of the datasets cache for ``repo_id`` (as load_dataset leaves after a download),
    written with the packaged json builder, no network."""
    from datasets.packaged_modules.json.json import Json
    files = {split: _jsonl(tmp_path / f"{split}.jsonl", rows) for split, rows in splits.items()}
    builder = Json(cache_dir=str(tmp_path / "build"), dataset_name=repo_id.split("/")[-1], config_name=config,
                   data_files=files)
    builder.download_and_prepare()
    shutil.copytree(builder.cache_dir, cache / repo_id.replace("/", "___") / config / "0.0.0" / "0123abcd")


def test_load_dataset_name_from_the_local_cache(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    cache = tmp_path / "hf_cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    train = [{"question": f"{i}+1=", "answer": str(i + 1)} for i in range(6)]
    test = [{"question": "9+1=", "answer": "10"}]
    _cache_dataset(cache, tmp_path, "acme/tiny_math", "main", {"train": train, "test": test})
    tables = read_table("acme/tiny_math", "main")
    assert tables == {"train": train, "test": test}
    task = _task("acme/tiny_math", subset="main", prompt_column="question", system_prompt="Be brief.")
    assert [p.prompt for p in task.rows("train")] == [r["question"] for r in train]
    assert [p.prompt for p in task.rows("test")] == ["9+1="]  # the cached test split is held out
    assert task.rows("train")[0].meta["messages"][0] == {"role": "system", "content": "Be brief."}
    only_test = _task("acme/tiny_math", subset="main", prompt_column="question", split="test")
    assert [p.prompt for p in only_test.rows("train") + only_test.rows("test")] == ["9+1="]
    with pytest.raises(ValueError, match="has no split 'validation'; splits: train, test"):
        _task("acme/tiny_math", prompt_column="question", split="validation").rows("train")


def test_load_dataset_name_not_cached_is_a_clear_error(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "empty_cache"))
    with pytest.raises(FileNotFoundError, match="'openai/gsm8k' \\(configuration 'main'\\) is not a local file or "
                                                "folder and not in the Hugging Face datasets cache"):
        _task("openai/gsm8k", subset="main").rows("train")
    with pytest.raises(FileNotFoundError, match="dataset file not found"):
        _task(tmp_path / "missing.jsonl").rows("train")
