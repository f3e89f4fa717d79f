"""`rlvr --help` starts without importing torch (issue 30, item 10)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

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


def _run(argv: list[str], **env: str) -> tuple[str, str]:
    """(stdout before the probe's line, the heavy modules imported) of ``rlvr ARGV`` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]), **env}
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], env=env, capture_output=True,
                         text=True, check=True).stdout
    text, _, heavy = out.rpartition("HEAVY=")
    return text, heavy.strip()


def _heavy(argv: list[str]) -> str:
    return _run(argv)[1]


def test_help_imports_no_torch():
    assert _heavy(["--help"]) == ""
    assert _heavy(["train", "--help"]) == ""
    assert _heavy(["export", "--help"]) == ""


def test_import_rlvr_is_light_and_its_names_still_load():
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    code = "import sys, rlvr; assert 'torch' not in sys.modules; from rlvr import Problem, build; print('ok')"
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "ok"


def test_list_is_cached_and_then_imports_no_torch(tmp_path):
    cache = {"XDG_CACHE_HOME": str(tmp_path)}
    first, _ = _run(["list", "--kind", "sampler"], **cache)  # builds the cache (imports every plug-in)
    assert list((tmp_path / "rlvr").glob("list-*.json"))
    second, heavy = _run(["list", "--kind", "sampler"], **cache)
    assert heavy == "" and second == first and "hint_len_range=(0.3, 0.7)" in second
    as_json, heavy = _run(["list", "--json"], **cache)
    assert heavy == "" and '"shown":' not in as_json and '"name": "grpo"' in as_json  # the text-only key stays out
