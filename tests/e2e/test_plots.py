"""Single-run plots (``plot_run`` for the quickstart, ``plot_runs`` for ``rlvr plot``) on a real tiny run."""

import pytest

from rlvr.plots import plot_run, plot_runs
from rlvr.train.run import train_run
from tests.helpers.tiny import tiny_config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
    data = path.read_bytes()
    return data[:8] == PNG_MAGIC and len(data) > 1024


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs") / "grpo" / "seed0"
    train_run(tiny_config(str(folder), ["run.steps=2", "run.eval_every=1"]))
    return folder


def test_plot_runs_default_place(run_dir):
    (path,) = plot_runs([str(run_dir)], None)
    assert path == run_dir / "curves.png" and _is_png(path)


def test_plot_runs_into_a_folder_and_a_file(run_dir, tmp_path):
    paths = plot_runs([run_dir, run_dir.parent / "seed0"], tmp_path / "figs")
    assert paths[0] == tmp_path / "figs" / "grpo_seed0.png" and all(_is_png(p) for p in paths)
    (single,) = plot_runs([run_dir], tmp_path / "one.png")
    assert single == tmp_path / "one.png" and _is_png(single)
    with pytest.raises(ValueError, match="output folder"):
        plot_runs([run_dir, run_dir], tmp_path / "two.png")


def test_plot_runs_rejects_a_folder_without_metrics(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        plot_runs([tmp_path], None)


def test_plot_run_keeps_its_quickstart_signature(run_dir, tmp_path):
    path = plot_run(run_dir, out=tmp_path / "lc.png", smooth=1, before=0.0, after=0.5)
    assert path == tmp_path / "lc.png" and _is_png(path)
