"""Issue 30, item 8: bad dataset input is one clear error naming the file and the line."""

from __future__ import annotations

import json

import pytest

from rlvr.registry import build

ROWS = [{"prompt": f"What is {i} + {i}?", "answer": 2 * i} for i in range(12)]


def _write(tmp_path, rows, extra: bytes = b""):
    path = tmp_path / "d.jsonl"
    path.write_bytes("".join(json.dumps(r) + "\n" for r in rows).encode() + extra)
    return path


def _rows(path, **params):
    task = build("task", "dataset", path=str(path), **params)
    return task.rows("train") + task.rows("test")


def test_a_row_without_an_answer_is_an_error_naming_file_and_line(tmp_path):
    path = _write(tmp_path, ROWS[:4] + [{"prompt": "lost label?"}] + ROWS[4:] + [{"prompt": "n?", "answer": None}])
    with pytest.raises(ValueError) as err:
        _rows(path)
    message = str(err.value)
    assert str(path) in message and "line 5: no answer ('answer' is absent)" in message
    assert "line 14: no answer ('answer' is null)" in message and "answer_column: ''" in message
    assert len(_rows(path, unlabelled_rows="label_free")) == len(ROWS) + 2  # declared partly labelled
    assert all(p.answer is None for p in _rows(path, answer_column=""))  # declared label-free


def test_line_numbers_count_blank_lines(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n\n\n" + json.dumps({"prompt": "x?"}) + "\n")
    with pytest.raises(ValueError, match="line 4: no answer"):
        _rows(path)


def test_an_unknown_chat_role_is_an_error(tmp_path):
    chat = [{"role": "system", "content": "Be brief."}, {"role": "wizard", "content": "2+2?"}]
    path = _write(tmp_path, ROWS[:2] + [{"prompt": chat, "answer": "4"}])
    with pytest.raises(ValueError, match=r"line 3: the prompt: message 1 has role 'wizard'; roles: system, "):
        _rows(path)


def test_a_duplicate_prompt_with_two_answers_is_an_error_naming_both_lines(tmp_path):
    path = _write(tmp_path, ROWS[:3] + [{"prompt": ROWS[1]["prompt"], "answer": 99}] + ROWS[3:])
    with pytest.raises(ValueError, match=r"line 2 and line 4: the same prompt with different answers '2' and '99'"):
        _rows(path)
    task = build("task", "dataset", path=str(path), on_bad_row="skip")
    kept = task.rows("train") + task.rows("test")
    assert len(kept) == len(ROWS) - 1 and ROWS[1]["prompt"] not in [p.prompt for p in kept]
    assert task.skipped_rows == 2  # both rows of the conflict
    same = _write(tmp_path, ROWS + [ROWS[0]])  # the same prompt and answer twice is no conflict
    assert len(_rows(same)) == len(ROWS) + 1


def test_a_non_utf8_line_is_named(tmp_path):
    path = _write(tmp_path, ROWS[:3], extra=b'{"prompt": "caf\xe9?", "answer": 1}\n')
    with pytest.raises(ValueError, match=rf"{path}: line 4 is not UTF-8 text"):
        _rows(path)
