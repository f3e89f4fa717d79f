"""`rlvr --help` and `rlvr list` start without importing torch (issue 30, item 10)."""

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


def test_list_imports_no_torch_even_the_first_time(tmp_path):
    # A fresh home and cache folder: the listing comes from the committed rlvr/listing.json, so the first
    # call is as light as any (tests/unit/test_listing.py keeps that file equal to the registry's).
    fresh = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    text, heavy = _run(["list", "--kind", "sampler"], **fresh)
    assert heavy == "" and "hint_len_range=(0.3, 0.7)" in text
    as_json, heavy = _run(["list", "--json"], **fresh)
    assert heavy == "" and '"shown":' not in as_json and '"name": "grpo"' in as_json  # the text-only key stays out
    assert list(tmp_path.iterdir()) == []  # nothing cached, nothing written
