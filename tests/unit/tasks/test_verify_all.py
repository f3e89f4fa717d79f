"""``verify_all`` outside a run: many rows go through a shared pool (kept for later calls) with the
same scores as the serial path; a handful, ``verifier_pool(0)`` and bounded tasks stay in-process;
the guard, pool and verify modules import one another without a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rlvr.registry import build
from rlvr.sandbox import verify as verify_mod
from rlvr.tasks import verify_all
from rlvr.sandbox.pool import VerifierPool, active, in_process, verifier_pool
from rlvr.types import Problem

pytest.importorskip("math_verify")


@pytest.fixture
def no_shared_pool():
    verify_mod.close_shared_pool()
    yield
    verify_mod.close_shared_pool()


def _batch(n):
    problems = [Problem(f"q{i}", str(i)) for i in range(n)]
    notations = ["$\\boxed{{{}}}$", "The answer is {}.", "${}.0$", "\\frac{{{}}}{{1}}"]
    texts = [notations[i % 4].format(i if i % 3 else i + 1) if i % 7 else "no idea" for i in range(n)]
    return problems, texts


def test_many_rows_use_a_shared_pool_with_the_serial_scores(dataset_task, no_shared_pool):
    problems, texts = _batch(40)
    with verifier_pool(0):  # rollout.verify_workers=0: one call at a time, in-process
        assert in_process() and active() is None
        serial = verify_all(dataset_task, problems, texts)
        assert verify_mod.shared_pool(create=False) is None  # none opened inside verifier_pool(0)
    pooled = verify_all(dataset_task, problems, texts)
    shared = verify_mod.shared_pool(create=False)
    assert shared is not None and shared.pids() and shared.replaced == 0
    assert pooled == serial
    assert 0 < sum(s.value for s in pooled) < len(problems)  # right and wrong rows both present
    again = verify_all(dataset_task, problems[:3], texts[:3])  # a warm shared pool serves small batches too
    assert verify_mod.shared_pool(create=False) is shared and again == serial[:3]
    verify_mod.close_shared_pool()
    assert verify_mod.shared_pool(create=False) is None


def test_a_handful_of_rows_opens_no_pool(dataset_task, no_shared_pool):
    problems, texts = _batch(verify_mod._HANDFUL)
    scores = verify_all(dataset_task, problems, texts)
    assert len(scores) == len(problems) and verify_mod.shared_pool(create=False) is None


def test_bounded_tasks_and_explicit_pools_never_open_the_shared_pool(dataset_task, no_shared_pool):
    task = build("task", "arithmetic")  # needs_timeout = False
    problems = task.problems(40, seed=0)
    assert [s.value for s in verify_all(task, problems, [p.solution for p in problems])] == [1.0] * 40
    assert verify_mod.shared_pool(create=False) is None
    rows, texts = _batch(12)
    with VerifierPool(1) as pool:
        verify_all(dataset_task, rows, texts)
        assert len(pool.pids()) == 1 and verify_mod.shared_pool(create=False) is None


_SANDBOX = Path(__file__).resolve().parents[3] / "src" / "rlvr" / "sandbox"


def _imports(path: Path) -> set[str]:
    """The rlvr.sandbox modules ``path`` imports, anywhere in it (function-level imports too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlvr.sandbox"):
            out |= {node.module} if node.module != "rlvr.sandbox" else {f"rlvr.sandbox.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("rlvr.sandbox.")}
    return out


def test_guard_pool_and_verify_modules_have_no_cycle():
    names = ["safe", "worker", "pool", "verify"]
    graph = {f"rlvr.sandbox.{n}": _imports(_SANDBOX / f"{n}.py") & {f"rlvr.sandbox.{m}" for m in names} for n in names}
    assert graph["rlvr.sandbox.safe"] == set()  # the guard imports neither the pool nor verify_all
    order: list[str] = []
    while graph:  # topological order, or a cycle left over
        leaves = [m for m, deps in graph.items() if deps <= set(order)]
        assert leaves, f"import cycle among {sorted(graph)}"
        order += leaves
        graph = {m: d for m, d in graph.items() if m not in leaves}
