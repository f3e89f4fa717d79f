"""Experiment trackers (run.report_to): the same scalars as metrics.jsonl, completions tables,
offline W&B and trackio, and clear errors for unknown or missing trackers."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.train.config import ConfigError
from rlvr.train.logging import read_metrics
from rlvr.train.trackers import finite_scalars
from rlvr.train.trainer import Trainer
from tests.helpers.tiny import tiny_config

ROOT = Path(__file__).resolve().parents[2]


def _train(tmp_path: Path, overrides: list[str]) -> list[dict]:
    Trainer(tiny_config(str(tmp_path), ["run.steps=2", *overrides])).train()
    return read_metrics(tmp_path)


def test_tensorboard_events_hold_the_metrics_jsonl_scalars(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    rows = _train(tmp_path, ["run.report_to=[tensorboard]"])
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    expected = {row["step"]: finite_scalars(row) for row in rows}
    assert sorted(expected) == [1, 2] and len(expected[1]) > 10
    assert set(events.Tags()["scalars"]) == set(expected[1]) | set(expected[2])
    for tag in events.Tags()["scalars"]:
        logged = {e.step: e.value for e in events.Scalars(tag)}
        want = {step: values[tag] for step, values in expected.items() if tag in values}
        assert logged == pytest.approx(want, rel=1e-6, abs=1e-6), tag  # event files store float32


def test_no_tracker_by_default(tmp_path):
    cfg = tiny_config(str(tmp_path), [])
    assert cfg.run.report_to == []
    _train(tmp_path, ["run.steps=1"])
    assert not (tmp_path / "tb").exists() and not (tmp_path / "wandb").exists()
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert samples and all(isinstance(s["advantage"], float) for s in samples)  # the table's columns


def test_unknown_or_missing_tracker_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"run.report_to: unknown tracker\(s\) \['tensorbord'\]"):
        tiny_config(str(tmp_path), ["run.report_to=[tensorbord]"])
    assert tiny_config(str(tmp_path), ["run.report_to=none"]).run.report_to == []
    if importlib.util.find_spec("mlflow") is None:  # not installed here: the error names the package
        with pytest.raises(ConfigError, match=r"'mlflow' needs the mlflow package \(pip install mlflow\)"):
            tiny_config(str(tmp_path), ["run.report_to=[mlflow]"])


def test_wandb_offline_run_gets_scalars_and_a_completions_table(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    rows = _train(tmp_path, ["run.report_to=[wandb]", "run.table_every=2"])
    wandb.teardown()  # the W&B service writes the run file asynchronously; this waits for it
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    record = next(runs[0].glob("run-*.wandb")).read_bytes()
    for key in finite_scalars(rows[-1]):
        assert key.encode() in record, key
    tables = list((runs[0] / "files" / "media" / "table").glob("completions_2_*.table.json"))  # step 2 only
    assert len(tables) == 1 and not list((runs[0] / "files" / "media" / "table").glob("completions_1_*"))
    table = json.loads(tables[0].read_text())
    assert table["columns"] == ["prompt", "completion", "reward", "advantage"] and len(table["data"]) >= 4


def test_trackio_run_gets_the_same_scalars_and_a_table(tmp_path):
    pytest.importorskip("trackio")
    code = ("from rlvr.train.trainer import Trainer; from tests.helpers.tiny import tiny_config; import sys; "
            "Trainer(tiny_config(sys.argv[1], ['run.steps=2', 'run.report_to=[trackio]', "
            "'run.table_every=1'])).train()")
    env = {**__import__("os").environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "TRACKIO_PROJECT": "rlvr_test",
           "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], env=env, capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    db = sqlite3.connect(tmp_path / "trackio" / "rlvr_test.db")
    logged = [(step, json.loads(m)) for step, m in db.execute("select step, metrics from metrics order by id")]
    scalars = {step: m for step, m in logged if "completions" not in m}
    for row in read_metrics(tmp_path / "run"):
        assert scalars[row["step"]] == pytest.approx(finite_scalars(row))
    tables = [m["completions"] for _, m in logged if "completions" in m]
    assert len(tables) == 2 and set(tables[0]["_value"][0]) == {"prompt", "completion", "reward", "advantage"}
