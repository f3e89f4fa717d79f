"""Tasks: golden demonstrations, verifiers (gold scores 1.0), step checkers, splits, datasets,
and safe_verify's time limit and error handling."""

import json
import threading
import time

import pytest

from rlvr.registry import RegistryError, build, names
from rlvr.tasks import Task, answer_after_marker, safe_verify, verify_all
from rlvr.tasks.arithmetic import add_steps, mul_steps, worked_steps
from rlvr.types import Problem, Score


def arith_problem(operands, ops):
    steps, value = worked_steps(operands, ops)
    return Problem(prompt="", answer=str(value), meta={"operands": operands, "ops": ops})


# --- arithmetic -------------------------------------------------------------------------------

def test_arithmetic_golden_demonstrations():
    task = build("task", "arithmetic")
    # TESTBED_NOTES examples: carries written as "+1", last step holds the leading digits
    assert task.demonstration(arith_problem([347, 285], ["+"])) == "7+5=12;4+8+1=13;3+2+1=6;#632"
    assert task.demonstration(arith_problem([876, 2], ["*"])) == "6*2=12;7*2+1=15;8*2+1=17;#1752"
    # shorter addend padded with 0: 47+285 → 7+5=12 (c1); 4+8+1=13 (c1); 0+2+1=3 → 332
    assert add_steps(47, 285) == ["7+5=12", "4+8+1=13", "0+2+1=3"]
    # 903*3: 3*3=9 (c0), 0*3=0 (c0), 9*3=27 → 2709
    assert mul_steps(903, 3) == ["3*3=9", "0*3=0", "9*3=27"]
    # chained: (12+34)*2: 2+4=6; 1+3=4; >46; 6*2=12; 4*2+1=9 → 92
    assert worked_steps([12, 34, 2], ["+", "*"]) == (["2+4=6", "1+3=4", ">46", "6*2=12", "4*2+1=9", "#92"], 92)


def test_arithmetic_problems_are_well_formed_and_gold_scores_one():
    task = build("task", "arithmetic")
    probs = task.problems(200, seed=3)
    assert len({p.prompt for p in probs}) == 200
    n_add = sum("+" in p.prompt for p in probs)
    assert 70 < n_add < 130  # half additions, half multiplications (binomial sd ≈ 7)
    for p in probs:
        a, op, b = p.prompt[:-1].partition("+") if "+" in p.prompt else p.prompt[:-1].partition("*")
        assert 2 <= len(a) <= 4
        assert (2 <= len(b) <= 4) if op == "+" else (len(b) == 1 and 2 <= int(b) <= 9)
        assert int(p.answer) == (int(a) + int(b) if op == "+" else int(a) * int(b))
        assert task.verify(p, task.demonstration(p)) == Score(1.0, p.answer, {"objectives": {"format": 1.0}})
        assert task.check_steps(p, task.demonstration(p)) is None


def test_arithmetic_verify_reads_number_after_last_marker():
    task = build("task", "arithmetic")
    p = arith_problem([347, 285], ["+"])
    assert task.verify(p, "#1;#632").value == 1.0  # the last marker counts
    assert task.verify(p, "7+5=12;#631") == Score(0.0, "631", {"objectives": {"format": 1.0}})
    assert task.verify(p, "632") == Score(0.0, None, {"objectives": {"format": 0.0}})  # no marker, no answer
    assert task.verify(p, "# 632<eos-ish>").value == 1.0
    assert answer_after_marker("#x") is None


def test_arithmetic_check_steps_finds_first_mistake():
    task = build("task", "arithmetic")
    p = arith_problem([347, 285], ["+"])  # gold: 7+5=12;4+8+1=13;3+2+1=6;#632
    assert task.check_steps(p, "7+5=12;4+8+1=13;3+2+1=6;#632") is None
    assert task.check_steps(p, "7+5=12;4+8=12;3+2=5;#522") == 1  # forgot the carry at step 1
    assert task.check_steps(p, "7+5=11;4+8+1=13;3+2+1=6;#632") == 0
    assert task.check_steps(p, "7+5=12;4+8+1=13;3+2+1=6;#633") == 3  # the answer segment is step 3
    assert task.check_steps(p, "7+5=12;4+8+1=13") == 2  # stopped early
    assert task.check_steps(p, "7+5=12;4+8+1=13;3+2+1=6;#632;x") == 4  # trailing extra segment


def test_arithmetic_difficulty_knob_chains_operations():
    task = build("task", "arithmetic", num_operations=3)
    for p in task.problems(20, seed=0):
        assert p.prompt.count("(") == 2 and p.solution.count(">") == 2
        assert task.verify(p, p.solution).value == 1.0
        assert eval(p.prompt[:-1]) == int(p.answer)  # parenthesised left to right, Python agrees


def test_splits_are_disjoint_and_deterministic():
    task = build("task", "arithmetic")
    test = {p.prompt for p in task.problems(300, seed=0, split="test")}
    train = {p.prompt for s in range(4) for p in task.problems(1000, seed=s, split="train")}
    assert len(test) == 300 and not (test & train)
    assert all(task.split_of(q) == "test" for q in test)
    assert [p.prompt for p in task.problems(5, seed=9)] == [p.prompt for p in task.problems(5, seed=9)]
    assert [p.prompt for p in task.problems(5, seed=9)] != [p.prompt for p in task.problems(5, seed=10)]
    with pytest.raises(ValueError, match="unknown split"):
        task.problems(1, 0, split="dev")


def test_too_small_problem_space_raises():
    task = build("task", "arithmetic", min_digits=1, max_digits=1, ops="*")  # 10*8 = 80 prompts
    with pytest.raises(ValueError, match="too small"):
        task.problems(500, seed=0)


def test_task_registry_and_config_errors():
    assert {"arithmetic", "countdown", "dataset"} <= set(names("task"))
    with pytest.raises(RegistryError, match="num_operation"):
        build("task", "arithmetic", num_operation=2)
    with pytest.raises(ValueError, match="ops"):
        build("task", "arithmetic", ops="+-")
    assert issubclass(type(build("task", "countdown")), Task)


# --- countdown --------------------------------------------------------------------------------

def cd(numbers, target):
    return Problem(prompt=",".join(map(str, numbers)) + f">{target}:", answer=str(target))


def test_countdown_gold_scores_one():
    task = build("task", "countdown")
    for p in task.problems(100, seed=1):
        assert task.verify(p, task.demonstration(p)).value == 1.0
        assert task.check_steps(p, task.demonstration(p)) is None
        nums = [int(x) for x in p.prompt.split(">")[0].split(",")]
        assert 3 <= len(nums) <= 4 and all(1 <= x <= 10 for x in nums)


def test_countdown_verifier_rules():
    task = build("task", "countdown")
    p = cd([3, 7, 2, 5], 23)
    assert task.verify(p, "3*7=21;21+2=23;#23").value == 1.0
    assert task.verify(p, "7*3=21;2+21=23;#23").value == 1.0  # operand order is free
    assert task.verify(p, "3*7=21;21+2=23;#24").value == 0.0  # wrong answer
    assert task.verify(p, "3*7=22;22+1=23;#23").value == 0.0  # wrong arithmetic
    assert task.verify(p, "3*7=21;21+2=23;#23").parsed == "23"
    assert task.verify(cd([3, 7, 5], 10), "5+5=10;#10").value == 0.0  # 5 used twice
    assert task.verify(p, "7*3=21;21+3=24;24-1=23;#23").value == 0.0  # 3 used twice, 1 not given
    assert task.verify(p, "#23").value == 0.0  # 23 is not in the pool
    assert task.verify(p, "2-3=-1;#23").value == 0.0  # negative results do not parse
    assert "not available" in task.verify(cd([3, 7, 5], 10), "5+5=10;#10").meta["reason"]
    assert task.verify(cd([4, 6], 10), "4+6=10").value == 0.0  # no answer segment


def test_countdown_check_steps_first_unreachable_step():
    task = build("task", "countdown")
    p = cd([2, 3, 4], 14)  # 3*4=12, 12+2=14
    assert task.check_steps(p, "3*4=12;12+2=14;#14") is None
    # 2+3=5 leaves {4, 5}: 4+5, 4*5, 5-4 never give 14 → step 0 is the first mistake
    assert task.check_steps(p, "2+3=5;5*4=20;#20") == 0
    # 3*4=12 keeps 14 reachable; 12-2=10 leaves {10} → step 1
    assert task.check_steps(p, "3*4=12;12-2=10;#10") == 1
    assert task.check_steps(p, "3*4=13;13+1=14;#14") == 0  # wrong arithmetic
    assert task.check_steps(p, "3*4=12;12+2=14;#41") == 2  # steps fine, answer segment wrong


# --- dataset ----------------------------------------------------------------------------------

ROWS = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i), "solution": f"{i}+{i}={2 * i}"} for i in range(40)]


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_dataset_jsonl_splits_and_problems(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    task = build("task", "dataset", path=str(path), test_fraction=0.25)
    train, test = task.rows("train"), task.rows("test")
    assert len(train) + len(test) == 40 and not ({p.prompt for p in train} & {p.prompt for p in test})
    batch = task.problems(50, seed=0)  # more than the rows: cycles through shuffles
    assert len(batch) == 50 and {p.prompt for p in batch} == {p.prompt for p in train}
    p = batch[0]
    assert task.demonstration(p) == p.solution
    assert task.verify(p, f"The answer is ${p.answer}$").value == 1.0
    assert task.verify(p, "The answer is $-12345$").value == 0.0


def test_dataset_math_verify_equivalence(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "half?", "answer": "\\frac{1}{2}"}])
    task = build("task", "dataset", path=str(path))
    p = Problem("half?", "\\frac{1}{2}")
    assert task.verify(p, "so it is $0.5$").value == 1.0  # symbolic, not textual, equality
    assert task.verify(p, "so it is $0.25$").value == 0.0
    with pytest.raises(ValueError, match="no solution"):
        task.demonstration(p)


def test_dataset_missing_column_names_column_and_file(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"question": "1+1", "answer": "2"}])
    task = build("task", "dataset", path=str(path))
    with pytest.raises(ValueError, match=r"'prompt' is missing in .*bad\.jsonl"):
        task.rows("train")
    with pytest.raises(ValueError, match="set `path`"):
        build("task", "dataset")


def test_dataset_meta_columns_reach_problem_meta(tmp_path):
    rows = [{**r, "ref_accuracy": i / 40} for i, r in enumerate(ROWS)]
    task = build("task", "dataset", path=str(write_jsonl(tmp_path / "d.jsonl", rows)), meta_columns=["ref_accuracy"])
    by_prompt = {r["prompt"]: r["ref_accuracy"] for r in rows}
    problems = task.rows("train") + task.rows("test")
    assert len(problems) == 40 and all(p.meta["ref_accuracy"] == by_prompt[p.prompt] for p in problems)
    missing = build("task", "dataset", path=str(write_jsonl(tmp_path / "e.jsonl", ROWS)), meta_columns=["ref_accuracy"])
    with pytest.raises(ValueError, match="'ref_accuracy' is missing"):
        missing.rows("train")


def test_dataset_parquet_and_saved_dataset_dict(tmp_path):
    datasets = pytest.importorskip("datasets")
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "d.parquet")
    task = build("task", "dataset", path=str(tmp_path / "d.parquet"))
    assert len(task.rows("train")) + len(task.rows("test")) == 40
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:30]),
                               "test": datasets.Dataset.from_list(ROWS[30:])})
    dd.save_to_disk(str(tmp_path / "saved"))
    task = build("task", "dataset", path=str(tmp_path / "saved"))
    assert len(task.rows("train")) == 30 and len(task.rows("test")) == 10  # the saved 'test' split wins


def test_dataset_verify_works_off_the_main_thread(tmp_path):
    # math-verify's signal-based limit raises in threads; the task turns it off there
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    task = build("task", "dataset", path=str(path))
    p = Problem("q", "4")
    box = []
    t = threading.Thread(target=lambda: box.append(task.verify(p, "$4$")))
    t.start()
    t.join(30)
    assert box and box[0].value == 1.0
    assert safe_verify(task.verify, p, "$4$", timeout_s=30).value == 1.0


# --- safe_verify ------------------------------------------------------------------------------

def _slow(problem, completion):
    time.sleep(10)
    return Score(1.0)


def _boom(problem, completion):
    raise RuntimeError("parser exploded")


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_safe_verify_timeout_and_errors(isolation):
    p = Problem("q", "1")
    slow = safe_verify(_slow, p, "x", timeout_s=0.2, isolation=isolation)
    assert slow.value == 0.0 and "timeout" in slow.meta["error"]
    boom = safe_verify(_boom, p, "x", timeout_s=5, isolation=isolation)
    assert boom.value == 0.0 and "parser exploded" in boom.meta["error"]
    ok = safe_verify(lambda q, c: Score(1.0, "1"), p, "x", timeout_s=5, isolation=isolation)
    assert ok == Score(1.0, "1")


def test_safe_verify_bad_results():
    p = Problem("q", "1")
    assert "not Score" in safe_verify(lambda q, c: 1.0, p, "x").meta["error"]
    assert "non-finite" in safe_verify(lambda q, c: Score(float("nan")), p, "x").meta["error"]
    assert safe_verify(_boom, p, "x", timeout_s=None).value == 0.0  # no limit, still caught
    with pytest.raises(ValueError, match="isolation"):
        safe_verify(_boom, p, "x", isolation="fiber")


def test_verify_all_scores_in_order():
    task = build("task", "arithmetic")
    probs = task.problems(3, seed=0)
    scores = verify_all(task, probs, [probs[0].solution, "#0", probs[2].solution])
    assert [s.value for s in scores] == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="3 problems but 2"):
        verify_all(task, probs, ["", ""])
