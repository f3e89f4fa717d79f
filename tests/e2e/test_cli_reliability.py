"""Issue 30 (reliability probe): one clear line for Ctrl-C and a full disk, resume hints, folder modes."""

from __future__ import annotations

import errno
import os
import re

import pytest
import yaml

from rlvr.cli import main
from rlvr.train import checkpoint as ckpt
from rlvr.train.checkpoint import latest_checkpoint
from tests.helpers.tiny import TINY


def _config(tmp_path, out, **run):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, "run": {**TINY["run"], "eval_problems": 2, "eval_k": 1,
                                                    "out_dir": str(out), **run}}))
    return str(path)


def _err(capsys) -> str:
    """stderr without progress bars (tqdm's carriage-return lines)."""
    text = re.sub(r"[a-z_ ]+:\s+\d+%\|[^\]]*\]", "", capsys.readouterr().err)
    return "\n".join(line for line in text.replace("\r", "\n").splitlines() if line.strip())


def test_ctrl_c_is_one_line_with_the_resume_command(tmp_path, monkeypatch, capsys):
    import rlvr.train.run as run_mod

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(run_mod, "train_run", interrupted)
    assert main(["train", _config(tmp_path, tmp_path / "run")]) == 130
    err = _err(capsys)
    assert err.startswith("rlvr train: interrupted") and "--resume" in err and "\n" not in err


def test_a_full_disk_during_a_save_is_one_line_and_the_earlier_checkpoint_stays(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    writes = {"n": 0}
    real = ckpt.save_file

    def full_disk(tensors, path, *args, **kwargs):
        writes["n"] += 1
        if writes["n"] > 2:  # step 1 (model + optimizer) is written; step 2 finds the disk full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(tensors, path, *args, **kwargs)
    monkeypatch.setattr(ckpt, "save_file", full_disk)
    assert main(["train", _config(tmp_path, out, steps=2, save_every=1)]) == 2
    err = _err(capsys)
    assert "\n" not in err and "model.safetensors" in err and "disk full" in err, err
    monkeypatch.undo()
    assert latest_checkpoint(out).name == "step_000001"
    assert not list((out / "checkpoints").glob(".tmp_*"))


def test_resume_without_a_checkpoint_says_how_to_start_over(tmp_path, capsys):
    out = tmp_path / "run"
    config = _config(tmp_path, out, steps=1)
    assert main(["train", config]) == 0
    for path in (out / "checkpoints").glob("step_*"):  # as if killed before its first save
        import shutil
        shutil.rmtree(path)
    capsys.readouterr()
    assert main(["train", "--resume", str(out)]) == 2
    err = _err(capsys)
    assert "has no checkpoint" in err and "--overwrite" in err and "\n" not in err


def test_checkpoint_and_export_folders_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        out = tmp_path / "run"
        assert main(["train", _config(tmp_path, out, steps=1)]) == 0
        assert main(["export", str(out), str(tmp_path / "hf")]) == 0
    finally:
        os.umask(old)
    for folder in (latest_checkpoint(out), out / "final", tmp_path / "hf"):
        assert folder.stat().st_mode & 0o777 == 0o755, folder


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 2-step run with checkpoints at steps 1 and 2."""
    root = tmp_path_factory.mktemp("finished")
    out = root / "run"
    assert main(["train", _config(root, out, steps=2, save_every=1)]) == 0
    return out


def _tree(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_export_never_deletes_the_run_or_a_foreign_folder(tmp_path, finished, capsys):
    import shutil
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    kept = _tree(run / "checkpoints")
    for out in (run, tmp_path, run / "checkpoints", run / "checkpoints" / "step_000001" / "x"):
        capsys.readouterr()
        assert main(["export", str(run), str(out)]) == 2, out
        err = _err(capsys)
        assert "choose another folder" in err and "\n" not in err
        assert _tree(run / "checkpoints") == kept
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    assert main(["export", str(run), str(mine)]) == 2
    err = _err(capsys)
    assert "is not an earlier rlvr export" in err and "--overwrite" in err
    assert (mine / "notes.txt").read_text() == "precious"
    assert main(["export", str(run), str(mine), "--overwrite"]) == 0
    assert "moved the previous folder" in _err(capsys)
    archived = list(tmp_path.glob("mine.archived-*"))
    assert len(archived) == 1 and (archived[0] / "notes.txt").read_text() == "precious"
    assert (mine / "config.json").is_file()
    assert main(["export", str(run / "checkpoints" / "step_000001"), str(mine)]) == 0  # an earlier export: replaced
    assert len(list(tmp_path.glob("mine.archived-*"))) == 1


def test_export_of_a_damaged_checkpoint_named_directly_is_refused(tmp_path, finished, capsys):
    import shutil
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    weights = run / "checkpoints" / "step_000002" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["export", str(weights.parent), str(tmp_path / "hf")]) == 2
    err = _err(capsys)
    assert "model.safetensors does not match its sha256" in err and "\n" not in err
    assert not (tmp_path / "hf").exists()
