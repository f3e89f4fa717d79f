"""docs/scaling.md's verl table: every rlvr estimator and loss once, and "refused" exactly where the
plug-in declares inputs that verl 0.9.1 does not pass (``mechanism_inputs``) or more reward
objectives than it passes (``min_objectives``). Which "works" names really run is
tests/peers/test_verl_dispatch.py's job (it reads the same table)."""

from __future__ import annotations

from rlvr.registry import get
from tests.peers.verl_table import built_in, verl_table

# Inputs verl 0.9.1 hands a registered estimator / loss (rlvr field names); see the table's preamble.
VERL_GIVES = {"advantage": {"rewards", "mask", "group_ids", "token_rewards"},
              "loss": {"logprobs", "old_logprobs", "advantages", "mask"}}


def _needs_more_than_verl_gives(kind: str, name: str) -> bool:
    cls = get(kind, name)
    lacking = [opts for opts in cls.mechanism_inputs if not set(opts) & VERL_GIVES[kind]]
    return bool(lacking) or getattr(cls, "min_objectives", 1) > 1


def test_the_verl_table_has_every_name_once():
    table = verl_table()
    expected = {f"rlvr_{n}" for kind in ("advantage", "loss") for n in built_in(kind)}
    assert set(table) == expected


def test_refused_exactly_where_the_plugin_needs_what_verl_does_not_pass():
    table = verl_table()
    for kind in ("advantage", "loss"):
        for name in built_in(kind):
            refused = _needs_more_than_verl_gives(kind, name)
            assert (table[f"rlvr_{name}"] == "refused") == refused, (name, table[f"rlvr_{name}"])
