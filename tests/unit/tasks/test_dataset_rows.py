"""Dataset rows (issue 22, case 6): typed answers, missing or misspelt columns in any row, and prompts
longer than the model's context, as errors naming the row or (on_bad_row: skip) skipped and counted."""

from __future__ import annotations

import json

import pytest

from rlvr.models import build_char_tokenizer
from rlvr.registry import build
from rlvr.tasks.dataset import BadRow, answer_text
from rlvr.train.validate import fit_prompts

ROWS = [{"prompt": f"What is {i} + {i}?", "answer": 2 * i} for i in range(30)]


def _task(tmp_path, rows, **params):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return build("task", "dataset", path=str(path), **params)


def _all_rows(task):
    return task.rows("train") + task.rows("test")


@pytest.mark.parametrize("value,text", [(58, "58"), (58.0, "58"), (0.5, "0.5"), (-3.25, "-3.25"), ("58", "58"),
                                        ("\\frac{1}{2}", "\\frac{1}{2}"), (None, None)])
def test_answers_are_strings_or_numbers_normalised_once(value, text):
    assert answer_text(value) == text


@pytest.mark.parametrize("value,kind", [([58, 0], "list"), ({"v": 58}, "dict"), (True, "bool"),
                                        (float("nan"), "float")])
def test_other_answers_are_bad_rows(value, kind):
    with pytest.raises(BadRow, match=f"is a {kind}; an answer must be a string or a finite number"):
        answer_text(value)


def test_a_float_answer_scores_the_boxed_integer(tmp_path):
    task = _task(tmp_path, [{**r, "answer": float(r["answer"])} for r in ROWS])
    problem = next(p for p in _all_rows(task) if p.prompt == "What is 29 + 29?")
    assert problem.answer == "58"
    assert task.verify(problem, "so \\boxed{58}").value == 1.0


def test_a_list_answer_is_an_error_naming_the_row(tmp_path):
    rows = ROWS[:3] + [{"prompt": "What is 29 + 29?", "answer": [58, 0]}] + ROWS[3:]
    with pytest.raises(ValueError, match=r"1 bad row\(s\) \(line 4: answer \[58, 0\] is a list; .*on_bad_row=skip"):
        _task(tmp_path, rows).rows("train")


def test_a_misspelt_column_after_the_first_row_is_reported_with_row_numbers(tmp_path):
    rows = ROWS[:5] + [{"prompt": "a?", "answr": 1}, {"promt": "b?", "answer": 2}] + ROWS[5:]
    with pytest.raises(ValueError) as err:
        _task(tmp_path, rows).rows("train")
    message = str(err.value)
    assert "2 bad row(s)" in message
    assert "line 6: column(s) ['answer'] missing (columns there: ['answr', 'prompt']; not in the first row: " \
           "['answr'])" in message
    assert "line 7: column(s) ['prompt'] missing" in message


def test_a_row_without_the_answer_column_is_label_free_when_declared(tmp_path):
    task = _task(tmp_path, ROWS + [{"prompt": "unlabelled?"}, {"prompt": "null?", "answer": None}],
                 unlabelled_rows="label_free")
    label_free = [p for p in _all_rows(task) if p.answer is None]
    assert sorted(p.prompt for p in label_free) == ["null?", "unlabelled?"] and task.skipped_rows == 0


def test_skip_drops_and_counts_bad_rows(tmp_path, capsys):
    rows = ROWS + [{"prompt": "x?", "answer": {"a": 1}}, {"prompt": "y?", "answer": False}, {"answer": "z"}]
    task = _task(tmp_path, rows, on_bad_row="skip")
    assert len(_all_rows(task)) == len(ROWS) and task.skipped_rows == 3
    err = capsys.readouterr().err
    assert "skipped 3 bad row(s)" in err and "line 31: answer {'a': 1} is a dict" in err
    with pytest.raises(ValueError, match="on_bad_row must be 'error' or 'skip'"):
        _task(tmp_path, ROWS, on_bad_row="ignore")


def test_prompts_longer_than_the_context_are_rejected_or_skipped(tmp_path, capsys):
    long_rows = ROWS + [{"prompt": "9" * 300, "answer": 1}, {"prompt": "8" * 250, "answer": 2}]
    tok = build_char_tokenizer()
    with pytest.raises(ValueError, match=r"2 prompt\(s\) longer than the model's context allows \(256 tokens, "
                                         r"16 of them for the completion\).*on_bad_row=skip"):
        fit_prompts(_task(tmp_path, long_rows), tok, 256, 16)
    task = _task(tmp_path, long_rows, on_bad_row="skip")
    fit_prompts(task, tok, 256, 16)
    assert len(_all_rows(task)) == len(ROWS) and task.skipped_rows == 2
    assert "skipped 2 prompt(s) longer than the model's context" in capsys.readouterr().err
    fit_prompts(task, tok, 256, 16)  # nothing left to drop
    assert task.skipped_rows == 2


def test_the_trainer_refuses_a_prompt_too_long_for_the_model(tmp_path):
    from rlvr.train.trainer import Trainer
    from tests.helpers.tiny import tiny_config
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS + [{"prompt": "7" * 10_000, "answer": 1}]))
    cfg = tiny_config(tmp_path / "run", ["task.name=dataset", f"task.params.path={path}"])
    with pytest.raises(ValueError, match="1 prompt\\(s\\) longer than the model's context allows"):
        Trainer(cfg)
