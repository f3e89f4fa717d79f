"""`rlvr --help` starts without importing torch (issue 30, item 10)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

PROBE = """
import sys
from rlvr.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
heavy = sorted(m for m in ("torch", "transformers", "rlvr.train.trainer", "accelerate") if m in sys.modules)
print("HEAVY=" + ",".join(heavy))
"""


def _heavy(argv: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], env=env, capture_output=True,
                         text=True, check=True).stdout
    return next(line for line in out.splitlines() if line.startswith("HEAVY="))[len("HEAVY="):]


def test_help_imports_no_torch():
    assert _heavy(["--help"]) == ""
    assert _heavy(["train", "--help"]) == ""
    assert _heavy(["export", "--help"]) == ""


def test_import_rlvr_is_light_and_its_names_still_load():
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    code = "import sys, rlvr; assert 'torch' not in sys.modules; from rlvr import Problem, build; print('ok')"
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "ok"
