"""Fixtures shared by the task and verifier-pool tests."""

from __future__ import annotations

import json

import pytest

from rlvr.registry import build


@pytest.fixture(scope="module")
def dataset_task(tmp_path_factory):
    """A 10-row dataset task (answers "0".."9") verified by its default math verifier."""
    path = tmp_path_factory.mktemp("data") / "d.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"q{i}", "answer": str(i)}) for i in range(10)))
    return build("task", "dataset", path=str(path))
