"""docs/design.md §5 is generated from rlvr.layers.LAYERS and each folder's docstring: the committed
section must be what ``python -m rlvr.layout`` writes now, so a new folder, a layer moved or a changed
docstring makes it stale."""

from rlvr.layers import LAYER_NAMES, LAYERS
from rlvr.layout import DESIGN_PAGE, REGENERATE, render, splice


def test_committed_layout_section_is_current():
    committed = DESIGN_PAGE.read_text()
    assert committed == splice(committed), f"docs/design.md §5 is stale; regenerate it with: {REGENERATE}"


def test_the_section_names_every_layer_key_once_with_a_description():
    text = render()
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| layer")]
    assert len(rows) == len(LAYERS)
    assert all(row.rstrip(" |").split("|")[-1].strip() for row in rows), "a folder or module without a docstring"
    assert set(LAYERS.values()) <= set(LAYER_NAMES)
