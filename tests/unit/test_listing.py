"""``rlvr list`` reads the committed ``src/rlvr/listing.json`` instead of importing every plug-in: the file
must equal what the live registry describes now (``python -m rlvr.listing``), so the fast listing is exact."""

from __future__ import annotations

import json

import rlvr.listing as listing
from rlvr.catalogue import builtin_entries
from rlvr.cli import main


def test_committed_listing_is_the_registrys():
    committed = listing.LISTING.read_text(encoding="utf-8")
    assert committed == listing.render_listing(listing.build_listing()), (
        f"src/rlvr/listing.json is stale (a plug-in was added, renamed or re-documented); regenerate it with: "
        f"{listing.REGENERATE}")


def test_listing_names_every_builtin_plugin_and_no_test_plugin():
    import tests.helpers.tiny  # noqa: F401  (registers the toy tasks in this process)
    listed = {(p["kind"], p["name"]) for p in listing.build_listing()["plugins"]}
    assert listed == {(e.kind, e.name) for e in builtin_entries()}
    assert ("task", "toy_digit_test") not in listed  # a plug-in a test or user module registered is not rlvr's


def test_without_the_file_the_listing_is_built_from_the_registry(tmp_path, monkeypatch, capsys):
    assert main(["list", "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    monkeypatch.setattr(listing, "LISTING", tmp_path / "absent.json")
    assert listing.load_listing() == listing.build_listing()
    assert main(["list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == from_file
