"""No collective in ``src/rlvr`` is handed a tensor built without a device.

A source scan (``ast``): for every call of a collective method (``all_reduce``, ``reduce``, ``gather``,
``broadcast``, ...), its tensor argument is traced back (through local names, to their last assignment
before the call, and through method chains such as ``.double().reshape(-1)``) to where it was made.
Made by a tensor factory (``torch.tensor``, ``torch.zeros``, ...) without ``device=`` and never moved
(``.to(...)``, ``.cuda()``, ``.cpu()``), it lives on the default device, the CPU, which NCCL refuses. Tensors of
``torch.cat`` / ``torch.stack`` are traced element by element. Anything else (a parameter, a slice, a
tensor handed in) is not judged here; ``tests/unit/test_collectives.py`` runs the sites themselves.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "rlvr"

COLLECTIVES = {"all_reduce", "all_gather", "all_gather_into_tensor", "reduce", "gather", "broadcast",
               "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "scatter",
               "send", "recv", "isend", "irecv"}
FACTORIES = {"tensor", "as_tensor", "zeros", "ones", "empty", "full", "arange", "linspace", "rand", "randn",
             "randint", "eye"}
JOINS = {"cat", "concat", "concatenate", "stack"}
MOVES = {"to", "cuda", "cpu"}


def _torch_call(node: ast.AST, names: set[str]) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch")


def _assignments(scope: ast.AST) -> dict[str, list[ast.Assign]]:
    out: dict[str, list[ast.Assign]] = {}
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(node)
    return out


def _off_device(expr: ast.AST, assigned: dict[str, list[ast.Assign]], line: int, depth: int = 0) -> bool:
    """Whether ``expr`` (a collective's tensor argument) is made by a factory without ``device=``."""
    if depth > 20:
        return False
    if isinstance(expr, ast.Name):  # its last assignment before the call
        earlier = [a for a in assigned.get(expr.id, []) if a.lineno < line]
        return bool(earlier) and _off_device(earlier[-1].value, assigned, earlier[-1].lineno, depth + 1)
    if _torch_call(expr, FACTORIES):
        return not any(k.arg == "device" for k in expr.keywords)
    if _torch_call(expr, JOINS) and expr.args and isinstance(expr.args[0], (ast.List, ast.Tuple)):
        return any(_off_device(e, assigned, line, depth + 1) for e in expr.args[0].elts)
    if _torch_call(expr, JOINS) and expr.args and isinstance(expr.args[0], (ast.ListComp, ast.GeneratorExp)):
        return _off_device(expr.args[0].elt, assigned, line, depth + 1)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not _torch_call(expr, FACTORIES):
        if expr.func.attr in MOVES:
            return False
        return _off_device(expr.func.value, assigned, line, depth + 1)  # .double(), .reshape(-1), ...
    return False


def _tensor_arg(call: ast.Call) -> ast.AST | None:
    for k in call.keywords:
        if k.arg == "tensor":
            return k.value
    return call.args[0] if call.args else None


def scan(source: str, name: str = "<src>") -> tuple[list[str], int]:
    """(``file:line`` of every collective handed an off-device tensor, collective calls seen)."""
    tree = ast.parse(source)
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    found, seen = [], 0
    for scope in [tree, *scopes]:
        assigned = _assignments(scope)
        body = scope.body
        calls = [n for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr in COLLECTIVES]
        for call in calls:
            if scope is tree and any(call in ast.walk(s) for s in scopes):
                continue  # judged in its function, with its function's names
            arg = _tensor_arg(call)
            seen += 1
            if arg is not None and _off_device(arg, assigned, call.lineno):
                found.append(f"{name}:{call.lineno} {ast.unparse(call)[:100]}")
    return found, seen


def test_no_collective_in_src_gets_a_tensor_without_a_device():
    found, seen = [], 0
    for path in sorted(SRC.rglob("*.py")):
        f, s = scan(path.read_text(), str(path.relative_to(SRC.parent)))
        found += f
        seen += s
    assert seen > 10  # the scan sees the collectives (and the many tensor .gather calls) at all
    assert not found, "collectives handed a tensor built without device= (the CPU, which NCCL refuses):\n" + \
        "\n".join(found)


def test_the_scan_catches_the_patterns_it_is_for():
    bad = textwrap.dedent("""
        def mean(acc, metrics):
            return acc.reduce(torch.tensor([metrics[k] for k in metrics], dtype=torch.float64), "mean")

        def width(dist, width):
            w = torch.tensor([width], dtype=torch.int64)
            dist.all_reduce(w, op=dist.ReduceOp.MAX)
            table = torch.zeros(3, width).double()
            dist.all_reduce(tensor=table)

        def joined(acc, a):
            return acc.gather(torch.cat([a.to(acc.device), torch.ones(1)]))
    """)
    found, seen = scan(bad)
    assert seen == 4 and [f.split()[0] for f in found] == ["<src>:3", "<src>:7", "<src>:9", "<src>:12"]

    good = textwrap.dedent("""
        def mean(acc, metrics, device):
            local = torch.tensor([1.0], dtype=torch.float64, device=device)
            out = acc.reduce(local, "mean")
            moved = torch.zeros(3).to(device)
            acc.reduce(moved)
            acc.reduce(torch.cat([x.double().to(device) for x in metrics]))
            return logp.gather(-1, index), out
    """)
    assert scan(good) == ([], 4)
