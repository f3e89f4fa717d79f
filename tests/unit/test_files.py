"""rlvr.files: the one atomic write (a sibling NAME.tmp, then os.replace)."""

from __future__ import annotations

import pytest

from rlvr.files import write_atomic, write_text_atomic


@pytest.mark.parametrize("fsync", [False, True])
def test_text_lands_whole_and_no_temporary_file_stays(tmp_path, fsync):
    path = tmp_path / "summary.json"
    assert write_text_atomic(path, "old", fsync=fsync) == path
    write_text_atomic(path, "new", fsync=fsync)
    assert path.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_a_failed_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"old")

    def half(tmp):
        tmp.write_bytes(b"ne")
        raise OSError("disk full")
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, half)
    assert path.read_bytes() == b"old"
