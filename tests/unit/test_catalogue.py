"""docs/catalogue.md is generated from the registries and the presets: it must match what
``python -m rlvr.catalogue`` writes now, so a new or renamed plug-in or preset makes it stale."""

from pathlib import Path

from rlvr.catalogue import REGENERATE, builtin_entries, render

ROOT = Path(__file__).resolve().parents[2]


def test_committed_catalogue_is_current():
    committed = (ROOT / "docs" / "catalogue.md").read_text()
    assert committed == render(ROOT / "configs" / "methods"), (
        f"docs/catalogue.md is stale; regenerate it with: {REGENERATE}")


def test_catalogue_lists_every_plugin_and_preset(tmp_path):
    text = render(ROOT / "configs" / "methods")
    for e in builtin_entries():
        assert f"| `{e.name}` |" in text, f"{e.kind} '{e.name}' missing from the catalogue"
    for preset in (ROOT / "configs" / "methods").glob("*.yaml"):
        assert f"[`{preset.stem}`]" in text
    # a preset naming a plug-in shows up in that plug-in's row
    (tmp_path / "mine.yaml").write_text("paper: x\nrollout: {engine: hf}\nalgorithm:\n  loss: {name: ppo_clip}\n")
    row = next(line for line in render(tmp_path).splitlines() if line.startswith("| `ppo_clip` |"))
    assert row.endswith("| `mine` |")
    row = next(line for line in render(tmp_path).splitlines() if line.startswith("| `hf` |"))
    assert row.endswith("| `mine` |")  # a bare engine name counts too
